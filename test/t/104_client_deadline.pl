# G5 from the client side: the command is dead before the server-side end of its
# period whatever it does with SIGTERM.  The command ignores SIGTERM and
# writes a timestamp every 50 ms; the server process of the renewal
# connection and the postmaster are frozen (SIGSTOP), so renewals hang on
# every connection until the local deadline (with the postmaster running, a
# new connection renews: test/t/113_client_hung_renewal.pl).
# pg_leader must send SIGTERM at (deadline - grace) and SIGKILL before the
# deadline, and release the lease only after the command's group is gone:
# the last write comes before the period's end in le_lease_history.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_deadline');

# A command that ignores SIGTERM (so do its children) and writes a timestamp every 50 ms.
my $writes = "$dir/writes";
my $cmd = "$dir/stubborn.sh";
open(my $fh, '>', $cmd) or die;
print $fh "#!/bin/sh\ntrap '' TERM\nwhile :; do echo \$LE_FENCING_TOKEN \$(date +%s.%N) >> $writes; sleep 0.05; done\n";
close($fh);
chmod 0755, $cmd;

my $c = start_candidate(dir => $dir, name => 'frozen', dsn => $dsn, key => 'dl',
	opts => [ '--ttl', '3s', '--grace', '1s' ], command => [$cmd]);
ok(wait_for(sub { -s $writes }, 30), 'the command runs and writes');
my $renew_pid;
wait_for(
	sub {
		$renew_pid = $node->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE application_name = 'pg_leader renew'");
		return $renew_pid ne '';
	},
	10);
ok($renew_pid, 'the renewal connection is found');
my $t_freeze = time();
kill 'STOP', $renew_pid;
kill 'STOP', $node->{_pid};
my $waited = wait_for(sub { defined reap($c) }, 20);
kill 'CONT', $node->{_pid};
kill 'CONT', $renew_pid;
ok(defined $waited, 'pg_leader ends although its renewals hang');
is($c->{status}, 79, 'leadership lost: status 79');

open($fh, '<', $writes) or die;
my @w = map { [split / /] } grep { /^\d+ \d+\.\d+$/ } map { chomp; $_ } <$fh>;
close($fh);
my ($token, $last) = @{ $w[-1] };
is(scalar(grep { $_->[0] != $token } @w), 0, 'the command ran with one token');
# the period of the command's token, as the server recorded it
my ($ended, $reason) = split /\|/, $node->safe_psql('postgres',
	"SELECT coalesce(extract(epoch FROM ended_at)::text, ''), coalesce(end_reason, '')
	   FROM le_lease_history WHERE lease_key = 'dl' AND fencing_token = $token");
my $expires = $node->safe_psql('postgres',
	"SELECT coalesce(extract(epoch FROM expires_at)::text, '') FROM le_leases WHERE lease_key = 'dl' AND fencing_token = $token");
# the period's server-side end: its release, or else the expiry in force
my $end = $ended ne '' ? $ended : $expires;
ok($end ne '', 'the period has a server-side end');
note(sprintf('renewal backend frozen at +0; last write +%.3f s; period ended (%s) +%.3f s; margin %.0f ms',
	$last - $t_freeze, $reason || 'expiry', $end - $t_freeze, 1000 * ($end - $last)));
cmp_ok($last, '<', $end, 'the command\'s last write comes before the server-side end of its period');
note(slurp_file($c->{log}));
ok(log_has($c, qr/stopping_command .*SIGTERM/), 'SIGTERM logged');
ok(log_has($c, qr/killing_command .*SIGKILL/), 'SIGKILL logged');
my @ev = log_events($c);
my ($kill) = grep { $_->[1] eq 'killing_command' && $_->[2] == $token } @ev;
my ($stop) = grep { $_->[1] eq 'stopped_leading' && $_->[2] == $token } @ev;
ok($kill && $stop && $kill->[0] <= $stop->[0], 'SIGKILL comes no later than the end of leadership');

# --grace that does not fit inside the period is refused
my ($out, $err) = ('', '');
IPC::Run::run([ pg_leader_cmd(), 'run', '-d', $dsn, '-l', 'dl2', '--ttl', '3s', '--grace', '5s', '--', 'true' ],
	'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
is($? >> 8, 64, '--grace longer than the period allows: bad usage (64)');
like($err, qr/grace/, 'and the error names --grace');

stop_all();
$node->stop;
done_testing();
