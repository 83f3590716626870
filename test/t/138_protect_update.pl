# G5, G8: le_protect changed its signature in 1.1 (group_name and
# partition_column, lease_key optional; DROP and CREATE).  Every EXECUTE
# grant on the 1.0 function is kept on the new one with its grantor and
# grant option, PUBLIC's too, and a role given the protect use under 1.0
# can call the new signature after the update.  A 1.0 catalog not yet
# updated calls the same C entry point with four arguments, and a group's
# fence there (attached by hand: 1.0 has no groups) refuses every write
# with 42704, never passes one.  A table fenced under 1.0 stays fenced.
use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use LeNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('protect_update', create => 0);
$node->safe_psql('postgres', q{
	CREATE ROLE regress_le_protector;
	CREATE ROLE regress_le_delegate;
	CREATE ROLE regress_le_sub;
	CREATE EXTENSION leader_election VERSION '1.0';
	SELECT le_grant('regress_le_protector', 'protect');
	GRANT EXECUTE ON FUNCTION le_protect(regclass, text, name, text) TO regress_le_delegate WITH GRANT OPTION;
	GRANT EXECUTE ON FUNCTION le_protect(regclass, text, name, text) TO PUBLIC;
	SET ROLE regress_le_delegate;
	GRANT EXECUTE ON FUNCTION le_protect(regclass, text, name, text) TO regress_le_sub;
	RESET ROLE;
	CREATE TABLE ledger (id serial, shard integer, fencing_token bigint);
	ALTER TABLE ledger OWNER TO regress_le_protector;
	GRANT ALL ON ledger, ledger_id_seq TO PUBLIC;
});

# Under 1.0, with the 1.1 library: the four-argument le_protect.
is($node->safe_psql('postgres', q{
	SET ROLE regress_le_protector;
	SELECT le_protect('ledger', 'one-lease');
	SELECT count(*) FROM pg_trigger WHERE tgrelid = 'ledger'::regclass}),
	"\n2", 'under 1.0 (new library), le_protect attaches the fence');
my ($rc, $out, $err) = $node->psql('postgres',
	"INSERT INTO ledger (shard, fencing_token) VALUES (0, 1)");
like($err, qr/lease "one-lease" has never been acquired/, 'and the fence refuses a write');

# A group's fence attached by hand on a 1.0 catalog: no le_group, so the
# group is unknown at every write (42704), and nothing is written.
$node->safe_psql('postgres', q{
	CREATE TABLE by_hand (shard integer, fencing_token bigint);
	CREATE TRIGGER le_fence BEFORE INSERT OR UPDATE OR DELETE ON by_hand FOR EACH ROW
	    EXECUTE FUNCTION le_fence('orders', 'fencing_token', 'lease', 'shard');
});
($rc, $out, $err) = $node->psql('postgres', q{
	\set VERBOSITY sqlstate
	INSERT INTO by_hand VALUES (0, 1)});
like($err, qr/42704/, 'under 1.0, a group fence attached by hand refuses a write: unknown group');
is($node->safe_psql('postgres', 'SELECT count(*) FROM by_hand'), '0', 'nothing was written');

my $acl_sql = q{SELECT pg_catalog.string_agg(pg_catalog.format('%s>%s:%s', a.grantor::regrole,
		CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END, a.is_grantable), ',' ORDER BY 1)
	FROM pg_proc AS p, aclexplode(p.proacl) AS a WHERE p.proname = 'le_protect'};
my $acl_before = $node->safe_psql('postgres', $acl_sql);
like($acl_before, qr/regress_le_delegate>regress_le_sub:f/, 'a grant by a delegate is among the 1.0 grants');
like($acl_before, qr/>regress_le_protector:f/, 'so is the protect use of le_grant');
$node->safe_psql('postgres', 'ALTER EXTENSION leader_election UPDATE');
is($node->safe_psql('postgres', $acl_sql), $acl_before,
	'the update keeps every grant on le_protect with its grantor, PUBLIC\'s too');
is($node->safe_psql('postgres',
	"SELECT string_agg(p.oid::regprocedure::text, ',') FROM pg_proc AS p WHERE p.proname = 'le_protect'"),
	'le_protect(regclass,text,name,text,text,name)', 'only the 1.1 signature is left');

# The table fenced under 1.0 stays fenced; the role calls the new
# signature, by name, with a lease key and with a group.
($rc, $out, $err) = $node->psql('postgres',
	"INSERT INTO ledger (shard, fencing_token) VALUES (0, 1)");
like($err, qr/lease "one-lease" has never been acquired/, 'after the update, the 1.0 fence still refuses');
is($node->safe_psql('postgres', q{
	SET ROLE regress_le_protector;
	SELECT le_protect('ledger', lease_key => 'one-lease', mode => 'strict');
	SELECT count(*) FROM pg_trigger WHERE tgrelid = 'ledger'::regclass
	   AND pg_get_triggerdef(oid) LIKE '%''strict'')'}),
	"\n2", 'after the update, the protect role calls the new le_protect by name');
($rc, $out, $err) = $node->psql('postgres', q{
	\set VERBOSITY sqlstate
	SET ROLE regress_le_protector;
	SELECT le_protect('ledger', group_name => 'no_such_group', partition_column => 'shard')});
like($err, qr/42704/, 'and reaches the group check (a group that does not exist: 42704)');

done_testing();
