# G3: tokens never repeat across pg_dump/pg_restore.  Lease
# rows, tokens, the lease id sequence, the history and its id sequence of a database that
# uses the extension are dumped (pg_extension_config_dump) and restored, in
# custom format (pg_dump -Fc + pg_restore) and plain format (pg_dump + psql);
# in the restored database the holder keeps its lease and token, and every
# next grant gets a token higher than any issued before the dump.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;
use Time::HiRes qw(usleep);

my $node = le_node('dump', dbs => ['src']);

$node->safe_psql('postgres', 'CREATE ROLE app LOGIN');
$node->safe_psql(
	'src', q{
GRANT EXECUTE ON FUNCTION le_acquire(text, text, interval, interval, jsonb), le_renew(text, text, bigint, interval),
	le_release(text, text, bigint) TO app;
});

# Run SQL as the application role in database $db.
sub as_app
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, "SET ROLE app; $sql");
}

# Lease 'a': five ownership periods, released (free).  Tokens come from one
# sequence for all keys: a gets 1..5, b 6..8, c 9..10.
my $token;
for my $i (1 .. 5)
{
	$token = as_app('src', "SELECT fencing_token FROM le_acquire('a', 'a-$i', '1 minute')");
	as_app('src', "SELECT le_release('a', 'a-$i', $token)");
}
# Lease 'b': three periods, the last one held by app for an hour.
for my $i (1 .. 3)
{
	$token = as_app('src', "SELECT fencing_token FROM le_acquire('b', 'b-$i', '1 hour')");
	as_app('src', "SELECT le_release('b', 'b-$i', $token)") if $i < 3;
}
my $b_token = $token;
# Lease 'c': two periods, the last one expired (not released) before the dump.
as_app('src', "SELECT le_release('c', 'c-1', fencing_token) FROM le_acquire('c', 'c-1', '1 minute')");
as_app('src', "SELECT fencing_token FROM le_acquire('c', 'c-2', '100 milliseconds')");
$node->poll_query_until('src', "SELECT NOT is_valid FROM le_leases WHERE lease_key = 'c'")
  or die "lease c did not expire";

# Everything the dump must carry.
my %state_sql = (
	lease => "SELECT string_agg(format('%s', l), E'\\n' ORDER BY lease_id) FROM le_lease l",
	history => "SELECT string_agg(format('%s', h), E'\\n' ORDER BY history_id) FROM le_lease_history h",
	lease_id_seq => "SELECT last_value || ' ' || is_called FROM le_lease_id_seq",
	history_id_seq => "SELECT pg_get_serial_sequence('le_lease_history', 'history_id')"
	  . " || ' ' || last_value || ' ' || is_called FROM le_lease_history_id_seq",
	token_seq => "SELECT last_value || ' ' || is_called FROM le_token_seq",
	max_tokens => "SELECT string_agg(lease_key || '=' || fencing_token, ' ' ORDER BY lease_key) FROM le_lease",);
my %before;
$before{$_} = $node->safe_psql('src', $state_sql{$_}) for keys %state_sql;
note "before the dump: tokens $before{max_tokens}; history rows: "
  . scalar(split /\n/, $before{history});
is($before{max_tokens}, "a=5 b=8 c=10", 'source database has the expected tokens');
my %max_before = map { split /=/ } split / /, $before{max_tokens};
my $max_all = (sort { $b <=> $a } values %max_before)[0];

my $tmp = PostgreSQL::Test::Utils::tempdir;
my %dumps = (
	custom => [ [ 'pg_dump', '-Fc', '-f', "$tmp/src.dump", '-d', $node->connstr('src') ],
		[ 'pg_restore', '--exit-on-error', '-d', $node->connstr('dst_custom'), "$tmp/src.dump" ] ],
	plain => [ [ 'pg_dump', '-Fp', '-f', "$tmp/src.sql", '-d', $node->connstr('src') ],
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-f', "$tmp/src.sql", '-d', $node->connstr('dst_plain') ] ],
);

for my $format (sort keys %dumps)
{
	my $db = "dst_$format";
	my ($dump, $restore) = @{ $dumps{$format} };
	$node->command_ok($dump, "[$format] pg_dump");
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->command_ok($restore, "[$format] restore into $db");
	note "[$format] injected: dump of src restored into a new database $db";

	for my $what (sort keys %state_sql)
	{
		is($node->safe_psql($db, $state_sql{$what}), $before{$what},
			"[$format] $what restored exactly");
	}

	# The holder of 'b' still holds it with its token; others are refused.
	ok(as_app($db, "SELECT le_renew('b', 'b-3', $b_token, '1 hour') IS NOT NULL") eq 't',
		"[$format] holder of b renews with its pre-dump token $b_token");
	is(as_app($db, "SELECT acquired FROM le_acquire('b', 'intruder', '1 minute')"),
		'f', "[$format] another owner is refused b");

	# Next grants: above every token issued before the dump, per key.
	as_app($db, "SELECT le_release('b', 'b-3', $b_token)");
	my %after;
	for my $key (qw(a b c))
	{
		my $reply = as_app($db,
			"SELECT acquired || ' ' || fencing_token FROM le_acquire('$key', 'new', '1 minute')");
		$after{$key} = $reply;
		my ($acquired, $tok) = split / /, $reply;
		is($acquired, 'true', "[$format] next grant of $key granted");
		cmp_ok($tok, '>', $max_all,
			"[$format] next grant of $key gets token $tok > every token issued before the dump ($max_all)");
	}
	note "[$format] checked: next grants after restore: "
	  . join(', ', map { "$_ $after{$_}" } sort keys %after);

	# A new key gets a fresh lease id (the id sequence was restored) and the
	# history keeps growing without clashing with restored rows.
	my $d_token = as_app($db, "SELECT fencing_token FROM le_acquire('d', 'new', '1 minute')");
	cmp_ok($d_token, '>', $max_all,
		"[$format] a new key is granted token $d_token, above those issued before the dump (the token sequence was restored)");
	is($node->safe_psql($db, "SELECT count(DISTINCT lease_id) = count(*) FROM le_lease"),
		't', "[$format] lease ids stay unique");
	is($node->safe_psql($db,
			"SELECT string_agg(end_reason, ',' ORDER BY history_id) FROM le_lease_history"
			  . " WHERE lease_key = 'c'"),
		'released,expired', "[$format] history records the takeover of the expired lease c");
	is($node->safe_psql($db,
			"SELECT count(*) FROM le_lease_history WHERE ended_at IS NULL"),
		'4', "[$format] one open history period per held lease (a, b, c, d)");
}

$node->stop;
done_testing();
