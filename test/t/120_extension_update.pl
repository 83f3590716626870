# G3: Upgrade scripts: every installable version, updated with ALTER EXTENSION
# leader_election UPDATE, must end in exactly the objects of a fresh install
# of the newest version (default_version).  1.0 is the base install script;
# later versions ship only upgrade scripts leader_election--X--Y.sql, so
# CREATE EXTENSION ... VERSION 'X' runs the chain from 1.0 and the update
# runs the rest.  The objects are compared as a catalog description of
# everything that belongs to the extension (pg_depend deptype 'e'): each
# object's identity, function definitions and properties, view definitions,
# table columns, defaults, constraints, indexes, triggers, policies,
# sequences, ACLs, comments, and the extension's configuration tables.
# While 1.0 is the only version, this checks that the comparison itself
# sees the same objects twice and that the update is a no-op.
use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use LeNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = le_node('update', create => 0);

# Everything the extension owns, one line each, ordered; no OIDs.
my $describe = <<'SQL';
WITH ext AS (SELECT oid, extname FROM pg_extension WHERE extname = 'leader_election'),
members AS (
    SELECT d.classid, d.objid, d.objsubid
    FROM pg_depend d, ext
    WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'),
lines AS (
    SELECT 'member ' || pg_describe_object(classid, objid, objsubid)
        || coalesce(' comment=' || obj_description(objid, classid::regclass::text), '') AS l
    FROM members
  UNION ALL
    SELECT 'function ' || p.oid::regprocedure::text || ' ' || pg_get_functiondef(p.oid)
        || ' acl=' || coalesce(p.proacl::text, 'default') || ' owner=' || pg_get_userbyid(p.proowner)
    FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid AND p.prokind <> 'a'
  UNION ALL
    SELECT 'relation ' || c.oid::regclass::text || ' kind=' || c.relkind::text || ' persistence=' || c.relpersistence::text
        || ' options=' || coalesce(c.reloptions::text, '') || ' acl=' || coalesce(c.relacl::text, 'default')
        || ' owner=' || pg_get_userbyid(c.relowner) || ' rls=' || c.relrowsecurity
        || coalesce(' view=' || pg_get_viewdef(c.oid), '')
    FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
  UNION ALL
    SELECT 'column ' || a.attrelid::regclass::text || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
        || ' notnull=' || a.attnotnull || ' identity=' || a.attidentity::text || ' generated=' || a.attgenerated::text
        || coalesce(' default=' || pg_get_expr(ad.adbin, ad.adrelid), '')
        || coalesce(' collation=' || nullif(a.attcollation, 0)::regcollation::text, '')
        || ' acl=' || coalesce(a.attacl::text, 'default')
        || coalesce(' comment=' || col_description(a.attrelid, a.attnum), '')
    FROM members m JOIN pg_attribute a ON m.classid = 'pg_class'::regclass AND a.attrelid = m.objid
        AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
  UNION ALL
    SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(co.oid)
    FROM members m JOIN pg_constraint co ON m.classid = 'pg_class'::regclass AND co.conrelid = m.objid
  UNION ALL
    SELECT 'index ' || pg_get_indexdef(i.indexrelid)
    FROM members m JOIN pg_index i ON m.classid = 'pg_class'::regclass AND i.indrelid = m.objid
  UNION ALL
    SELECT 'trigger ' || pg_get_triggerdef(t.oid) || ' enabled=' || t.tgenabled::text
    FROM members m JOIN pg_trigger t ON m.classid = 'pg_class'::regclass AND t.tgrelid = m.objid
        AND NOT t.tgisinternal
  UNION ALL
    SELECT 'policy ' || po.polrelid::regclass::text || ' ' || po.polname || ' ' || po.polcmd::text
        || ' ' || coalesce(pg_get_expr(po.polqual, po.polrelid), '') || ' ' || coalesce(pg_get_expr(po.polwithcheck, po.polrelid), '')
    FROM members m JOIN pg_policy po ON m.classid = 'pg_class'::regclass AND po.polrelid = m.objid
  UNION ALL
    SELECT 'sequence ' || s.seqrelid::regclass::text || ' ' || format_type(s.seqtypid, NULL) || ' start=' || s.seqstart
        || ' inc=' || s.seqincrement || ' min=' || s.seqmin || ' max=' || s.seqmax || ' cache=' || s.seqcache
        || ' cycle=' || s.seqcycle
    FROM members m JOIN pg_sequence s ON m.classid = 'pg_class'::regclass AND s.seqrelid = m.objid
  UNION ALL
    SELECT 'type ' || format_type(t.oid, NULL) || ' ' || t.typtype::text
        || coalesce(' labels=' || (SELECT string_agg(enumlabel::text, ',' ORDER BY enumsortorder)
                                   FROM pg_enum WHERE enumtypid = t.oid), '')
        || ' acl=' || coalesce(t.typacl::text, 'default')
    FROM members m JOIN pg_type t ON m.classid = 'pg_type'::regclass AND t.oid = m.objid
  UNION ALL
    SELECT 'config ' || cfg::regclass::text || ' ' || coalesce(cond, '')
    FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS u(cfg, cond)
    WHERE e.extname = 'leader_election'
  UNION ALL
    SELECT 'extension ' || extname || ' relocatable=' || extrelocatable || ' schema=' || extnamespace::regnamespace::text
    FROM pg_extension WHERE extname = 'leader_election')
SELECT string_agg(l, E'\n' ORDER BY l) FROM lines
SQL

my $newest = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'leader_election'");
like($newest, qr/^\d+\.\d+$/, "the newest version is $newest");
my @versions = split /\n/, $node->safe_psql('postgres',
	"SELECT version FROM pg_available_extension_versions WHERE name = 'leader_election' "
	  . "ORDER BY string_to_array(version, '.')::int[]");
is($versions[0], '1.0', 'the oldest installable version is the base 1.0');
is($versions[-1], $newest, 'no installable version is newer than default_version');

$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION leader_election');
my $fresh = $node->safe_psql('fresh', $describe);
cmp_ok(scalar(split /\n/, $fresh), '>', 50, 'a fresh install describes its objects');
like($fresh, qr/^function le_acquire\(text,text,interval,interval,jsonb\) /m, 'the description holds function definitions');
like($fresh, qr/^relation le_leases kind=v .* view=/m, 'and view definitions');

for my $from (@versions)
{
	my $db = "from_" . ($from =~ s/\W/_/gr);
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, "CREATE EXTENSION leader_election VERSION '$from'");
	# A lease granted before the update keeps its token across it.
	my $token = $node->safe_psql($db, "SELECT fencing_token FROM le_acquire('update-check', 'o', '1 hour')");
	$node->safe_psql($db, 'ALTER EXTENSION leader_election UPDATE');
	is($node->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'leader_election'"),
		$newest, "$from: ALTER EXTENSION UPDATE reaches $newest");
	my $updated = $node->safe_psql($db, $describe);
	ok($updated eq $fresh, "$from updated to $newest: the same objects as a fresh install of $newest")
	  or diag(differences($fresh, $updated));
	ok(defined $node->safe_psql($db, "SELECT le_renew('update-check', 'o', $token, '1 hour')"),
		"$from: the holder renews with its token $token after the update");
}

