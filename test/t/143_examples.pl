# The Node.js and Java examples (examples/node, examples/java) against a
# real server: each acquires a lease, commits a fenced write, releases,
# and then has a write with the old token refused with LE001 after
# another owner acquired the lease (G5), with the lease's tokens rising
# (G3).  Missing tools fail the test with the package to install: nothing
# is skipped.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use File::Copy;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use LeNode;

my $top = $ENV{TESTDIR} // "$FindBin::RealBin/../..";
my $jar = '/usr/share/java/postgresql.jar';
my %need = (node => 'nodejs', npm => 'npm (or a nodejs that brings it)',
	javac => 'openjdk-17-jdk-headless', java => 'openjdk-17-jdk-headless');
for my $tool (sort keys %need)
{
	my $path = `sh -c 'command -v $tool'`;
	ok($path ne '', "$tool is installed") or diag("$tool is missing: install Debian package $need{$tool}");
}
ok(-r $jar, 'the JDBC driver is installed')
  or diag("$jar is missing: install Debian package libpostgresql-jdbc-java");

my $node = le_node('examples', conf => "listen_addresses = '127.0.0.1'\n");
my $port = $node->port;
open(my $fh, '<', "$top/examples/setup.sql") or die "examples/setup.sql: $!";
my $setup = do { local $/; <$fh> };
close($fh);
$node->safe_psql('postgres', $setup);
my $dir = PostgreSQL::Test::Utils::tempdir;

# A command run to its end: (ok, stdout, stderr).
sub run_cmd
{
	my ($cmd, %env) = @_;
	my ($out, $err) = ('', '');
	local @ENV{ keys %env } = values %env;
	my $ok = IPC::Run::run($cmd, '>', \$out, '2>', \$err);
	return ($ok, $out, $err);
}

# What every example prints when it does what it should.
sub check_output
{
	my ($lang, $out) = @_;
	my ($t1) = $out =~ /^acquired token=(\d+)$/m;
	my ($t2) = $out =~ /^next owner acquired token=(\d+)$/m;
	like($out, qr/^write ok token=\Q@{[ $t1 \/\/ '?' ]}\E$/m, "$lang: the leader's fenced write commits");
	like($out, qr/^released=true$/m, "$lang: the lease is released");
	ok(defined $t1 && defined $t2 && $t2 > $t1, "$lang: the next owner gets a higher token");
	like($out, qr/^stale write refused: LE001 /m, "$lang: the old token's write is refused with LE001");
}

# Node.js: npm ci of the vendored lock file in a directory of its own.
my $nd = "$dir/node";
mkdir $nd;
copy("$top/examples/node/$_", "$nd/$_") or die "copy $_: $!" for qw(package.json package-lock.json leader.js);
my ($ok, $out, $err) = run_cmd([ 'npm', 'ci', '--no-audit', '--no-fund', '--prefix', $nd ],
	npm_config_cache => "$dir/npm-cache", npm_config_update_notifier => 'false');
ok($ok, 'npm ci installs the Node.js example\'s dependencies') or diag("npm ci failed: $err");
($ok, $out, $err) = run_cmd([ 'node', "$nd/leader.js", "postgresql://example_app\@127.0.0.1:$port/postgres" ]);
ok($ok, 'the Node.js example succeeds') or diag($err);
note($out);
check_output('node', $out);

# Java: compiled against Debian's JDBC driver.
my $jd = "$dir/java";
mkdir $jd;
($ok, $out, $err) = run_cmd([ 'javac', '-cp', $jar, '-d', $jd, "$top/examples/java/LeaderExample.java" ]);
ok($ok, 'the Java example compiles') or diag($err);
($ok, $out, $err) = run_cmd([ 'java', '-cp', "$jar:$jd", 'LeaderExample',
	"jdbc:postgresql://127.0.0.1:$port/postgres?user=example_app" ]);
ok($ok, 'the Java example succeeds') or diag($err);
note($out);
check_output('java', $out);

is($node->safe_psql('postgres',
	"SELECT count(*) FROM example_jobs WHERE what = 'late write of the old leader'"),
	'0', 'no stale write committed');
is($node->safe_psql('postgres', "SELECT count(*) FROM example_jobs WHERE what = 'work of the leader'"),
	'2', 'both leaders\' writes committed');

$node->stop;
done_testing();
