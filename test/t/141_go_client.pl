# The Go client (clients/go) against a real server:
#  - builds offline from Debian's Go packages (clients/go/build.sh);
#  - its go test suite: G1 (two Runs of one process are two owners, one
#    leads), G3 (the token rises on takeover), G4 (renewals, release, a
#    refused renewal ends the period), G5 (the fenced transaction declares
#    the token; a stale one gets LE001), G7 and doc/client.md's local
#    deadline (with every renewal hung the work's context is cancelled and
#    Lost closes before the server's expiry; ExitProcess ends a process
#    whose work ignores its context before that expiry), G11 (a release
#    wakes a follower long before its next poll), G1/G4/G5 through PgBouncer
#    in transaction mode, G4 (a panic in the work releases; Run's end ends
#    the period before the work's context), G6 (typed option errors, whole
#    ms ttl, 3D000 ends Run), G8 (the extension in a quoted schema off the
#    search_path; a shadowing le_renew changes nothing);
#  - README.md's example is clients/go/example/main.go verbatim, and runs;
#  - the conformance probe (test/conformance/probe-go) leads, writes fenced
#    rows, and on SIGTERM reports the end, releases and exits 0 (also with
#    --ignore-cancel).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use LeNode;

my $go = `sh -c 'command -v go'`;
# test/lib/prereq.sh installs both: a missing one fails this test.
die 'no Go compiler or pgx v4 (apt-get install golang-go golang-github-jackc-pgx-v4-dev)'
  unless $go && -d '/usr/share/gocode/src/github.com/jackc/pgx/v4';

my $root = "$FindBin::RealBin/../..";
my $gdir = "$root/clients/go";
my $node = le_node('go_client');
my $dsn = $node->connstr('postgres');

my ($out, $err) = ('', '');
my $built = IPC::Run::run(["$gdir/build.sh", 'build'], '>', \$out, '2>', \$err);
ok($built, 'the Go package, example and probe build offline') or diag($err);
($out, $err) = ('', '');
ok(IPC::Run::run(["$gdir/build.sh", 'vet'], '>', \$out, '2>', \$err), 'go vet finds nothing') or diag($err);

# the extension in a schema of its own (a name that needs quoting), off
# the search_path, in a second database
$node->safe_psql('postgres', 'CREATE DATABASE le_schema');
$node->safe_psql('le_schema', 'CREATE SCHEMA "le schema"; CREATE EXTENSION leader_election SCHEMA "le schema"');

# PgBouncer in transaction mode, on a Unix socket (when installed: the
# suite's package list has it)
my $bdsn = le_pgbouncer($node, pool_size => 4);
$bdsn = defined $bdsn ? "$bdsn prefer_simple_protocol=true" : '';

