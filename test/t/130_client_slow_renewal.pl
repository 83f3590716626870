# G9: a slow but healthy server at a short ttl: pg_leader must not stop its
# command.  Renewal attempts are sized to leave room for a retry before the
# SIGTERM point, but never below the round trip the server takes: with
# every packet delayed by 60 ms each way (a round trip of 120 ms, a
# connection needing two), ttl 1 s and the default grace and renew
# interval, the command keeps running with one token.  pg_leader runs with
# default signal dispositions.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IO::Select;
use Time::HiRes qw(time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my $delay = 0.060;
my ($node, $dsn, $dir) = start_node('client_slow_renewal');

# A TCP proxy to the node's socket that delays every chunk by $delay.
my ($proxy, $proxy_port) = tcp_proxy($node, sub {
	my ($listen, $path) = @_;
	my $sel = IO::Select->new($listen);
	my (%peer, %queue);
	for (;;)
	{
		my $now = time;
		my $next = 0.5;
		for my $fd (keys %queue)
		{
			my $q = $queue{$fd};
			while (@$q && $q->[0][0] <= $now)
			{
				my ($t, $sock, $data) = @{ shift @$q };
				if (!defined $data) { close($sock); next; }
				syswrite($sock, $data);
			}
			$next = $q->[0][0] - $now if @$q && $q->[0][0] - $now < $next;
		}
		for my $s ($sel->can_read($next > 0 ? $next : 0))
		{
			next unless $s == $listen || exists $peer{$s};    # closed in this round
			if ($s == $listen)
			{
				proxy_accept($listen, $path, \%peer, $sel);
				next;
			}
			my $to = $peer{$s};
			my $n = sysread($s, my $buf, 65536);
			push @{ $queue{$to} }, [ time + $delay, $to, $n ? $buf : undef ];
			if (!$n)
			{
				# Both ends leave the select set now: a socket left in it
				# after its delayed close would keep its descriptor's slot,
				# and a new connection given that descriptor would never be
				# read.
				for ($s, $to) { $sel->remove($_); delete $peer{$_}; }
				close($s);
			}
		}
	}
});

my $slow = "host=127.0.0.1 port=$proxy_port dbname=postgres sslmode=disable";
my $c = start_candidate(dir => $dir, name => 'slow', dsn => $slow, key => 'slow',
	opts => [ '--ttl', '1s' ], command => [ 'sleep', '60' ]);
ok(wait_for(sub { log_has($c, qr/command_started/) }, 30), 'the command started through the slow proxy');
my ($token0) = lease_state($node, 'slow') =~ /\|(\d+)\|/;
sleep 6;
my $log = slurp_file($c->{log});
unlike($log, qr/stopping_command/, 'the command was not stopped');
ok(alive($c->{pid}), 'pg_leader still runs');
like(lease_state($node, 'slow'), qr/^slow\|\Q$token0\E\|t$/, 'the lease is still held with the same token');
note($log) if $log =~ /stopping_command/;
kill 'TERM', $c->{pid};
ok(wait_for(sub { defined reap($c) }, 20), 'pg_leader exits on SIGTERM');
is($c->{status}, 143, 'status 143');

kill 'KILL', $proxy;
waitpid($proxy, 0);
stop_all();
$node->stop;
done_testing();
