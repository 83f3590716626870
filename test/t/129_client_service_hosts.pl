# G9: hosts listed in a service file (service=NAME, PGSERVICEFILE) are tried
# one at a time, as hosts listed in the connection string are: with the
# first one frozen (it accepts TCP connections and never answers), the
# second is reached within the first one's share of --connect-timeout.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IO::Socket::INET;
use IPC::Run;
use POSIX ();
use Time::HiRes qw(time);
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_service_hosts');

my $listener = IO::Socket::INET->new(
	LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 16, ReuseAddr => 1)
  or die "listen: $!";
my $fport = $listener->sockport;
my $frozen = fork();
die "fork: $!" unless defined $frozen;
if ($frozen == 0)
{
	my @held;
	while (my $s = $listener->accept) { push @held, $s; }
	POSIX::_exit(0);
}
close $listener;
END { local $?; if ($frozen) { kill 'KILL', $frozen; waitpid($frozen, 0); } }

my $sf = "$dir/pg_service.conf";
open(my $fh, '>', $sf) or die;
printf $fh "# two hosts, the first frozen\n[svc]\nhost=127.0.0.1,%s\nport=%d,%d\ndbname=postgres\n\n[other]\nhost=nowhere\n",
  $node->host, $fport, $node->port;
close $fh;

sub run_no_wait
{
	my ($conninfo, $key, @opts) = @_;
	my ($out, $err) = ('', '');
	my $stamp = "$dir/started.$key";
	local $ENV{PGSERVICEFILE} = $sf;
	delete local $ENV{PGHOST};
	delete local $ENV{PGPORT};
	my $t0 = time();
	IPC::Run::run([ pg_leader_cmd(), 'run', '--no-wait', '-d', $conninfo, '-l', $key,
			@opts, '--', 'sh', '-c', "date +%s.%N > $stamp" ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
	my $t1 = -s $stamp ? slurp_file($stamp) + 0 : time();
	return ($? >> 8, $t1 - $t0, $err);
}

my ($rc, $secs, $err) = run_no_wait('service=svc', 'svc1', '--connect-timeout', '4s');
note sprintf('service=svc, --connect-timeout 4s: exit %d after %.2f s; %s', $rc, $secs, $err);
is($rc, 0, 'the lease was acquired through the service\'s second host');
cmp_ok($secs, '<', 3.8, 'within the frozen host\'s share of --connect-timeout plus 1.8 s');

# PGSERVICE instead of service= in the string
{
	local $ENV{PGSERVICE} = 'svc';
	($rc, $secs, $err) = run_no_wait('dbname=postgres', 'svc2', '--connect-timeout', '4s');
}
note sprintf('PGSERVICE=svc: exit %d after %.2f s; %s', $rc, $secs, $err);
is($rc, 0, 'PGSERVICE: the lease was acquired through the second host');
cmp_ok($secs, '<', 3.8, 'PGSERVICE: within the frozen host\'s share plus 1.8 s');

$node->stop;
done_testing();
