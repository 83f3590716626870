# G9: pg_leader across connection loss: pg_terminate_backend of the renewal
# connection (the leader reconnects and keeps its lease and token),
# of the campaign connections (the follower waits in le_acquire again on its
# new connection: a release still hands over at once), and a server restart during leadership (afterwards
# exactly one leader, and an old leader's leadership always ended before
# a new one began).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_reconnect');
my $ttl_s = 3;
my @timing = ('--ttl', "${ttl_s}s", '--retry', '300ms', '--grace', '1s', '-v');

# Backend pids of pg_leader connections of one kind ("renew" or "campaign").
sub backends
{
	my ($kind) = @_;
	return split /\n/, $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE application_name = 'pg_leader $kind' ORDER BY pid");
}

# --- 1. the renewal connection is terminated -------------------------------------
my $events = "$dir/term.events";
my $job = write_job($dir, $events, 0);
my $a = start_candidate(dir => $dir, name => 'tA', dsn => $dsn, key => 'term',
	opts => [@timing], command => [$job]);
ok(wait_for(sub { lease_state($node, 'term') =~ /^tA\|\d+\|t$/ }, 30), 'tA leads');
# tB polls only every 5 s: a quick takeover can only come from its wait in the server
my $b = start_candidate(dir => $dir, name => 'tB', dsn => $dsn, key => 'term',
	opts => [ @timing, '--retry', '5s' ], command => [$job]);
ok(wait_for(sub { log_has($b, qr/new_leader .*holder tA/) }, 30), 'tB follows');
my ($tokA) = lease_state($node, 'term') =~ /^tA\|(\d+)\|/;
my @renew;
ok(wait_for(sub { @renew = backends('renew'); @renew == 1 }, 10), 'the leader has one renewal connection');
my $t_term = time();
$node->safe_psql('postgres', "SELECT pg_terminate_backend($renew[0])");
ok(wait_for(sub { grep { $_->[1] eq 'renewed' && $_->[0] > $t_term } log_events($a) }, 2 * $ttl_s + 5),
	'a renewal succeeds after the renewal connection was terminated');
ok(wait_for(sub { my @r = backends('renew'); @r == 1 && $r[0] != $renew[0] }, 2 * $ttl_s + 5),
	'on a new connection');
ok(log_has($a, qr/renewal failed, reconnecting/), 'the lost connection is logged');
is(lease_state($node, 'term'), "tA|$tokA|t", 'tA keeps the lease with the same token');
my @starts = grep { $_->[0] eq 'start' } read_events($events);
is(scalar @starts, 1, 'and its command was never restarted or doubled');

# --- 2. the campaign connections are terminated; the follower waits again --------
my @camp = backends('campaign');
is(scalar @camp, 2, 'two campaign connections');
my $t_camp = time();
$node->safe_psql('postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pg_leader campaign'");
ok(wait_for(sub { my @n = backends('campaign'); @n == 2 && !grep({ my $p = $_; grep { $_ == $p } @camp } @n) }, 20),
	'both campaign connections are re-established');
# the backend shows up in pg_stat_activity before the client logs it
ok(wait_for(sub { log_has($b, qr/campaign connection established/) }, 10), 'the follower logs its reconnection');
# the release can only reach tB if it waits in the server again: not at its next poll
usleep(300_000);
my $t0 = time();
kill 'TERM', $a->{pid};
ok(wait_for(sub { lease_state($node, 'term') =~ /^tB\|\d+\|t$/ }, 20), 'tB takes over after tA shuts down');
my @h = history_rows($node, 'term');
my $gap = $h[-1][2] - $h[-2][3];
note(sprintf('after reconnecting: release -> grant %.1f ms (follower polls every 5 s)', 1000 * $gap));
cmp_ok($gap, '<', 2, 'the release reaches the follower at once, not at its next poll');
wait_for(sub { defined reap($a) }, 10);
is_deeply([ check_no_overlap($events) ], [], 'tA\'s command stopped before tB\'s started');
kill 'TERM', $b->{pid};
wait_for(sub { defined reap($b) }, 10);

# --- 3. server restart during leadership ------------------------------------------
$events = "$dir/restart.events";
$job = write_job($dir, $events, 0);
my $c = start_candidate(dir => $dir, name => 'rC', dsn => $dsn, key => 'restart',
	opts => [ @timing, '--loop' ], command => [$job]);
ok(wait_for(sub { lease_state($node, 'restart') =~ /^rC\|\d+\|t$/ }, 30), 'rC leads');
my $d = start_candidate(dir => $dir, name => 'rD', dsn => $dsn, key => 'restart',
	opts => [ @timing, '--loop' ], command => [$job]);
ok(wait_for(sub { log_has($d, qr/new_leader .*holder rC/) }, 30), 'rD follows');
my ($tokC) = lease_state($node, 'restart') =~ /^rC\|(\d+)\|/;
my $t_restart = time();
$node->restart;
note(sprintf('server restart took %.1f s', time() - $t_restart));
ok(wait_for(sub { lease_state($node, 'restart') =~ /\|t$/ }, 30), 'a valid leader after the restart');
usleep(1_000_000 * $ttl_s);    # let any loss of leadership play out
my ($holder, $tok, $valid) = split /\|/, lease_state($node, 'restart');
is($valid, 't', 'the lease is held');
my @running = grep { !defined $_->[4] && alive($_->[2]) } spans($events);
is(scalar @running, 1, 'exactly one command runs');
is($running[0][0] . ' ' . $running[0][1], "$tok $holder", 'it is the holder\'s, with the current token');
if ($holder eq 'rC' && $tok == $tokC)
{
	note('rC kept its lease across the restart (renewed before its deadline)');
}
else
{
	cmp_ok($tok, '>', $tokC, 'leadership changed across the restart, with a higher token');
}
# leadership periods never overlapped: every end is logged before the next start
my @periods;
for my $w ($c, $d)
{
	for my $e (log_events($w))
	{
		push @periods, [ $e->[0], $w->{name}, $e->[1], $e->[2] ]
		  if $e->[1] eq 'acquired' || $e->[1] eq 'stopped_leading';
	}
}
# ($main::a/$main::b: the lexical $a and $b above are candidates)
@periods = sort { $main::a->[0] <=> $main::b->[0] } @periods;
my ($open, @overlaps);
for my $p (@periods)
{
	if ($p->[2] eq 'acquired')
	{
		push @overlaps, "$p->[1] acquired token $p->[3] while $open->[1] led" if $open;
		$open = $p;
	}
	else
	{
		$open = undef if $open && $open->[1] eq $p->[1];
	}
}
is_deeply(\@overlaps, [], 'no two wrappers considered themselves leader at the same time');
my @job_overlaps = check_no_overlap($events);
note(@job_overlaps ? "job-level overlaps: @job_overlaps" : 'no job-level overlap either');

stop_all();
$node->stop;
done_testing();
