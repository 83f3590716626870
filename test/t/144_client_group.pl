# pg_leader group run: three members share a group of 8 partitions, one
# instance of the command per owned partition, each writing fenced rows
# with its partition's LE_FENCING_TOKEN.  A fourth member joins and leaves:
# instances move, and a partition's old instance is gone before its new one
# starts; an instance that exits on its own starts again under the same
# token; status --group shows members and the assignment; SIGTERM leaves
# the group (exit 143) and releases everything.  Every row was written
# inside its token's ownership period (le_lease_history).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use JSON::PP;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use LeClientTest;

my ($node, $dsn, $dir) = group_node('client_group', 'orders', 8);
is($node->safe_psql('postgres', "SELECT partitions FROM le_groups WHERE group_name = 'orders'"), '8',
	'group orders with 8 partitions');
my $events = "$dir/group.events";
my $job = group_job($dir, $events);
my @timing = ('--ttl', '4s', '--retry', '500ms');
my %m;

# Every partition has one live instance, run by the member the server
# says holds it with that token; the members' shares are @shares (sorted).
sub balanced
{
	my (@shares) = @_;
	my $live = group_instances($events);
	my $held = group_holders($node, 'orders');
	my %count;
	for my $p (0 .. 7)
	{
		return 0 unless $live->{$p} && @{ $live->{$p} } == 1;
		my ($tok, $member) = @{ $live->{$p}[0] };
		return 0 unless ($held->{$p} // '') eq "$member|$tok";
		$count{$member}++;
	}
	return join(',', sort values %count) eq join(',', sort @shares);
}

# --- errors before anything runs --------------------------------------------------
for my $bad ([ [ '--ttl', '4s' ], qr/group run needs --group G/ ],
	[ [ '--group', 'orders', '-l', 'k' ], qr/not -l or --owner/ ],
	[ [ '--group', 'bad name' ], qr/a group name of 1 to 63 letters/ ],
	[ [ '--group', 'orders', '--loop' ], qr/are for run/ ],
	[ [ '--group', 'orders', '--member', 'x' x 121 ], qr/member id must be 1 to 120 bytes/ ])
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ pg_leader_cmd(), 'group', 'run', '-d', $dsn, @{ $bad->[0] }, '--', 'true' ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(60));
	is($? >> 8, 64, "group run @{ $bad->[0] }: bad usage (64)");
	like($err, $bad->[1], 'explained');
}
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ pg_leader_cmd(), 'group', 'run', '-d', $dsn, '--group', 'nosuch', '--', 'true' ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(60));
	is($? >> 8, 69, 'group run of an unknown group: 69');
	like($err, qr/not_joined .*SQLSTATE 42704/, 'with the server\'s error');
}

