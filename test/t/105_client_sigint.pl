# G9: SIGINT to pg_leader's whole process group (Ctrl-C, or
# kill -INT -- -PGID), run with default signal dispositions.  pg_leader must
# not die of SIGPIPE (141): it stops the command and its grandchildren (even
# those ignoring SIGTERM), releases the lease, logs its exit, exits 130.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_sigint');

my $gc = "$dir/grandchild.pid";
my $c = start_candidate(dir => $dir, name => 'intr', dsn => $dsn, key => 'int',
	opts => [ '--ttl', '3s', '--grace', '500ms', '-v' ],
	command => [ 'sh', '-c', "trap '' TERM; sleep 300 & echo \$! > $gc; while :; do sleep 0.1; done" ]);
ok(wait_for(sub { -s $gc }, 30), 'the command and its grandchild run');
ok(wait_for(sub { log_has($c, qr/ renewed /) }, 10), 'the lease was renewed once');
chomp(my $gpid = slurp_file($gc));
my ($tok) = (split /\|/, lease_state($node, 'int'))[1];

kill 'INT', -$c->{pid};
ok(wait_for(sub { defined reap($c) }, 20), 'pg_leader exits after SIGINT to its process group');
isnt($c->{status}, 141, 'not killed by SIGPIPE');
is($c->{status}, 130, 'exit status 128 + SIGINT');
ok(!alive($gpid), 'the grandchild that ignores SIGTERM is gone');
is( $node->safe_psql('postgres',
		"SELECT end_reason FROM le_lease_history WHERE lease_key = 'int' AND fencing_token = $tok"),
	'released', 'the lease was released');
ok(log_has($c, qr/ exit key=int .*status 130/), 'the exit is logged');

stop_all();
$node->stop;
done_testing();
