# The Python client (clients/python), installed with the documented offline
# pip command into a virtual environment in a temporary directory, tested
# against a throwaway node: G1 (two leases of one process are two owners),
# G3 (the token rises after a takeover), G4 (compare-and-release), G5 (a
# stale fenced write gets LE001; with renewals hung, leadership ends before
# the server's expiry: lost/is_leader in threads, cancellation in asyncio,
# SIGKILL of a child ignoring SIGTERM in run()), G11 (a follower is woken by
# the release it watches); the README example runs.  Also: bad input (NUL,
# types, durations), refused connections, owner id conflicts, forked copies
# of a lease, abandoned acquires cancelled, run()'s work dying with run().
# A missing prerequisite fails the test, naming its Debian package.
# The conformance probe leads, writes through the fence and releases on
# SIGTERM.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);
use LeNode;

my $tree = $ENV{TESTDIR} // '.';
my $python = '/usr/bin/python3';
# Prerequisites (test/lib/prereq.sh installs them): a missing one fails the test, naming its package.
my %needs = (psycopg => 'python3-psycopg', ensurepip => 'python3-venv', setuptools => 'python3-setuptools',
	wheel => 'python3-wheel');
my @missing = grep { system("$python -c 'import $_' 2>/dev/null") != 0 } sort keys %needs;
if (@missing)
{
	fail("$python cannot import @missing: apt-get install @needs{@missing}");
	done_testing();
	exit;
}

my $node = le_node('python_client');
my $dsn = $node->connstr('postgres');
my $dir = PostgreSQL::Test::Utils::tempdir;

# A copy of the package, so that pip's build files stay out of the tree.
system('cp', '-r', "$tree/clients/python", "$dir/src") == 0 or die "cp failed";
my ($out, $err);
my $ok = IPC::Run::run(
	[ 'sh', '-c', "$python -m venv --system-site-packages venv && venv/bin/pip install --no-build-isolation --no-index ./src" ],
	'>', \$out, '2>', \$err, init => sub { chdir $dir });
ok($ok, 'the documented pip command installs the package offline') or diag("$out\n$err");
my $vpy = "$dir/venv/bin/python";

# Run from the temporary directory so that the installed package is imported, not the copy; two
# groups of test classes at once (they use different keys), to keep the test short.
my @groups = ([ 'SyncTests' ], [ 'AsyncTests', 'RunTests', 'RunParentTests', 'ReadmeTest', 'WaitMetadataTests' ]);
my @runs = map {
	my $g = { out => '', err => '' };
	$g->{h} = IPC::Run::start([ $vpy, "$dir/src/tests/test_client.py", '-v', @$_ ],
		'>', \$g->{out}, '2>', \$g->{err},
		init => sub { chdir $dir; $ENV{LE_TEST_DSN} = $dsn; $ENV{PYTHONDONTWRITEBYTECODE} = 1 });
	$g
} @groups;
$_->{h}->finish for @runs;
$err = join("\n", map { $_->{err} } @runs);
my @results = $err =~ /^(test_\w+) \(.*?\) \.\.\. (ok|FAIL|ERROR|skipped .*)$/mg;
open(my $fh, '<', "$dir/src/tests/test_client.py") or die;
my $defined = grep { /^    def test_/ } <$fh>;
close($fh);
is(scalar(@results) / 2, $defined, "all $defined Python tests ran") or diag($err);
while (my ($name, $res) = splice(@results, 0, 2))
{
	if ($res =~ /^skipped (.*)/)
	{
		note("python: $name skipped: $1");
		pass("python: $name (skipped: $1)");
		next;
	}
	is($res, 'ok', "python: $name");
}
for my $i (0 .. $#runs)
{
	like($runs[$i]{err}, qr/^OK(?: \(skipped=\d+\))?$/m, "the Python tests pass: @{ $groups[$i] }") or diag($runs[$i]{err});
}
note($_) for grep { /^figure:/ } split /\n/, $err;

# The conformance probe: leads, acts, writes through the fence; SIGTERM releases and exits 0.
$node->safe_psql('postgres',
	"CREATE TABLE conformance_writes (client text, lease_key text, owner_id text, fencing_token bigint NOT NULL,
	   written_at timestamptz DEFAULT clock_timestamp());
	 SELECT le_protect('conformance_writes', 'probe-key')");
my ($pout, $perr) = ('', '');
my $probe = IPC::Run::start(
	[ "$tree/test/conformance/probe-python", '--dsn', $dsn, '--key', 'probe-key', '--owner', 'p1', '--ttl-ms', '2000' ],
	'>', \$pout, '2>', \$perr, init => sub { $ENV{LE_CONFORMANCE_CLIENT} = 'python'; $ENV{LE_PYTHON} = $vpy });
# up to 30 s: a loaded machine starts the interpreter and its imports slowly
for (1 .. 1200)
{
	$probe->pump_nb;
	last if $pout =~ /"ev": ?"write".*"ok": ?true/;
	usleep(25_000);
}
like($pout, qr/"ev": ?"leader"/, 'probe: leader event');
like($pout, qr/"ev": ?"write".*"ok": ?true/, 'probe: a fenced write committed');
$probe->signal('TERM');
$probe->finish;
is($probe->result(0), 0, 'probe: exit 0 after SIGTERM') or diag($perr);
like($pout, qr/"ev": ?"exit"/, 'probe: exit event');
my ($token) = $pout =~ /"ev": ?"leader".*?"token": ?(\d+)/;
is($node->safe_psql('postgres', "SELECT end_reason FROM le_lease_history WHERE lease_key = 'probe-key' AND fencing_token = $token"),
	'released', 'probe: released on SIGTERM');
is($node->safe_psql('postgres', "SELECT count(*) > 0 FROM conformance_writes WHERE client = 'python' AND fencing_token = $token"),
	't', 'probe: rows carry its client name and token');

$node->stop;
done_testing();