for my $name (qw(a b c))
{
	$m{$name} = start_group_member(dir => $dir, name => $name, dsn => $dsn, group => 'orders',
		opts => [@timing], command => [$job]);
}
my $took = wait_for(sub { balanced(2, 3, 3) }, 60);
ok($took, 'three members run the 8 partitions, 3, 3 and 2, one instance each, as the server assigns them');
note(sprintf('balanced %.1f s after the start', $took // -1));

# the instances' environment
my ($start) = grep { /^start 5 / } split /\n/, slurp_file($events);
ok($start, 'partition 5 started');
ok(log_has($m{ (split ' ', $start)[3] }, qr/command_started key=le:group:orders:5 .*token=/),
	'its member logs command_started with the partition\'s lease key');

# --- status --group ------------------------------------------------------------
my ($out, $err) = ('', '');
IPC::Run::run([ pg_leader_cmd(), 'status', '-d', $dsn, '--group', 'orders' ], '>', \$out, '2>', \$err);
is($? >> 8, 0, 'status --group exits 0');
note($out);
like($out, qr/^group orders: 8 partitions/m, 'status names the group and its partitions');
for my $name (qw(a b c))
{
	like($out, qr/^$name\s+\S+\s+\d+\s+[\d.]+s\s+\S+Z\s+yes\s+[23]\s+0\s+[\d,]+$/m,
		"member $name: role, token, heartbeat age, expiry, valid, 2 or 3 held, none pending");
}
my $held = group_holders($node, 'orders');
my $rows_ok = 1;
for my $p (0 .. 7)
{
	my ($holder, $tok) = split /\|/, $held->{$p};
	$rows_ok &&= $out =~ /^\s+$p owned\s+$holder\s+$holder\s+$tok /m;
}
ok($rows_ok, 'one row per partition: owned, holder = target, the server\'s token');
IPC::Run::run([ pg_leader_cmd(), 'status', '-d', $dsn, '--group', 'orders', '--json' ], '>', \$out, '2>', \$err);
my $st = eval { decode_json($out) };
ok($st, 'status --group --json is JSON') or note($out);
is(scalar @{ $st->{members} }, 3, 'three members');
is(scalar @{ $st->{assignment} }, 8, 'eight partitions');
is_deeply([ sort { $a <=> $b } map { @{ $_->{held} } } @{ $st->{members} } ], [ 0 .. 7 ],
	'the members\' held lists cover every partition once');
IPC::Run::run([ pg_leader_cmd(), 'status', '-d', $dsn, '--group', 'nosuch' ], '>', \$out, '2>', \$err);
is($? >> 8, 1, 'status of an unknown group exits 1');
like($err, qr/no group named "nosuch"/, 'and says so');

# --- an instance that exits on its own starts again ------------------------------
my ($p3, $tok3) = split /\|/, group_holders($node, 'orders')->{3};
my $n_starts = () = slurp_file($events) =~ /^start 3 $tok3 /mg;
open(my $fh, '>', "$dir/exit.3") or die;
close($fh);
ok(wait_for(sub { (() = slurp_file($events) =~ /^start 3 $tok3 /mg) > $n_starts }, 20),
	'the instance of partition 3 that exited on its own starts again under the same token');
ok(log_has($m{$p3}, qr/restarting key=le:group:orders:3 .*token=$tok3: partition 3 is still ours: the command starts again in 500ms/),
	'after --retry (the first restart), logged');
ok(log_has($m{$p3}, qr/command_exited key=le:group:orders:3 .*status 3/), 'its exit status was logged');

# --- a partition force-released by an administrator ---------------------------------
# The next heartbeat no longer lists it as ours: its instance is stopped
# (nothing to release), and the member, still its target, claims it again
# with a new token and starts a new instance.  The partition is one of the
# member holding 2: with 1 left it is the one short of its target (members
# ranked by partitions held, the two holding 3 keep theirs).  A partition of
# a member holding 3 could go to the one holding 2 instead, whose instance
# would start while the old one is still being stopped.
my $holders = group_holders($node, 'orders');
my %held;
$held{ (split /\|/, $holders->{$_})[0] }++ for keys %$holders;
my ($few) = grep { $held{$_} == 2 } sort keys %held;
my ($pf) = sort { $a <=> $b } grep { (split /\|/, $holders->{$_})[0] eq $few } keys %$holders;
ok(defined $pf, 'a member holds 2 partitions') or diag(join ' ', map { "$_=$held{$_}" } sort keys %held);
my ($p1, $tok1) = split /\|/, $holders->{$pf};
is($node->safe_psql('postgres', "SELECT le_force_release('le:group:orders:$pf')"), 't',
	"le_force_release of partition $pf (member $few)");
ok(wait_for(sub { my $l = group_instances($events)->{$pf}; $l && @$l == 1 && $l->[0][0] > $tok1 && balanced(2, 3, 3) }, 20),
	'its instance is replaced by one with a new token');
is((split /\|/, group_holders($node, 'orders')->{$pf})[0], $few, 'by the same member');
ok(log_has($m{$p1}, qr/revoked key=le:group:orders:$pf .*token=$tok1 .*reason=lost/), 'revoked as lost');
ok(!log_has($m{$p1}, qr/releasing key=le:group:orders:$pf .*token=$tok1/), 'and not released (not ours any more)');
is_deeply([ group_overlaps($events) ], [], 'the old instance ended before the new one started');

# --- a member joins: instances move ----------------------------------------------
my $t_join = time();
$m{d} = start_group_member(dir => $dir, name => 'd', dsn => $dsn, group => 'orders',
	opts => [@timing], command => [$job]);
$took = wait_for(sub { balanced(2, 2, 2, 2) }, 60);
ok($took, 'a fourth member joins: 2 partitions each, one instance each');
note(sprintf('rebalanced %.1f s after the fourth member started', $took // -1));
is_deeply([ group_overlaps($events) ], [], 'no partition ever had two instances at once; tokens rose');

# --- it leaves: its partitions go back ------------------------------------------
my $t_leave = time();
kill 'TERM', $m{d}{pid};
ok(wait_for(sub { defined reap($m{d}) }, 20), 'SIGTERM: the fourth member exits');
is($m{d}{status}, 143, 'with 143');
note(sprintf('member left %.0f ms after SIGTERM', 1000 * (time() - $t_leave)));
ok(log_has($m{d}, qr/left group "orders": 2 partitions released/), 'after releasing its 2 partitions (le_group_leave)');
ok(wait_for(sub { balanced(2, 3, 3) }, 60), 'the three others run all 8 partitions again');
note(sprintf('taken over %.1f s after the SIGTERM', time() - $t_leave));
is_deeply([ group_overlaps($events) ], [], 'still no overlap');

# --- every fenced row was written in its token's period -----------------------------
my $rows = $node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT part), count(DISTINCT (part, token)) FROM work');
my ($n, $parts, $periods) = split /\|/, $rows;
cmp_ok($n, '>', 100, "the instances wrote fenced rows ($n)");
is($parts, 8, 'for every partition');
cmp_ok($periods, '>', 8, "under $periods partition tokens");
is_deeply([ group_rows_outside_periods($node, 'orders') ], [],
	'no row was written outside its token\'s ownership period of its partition');
my $refused = -e "$dir/group_job.err" ? () = slurp_file("$dir/group_job.err") =~ /LE001/g : 0;
is($refused, 0, 'and no fenced write was refused');

# --- SIGTERM to every member: all released --------------------------------------
kill 'TERM', map { $m{$_}{pid} } qw(a b c);
ok(wait_for(sub { !grep { !defined reap($m{$_}) } qw(a b c) }, 30), 'SIGTERM ends every member');
is(join(',', map { $m{$_}{status} } qw(a b c)), '143,143,143', 'each with 143');
is(scalar(keys %{ group_instances($events) }), 0, 'no instance is left');
is($node->safe_psql('postgres',
	"SELECT count(*) FROM le_group_partitions WHERE group_name = 'orders' AND is_valid"), '0',
	'every partition was released');
is($node->safe_psql('postgres',
	"SELECT count(*) FROM le_group_members WHERE group_name = 'orders' AND is_valid"), '0',
	'and every membership');

stop_all();
$node->stop;
done_testing();
