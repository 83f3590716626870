# G11 for groups: the answer to the heartbeat that joined the group is lost
# (the connection breaks after the join committed, before the member read
# it).  On the new connection le_group_heartbeat hands the membership back
# with new_period = false and a token the member never saw.  Under a member
# id the library made (unique to the member) that membership can only be
# the lost heartbeat's: the member keeps it and works, rather than taking
# it for another process's membership and waiting a ttl while the
# partitions it was granted stay held by nobody.  A proxy between
# pg_leader and the server drops the answer.  pg_leader runs with default
# signal dispositions.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = group_node('client_group_lost_join', 'g', 2);
my $arm = "$dir/drop-next-join";

# While $arm exists, the first membership row of a heartbeat's answer
# (state "member") is dropped with the connection.
my ($proxy, $proxy_port) = drop_answer_proxy($node, $arm, sub {
	my ($msg) = @_;
	return unpack('x5 n', $msg) >= 6 && $msg =~ /\x00\x00\x00\x06member/;
});
END { kill 'KILL', $proxy if $proxy; }

my $via_proxy = "host=127.0.0.1 port=$proxy_port dbname=postgres sslmode=disable gssencmode=disable";
open(my $fh, '>', $arm) or die;
close($fh);

# no --member: the member id is the library's own
my $c = LeClientTest::start_pg_leader($dir, 'lost', 'group', 'run', '-d', $via_proxy, '--group', 'g',
	'--ttl', '6s', '--retry', '1s', '--grace', '1s', '--',
	'sh', '-c', "echo \"\$LE_PARTITION \$LE_FENCING_TOKEN\" >> $dir/started; exec sleep 600");
ok(wait_for(sub { !-e $arm }, 30), 'the proxy dropped the answer to the joining heartbeat');
my $t0 = time;
# the instances started so far: "PARTITION TOKEN" lines
sub started { return -e "$dir/started" ? slurp_file("$dir/started") : ''; }
ok(wait_for(sub { (() = started() =~ /^\d+ \d+$/mg) == 2 }, 20), 'both partitions run');
my $took = time - $t0;
note(sprintf('answer dropped -> both instances started: %.3f s', $took));
ok($took < 4, 'well within the ttl after the lost answer (6 s ttl, 1 s retry)');
ok(!log_has($c, qr/member ids must be unique/), 'the lost join is not taken for another process\'s membership');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM le_lease_history WHERE lease_key LIKE 'le:group:g:member:%'"),
	'1', 'the member kept the membership of the lost heartbeat');
my $held = $node->safe_psql('postgres',
	"SELECT string_agg(right(lease_key, 1) || ' ' || fencing_token, E'\\n' ORDER BY lease_key) FROM le_leases "
	  . "WHERE lease_key IN ('le:group:g:0', 'le:group:g:1') AND is_valid");
my $started = join("\n", sort split /\n/, started());
is($started, $held, 'each instance runs under its partition\'s current token');

kill 'TERM', $c->{pid};
ok(wait_for(sub { defined reap($c) }, 20), 'pg_leader exits at SIGTERM');
is($node->safe_psql('postgres', "SELECT count(*) FROM le_leases WHERE lease_key LIKE 'le:group:g:%' AND is_valid"),
	'0', 'it left the group and released everything');

kill 'KILL', $proxy;
waitpid($proxy, 0);
stop_all();
$node->stop;
done_testing();
