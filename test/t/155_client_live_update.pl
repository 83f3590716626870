# pg_leader keeps campaigning across an ALTER EXTENSION leader_election
# UPDATE from 1.0 to 1.1 made while it runs.  The update drops the 1.0
# le_acquire(text, text, interval) for the 1.1 one with a wait and
# metadata; a follower that found 1.0 on its campaign connection must
# then call the 1.1 function on that same connection, not take the
# dropped signature for a missing extension and exit 78.  Likewise a
# leader, whose next campaign after its period follows the update.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeNode;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_live_update');

sub reinstall_1_0
{
	$node->safe_psql('postgres', "SET client_min_messages = warning;"
		  . " DROP EXTENSION IF EXISTS leader_election CASCADE;"
		  . " CREATE EXTENSION leader_election VERSION '1.0'");
}

# --- a follower, its campaign connection up during the update ---
{
	reinstall_1_0();
	$node->safe_psql('postgres', "SELECT le_acquire('f', 'other', '4s')");
	my $c = start_candidate(dir => $dir, name => 'follower', dsn => $dsn, key => 'f',
		opts => [ '--ttl', '3s', '--retry', '300ms' ],
		command => [ 'sh', '-c', "echo ran >> $dir/ran.f" ]);
	ok(wait_for(sub { log_has($c, qr/new_leader .*holder other/) }, 20), 'follower: sees the holder under 1.0');
	$node->safe_psql('postgres', 'ALTER EXTENSION leader_election UPDATE');
	is($node->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'leader_election'"),
		'1.1', 'the extension is at 1.1 now');
	ok(wait_for(sub { defined reap($c) }, 30), 'follower: its command ran and it exited');
	is(reap($c), 0, 'follower: with the status of its command, not 78');
	ok(-e "$dir/ran.f", 'follower: led after the update and ran its command');
	ok(!log_has($c, qr/does not exist|not part of extension/), 'follower: never took the update for a missing extension');
}

# --- a leader (--loop), campaigning again after its command ended ---
{
	reinstall_1_0();
	my $c = start_candidate(dir => $dir, name => 'leader', dsn => $dsn, key => 'l',
		opts => [ '--ttl', '3s', '--retry', '300ms', '--loop' ],
		command => [ 'sh', '-c', "echo run >> $dir/runs.l; sleep 1" ]);
	my $runs = sub { open(my $f, '<', "$dir/runs.l") or return 0; my @l = <$f>; return scalar @l };
	ok(wait_for(sub { $runs->() >= 1 }, 20), 'leader: runs its command under 1.0');
	$node->safe_psql('postgres', 'ALTER EXTENSION leader_election UPDATE');
	my $at_update = $runs->();
	ok(wait_for(sub { $runs->() >= $at_update + 2 }, 30), 'leader: leads again after the update');
	ok(alive($c->{pid}), 'leader: still running');
	ok(!log_has($c, qr/does not exist|not part of extension/), 'leader: never took the update for a missing extension');
}

stop_all();
done_testing();
