# The group member of the C library (le_group_member_*, test/c/le_group_probe.c):
# callbacks per partition in order (on_assigned(T), then on_revoked(T),
# then on_assigned of the next token), one at a time, never owned from
# on_revoked on; a partition the server moves is released only after its
# slow on_revoked returned, or, with defer_release, only after the caller
# handed it back (the period's end in le_lease_history); the member it moves
# to gets it after that; a stop revokes everything and leaves the group.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use LeClientTest;

my ($node, $dsn, $dir) = group_node('client_group_api', 'api', 4);
my ($ok, $err) = build_probe("$dir/le_group_probe", undef, 'le_group_probe.c');
ok($ok, 'the group probe builds against the static library') or diag($err);

# Start the probe (member name first); returns [handle, \$out, finished].
sub probe
{
	my (@args) = @_;
	my $out = '';
	my $h = IPC::Run::start([ "$dir/le_group_probe", $dsn, 'api', @args ], '>', \$out, '2>&1');
	return [ $h, \$out, 0 ];
}

# Wait for a probe to end.
sub finish
{
	my ($p) = @_;
	$p->[0]->finish;
	$p->[2] = 1;
}

# Lines of a probe's output matching $re, split into fields.
sub lines
{
	my ($p, $re) = @_;
	$p->[0]->pump_nb unless $p->[2];    # (a finished harness would start again)
	return map { [ split ' ' ] } grep { /$re/ } split /\n/, ${ $p->[1] };
}

# Server times (epoch) of partition $part's period under $tok: [acquired, ended].
sub period
{
	my ($part, $tok) = @_;
	return [ split /\|/, $node->safe_psql('postgres',
		"SELECT extract(epoch FROM acquired_at), coalesce(extract(epoch FROM ended_at)::text, '')
		   FROM le_lease_history WHERE lease_key = 'le:group:api:$part' AND fencing_token = $tok"), -1 ];
}

# Check that every server-revoked partition of $first, moved to $second, was
# released after $first's release point (field $at_kind lines) and granted to
# $second after that.
sub check_moves
{
	my ($what, $first, $second, $at_kind) = @_;
	my @moved = lines($first, qr/^revoked \d+ \d+ revoked /);
	ok(@moved >= 2, "$what: the server moved partitions away from the first member")
	  or note(${ $first->[1] });
	for my $r (@moved)
	{
		my (undef, $part, $tok, undef, $t_enter) = @$r;
		my ($point) = lines($first, qr/^$at_kind $part $tok /);
		my $end = period($part, $tok)->[1];
		ok($point && $end ne '' && $end >= $point->[3],
			"$what: partition $part token $tok is released only after its $at_kind point")
		  or note("end $end, point " . ($point ? $point->[3] : 'none'));
		note(sprintf('%s: partition %d: on_revoked at +0, %s +%.0f ms, released +%.0f ms', $what, $part,
			$at_kind, 1000 * (($point ? $point->[3] : 0) - $t_enter), 1000 * (($end || 0) - $t_enter)));
		my ($got) = grep { $_->[1] == $part } lines($second, qr/^assigned /);
		ok($got && $got->[2] > $tok && period($part, $got->[2])->[0] >= $end,
			"$what: partition $part goes to the second member after that");
	}
}

# --- on_revoked that takes a second ---------------------------------------------------
my $a = probe('a', 14, 1000);
ok(wait_for(sub { lines($a, qr/^assigned /) == 4 }, 30), 'the first member gets all 4 partitions');
like(${ $a->[1] }, qr/^first heartbeat member=1 token=\d+ last_error=ok id=a$/m,
	'le_group_member_wait_heartbeat and le_group_member_status: a member with its membership token');
my $b = probe('b', 7, 0);
ok(wait_for(sub { lines($b, qr/^assigned /) == 2 }, 30), 'a second member gets 2 of them');
check_moves('slow on_revoked', $a, $b, 'returned');
finish($b);
like(${ $b->[1] }, qr/^stopped\norder ok$/m, 'the second member stops; its callbacks were in order');
is(scalar(lines($b, qr/^revoked \d+ \d+ shutdown /)), 2, 'its stop revoked both partitions (shutdown)');
ok(wait_for(sub { lines($a, qr/^assigned /) == 6 }, 30), 'and the first member gets them back');
finish($a);
like(${ $a->[1] }, qr/^order ok$/m, 'the first member\'s callbacks were in order') or note(${ $a->[1] });
unlike(${ $a->[1] }, qr/^problem/m, 'no problem reported');

# --- defer_release: released when handed back ------------------------------------------
my $c = probe('c', 12, 800, 'defer');
ok(wait_for(sub { lines($c, qr/^assigned /) == 4 }, 30), 'a deferring member gets all 4 partitions');
my $d = probe('d', 6, 0);
ok(wait_for(sub { lines($d, qr/^assigned /) == 2 }, 30), 'a second member gets 2');
check_moves('defer_release', $c, $d, 'handed');
finish($_) for ($c, $d);
like(${ $c->[1] }, qr/^order ok$/m, 'the deferring member\'s callbacks were in order') or note(${ $c->[1] });
like(${ $d->[1] }, qr/^order ok$/m, 'and the second member\'s');

is($node->safe_psql('postgres', "SELECT count(*) FROM le_group_partitions WHERE group_name = 'api' AND is_valid"),
	'0', 'after the stops every partition was released');
is($node->safe_psql('postgres', "SELECT count(*) FROM le_group_members WHERE group_name = 'api' AND is_valid"),
	'0', 'and every membership');

$node->stop;
done_testing();
