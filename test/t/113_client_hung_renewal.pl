# G9: A hung renewal connection (its server process frozen with SIGSTOP):
#  1. alone: one hung attempt must not use all the retry room.
#     With ttl 3 s and the default 5 s statement timeout, an attempt
#     gets at most half the time left, then a new connection renews: the
#     elector keeps leading.  (Before: the attempt ran to the deadline and
#     leadership ended.)
#  2. with the postmaster frozen too (no new connection possible):
#     on_stopped(deadline_passed) must come within 100 ms of the local
#     deadline (item 4).  (Before: a fixed 200 ms pause after the failed
#     connect made it ~200 ms late.)  le_status.last_error is "timeout".
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my $cc = `sh -c 'command -v cc'`;
plan skip_all => 'no C compiler' unless $cc;

my ($node, $dsn, $dir) = start_node('client_hung');
my ($ok, $err) = build_probe("$dir/le_probe");
ok($ok, 'the probe program builds') or diag($err);

# pid of the renewal connection's server process, once it exists
sub renew_pid
{
	my $pid;
	wait_for(sub {
		$pid = $node->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE application_name = 'pg_leader renew'");
		$pid ne '';
	}, 20);
	return $pid;
}

# Start the probe in mode @args; returns [harness, \$stdout].
sub start_probe
{
	my @args = @_;
	my $o = '';
	# PostgreSQL::Test::Utils sets PGAPPNAME; let the library name its connections
	local $ENV{PGAPPNAME};
	delete $ENV{PGAPPNAME};
	my $h = IPC::Run::start([ "$dir/le_probe", @args ], '>', \$o, '2>', \$err,
		IPC::Run::timeout(90));
	wait_for(sub { $h->pump_nb; $o =~ /^leading/m }, 30) or diag("probe: $o $err");
	return ($h, \$o);
}

# --- 1. renewal backend frozen: a second connection renews in time ----------
{
	my ($h, $o) = start_probe('survive', $dsn, 'survive-key', 8);
	my $pid = renew_pid();
	ok($pid, 'the renewal connection is up');
	kill 'STOP', $pid;
	$h->finish;
	kill 'CONT', $pid;
	note($$o);
	like($$o, qr/^still leading token=\d+ renewals=(\d+)$/m,
		'with its renewal backend frozen, the elector still leads after 8 s (ttl 3 s)');
	my ($n) = $$o =~ /renewals=(\d+)/;
	cmp_ok($n // 0, '>=', 4, 'renewing on a new connection');
}

# --- 2. renewal backend and postmaster frozen: on_stopped on time ------------
{
	my ($h, $o) = start_probe('deadline', $dsn, 'deadline-key');
	my $pid = renew_pid();
	ok($pid, 'the renewal connection is up');
	open(my $fh, '<', $node->data_dir . '/postmaster.pid') or die;
	my $pm = <$fh>;
	chomp $pm;
	close $fh;
	kill 'STOP', $pid, $pm;
	eval { $h->finish; };
	kill 'CONT', $pid, $pm;
	note($$o);
	like($$o, qr/^stopped reason=deadline_passed late_ms=-?\d+ /m, 'on_stopped(deadline_passed)');
	like($$o, qr/ last_error=timeout$/m, 'le_status.last_error says the attempts timed out');
	my ($late) = $$o =~ /late_ms=(-?\d+)/;
	cmp_ok($late // 9999, '<', 100, 'within 100 ms of the local deadline');
	cmp_ok($late // -1, '>=', 0, 'and not before it');
}

$node->stop;
done_testing();
