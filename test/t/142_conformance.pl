# The conformance suite of the client libraries (test/conformance/run.py,
# PROTOCOL.md) in its quick form, against every client whose probe
# launcher exists: G1 (no two probes act in one period), G5 (no write of
# an ended period commits, judged by its commit timestamp; a stale write
# fails with LE001), G8 (forged notifications change nothing), G9 (a
# takeover after a SIGTERMed leader and while a holder stalls, and a new
# act within the liveness bound after every fault), and the client's local
# deadline of doc/client.md (no act at or after the server's end of the
# period, nor after the library reported its end, whatever is frozen,
# locked, restarted or terminated).
# Then the harness must catch broken clients (LE_PROBE_BREAK of the C
# probe and its launcher): one that ignores the deadline, one that trusts
# is_leader for 0.6 ttl, one that crashes at a failed write, and a
# launcher that does not exec the probe.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use LeNode;

my $cc = `sh -c 'command -v cc'`;
plan skip_all => 'no C compiler' unless $cc;

my $node = le_node('conformance', conf => "max_connections = 400\ntrack_commit_timestamp = on\n");
my $admin = $node->connstr('postgres');
my $top = $ENV{TESTDIR} // "$FindBin::RealBin/../..";
my $bindir = $node->config_data('--bindir');
# the system's python3: it has psycopg2
my $python = -x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3';
my @run = ($python, "$top/test/conformance/run.py", '--admin-dsn', $admin);
my @restart = ('--pgdata', $node->data_dir, '--pg-ctl', "$bindir/pg_ctl", '--pg-log', $node->logfile);

my ($out, $err) = ('', '');
# test/run.sh conformance passes the options of the full run (--reps 20 ...)
my @opts = split ' ', ($ENV{LE_CONFORMANCE_ARGS} // '--client all --quick --parallel');
my $ok = IPC::Run::run([ @run, @restart, @opts ], '>', \$out, '2>', \$err);
note($out);
diag($err) if $err ne '';
ok($ok, 'every available client passes every scenario');
for my $s (qw(sigstop short_stop frozen_renewal hung_renewals restart terminate forged_notify
	same_owner handoff stall stall_commit ignore_cancel))
{
	like($out, qr/^\| $s \| (PASS|fault survived) /m, "C client: $s passes");
}
unlike($out, qr/FAIL/, 'no scenario failed');

# the broken C probes, at the same time (no restart among their scenarios);
# the C probe is built first, once (run without arguments, a launcher builds
# and exits), for a run that started with other clients only
system("$top/test/conformance/probe-c >/dev/null 2>&1");
my %mutant = (
	ignore_deadline => 'sigstop,hung_renewals,same_owner',
	'cache_leader_ms=600' => 'hung_renewals',
	crash_on_write_error => 'terminate,stall',
	no_exec => 'sigstop,handoff,ignore_cancel');
# a broken Go probe, where Go is there: one that ends with the library's overrun status at once
my $go = `sh -c 'command -v go'`;
$mutant{early_overrun_exit} = 'ignore_cancel' if $go;
my %client = (early_overrun_exit => 'go');
# the cache outlives the library's end of the period in about 3 of 4
# repetitions: 8 of them make a miss of all unlikely
my %reps = ('cache_leader_ms=600' => [ '--reps', '8' ]);
my (%h, %mout);
for my $m (sort keys %mutant)
{
	local $ENV{LE_PROBE_BREAK} = $m;
	$mout{$m} = '';
	$h{$m} = IPC::Run::start([ @run, '--client', $client{$m} // 'c', @{ $reps{$m} // ['--quick'] }, '--parallel',
			'--scenarios', $mutant{$m} ],
		'>', \$mout{$m}, '2>&1');
}
my %rc;
for my $m (sort keys %mutant)
{
	$h{$m}->finish;
	$rc{$m} = $h{$m}->result(0);
	note("LE_PROBE_BREAK=$m:\n$mout{$m}");
}
is($rc{ignore_deadline}, 1, 'a probe that ignores the deadline fails the suite');
for my $s (split /,/, $mutant{ignore_deadline})
{
	like($mout{ignore_deadline}, qr/^\| $s \| FAIL /m, "$s catches the probe that ignores the deadline");
}
like($mout{ignore_deadline}, qr/acted [\d.]+ ms after the end of period/, 'the failure names an act after the deadline');
is($rc{'cache_leader_ms=600'}, 1, 'a probe that trusts is_leader for 0.6 ttl fails the suite');
like($mout{'cache_leader_ms=600'}, qr/^\| hung_renewals \| FAIL /m, 'hung_renewals catches it');
like($mout{'cache_leader_ms=600'}, qr/after its library reported the end|ms after the end of period/,
	'the failure names an act after the end');
is($rc{crash_on_write_error}, 1, 'a probe that crashes at a failed write fails the suite');
like($mout{crash_on_write_error}, qr/ended by itself/, 'the failure names the early end');
is($rc{no_exec}, 1, 'a launcher that does not exec its probe fails the suite');
like($mout{no_exec}, qr/after SIGTERM: exit code/, 'the failure names the exit code');
like($mout{no_exec}, qr/^\| ignore_cancel \| FAIL /m, 'ignore_cancel checks the exit after SIGTERM too');
SKIP:
{
	skip 'no Go toolchain', 2 unless $go;
	is($rc{early_overrun_exit}, 1, 'a Go probe that ends with the overrun status without leading fails the suite');
	like($mout{early_overrun_exit}, qr/b ended by itself \(code 70\)/, 'the failure names the early end');
}

$node->stop;
done_testing();
