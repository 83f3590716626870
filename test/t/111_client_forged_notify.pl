# G8, G11: Notifications on channel leader_election are unauthenticated: any role that
# can connect may send one.  A forged "acquired" with a huge token, a forged
# "force_released" of the leader's own token and a forged "released" must not
# end leadership, must not make --loop candidates flap, and must not be
# reported as a new leader: the client confirms with the server first.
# pg_leader runs with default signal dispositions (SIGPIPE not ignored).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_forged');
$node->safe_psql('postgres', 'CREATE ROLE intruder LOGIN');

# start_candidate with SIGPIPE at its default disposition in the child
sub start_default
{
	local $SIG{PIPE} = 'DEFAULT';
	return start_candidate(@_);
}

# Send a notification on the extension's channel as role intruder.
sub forge
{
	my ($payload) = @_;
	$node->safe_psql('postgres', "SELECT pg_notify('leader_election', '$payload')",
		extra_params => [ '-U', 'intruder' ]);
}

my $key = 'fn';
my $events = "$dir/fn.events";
my $job = write_job($dir, $events, 0);
my @timing = ('--ttl', '3s', '--retry', '300ms', '--grace', '1s', '--loop');
my $a = start_default(dir => $dir, name => 'fnA', dsn => $dsn, key => $key,
	opts => [@timing], command => [$job]);
ok(wait_for(sub { grep({ $_->[0] eq 'start' } read_events($events)) == 1 }, 30), 'leader starts its job');
my $b = start_default(dir => $dir, name => 'fnB', dsn => $dsn, key => $key,
	opts => [@timing], command => [$job]);
ok(wait_for(sub { log_has($b, qr/new_leader .*holder fnA/) }, 30), 'follower sees the leader');
my ($start) = grep { $_->[0] eq 'start' } read_events($events);
my $tok = $start->[1];

forge(qq({"event":"acquired","lease_key":"$key","holder":"intruder","fencing_token":9000000000000000000,"expires_at":"2099-01-01T00:00:00.000Z"}));
forge(qq({"event":"force_released","lease_key":"$key","holder":"fnA","fencing_token":$tok}));
forge(qq({"event":"released","lease_key":"$key","holder":"fnA","fencing_token":$tok}));
forge(qq({"event":"acquired","lease_key":"$key","holder":"intruder\\nfake line","fencing_token":-5}));
# a few renewals' worth of time (renew interval ~0.9 s), less than the ttl
usleep(2_000_000);

ok(!log_has($a, qr/stopped_leading/), 'the leader did not stop leading');
ok(alive($start->[3]), 'its command still runs');
my @starts = grep { $_->[0] eq 'start' } read_events($events);
is(scalar @starts, 1, 'no candidate flapped: one job start in all');
is(lease_state($node, $key), "fnA|$tok|t", 'the server still has the leader with its token');
ok(!log_has($b, qr/new_leader .*intruder/), 'the follower did not report the forged leader');
ok(!log_has($a, qr/new_leader .*intruder/), 'nor did the leader');
ok(!defined reap($a) && !defined reap($b), 'both candidates still run');
my @h = history_rows($node, $key);
is(scalar @h, 1, 'one ownership period in the server history');

kill 'TERM', $a->{pid}, $b->{pid};
wait_for(sub { defined reap($a) && defined reap($b) }, 15);
is($a->{status}, 143, 'the leader exits 143 on SIGTERM');
is_deeply([ check_no_overlap($events) ], [], 'jobs never overlapped');

stop_all();
$node->stop;
done_testing();
