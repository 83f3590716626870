# G9: a host name lookup that never answers is bounded like the rest of the
# connection: by --timeout for status, by --connect-timeout for run (also
# with --no-wait), and per host in a multi-host string, so that the next
# host is still tried.  An LD_PRELOAD shim (test/c/slow_dns.c) makes
# getaddrinfo of one name hang for 30 s.  A name that resolves to several
# addresses (localhost: ::1 and 127.0.0.1) still connects; PGHOSTADDR in the
# environment is used as libpq uses it, with no lookup.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use Time::HiRes qw(time);
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_dns_timeout');
$node->append_conf('postgresql.conf', "listen_addresses = '127.0.0.1'");
$node->restart;
my $port = $node->port;

my $shim = "$dir/slow_dns.so";
my ($o, $e) = ('', '');
IPC::Run::run([ 'cc', '-Wall', '-Wextra', '-Werror', '-shared', '-fPIC',
		"$FindBin::RealBin/../c/slow_dns.c", '-ldl', '-o', $shim ], '>', \$o, '2>', \$e)
  or plan skip_all => "cannot build the shim (a C compiler is needed): $e";

# pg_leader under the shim: (exit status, seconds taken, stderr)
sub timed
{
	my (@args) = @_;
	my ($out, $err) = ('', '');
	local $ENV{LD_PRELOAD} = $shim;
	local $ENV{LE_SLOW_DNS_NAME} = 'slow.test';
	my $t0 = time();
	IPC::Run::run([ pg_leader_cmd(), @args ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(120));
	return ($? >> 8, time() - $t0, $err);
}

my $slow = "host=slow.test port=$port dbname=postgres";
my ($rc, $secs, $err) = timed('status', '-d', $slow, '--timeout', '1s');
isnt($rc, 0, 'status with a hanging lookup fails');
cmp_ok($secs, '<', 4, "status --timeout 1s: bounded (took ${secs}s)") or diag($err);
like($err, qr/slow\.test/, 'the error names the host');

($rc, $secs, $err) = timed('run', '-d', $slow, '-l', 'dns-key', '--connect-timeout', '1s', '--no-wait',
	'--', 'true');
isnt($rc, 0, 'run --no-wait with a hanging lookup fails');
cmp_ok($secs, '<', 5, "run --connect-timeout 1s --no-wait: bounded (took ${secs}s)") or diag($err);

($rc, $secs, $err) = timed('run', '-d', $slow, '-l', 'dns-key', '--connect-timeout', '1s',
	'--wait-timeout', '2s', '--', 'true');
isnt($rc, 0, 'run --wait-timeout 2s with a hanging lookup fails');
cmp_ok($secs, '<', 6, "run --connect-timeout 1s --wait-timeout 2s: bounded (took ${secs}s)") or diag($err);

# several hosts: the hanging one gets its connect_timeout, the next connects
my $multi = "host=slow.test,localhost port=$port dbname=postgres connect_timeout=2";
($rc, $secs, $err) = timed('status', '-d', $multi, '-l', 'nothing', '--timeout', '20s');
is($rc, 1, 'status over two hosts, the first hanging: the second answers (no such lease: 1)') or diag($err);
cmp_ok($secs, '<', 8, "the first host's lookup took its connect_timeout only (took ${secs}s)");

($rc, $secs, $err) = timed('run', '-d', $multi, '-l', 'dns-multi', '--ttl', '5s', '--', 'sh', '-c', 'exit 4');
is($rc, 4, 'run over two hosts, the first hanging: the command runs') or diag($err);
cmp_ok($secs, '<', 20, "and in bounded time (took ${secs}s)");

# a name with several addresses (::1 refused, 127.0.0.1 listening)
($rc, $secs, $err) = timed('status', '-d', "host=localhost port=$port dbname=postgres", '-l', 'nothing');
is($rc, 1, 'a name with several addresses: the one listening answers') or diag($err);

# PGHOSTADDR in the environment is the address, as libpq takes it: the name
# (here the hanging one) is not looked up
{
	local $ENV{PGHOSTADDR} = '127.0.0.1';
	($rc, $secs, $err) = timed('status', '-d', $slow, '-l', 'nothing', '--timeout', '10s');
	is($rc, 1, 'PGHOSTADDR with a host name: connected to that address') or diag($err);
	cmp_ok($secs, '<', 4, "without looking the name up (took ${secs}s)");
}

$node->stop;
done_testing();