# the package's own tests
($out, $err) = ('', '');
{
	local $ENV{LE_TEST_DSN} = $dsn;
	local $ENV{LE_TEST_SCHEMA_DSN} = $node->connstr('le_schema');
	local $ENV{LE_TEST_BOUNCER_DSN} = $bdsn;
	IPC::Run::run(["$gdir/build.sh", 'test', '-count=1', '-v', '-timeout=120s'],
		'>', \$out, '2>', \$err);
}
my %result;
$result{$2} = $1 while $out =~ /^--- (PASS|FAIL|SKIP): (\w+)/mg;
for my $t (qw(TestAcquireRenewRelease TestTwoRunsTakeover TestHungRenewals TestRenewRefused
	TestFencedTx TestExitProcess TestReleaseWakesFollower TestOptionsChecks TestShutdownEndsPeriodFirst
	TestRecampaignWorkContextError TestPermanentConnectError TestPanicReleases TestExtensionSchema
	TestShadowedFunctions TestThroughPgBouncer TestNonStandardStrings
	TestCancelDuringAcquire TestServerWaitAndMetadata))
{
	# the checks of the 1.1 server-side wait skip (with a message) against a 1.0 server
	if ($t eq 'TestServerWaitAndMetadata' && ($result{$t} // '') eq 'SKIP')
	{
		pass("go test $t (skipped: no 1.1 le_acquire on this server)");
		next;
	}
	is($result{$t} // 'missing', 'PASS', "go test $t");
}
like($out, qr/^ok\s+leaderelection/m, 'go test passes as a whole') or diag("$out\n$err");
note($_) for $out =~ /^\s+\S+\.go:\d+: (.*(?:before the server's expiry|after the release|after the expiry|SKIP:).*)$/mg;

# README.md shows example/main.go verbatim
my $readme = slurp_file("$gdir/README.md");
my ($shown) = $readme =~ /<!-- example\/main\.go -->\n```go\n(.*?)```\n/s;
is($shown, slurp_file("$gdir/example/main.go"), 'README.md shows example/main.go verbatim');

# ... and it runs: one fenced row with the period's token
$node->safe_psql('postgres', q{
	CREATE TABLE invoices (customer text, fencing_token bigint NOT NULL);
	SELECT le_protect('invoices', 'billing-scheduler');});
($out, $err) = ('', '');
{
	local $ENV{DATABASE_URL} = $dsn;
	IPC::Run::run(["$gdir/bin/example"], '>', \$out, '2>', \$err);
}
is($out, "done: <nil>\n", 'the example runs') or diag($err);
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM invoices i JOIN le_lease_history h
	    ON h.lease_key = 'billing-scheduler' AND h.fencing_token = i.fencing_token
	 WHERE h.end_reason = 'released'}), '1', 'its row carries the token of a released period');

# the conformance probe, briefly: lead, write, SIGTERM
$node->safe_psql('postgres', q{
	CREATE TABLE conformance_writes (client text, lease_key text, owner_id text,
	    fencing_token bigint NOT NULL, written_at timestamptz DEFAULT clock_timestamp());
	SELECT le_protect('conformance_writes', 'probe-key');});
my $pout = '';
my $h = IPC::Run::start(['env', '--default-signal', "$root/test/conformance/probe-go", '--dsn', $dsn,
		'--key', 'probe-key', '--owner', 'probe', '--ttl-ms', '2000'],
	'<', \undef, '>', \$pout, '2>', \$err);
my $t0 = time;
while ($pout !~ /"ev":"write","ok":true/ && time - $t0 < 20) { $h->pump_nb; usleep(50_000); }
$h->signal('TERM');
$h->finish;
is($h->full_result(0), 0, 'the probe exits 0 on SIGTERM') or diag($err);
my @ev = map { /"ev":"(\w+)"/ ? $1 : () } split /\n/, $pout;
is($ev[0], 'leader', 'first event: leader');
ok((grep { $_ eq 'act' } @ev) && (grep { $_ eq 'write' } @ev), 'act and write events');
# a write in flight at the SIGTERM may report after the period's end; no act may
my ($lost) = grep { $ev[$_] eq 'lost' } 0 .. $#ev;
is($ev[-1], 'exit', 'last event: exit') or diag($pout);
ok(defined $lost && !grep({ $_ eq 'act' } @ev[ $lost .. $#ev ]), 'the period ends (lost), and no act after it')
  or diag($pout);
like($pout, qr/"ev":"lost","reason":"shutdown"/, 'lost with reason shutdown');
my ($token) = $pout =~ /"ev":"leader".*?"token":(\d+)/;
is($node->safe_psql('postgres', qq{
	SELECT (SELECT count(*) FROM conformance_writes WHERE fencing_token = $token AND client = 'go') > 0
	   AND (SELECT end_reason FROM le_lease_history WHERE lease_key = 'probe-key' AND fencing_token = $token)
	       = 'released'}), 't', 'its rows carry its token, and it released the lease');

# with --ignore-cancel, a SIGTERM still ends the long task: release, exit 0
$pout = '';
$h = IPC::Run::start(['env', '--default-signal', "$root/test/conformance/probe-go", '--dsn', $dsn,
		'--key', 'probe-ignore', '--owner', 'probe', '--ttl-ms', '3000', '--ignore-cancel'],
	'<', \undef, '>', \$pout, '2>', \$err);
$t0 = time;
while ($pout !~ /"ev":"act"/ && time - $t0 < 20) { $h->pump_nb; usleep(20_000); }
$h->signal('TERM');
$h->finish;
is($h->full_result(0), 0, 'an --ignore-cancel probe exits 0 on SIGTERM') or diag("$pout\n$err");
like($pout, qr/"ev":"exit"/, 'and prints its exit event');
is($node->safe_psql('postgres', q{
	SELECT end_reason FROM le_lease_history WHERE lease_key = 'probe-ignore'}), 'released', 'and released the lease');

done_testing();
