# G11: the answer to a granting le_acquire is lost (the connection breaks
# after the grant committed, before the client read it).  On the new
# connection le_acquire hands the same lease back with new_period = false.
# Under an owner id the library made (unique to the elector) that grant can
# only be the lost one: the elector leads on it at once rather than taking
# it for another process's lease, which left it held by nobody for a ttl.
# A proxy between pg_leader and the server drops the granting answer.
# pg_leader runs with default signal dispositions.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_lost_grant');
my $arm = "$dir/drop-next-grant";

# While $arm exists, the first DataRow of an le_acquire answer (five
# columns or more) granting the lease (first column "t") is dropped with
# the connection.
my ($proxy, $proxy_port) = drop_answer_proxy($node, $arm, sub {
	my ($msg) = @_;
	my ($ncols, $l1) = unpack('x5 n N', $msg);
	return $ncols >= 5 && $l1 == 1 && substr($msg, 11, 1) eq 't';
});
END { kill 'KILL', $proxy if $proxy; }

my $via_proxy = "host=127.0.0.1 port=$proxy_port dbname=postgres sslmode=disable gssencmode=disable";
my $token = $node->safe_psql('postgres', "SELECT fencing_token FROM le_acquire('lg', 'holder', '60s')");

# no --owner: the owner id is the library's own
my $c = LeClientTest::start_pg_leader($dir, 'lost', 'run', '-d', $via_proxy, '-l', 'lg', '--ttl', '6s', '--retry', '1s',
	'--grace', '1s', '--', 'sh', '-c', "echo \"\$LE_FENCING_TOKEN\" > $dir/token; exec sleep 600");
ok(wait_for(sub { log_has($c, qr/the server waits for the lease/) }, 30), 'the candidate waits in the server');
usleep(300_000);

open(my $fh, '>', $arm) or die;
close($fh);
my $t0 = time;
is($node->safe_psql('postgres', "SELECT le_release('lg', 'holder', $token)"), 't', 'the holder releases');
ok(wait_for(sub { !-e $arm }, 10), 'the proxy dropped the granting answer');
ok(wait_for(sub { log_has($c, qr/command_started/) }, 20), 'the candidate leads');
my $took = time - $t0;
note(sprintf('release -> command started: %.3f s', $took));
ok($took < 3, 'it leads well within the ttl after the lost answer (6 s ttl, 1 s retry)');
ok(!log_has($c, qr/owner ids must be unique/), 'the lost grant is not taken for an owner-id conflict');
my $granted = $node->safe_psql('postgres',
	"SELECT string_agg(fencing_token::text, ',' ORDER BY fencing_token) FROM le_lease_history "
	  . "WHERE lease_key = 'lg' AND fencing_token > $token");
ok(wait_for(sub { -s "$dir/token" }, 10), 'the command got its token');
chomp(my $used = slurp_file("$dir/token"));
is($granted, $used, 'the command runs with the one token granted after the release');

kill 'TERM', $c->{pid};
ok(wait_for(sub { defined reap($c) }, 20), "pg_leader exits at SIGTERM");
is($node->safe_psql('postgres', "SELECT count(*) FROM le_leases WHERE lease_key = 'lg' AND is_valid"), '0',
	'released at SIGTERM');

kill 'KILL', $proxy;
waitpid($proxy, 0);
stop_all();
$node->stop;
done_testing();
