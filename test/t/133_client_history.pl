# G1, G3, G6: "pg_leader history" shows the ownership periods the server
# recorded.  A scripted history (acquires, renewals, an expiry taken over, a
# release, a force release, an open period; three holders, one named with
# XML's markup characters) is drawn with --svg; the SVG must parse (xmllint
# when installed, and Python's XML parser), and, rendered to PNG with
# rsvg-convert, show one lane per holder, one bar per period in the colour of
# how it ended, bars that follow each other in token order without
# overlapping (one holder at a time) at the x their start times give, and
# the holders' names as they are.  The table and JSON forms hold the same
# periods; a current period left unrecorded by leader_election.history = off
# is shown from le_leases; a bad --since (also infinity) is a usage error
# (64).  Holders with characters XML forbids, or that attribute values
# would change, still give valid SVG; past 200 holders the last lane holds
# the rest; JSON is UTF-8 whatever the client encoding or database encoding.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use JSON::PP;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

# test/lib/prereq.sh installs librsvg2-bin and libxml2-utils: a missing tool fails.
die 'rsvg-convert is not installed (apt-get install librsvg2-bin)'
  unless system('command -v rsvg-convert >/dev/null 2>&1') == 0;

my ($node, $dsn, $dir) = start_node('client_history');
my @pgl = pg_leader_cmd();
my $checker = "$FindBin::RealBin/../lib/svg_check.py";

# Run pg_leader to completion: (exit status, stdout, stderr).
sub cli
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ @pgl, @_ ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(60));
	return ($? >> 8, $out, $err);
}

sub sql { return $node->safe_psql('postgres', $_[0]); }

