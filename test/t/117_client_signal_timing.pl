# G9: signals and clocks of pg_leader run, with default signal dispositions:
#  - SIGTERM while --no-wait's one attempt waits on a busy lease row
#    (locked by an open transaction): exit 143 at once, not after the
#    server's lock_timeout; without the signal a busy row is "held" (75);
#  - under timeout(1), which signals its child and then its own process
#    group, the two deliveries count as one signal: the command keeps its
#    grace period (its SIGTERM handler finishes);
#  - --heartbeat-timeout watches the file change, on the monotonic clock:
#    a healthy command setting the mtime an hour into the past is not
#    stopped, a hung one whose last beat set it an hour into the future is.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_signal_timing');

# Runs a command list to completion with default signal dispositions:
# (exit status, stderr, seconds).
sub run_cmd
{
	my ($cmd, $signal_after) = @_;
	my $err = '';
	my $t0 = time();
	my $h = IPC::Run::start($cmd, '<', \undef, '>', '/dev/null', '2>', \$err,
		init => sub { LeClientTest::default_signals(); delete $ENV{PGAPPNAME}; });
	if (defined $signal_after)
	{
		usleep(1_000_000 * $signal_after);
		$h->signal('TERM');
	}
	my $ts = time();
	$h->finish;
	return ($h->result(0), $err, time() - ($signal_after ? $ts : $t0));
}

# --- --no-wait against a busy row -------------------------------------------------
{
	my $tx = $node->background_psql('postgres');
	$tx->query_safe("BEGIN; SELECT le_acquire('nw', 'sql-holder', '1 minute')");
	my @run = (pg_leader_cmd(), 'run', '-d', $dsn, '-l', 'nw', '--no-wait', '--', 'true');
	my ($rc, $err, $secs) = run_cmd([@run], 0.3);
	is($rc, 143, '--no-wait, SIGTERM during the attempt: exit 143');
	cmp_ok($secs, '<', 1, 'promptly, not after the lock timeout');
	note(sprintf('SIGTERM during --no-wait -> exit %.0f ms', 1000 * $secs));
	($rc, $err, $secs) = run_cmd([@run]);
	is($rc, 75, '--no-wait on a row locked by another transaction: 75 (held), not 69');
	like($err, qr/not_acquired .*busy/, 'logged as busy');
	$tx->query_safe('ROLLBACK');
	$tx->quit;
}

# --- timeout(1): the child and then timeout's group get SIGTERM ----------------------
for my $i (1 .. 4)
{
	my $f = "$dir/graceful.$i";
	my $pidf = "$dir/graceful.$i.pid";
	my $job = "echo \$\$ > $pidf; trap 'sleep 0.5; echo done > $f; exit 0' TERM; while :; do sleep 0.05; done";
	my ($rc, $err) = run_cmd([ 'env', '--default-signal', 'timeout', '-s', 'TERM', '2',
			pg_leader_bin(), 'run', '-d', $dsn, '-l', "tmo$i", '--ttl', '10s', '--grace', '3s',
			'--', 'sh', '-c', $job ]);
	ok(-s $pidf, "timeout(1) run $i: the command had started");
	ok(-s $f, "timeout(1) run $i: the command finished its SIGTERM handler (grace kept)");
	unlike($err, qr/killing_command .*second signal/, "timeout(1) run $i: no \"second signal\" SIGKILL");
	like($err, qr/stopping_command .*reason=shutdown/, "timeout(1) run $i: stopped for shutdown");
}

# --- heartbeat: mtime set far into the past by a healthy command ------------------------
{
	my $hb = "$dir/hb-past";
	my $job = "i=0; while [ \$i -lt 15 ]; do echo \$i > $hb; touch -d '-1 hour' $hb; sleep 0.2; i=\$((i + 1)); done";
	my ($rc, $err, $secs) = run_cmd([ pg_leader_cmd(), 'run', '-d', $dsn, '-l', 'hb-past',
			'--heartbeat-file', $hb, '--heartbeat-timeout', '1s', '--', 'sh', '-c', $job ]);
	is($rc, 0, 'heartbeat an hour in the past but changing every 0.2 s: the command runs to its end');
	unlike($err, qr/heartbeat_timeout/, 'no heartbeat_timeout');
}

# --- heartbeat: mtime set far into the future, then the command hangs ------------------
{
	my $hb = "$dir/hb-future";
	my $job = "i=0; while [ \$i -lt 3 ]; do echo \$i > $hb; touch -d '+1 hour' $hb; sleep 0.2; i=\$((i + 1)); done; date +%s.%N > $hb.hung; sleep 20";
	my ($rc, $err, $secs) = run_cmd([ pg_leader_cmd(), 'run', '-d', $dsn, '-l', 'hb-future',
			'--heartbeat-file', $hb, '--heartbeat-timeout', '1s', '--max-runtime', '15s',
			'--', 'sh', '-c', $job ]);
	is($rc, 80, 'heartbeat an hour in the future, then none: stopped (80)');
	like($err, qr/stopping_command .*reason=heartbeat_timeout/, 'reason heartbeat_timeout');
	my ($stop) = $err =~ /^(\S+) pg_leader\[\d+\] stopping_command/m;
	if (-s "$hb.hung" && $stop && $stop =~ /T(\d+):(\d+):([\d.]+)Z/)
	{
		chomp(my $hung = slurp_file("$hb.hung"));
		my $tod = $hung - 86400 * int($hung / 86400);
		my $late = ($1 * 3600 + $2 * 60 + $3) - $tod;
		$late += 86400 if $late < -43200;
		cmp_ok($late, '<', 2.5, 'within about the timeout of the last beat');
		note(sprintf('last beat -> stopping_command %.0f ms', 1000 * $late));
	}
}

done_testing();
