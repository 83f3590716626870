# pg_leader group run when a member fails: three members share a group of 8
# partitions with a command that ignores SIGTERM and writes a fenced row
# every 100 ms.  One member's pg_leader process is frozen (SIGSTOP) past its
# ttl: its supervisors still kill its instances before their partitions'
# periods end (the last write and the period's end from le_lease_history),
# the other members take the partitions over, and on SIGCONT it rejoins.
# Another member is killed (SIGKILL): its instances die with it and the
# others take over within ttl plus a heartbeat.  Then a member's whole tree
# (pg_leader, supervisors, instances) is frozen past its ttl: once resumed,
# its instances' writes with their stale tokens are refused by the fence
# (le_fence_check, LE001) until they are killed.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use List::Util qw(min max);
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = group_node('client_group_failures', 'jobs', 8);
my $events = "$dir/group.events";
my $job = group_job($dir, $events, ignore_term => 1);
my $ttl = 3;
my @timing = ('--ttl', "${ttl}s", '--retry', '500ms');
my %m;

# Every partition has one live instance, run by the member the server says
# holds it with that token, and only members in @who run them.
sub run_by
{
	my (@who) = @_;
	my $live = group_instances($events);
	my $held = group_holders($node, 'jobs');
	for my $p (0 .. 7)
	{
		return 0 unless $live->{$p} && @{ $live->{$p} } == 1;
		my ($tok, $member) = @{ $live->{$p}[0] };
		return 0 unless ($held->{$p} // '') eq "$member|$tok" && grep { $_ eq $member } @who;
	}
	return 1;
}

# The partitions member $name runs: [partition, token, instance pid]...
sub instances_of
{
	my ($name) = @_;
	my $live = group_instances($events);
	return map { [ $_, $live->{$_}[0][0], $live->{$_}[0][2] ] }
	  grep { $live->{$_}[0][1] eq $name } sort keys %$live;
}

# Server time (epoch) of the end of the period of partition $p under
# $tok (its release, or else its expiry), and the next period's grant.
sub period_end
{
	my ($p, $tok) = @_;
	my ($ended, $expires, $next) = split /\|/, $node->safe_psql('postgres', qq{
		SELECT coalesce(extract(epoch FROM h.ended_at)::text, ''),
		       coalesce((SELECT extract(epoch FROM l.expires_at)::text FROM le_leases l
		                  WHERE l.lease_key = h.lease_key AND l.fencing_token = h.fencing_token), ''),
		       coalesce((SELECT extract(epoch FROM min(n.acquired_at))::text FROM le_lease_history n
		                  WHERE n.lease_key = h.lease_key AND n.fencing_token > h.fencing_token), '')
		  FROM le_lease_history h WHERE h.lease_key = 'le:group:jobs:$p' AND h.fencing_token = $tok}), -1;
	return ($ended ne '' ? $ended : $expires, $next);
}

# Last row (server time, epoch) written by partition $p under token $tok.
sub last_write
{
	my ($p, $tok) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(extract(epoch FROM max(written_at))::text, '') FROM work WHERE part = $p AND token = $tok");
}

# Check that each of @$gone ([partition, token, pid]) stopped writing before
# its period ended; returns (smallest margin, largest takeover after the
# end), both in ms.
sub check_dead_before_end
{
	my ($what, $gone) = @_;
	my (@margins, @takeovers);
	for my $g (@$gone)
	{
		my ($p, $tok) = @$g;
		my ($end, $next) = period_end($p, $tok);
		my $last = last_write($p, $tok);
		ok($end ne '' && $last ne '' && $last < $end,
			"$what: partition $p, token $tok: the last write comes before the period's end")
		  or note("last write $last, end $end");
		push @margins, 1000 * ($end - $last) if $end ne '' && $last ne '';
		push @takeovers, 1000 * ($next - $end) if $next ne '' && $end ne '';
	}
	note(sprintf('%s: last write %.0f-%.0f ms before the period\'s end; next grant %.0f-%.0f ms after it',
		$what, min(@margins) // -1, max(@margins) // -1, min(@takeovers) // -1, max(@takeovers) // -1));
	return (min(@margins), max(@takeovers));
}

for my $name (qw(a b c))
{
	$m{$name} = start_group_member(dir => $dir, name => $name, dsn => $dsn, group => 'jobs',
		opts => [@timing], command => [$job]);
}
ok(wait_for(sub { run_by(qw(a b c)) && instances_of('a') && instances_of('b') && instances_of('c') }, 60),
	'three members run the 8 partitions');

# --- SIGSTOP of member b's pg_leader process (its supervisors run on) -------------------
my @b = instances_of('b');
my $t_stop = time();
kill 'STOP', $m{b}{pid};
my $dead = wait_for(sub { !grep { alive($_->[2]) } @b }, $ttl + 10);
ok($dead, 'its supervisors kill its instances (which ignore SIGTERM) while pg_leader is frozen');
note(sprintf('frozen member: instances dead %.0f ms after the SIGSTOP (ttl %d s)', 1000 * ($dead // -1), $ttl));
ok(wait_for(sub { run_by(qw(a c)) }, 30), 'the other members take its partitions over');
note(sprintf('frozen member: all partitions run by the others %.0f ms after the SIGSTOP', 1000 * (time() - $t_stop)));
my ($margin, $takeover) = check_dead_before_end('frozen member', \@b);
cmp_ok($takeover, '<', 3000, 'each partition granted again within 3 s of its period\'s end');
ok(alive($m{b}{pid}), 'the frozen member is still there');
kill 'CONT', $m{b}{pid};
ok(wait_for(sub { log_has($m{b}, qr/reason=deadline_passed/) }, 10),
	'resumed, it sees that its partitions\' deadlines passed');
ok(wait_for(sub { run_by(qw(a b c)) && instances_of('b') }, 60), 'and rejoins: it runs partitions again');

# --- SIGKILL of member c -------------------------------------------------------------
my @c = instances_of('c');
my $t_kill = time();
kill 'KILL', $m{c}{pid};
$dead = wait_for(sub { !grep { alive($_->[2]) } @c }, 10);
ok($dead, 'SIGKILL of a member: its instances die with it');
note(sprintf('killed member: instances dead %.0f ms after the SIGKILL', 1000 * ($dead // -1)));
cmp_ok($dead, '<', 2, 'at once (their supervisors see pg_leader gone)');
my $took = wait_for(sub { run_by(qw(a b)) }, 30);
ok($took, 'the other members take its partitions over');
note(sprintf('killed member: all partitions run by the others %.0f ms after the SIGKILL (ttl %d s)',
	1000 * ($took // -1), $ttl));
cmp_ok($took, '<', $ttl + 3, 'within ttl + 3 s');
check_dead_before_end('killed member', \@c);

# --- SIGSTOP of member a's whole tree -------------------------------------------------
ok(wait_for(sub { run_by(qw(a b)) && instances_of('a') && instances_of('b') }, 60),
	'the two members left both run partitions');
my @a = instances_of('a');
my @groups = map { pgid_of($_->[2]) } @a;
ok(!grep({ $_ <= 1 } @groups), 'the process groups of a\'s instances are known');
my $refused_before = () = (-e "$dir/group_job.err" ? slurp_file("$dir/group_job.err") : '') =~ /LE001/g;
kill 'STOP', -$m{a}{pid}, map { -$_ } @groups;
# a's frozen instances are alive (stopped): count b's alone
ok(wait_for(sub {
	my $held = group_holders($node, 'jobs');
	my $live = group_instances($events);
	!grep { my $p = $_; ($held->{$p} // '') !~ /^b\|(\d+)$/
		  || !grep { $_->[1] eq 'b' && $_->[0] == $1 } @{ $live->{$p} // [] } } 0 .. 7;
	}, 30), 'while the whole tree of a is frozen, b takes every partition');
usleep(500_000);
my $t_cont = time();
kill 'CONT', -$m{a}{pid}, map { -$_ } @groups;
ok(wait_for(sub { !grep { alive($_->[2]) } @a }, 10), 'resumed, its instances are killed');
note(sprintf('frozen tree: instances dead %.0f ms after the SIGCONT', 1000 * (time() - $t_cont)));
my $refused = () = (-e "$dir/group_job.err" ? slurp_file("$dir/group_job.err") : '') =~ /LE001/g;
note(($refused - $refused_before) . ' writes with a stale token refused by the fence after the resume');
ok(wait_for(sub { run_by(qw(a b)) && instances_of('a') }, 60), 'and a rejoins');

is_deeply([ group_rows_outside_periods($node, 'jobs') ], [],
	'no row was written outside its token\'s ownership period of its partition');
my $rows = $node->safe_psql('postgres', 'SELECT count(*) FROM work');
cmp_ok($rows, '>', 100, "rows written: $rows");

kill 'TERM', $m{a}{pid}, $m{b}{pid};
ok(wait_for(sub { defined reap($m{a}) && defined reap($m{b}) }, 30), 'SIGTERM ends the others');
is("$m{a}{status},$m{b}{status}", '143,143', 'with 143');
is(scalar(keys %{ group_instances($events) }), 0, 'no instance is left (SIGKILL after the grace)');

stop_all();
$node->stop;
done_testing();
