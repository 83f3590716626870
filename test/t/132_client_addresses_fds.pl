# G9: the addresses a host name resolves to are all handed to libpq, each
# exactly once: 127.0.0.1 after 127.0.0.10 is a distinct address, and an
# IPv6 link-local address keeps its zone ("%eth0"), without which it
# cannot be reached.  An LD_PRELOAD shim (test/c/slow_dns.c) gives a name
# the addresses.  And the command gets no descriptor from 3 up by default,
# and with --keep-fds every one pg_leader got, however high its number
# (one at 5000 here).  A lookup's thread blocks every signal, as the
# library's other threads do.  Two ports for one host name are libpq's
# error, as without the lookup.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_addresses_fds');
my $ll = '';
# a link-local address of this machine, with its zone
for my $line (split /\n/, `ip -6 -o addr show scope link 2>/dev/null`)
{
	$ll = "$2%$1", last if $line =~ /^\d+:\s+(\S+)\s+inet6\s+(fe80::[0-9a-f:]+)\//;
}
$node->append_conf('postgresql.conf',
	"listen_addresses = '127.0.0.1" . ($ll ne '' ? ",$ll" : '') . "'");
$node->append_conf('pg_hba.conf', "host all all fe80::/10 trust") if $ll ne '';
$node->restart;
my $port = $node->port;

my $shim = "$dir/slow_dns.so";
my ($o, $e) = ('', '');
IPC::Run::run([ 'cc', '-Wall', '-Wextra', '-Werror', '-shared', '-fPIC',
		"$FindBin::RealBin/../c/slow_dns.c", '-ldl', '-o', $shim ], '>', \$o, '2>', \$e)
  or plan skip_all => "cannot build the shim (a C compiler is needed): $e";

# pg_leader status with name multi.test resolving to $addrs: (exit status, stderr)
sub status_via
{
	my ($addrs) = @_;
	my ($out, $err) = ('', '');
	local $ENV{LD_PRELOAD} = $shim;
	local $ENV{LE_MULTI_DNS_NAME} = 'multi.test';
	local $ENV{LE_MULTI_DNS_ADDRS} = $addrs;
	IPC::Run::run([ pg_leader_cmd(), 'status', '-d', "host=multi.test port=$port dbname=postgres",
			'-l', 'nothing', '--timeout', '20s' ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(60));
	return ($? >> 8, $err);
}

my ($rc, $err) = status_via('127.0.0.10,127.0.0.1');
is($rc, 1, '127.0.0.10 refused, then 127.0.0.1 answers (no such lease: 1)') or diag($err);

# two ports for one host name: libpq's error, not the first port alone
{
	my ($out, $e3) = ('', '');
	IPC::Run::run([ pg_leader_cmd(), 'status', '-d', "host=localhost port=$port,1 dbname=postgres",
			'-l', 'nothing', '--timeout', '20s' ], '<', \undef, '>', \$out, '2>', \$e3,
		IPC::Run::timeout(60));
	isnt($? >> 8, 1, 'host=localhost port=P,1: refused');
	like($e3, qr/could not match 2 port numbers to 1 hosts/, 'with libpq\'s message');
}

SKIP:
{
	skip 'no IPv6 link-local address here', 1 if $ll eq '';
	($rc, $err) = status_via($ll);
	is($rc, 1, "a link-local address ($ll) keeps its zone and answers") or diag($err);
}

# a lookup's thread leaves every signal to the application's threads: while
# one hangs (slow.test), only pg_leader's main thread has none blocked
{
	local $ENV{LD_PRELOAD} = $shim;
	local $ENV{LE_SLOW_DNS_NAME} = 'slow.test';
	my $h = IPC::Run::start([ pg_leader_cmd(), 'status', '-d', "host=slow.test port=$port dbname=postgres",
			'--timeout', '4s' ], '<', \undef, '>', \my $o2, '2>', \my $e2);
	my $pid = $h->{KIDS}[0]{PID};
	my @open;
	wait_for(sub {
		@open = ();
		for my $st (glob("/proc/$pid/task/*/status"))
		{
			my $t = eval { slurp_file($st) } // '';
			push @open, $st if $t =~ /^SigBlk:\s*0+$/m;
		}
		my @tasks = glob("/proc/$pid/task/*");
		return @tasks >= 2;
	}, 10);
	is(scalar(@open), 1, 'during a hanging lookup only the main thread takes signals')
	  or diag(join(' ', @open));
	$h->finish;
}

# the command's descriptors (but ls's own directory, 3) with one at 5000
# passed to pg_leader; undef when descriptor 5000 cannot be opened here
# (with no options: ls run directly, for what the shell passes)
sub fds_with_5000
{
	my (@opts) = @_;
	my ($out, $err) = ('', '');
	my @leader = @opts ? (pg_leader_cmd(), 'run', '-d', $dsn, '-l', 'fd-high', '--ttl', '5s',
		grep { $_ ne '' } @opts, '--') : ();
	IPC::Run::run([ 'bash', '-c', 'ulimit -n 8192 2>/dev/null; exec 5000</dev/null || exit 99; exec "$@"',
			'bash', @leader, 'ls', '/proc/self/fd' ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
	return undef if $? >> 8 == 99;
	diag($err) if $? != 0;
	return join(',', grep { $_ != 3 } sort { $a <=> $b } grep { /^\d+$/ } split /\s+/, $out);
}

SKIP:
{
	my $passed = fds_with_5000();
	skip 'cannot open descriptor 5000 here', 3 unless defined $passed;
	like($passed, qr/,5000$/, "the shell passes descriptor 5000 (and $passed)");
	is(fds_with_5000(''), '0,1,2', 'by default descriptor 5000 did not reach the command');
	is(fds_with_5000('--keep-fds'), $passed, '--keep-fds: the command got all of them, 5000 too');
}

$node->stop;
done_testing();
