# G9: one hung renewal at a short ttl: pg_leader must not stop its command.
# pg_leader's rule is that one failed renewal can be retried before the
# command's SIGTERM point; for a renewal that hangs (its server process
# frozen with SIGSTOP while idle) this needs each attempt to be bounded by
# half the time left before the SIGTERM point, not before the deadline.
# At ttl 1 s and 2 s with the default grace and renew interval, the hung
# attempt times out, a new connection renews, and the command keeps
# running with the same token.  pg_leader runs with default signal
# dispositions.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_hung_short');

for my $ttl ('1s', '2s')
{
	my $key = "hung-$ttl";
	my $c = start_candidate(dir => $dir, name => "c$ttl", dsn => $dsn, key => $key,
		opts => [ '--ttl', $ttl ], command => [ 'sleep', '60' ]);
	ok(wait_for(sub { log_has($c, qr/command_started/) }, 30), "ttl $ttl: the command started");
	# the renewal connection's server process, frozen while idle
	my $pid = '';
	wait_for(sub {
		$pid = $node->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE application_name = 'pg_leader renew' AND state = 'idle'");
		$pid =~ /^\d+$/;
	}, 20);
	ok($pid =~ /^\d+$/, "ttl $ttl: the renewal connection is up");
	kill 'STOP', $pid;
	my ($token0) = lease_state($node, $key) =~ /\|(\d+)\|/;
	sleep 4;
	my $log = slurp_file($c->{log});
	like($log, qr/notice .*renewal failed|notice .*renewal connection/, "ttl $ttl: the hung renewal was noticed");
	unlike($log, qr/stopping_command/, "ttl $ttl: the command was not stopped");
	ok(alive($c->{pid}), "ttl $ttl: pg_leader still runs");
	like(lease_state($node, $key), qr/^c$ttl\|\Q$token0\E\|t$/, "ttl $ttl: the lease is still held with the same token");
	kill 'CONT', $pid;
	kill 'TERM', $c->{pid};
	ok(wait_for(sub { defined reap($c) }, 20), "ttl $ttl: pg_leader exits on SIGTERM");
	is($c->{status}, 143, "ttl $ttl: status 143");
	note($log) if $log =~ /stopping_command/;
}

stop_all();
$node->stop;
done_testing();
