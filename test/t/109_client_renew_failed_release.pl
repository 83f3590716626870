# G4: A period that ends with renew_failed while the command is still in its
# grace period: the lease must be released only after the command's whole
# process group is gone (pg_leader asks the library to hold the release
# back: le_config.defer_release, le_elector_release_period).  The command
# ignores SIGTERM and logs a beat every 50 ms until pg_leader SIGKILLs it
# after --grace; the server's history must show the period ended after its
# last beat.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_renew_failed');
$node->safe_psql('postgres', q{
	CREATE ROLE alice LOGIN;
	GRANT EXECUTE ON FUNCTION le_acquire(text, text, interval, interval, jsonb), le_renew(text, text, bigint, interval),
		le_release(text, text, bigint) TO alice;
});
(my $alice = $dsn) =~ s/$/ user=alice/;

# Last beat of the command (epoch seconds), 0 if none.
sub last_beat
{
	my ($file) = @_;
	return 0 unless -s $file;
	my @lines = split /\n/, slurp_file($file);
	return $lines[-1] + 0;
}

# One run: the command ignores SIGTERM and beats into $beats; renewals are
# refused mid-period; returns the candidate.
sub run_case
{
	my ($name, @opts) = @_;
	my $beats = "$dir/$name.beats";
	my $c = start_candidate(dir => $dir, name => $name, dsn => $alice, key => $name,
		opts => [ '--ttl', '3s', '--grace', '1s', '-v', @opts ],
		command => [ 'sh', '-c', "trap '' TERM; while :; do date +%s.%N >> $beats; sleep 0.05; done" ]);
	ok(wait_for(sub { log_has($c, qr/ renewed /) }, 30), "$name: leads and renews");
	$node->safe_psql('postgres', 'REVOKE EXECUTE ON FUNCTION le_renew(text, text, bigint, interval) FROM alice');
	ok(wait_for(sub { log_has($c, qr/ command_exited /) }, 20), "$name: the command was stopped");
	$node->safe_psql('postgres', 'GRANT EXECUTE ON FUNCTION le_renew(text, text, bigint, interval) TO alice');
	ok(log_has($c, qr/stopped_leading .*reason=renew_failed/), "$name: the period ended with renew_failed");
	ok(log_has($c, qr/killing_command .*grace period over/), "$name: SIGKILL after the grace period");
	return ($c, "$dir/$name.beats");
}

# Without --loop: pg_leader exits 79 after releasing.
my ($c, $beats) = run_case('once');
ok(wait_for(sub { defined reap($c) }, 20), 'once: pg_leader exits');
is($c->{status}, 79, 'once: leadership lost, status 79');
my @h = history_rows($node, 'once');
my $last = last_beat($beats);
note sprintf('once: period ended %s (%s), last beat %.3f', $h[0][3], $h[0][4], $last);
is($h[0][4], 'released', 'once: the lease was released');
cmp_ok($h[0][3], '>=', $last, 'once: released after the last beat of the command');

# With --loop: released after the group is gone, then pg_leader campaigns again.
($c, $beats) = run_case('loop', '--loop');
ok(wait_for(sub { scalar(history_rows($node, 'loop')) >= 2 }, 30), 'loop: leads again after the release');
@h = history_rows($node, 'loop');
$last = 0;
# beats of the first period only: those before the second period began
for my $b (split /\n/, slurp_file($beats))
{
	$last = $b if $b < $h[1][2];
}
note sprintf('loop: first period ended %s (%s), its last beat %.3f', $h[0][3], $h[0][4], $last);
is($h[0][4], 'released', 'loop: the first lease was released');
cmp_ok($h[0][3], '>=', $last, 'loop: released after the last beat of the first command');

stop_all();
$node->stop;
done_testing();
