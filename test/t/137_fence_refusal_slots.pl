# G14, G8: the counts of refused writes (le_fence_refusals, shared memory)
# are kept per database: a database that refuses writes in more tables than
# there are counter slots counts the rest in its own overflow row, and
# another database sees neither its rows nor its overflow.  The slots of
# dropped tables are freed when their database reads the counts, so a
# table refused later gets a slot of its own again.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;

my $node = le_node('slots', conf => "shared_preload_libraries = 'leader_election'\n");
my $tables = 1100;	# more than the 1,024 slots of src/metrics.c

# In database db, a stale token of lease 'k' and a protected table per name.
sub setup
{
	my ($db, @names) = @_;
	my $create = join '', map { "CREATE TABLE $_ (id int, fencing_token bigint NOT NULL);
		SELECT le_protect('$_', 'k');\n" } @names;
	$node->safe_psql($db, qq{
		$create
		SELECT le_acquire('k', 'a', '1 minute');
		SELECT le_force_release('k');
		SELECT le_acquire('k', 'b', '1 minute');});
	return $node->safe_psql($db, q{SELECT min(fencing_token) FROM le_lease_history WHERE lease_key = 'k'});
}

# Refused writes with the stale token in tables t1..tn of database db.
sub refuse
{
	my ($db, $stale, $prefix, $n) = @_;
	return $node->safe_psql($db, qq{
		DO \$\$
		DECLARE refused int := 0;
		BEGIN
			FOR i IN 1..$n LOOP
				BEGIN
					EXECUTE format('INSERT INTO %I VALUES (1, $stale)', '$prefix' || i);
				EXCEPTION WHEN others THEN
					refused := refused + 1;
				END;
			END LOOP;
			RAISE NOTICE 'refused %', refused;
		END \$\$;
		SELECT count(*) FROM $prefix} . "1");
}

$node->safe_psql('postgres', 'CREATE DATABASE flood');
$node->safe_psql('flood', 'CREATE EXTENSION leader_election');
my $quiet_stale = setup('postgres', 'ledger');
$node->safe_psql('flood', join '', map { "CREATE TABLE t$_ (id int, fencing_token bigint NOT NULL);\n" } 1 .. $tables);
$node->safe_psql('flood', qq{SELECT le_protect(('t' || i)::regclass, 'k') FROM generate_series(1, $tables) AS i});
my $flood_stale = setup('flood');
is(refuse('flood', $flood_stale, 't', $tables), '0', 'no refused write committed');

my ($rows, $overflow) = split /\|/, $node->safe_psql('flood', q{
	SELECT count(*) FILTER (WHERE relation IS NOT NULL),
	       coalesce(sum(refused_writes) FILTER (WHERE relation IS NULL AND NOT without_table), 0)
	  FROM le_fence_refusals});
cmp_ok($rows, '<', $tables, "flood: $rows tables have a slot");
is($rows + $overflow, $tables, "flood: the other refusals are in its overflow ($overflow)");
is($node->safe_psql('postgres', 'SELECT count(*) FROM le_fence_refusals'), '0',
	'postgres sees nothing of the other database, not even its overflow');

# A refusal in the quiet database, with every table slot taken: counted in
# its own overflow, not in the other database's.
my ($rc, $o, $e) = $node->psql('postgres', "INSERT INTO ledger VALUES (1, $quiet_stale)");
like($e, qr/is stale/, 'postgres: stale write refused');
is($node->safe_psql('postgres',
		q{SELECT coalesce(relation::text, '(overflow)') || ':' || refused_writes FROM le_fence_refusals}),
	'(overflow):1', 'postgres: its own overflow row only');
is($node->safe_psql('flood',
		q{SELECT sum(refused_writes) FILTER (WHERE relation IS NULL AND NOT without_table) FROM le_fence_refusals}),
	$overflow, 'flood: its overflow unchanged');

# The flooded tables dropped: reading the counts in their database frees
# their slots, and a new refusal in postgres gets a slot of its own.
$node->safe_psql('flood', join '', map { "DROP TABLE t$_;\n" } 1 .. $tables);
is($node->safe_psql('flood', q{SELECT count(*) FROM le_fence_refusals WHERE relation IS NOT NULL}), '0',
	'flood: the dropped tables are not shown');
($rc, $o, $e) = $node->psql('postgres', "INSERT INTO ledger VALUES (2, $quiet_stale)");
like($e, qr/is stale/, 'postgres: second stale write refused');
is($node->safe_psql('postgres',
		q{SELECT string_agg(coalesce(relation::text, '(overflow)') || ':' || refused_writes, ',' ORDER BY relation NULLS LAST) FROM le_fence_refusals}),
	'ledger:1,(overflow):1', 'postgres: the freed slots serve its table again');

$node->stop;
done_testing();
