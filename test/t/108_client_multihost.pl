# G9: A multi-host connection string whose first host is frozen: it accepts TCP
# connections and never answers (a SIGSTOPped primary, or one cut off after
# the handshake).  libpq ignores connect_timeout in non-blocking connects,
# so the client must try the hosts one at a time, each for connect_timeout
# when the DSN sets it, else for an equal share of --connect-timeout, and
# reach the real server listed second in time.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_multihost');

# The frozen server: a child that accepts connections and keeps them open
# without ever sending a byte.
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
	POSIX::_exit(0);    # no END blocks: they would stop the node
}
close $listener;
# the frozen server must not outlive the test, whatever fails
END { local $?; if ($frozen) { kill 'KILL', $frozen; waitpid($frozen, 0); } }

my $multi = sprintf('host=127.0.0.1,%s port=%d,%d dbname=postgres',
	$node->host, $fport, $node->port);

# Run pg_leader run --no-wait with the given connection string and
# options, the command writing the time it started; returns (exit status,
# seconds until the command started (until pg_leader exited if it did
# not), stderr).  (pg_leader's exit can come later: it closes a renewal
# connection that is still trying the frozen host.)
sub run_no_wait
{
	my ($conninfo, $key, @opts) = @_;
	my ($out, $err) = ('', '');
	my $stamp = "$dir/started.$key";
	my $t0 = time();
	IPC::Run::run([ pg_leader_cmd(), 'run', '--no-wait', '-d', $conninfo, '-l', $key,
			'--owner', "mh-$key", @opts, '--', 'sh', '-c', "date +%s.%N > $stamp" ],
		'>', \$out, '2>', \$err);
	my $t1 = -s $stamp ? slurp_file($stamp) + 0 : time();
	return ($? >> 8, $t1 - $t0, $err);
}

# No connect_timeout in the DSN: each host gets an equal share of the
# time left (2 s of 4 s for the frozen one).
my ($rc, $secs, $err) = run_no_wait($multi, 'mh1', '--connect-timeout', '4s');
note sprintf('share of --connect-timeout 4s: exit %d after %.2f s; %s', $rc, $secs, $err);
is($rc, 0, 'the lease was acquired through the second host (equal shares)');
cmp_ok($secs, '<', 3.8, 'the command started within the frozen host\'s share of the timeout plus 1.8 s');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM le_lease_history WHERE lease_key = 'mh1' AND holder = 'mh-mh1'"),
	'1', 'the server recorded that period');

# connect_timeout in the DSN bounds each host, whatever --connect-timeout is.
($rc, $secs, $err) = run_no_wait("$multi connect_timeout=2", 'mh2', '--connect-timeout', '10s');
note sprintf('connect_timeout=2, --connect-timeout 10s: exit %d after %.2f s; %s', $rc, $secs, $err);
is($rc, 0, 'the lease was acquired through the second host (connect_timeout per host)');
cmp_ok($secs, '<', 3.8, 'the command started within connect_timeout for the frozen host plus 1.8 s');

# Only frozen hosts: a connection error naming the last host tried, within
# --connect-timeout.
($rc, $secs, $err) = run_no_wait(
	sprintf('host=127.0.0.1,127.0.0.1 port=%d,%d dbname=postgres', $fport, $fport),
	'mh3', '--connect-timeout', '2s');
note sprintf('two frozen hosts: exit %d after %.2f s; %s', $rc, $secs, $err);
is($rc, 69, 'unreachable servers: exit status 69');
like($err, qr/host 2 of 2/, 'the error names the last host tried');
cmp_ok($secs, '<', 3.5, 'within --connect-timeout plus 1.5 s');

$node->stop;
done_testing();