# le_acquire changed its signature in 1.1 (DROP and CREATE): a role that
# le_grant gave the campaign use under 1.0 keeps calling it after the
# update, and may publish metadata; a 1.0 catalog not yet updated calls the
# same C entry point with three arguments.
$node->safe_psql('postgres', 'CREATE DATABASE grants_1_0');
$node->safe_psql('grants_1_0', q{
	CREATE ROLE regress_le_campaigner;
	CREATE EXTENSION leader_election VERSION '1.0';
	SELECT le_grant('regress_le_campaigner', 'campaign');
});
is($node->safe_psql('grants_1_0', q{
	SET ROLE regress_le_campaigner;
	SELECT acquired FROM le_acquire('acl-check', 'o', '1 hour');
	SELECT le_release('acl-check', 'o', fencing_token) FROM le_leases WHERE lease_key = 'acl-check'}),
	"t\nt", 'under 1.0 (new library), the campaign role acquires and releases');
# Grants of its own (by a role given the grant option, and to PUBLIC) are
# kept with their grantors.
$node->safe_psql('grants_1_0', q{
	CREATE ROLE regress_le_delegate;
	CREATE ROLE regress_le_sub;
	GRANT EXECUTE ON FUNCTION le_acquire(text, text, interval) TO regress_le_delegate WITH GRANT OPTION;
	GRANT EXECUTE ON FUNCTION le_acquire(text, text, interval) TO PUBLIC;
	SET ROLE regress_le_delegate;
	GRANT EXECUTE ON FUNCTION le_acquire(text, text, interval) TO regress_le_sub;
	RESET ROLE;
	GRANT EXECUTE ON FUNCTION le_protect(regclass, text, name, text) TO regress_le_delegate WITH GRANT OPTION;
	SET ROLE regress_le_delegate;
	GRANT EXECUTE ON FUNCTION le_protect(regclass, text, name, text) TO regress_le_sub;
});
my $acl_sql = q{SELECT pg_catalog.string_agg(pg_catalog.format('%s %s>%s:%s', p.proname, a.grantor::regrole,
		CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END, a.is_grantable), ',' ORDER BY 1)
	FROM pg_proc AS p, aclexplode(p.proacl) AS a WHERE p.proname IN ('le_acquire', 'le_protect')};