my $odd = q{c<&"'>x};    # a holder name with every XML markup character
(my $odd_sql = $odd) =~ s/'/''/g;

# --- a scripted history of lease "k" ---------------------------------------
my $t1 = sql("SELECT fencing_token FROM le_acquire('k', 'alice', '1 second')");
for (1 .. 2)
{
	usleep(300_000);
	isnt(sql("SELECT le_renew('k', 'alice', $t1, '1 second')"), '', "alice renews ($_)");
}
usleep(1_300_000);    # alice's lease expires; bob's grant records it so
my $t2 = sql("SELECT fencing_token FROM le_acquire('k', 'bob', '30 seconds')");
usleep(400_000);
is(sql("SELECT le_release('k', 'bob', $t2)"), 't', 'bob releases');
usleep(300_000);
my $t3 = sql("SELECT fencing_token FROM le_acquire('k', '$odd_sql', '30 seconds')");
usleep(400_000);
is(sql("SELECT le_force_release('k')"), 't', 'the odd holder is force released');
usleep(300_000);
my $t4 = sql("SELECT fencing_token FROM le_acquire('k', 'alice', '60 seconds')");
usleep(400_000);
ok($t1 < $t2 && $t2 < $t3 && $t3 < $t4, 'tokens rise');

# What the server holds: token, holder, how it ended, start as epoch.
my @periods = map { [ split /\|/, $_, -1 ] } split /\n/, sql(
	"SELECT fencing_token, holder, COALESCE(end_reason, 'held'), "
	  . "date_part('epoch', acquired_at) FROM le_lease_history "
	  . "WHERE lease_key = 'k' ORDER BY fencing_token");
is(scalar @periods, 4, 'four periods recorded');
my @holders;
for my $p (@periods)
{
	push @holders, $p->[1] unless grep { $_ eq $p->[1] } @holders;
}

# --- the SVG ----------------------------------------------------------------
my ($rc, $out, $err) = cli('history', '-d', $dsn, '-l', 'k', '--svg', "$dir/k.svg");
is($rc, 0, 'history --svg exits 0') or diag($err);
my $svg = slurp_file("$dir/k.svg");
unlike($svg, qr/<script/i, 'no script in the SVG');
unlike($svg, qr/c<&/, 'the odd name is never written raw');
is(system('xmllint', '--noout', "$dir/k.svg"), 0, 'xmllint accepts the SVG');
my $json = `python3 $checker $dir/k.svg $dir/k.png`;
is($?, 0, 'the SVG parses and renders to PNG');
my $seen = decode_json($json);

is($seen->{lanes_attr}, scalar @holders, 'one lane per holder');
is_deeply($seen->{lanes}, \@holders, 'lane labels are the holders, names intact, in order of first period');
is(scalar @{ $seen->{bars} }, scalar @periods, 'one bar per period');

my %fill;
for my $i (0 .. $#periods)
{
	my ($tok, $holder, $state, $start) = @{ $periods[$i] };
	my $b = $seen->{bars}[$i];
	is($b->{token}, $tok, "bar $i carries token $tok");
	is($b->{holder}, $holder, "bar $i: holder $holder");
	is($b->{state}, $state, "bar $i: $state");
	my ($lane) = grep { $holders[$_] eq $holder } 0 .. $#holders;
	is($b->{lane}, $lane, "bar $i in its holder's lane");
	# x from the start time: the axis maps [t0, t1] onto [left, right]
	my $x = $seen->{left} + ($start - $seen->{t0}) / ($seen->{t1} - $seen->{t0})
	  * ($seen->{right} - $seen->{left});
	cmp_ok(abs($b->{x} - $x), '<', 1.5, "bar $i starts at its start time (x $b->{x}, expected $x)");
	my $off = 0;
	$off += abs($b->{pixel}[$_] - $b->{fill}[$_]) for 0 .. 2;
	cmp_ok($off, '<=', 12, "bar $i: the PNG shows its colour at its centre (@{$b->{pixel}})");
	$fill{$state} = join(',', @{ $b->{fill} });
	isnt(join(',', @{ $b->{left_of_bar} }), $fill{$state}, "bar $i: left of it is not the bar");
	next if $i == 0;
	my $prev = $seen->{bars}[ $i - 1 ];
	cmp_ok($prev->{x} + $prev->{width}, '<=', $b->{x} + 0.5,
		"bar $i starts after bar " . ($i - 1) . ' ended: one holder at a time');
}
is(scalar(keys %fill), 4, 'four kinds of end, four colours');
my %colours = map { $_ => 1 } values %fill;
is(scalar(keys %colours), 4, 'the colours differ');
# one marker per period end (and one per kind in the legend)
for my $kind (qw(expired released force_released held))
{
	my $n = grep { $_->[2] eq $kind } @periods;
	is($seen->{markers}{$kind}, $n + 1, "$kind ends marked ($n, and the legend)");
}
cmp_ok($seen->{ticks}, '>=', 2, 'a time axis with ticks');

# --- table and JSON ---------------------------------------------------------
($rc, $out, $err) = cli('history', '-d', $dsn, '-l', 'k', '--json');
is($rc, 0, 'history --json exits 0') or diag($err);
my $rows = decode_json($out);
is_deeply([ map { [ $_->{fencing_token}, $_->{holder}, $_->{state} ] } @$rows ],
	[ map { [ $_->[0], $_->[1], $_->[2] ] } @periods ], 'JSON holds the same periods');
ok(!defined $rows->[-1]{ended_at} && defined $rows->[0]{ended_at}, 'only the open period has no end');

($rc, $out, $err) = cli('history', '-d', $dsn, '-l', 'k');
is($rc, 0, 'history exits 0');
for my $p (@periods)
{
	like($out, qr/^k\s+\S+\s+$p->[0]\s+\S+\s+\S+\s+$p->[2]\s/m, "table row of token $p->[0]");
}

# --since: only periods that ended since (and the open one)
($rc, $out, $err) = cli('history', '-d', $dsn, '-l', 'k', '--json', '--since', '2999-01-01');
is($rc, 0, 'history --since TIMESTAMP exits 0');
is_deeply([ map { $_->{fencing_token} } @{ decode_json($out) } ], [$t4], '--since in the future: only the open period');
($rc, $out, $err) = cli('history', '-d', $dsn, '-l', 'k', '--json', '--since', '1h');
is(scalar @{ decode_json($out) }, scalar @periods, '--since 1h: every period');
# a period leader_election.history = off did not record: from le_leases
my $t5 = sql("SET leader_election.history = off; SELECT fencing_token FROM le_acquire('k2', 'erin', '30 seconds')");
($rc, $out, $err) = cli('history', '-d', $dsn, '-l', 'k2', '--json');
is_deeply([ map { "$_->{fencing_token} $_->{holder} $_->{state}" } @{ decode_json($out) } ],
	["$t5 erin held"], 'an unrecorded current period is shown from le_leases');
($rc, $out, $err) = cli('history', '-d', $dsn, '--svg', "$dir/all.svg");
$seen = decode_json(`python3 $checker $dir/all.svg $dir/all.png`);
is($seen->{lanes_attr}, @holders + 1, 'every lease: one lane per key and holder');
is($seen->{lanes}[-1], 'k2: erin', 'lanes of several keys are labelled with the key');

# holders XML cannot carry as they are (U+FFFE, U+FFFF, a control) or that
# an attribute value would change (newline, tab)
sql(q{SELECT le_acquire('kx', E'nc\uFFFE\uFFFF\x01!', '30 seconds')});
sql(q{SELECT le_force_release('kx')});
sql(q{SELECT le_acquire('kx', E'two\nlines\tand tab', '30 seconds')});
($rc, $out, $err) = cli('history', '-d', $dsn, '-l', 'kx', '--svg', "$dir/kx.svg");
is($rc, 0, 'history --svg of odd holders exits 0') or diag($err);
is(system('xmllint', '--noout', "$dir/kx.svg"), 0, 'xmllint accepts the SVG of odd holders');
my $kx = slurp_file("$dir/kx.svg");
like($kx, qr/data-holder="nc\?\?\?!"/, 'characters XML forbids become ?');
like($kx, qr/data-holder="two&#10;lines&#9;and tab"/, 'newline and tab kept as character references');
$seen = decode_json(`python3 $checker $dir/kx.svg $dir/kx.png`);
is($seen->{bars}[1]{holder}, "two\nlines\tand tab", 'the attribute reads back as the name');

# JSON is UTF-8 whatever the client encoding asked for
sql(q{SELECT le_acquire('ke', E'caf\u00e9', '30 seconds')});
{
	local $ENV{PGCLIENTENCODING} = 'LATIN1';
	($rc, $out, $err) = cli('history', '-d', $dsn, '-l', 'ke', '--json');
}
is($rc, 0, 'history --json under PGCLIENTENCODING=LATIN1 exits 0') or diag($err);
is(eval { decode_json($out)->[0]{holder} }, "caf\x{e9}", 'JSON is UTF-8 under another client encoding')
  or diag($out);

# more holders than lanes: the last lane gathers the others
sql(q{DO $$ BEGIN FOR i IN 1 .. 250 LOOP
	PERFORM le_acquire('kl', 'h' || i, '30 seconds'); PERFORM le_force_release('kl');
END LOOP; END $$});
($rc, $out, $err) = cli('history', '-d', $dsn, '-l', 'kl', '--svg', "$dir/kl.svg");
is($rc, 0, 'history --svg of 250 holders exits 0') or diag($err);
$json = `python3 $checker $dir/kl.svg $dir/kl.png`;
is($?, 0, 'the SVG of 250 holders renders');
$seen = decode_json($json);
is($seen->{lanes_attr}, 200, 'lanes end at 200');
is_deeply([ @{ $seen->{lanes} }[ 0, 198, 199 ] ], [ 'h1', 'h199', '51 others in one lane' ],
	'lanes in order of first period, the last one says what it holds');
is(scalar @{ $seen->{bars} }, 250, 'every period is drawn');
is($seen->{bars}[-1]{lane}, 199, 'a later holder is drawn in the last lane');

# a SQL_ASCII database may hold any bytes: JSON stays valid UTF-8
$node->safe_psql('postgres', "CREATE DATABASE sa ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
$node->safe_psql('sa', "CREATE EXTENSION leader_election");
$node->safe_psql('sa', q{SELECT le_acquire('ka', E'b\xffd', '30 seconds')});
($rc, $out, $err) = cli('history', '-d', $node->connstr('sa'), '-l', 'ka', '--json');
is($rc, 0, 'history --json of a SQL_ASCII database exits 0') or diag($err);
is(eval { decode_json($out)->[0]{holder} }, "b\x{fffd}d", 'invalid UTF-8 becomes U+FFFD in JSON')
  or diag($out);

for my $inf ('infinity', '-infinity')
{
	($rc, $out, $err) = cli('history', '-d', $dsn, '-l', 'k', '--svg', "$dir/inf.svg", '--since', $inf);
	is($rc, 64, "--since $inf: bad usage (64)");
}
($rc, $out, $err) = cli('history', '-d', $dsn, '-l', 'k', '--svg', "$dir/old.svg", '--since', '0044-03-15 BC');
is($rc, 0, '--since long ago exits 0') or diag($err);
is(system('xmllint', '--noout', "$dir/old.svg"), 0, 'xmllint accepts the SVG from long ago');

($rc, $out, $err) = cli('history', '-d', $dsn, '-l', 'k', '--since', 'yesterdayish');
is($rc, 64, 'bad --since: bad usage (64)');
like($err, qr/invalid --since/, 'bad --since explained');
($rc, $out, $err) = cli('history', '-d', $dsn, '--svg', "$dir/k.svg", '--json');
is($rc, 64, '--svg with --json: bad usage (64)');
($rc, $out, $err) = cli('history', '-d', $dsn, '--svg', "$dir/no/such/dir.svg");
is($rc, 70, 'an unwritable --svg file: 70');

$node->stop;
done_testing();
