# A member whose membership ended while its partitions' leases were still
# valid (force released here) joins again; the server renews those
# partitions under the new membership with their old tokens, and the member,
# which revoked them, releases them.  That release must wait until each
# instance is gone (pg_leader runs the member with defer_release), as every
# release of a revoked partition does: the instances here ignore SIGTERM
# and run until the SIGKILL after --grace.  Once with the answer of the
# joining heartbeat, once with that answer lost (a proxy drops it).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(time sleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = group_node('client_group_rejoin_release', 'g', 2);
my $arm = "$dir/drop-next-join";
my ($proxy, $proxy_port) = drop_answer_proxy($node, $arm, sub {
	my ($msg) = @_;
	# a membership row with new_period = t
	return unpack('x5 n', $msg) >= 6 && $msg =~ /\x00\x00\x00\x06member\x00\x00\x00\x01t/;
});
END { kill 'KILL', $proxy if $proxy; }
my $via_proxy = "host=127.0.0.1 port=$proxy_port dbname=postgres sslmode=disable gssencmode=disable";

for my $lose (0, 1)
{
	my $what = $lose ? 'answer lost' : 'answer seen';
	my $events = "$dir/events.$lose";
	my $job = LeClientTest::group_job($dir, $events, ignore_term => 1);
	my $c = LeClientTest::start_pg_leader($dir, "m$lose", 'group', 'run', '-d', $via_proxy, '--group', 'g',
		'--ttl', '10s', '--retry', '1s', '--grace', '4s', '--', $job);
	my $ev = sub { return -e $events ? slurp_file($events) : ''; };
	ok(wait_for(sub { (() = $ev->() =~ /^start /mg) == 2 }, 20), "$what: both partitions run");
	my %pid = map { (split / /)[1, 4] } grep { /^start / } split /\n/, $ev->();
	my %tok = map { (split / /)[1, 2] } grep { /^start / } split /\n/, $ev->();
	my $mkey = $node->safe_psql('postgres',
		"SELECT lease_key FROM le_leases WHERE lease_key LIKE 'le:group:g:member:%' AND is_valid");
	if ($lose)
	{
		open(my $fh, '>', $arm) or die;
		close($fh);
	}
	$node->safe_psql('postgres', "SELECT le_force_release('$mkey')");
	ok(wait_for(sub { !-e $arm }, 20), "$what: the joining heartbeat's answer was dropped") if $lose;

	# until the old instances are gone, their tokens stay held by the member
	my $early = '';
	my $t0 = time;
	while (time - $t0 < 15 && grep { kill(0, $pid{$_}) } keys %pid)
	{
		for my $p (sort keys %pid)
		{
			next unless kill(0, $pid{$p});
			my $held = $node->safe_psql('postgres',
				"SELECT count(*) FROM le_leases WHERE lease_key = 'le:group:g:$p' AND fencing_token = $tok{$p} AND is_valid");
			$early .= sprintf("partition %d token %d released %.3f s after the force release, its instance alive\n",
				$p, $tok{$p}, time - $t0)
			  if $held ne '1' && kill(0, $pid{$p}) && $early !~ /^partition $p /m;
		}
		sleep(0.05);
	}
	ok(!(grep { kill(0, $pid{$_}) } keys %pid), "$what: the old instances were killed");
	is($early, '', "$what: no partition released while its old instance ran");
	ok(wait_for(sub { (() = $ev->() =~ /^start /mg) == 4 }, 20), "$what: both partitions run again");
	my @starts = map { join ' ', (split / /)[1, 2] } grep { /^start / } split /\n/, $ev->();
	my %n;
	is((grep { $n{$_}++ } @starts), 0, "$what: every instance under a token of its own");
	kill 'TERM', $c->{pid};
	ok(wait_for(sub { defined reap($c) }, 20), "$what: pg_leader exits at SIGTERM");
}

kill 'KILL', $proxy;
waitpid($proxy, 0);
stop_all();
$node->stop;
done_testing();