my $acl_before = $node->safe_psql('grants_1_0', $acl_sql);
$node->safe_psql('grants_1_0', 'ALTER EXTENSION leader_election UPDATE');
is($node->safe_psql('grants_1_0', $acl_sql), $acl_before,
	'the update keeps every grant on le_acquire and le_protect with its grantor, PUBLIC\'s too');
like($acl_before, qr/le_acquire regress_le_delegate>regress_le_sub:f/, 'a grant by a delegate is among them');
like($acl_before, qr/le_protect regress_le_delegate>regress_le_sub:f/, 'on le_protect too');
is($node->safe_psql('grants_1_0', q{SELECT count(*) FROM pg_proc WHERE proname = '_le_copy_execute_grants'}),
	'0', 'the update leaves none of its helpers behind');
is($node->safe_psql('grants_1_0', q{
	SET ROLE regress_le_campaigner;
	SELECT acquired FROM le_acquire('acl-check', 'o', '1 hour', wait => '1 second',
	                                metadata => '{"addr": "10.0.0.5:8080"}');
	SELECT le_set_metadata('acl-check', 'o', fencing_token, '{"addr": "10.0.0.5:8081"}')
	  FROM le_leases WHERE lease_key = 'acl-check';
	SELECT metadata->>'addr' FROM le_leases WHERE lease_key = 'acl-check'}),
	"t\n\n10.0.0.5:8081", 'after the update, the campaign role calls the new le_acquire and le_set_metadata');
$node->safe_psql('grants_1_0', 'DROP EXTENSION leader_election; DROP ROLE regress_le_campaigner, regress_le_delegate, regress_le_sub');

# Partition groups came in 1.1.  Under 1.0 (new library) keys starting
# with le:group: are plain keys like any other; after the update they keep
# working with their tokens, no new plain key may take the prefix, and a
# group whose keys a plain lease took is refused (42710); other groups work
# next to them.
$node->safe_psql('postgres', 'CREATE DATABASE groups_1_0');
$node->safe_psql('groups_1_0', "CREATE EXTENSION leader_election VERSION '1.0'");
my $plain = $node->safe_psql('groups_1_0',
	"SELECT fencing_token FROM le_acquire('le:group:up:0', 'old', '1 hour')");
like($plain, qr/^\d+$/, 'under 1.0 a key starting with le:group: is a plain key');
my $other = $node->safe_psql('groups_1_0',
	"SELECT fencing_token FROM le_acquire('plain-held', 'o', '1 hour')");
$node->safe_psql('groups_1_0', 'ALTER EXTENSION leader_election UPDATE');
ok(defined $node->safe_psql('groups_1_0', "SELECT le_renew('le:group:up:0', 'old', $plain, '1 hour')"),
	'after the update the 1.0 lease le:group:up:0 renews with its token');
ok(defined $node->safe_psql('groups_1_0', "SELECT le_renew('plain-held', 'o', $other, '1 hour')"),
	'and so does an ordinary lease');
my ($rc, $out, $err) = $node->psql('groups_1_0', "SELECT le_group_create('up', 2)",
	extra_params => ['-v', 'VERBOSITY=verbose']);
like($err, qr/42710/, 'a group whose partition key a 1.0 lease took is refused (42710)');
($rc, $out, $err) = $node->psql('groups_1_0', "SELECT le_acquire('le:group:new:0', 'o', '1 minute')",
	extra_params => ['-v', 'VERBOSITY=verbose']);
like($err, qr/22023/, 'a new plain key with the group prefix is refused (22023)');
is($node->safe_psql('groups_1_0', q{
	SELECT le_group_create('up2', 3);
	SELECT count(*) FILTER (WHERE state = 'owned' AND new_period)
	  FROM le_group_heartbeat('up2', 'm1', '1 hour');
	SELECT count(*) FROM le_lease WHERE group_id IS NOT NULL;
	SELECT count(*) FROM le_lease WHERE group_id IS NULL}),
	"t\n3\n4\n2", 'after the update a new group works beside the 1.0 leases');
is($node->safe_psql('groups_1_0', qq{
	SELECT le_release('le:group:up:0', 'old', $plain);
	SELECT fencing_token > $plain FROM le_acquire('le:group:up:0', 'new', '1 hour')}),
	"t\nt", 'the 1.0 lease of such a key is released and taken again with a higher token');
$node->safe_psql('groups_1_0', 'DROP EXTENSION leader_election');

done_testing();

# The lines only in the fresh install (-) and only in the updated one (+).
sub differences
{
	my ($a, $b) = @_;
	my %in_a = map { $_ => 1 } split /\n/, $a;
	my %in_b = map { $_ => 1 } split /\n/, $b;
	return join "\n", (map { "- $_" } grep { !$in_b{$_} } split /\n/, $a),
	  (map { "+ $_" } grep { !$in_a{$_} } split /\n/, $b);
}
