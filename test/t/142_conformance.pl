# The conformance suite of the client libraries (test/conformance/run.py,
# PROTOCOL.md) in its quick form, against every client whose probe
# launcher exists: G1 (no two probes act in one period), G5 (no write of
# an ended period commits; a stale write fails with LE001), G8 (forged
# notifications change nothing), G9 (a takeover after a SIGTERMed leader
# and while a holder stalls), and the client's local deadline of
# doc/client.md (no act at or after the server's end of the period,
# whatever is frozen, locked, restarted or terminated).
# Then the harness must catch a broken client: the C probe with
# LE_PROBE_BREAK=ignore_deadline acts on its own after its period ended,
# and the harness must report FAIL.
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

my $node = le_node('conformance', conf => "max_connections = 300\n");
my $admin = $node->connstr('postgres');
my $top = $ENV{TESTDIR} // "$FindBin::RealBin/../..";
my $bindir = $node->config_data('--bindir');
my @run = ('python3', "$top/test/conformance/run.py", '--admin-dsn', $admin,
	'--pgdata', $node->data_dir, '--pg-ctl', "$bindir/pg_ctl");

my ($out, $err) = ('', '');
# test/run.sh conformance passes the options of the full run (--reps 20 ...)
my @opts = split ' ', ($ENV{LE_CONFORMANCE_ARGS} // '--client all --quick --parallel');
my $ok = IPC::Run::run([ @run, @opts ], '>', \$out, '2>', \$err);
note($out);
diag($err) if $err ne '';
ok($ok, 'every available client passes every scenario');
for my $s (qw(sigstop frozen_renewal hung_renewals restart terminate forged_notify
	same_owner handoff stall ignore_cancel))
{
	like($out, qr/^\| $s \| PASS /m, "C client: $s passes");
}
unlike($out, qr/FAIL/, 'no scenario failed');

($out, $err) = ('', '');
{
	local $ENV{LE_PROBE_BREAK} = 'ignore_deadline';
	$ok = IPC::Run::run([ @run, '--client', 'c', '--quick', '--parallel', '--scenarios', 'sigstop,hung_renewals' ],
		'>', \$out, '2>', \$err);
}
note($out);
ok(!$ok, 'a probe that ignores the deadline fails the suite');
like($out, qr/^\| sigstop \| FAIL /m, 'sigstop catches the broken probe');
like($out, qr/^\| hung_renewals \| FAIL /m, 'hung_renewals catches the broken probe');
like($out, qr/acted [\d.]+ ms after the end of period/, 'the failure names an act after the deadline');

$node->stop;
done_testing();
