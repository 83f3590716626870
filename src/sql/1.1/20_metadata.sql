-- ---------------------------------------------------------------------------
-- Leader metadata: a jsonb value the holder publishes with its lease
-- (le_acquire's metadata, le_set_metadata), shown in le_leases, carried in
-- notifications, cleared on release.  A column of the lease row, so hot
-- standbys read it as they read the holder.
-- ---------------------------------------------------------------------------

-- Not indexed: setting it keeps the lease row's updates HOT.
ALTER TABLE @extschema@.le_lease ADD COLUMN metadata jsonb;
COMMENT ON COLUMN @extschema@.le_lease.metadata IS
    'jsonb published by the holder of the current period (le_acquire''s metadata, le_set_metadata); NULL when released or none was given';

CREATE FUNCTION @extschema@.le_set_metadata(
    lease_key text,
    owner_id text,
    fencing_token bigint,
    metadata jsonb)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'le_set_metadata';
COMMENT ON FUNCTION @extschema@.le_set_metadata(text, text, bigint, jsonb) IS
    'compare-and-set of the metadata of a valid lease held by this owner, role and token (NULL clears it); LE001 for another token or holder, LE002 when the lease is not held; nothing changes then';
REVOKE ALL ON FUNCTION @extschema@.le_set_metadata(text, text, bigint, jsonb) FROM PUBLIC;

-- Roles that may take leases (le_grant's campaign use under 1.0, or a GRANT
-- of their own) may publish metadata too: it changes only a lease they
-- hold, by owner, role and token.
DO $$
DECLARE
    nsp oid := (SELECT e.extnamespace FROM pg_catalog.pg_extension AS e
                 WHERE e.extname OPERATOR(pg_catalog.=) 'leader_election');
    acl record;
BEGIN
    FOR acl IN
        SELECT r.rolname, s.oid AS set_fn
          FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a,
               pg_catalog.pg_roles AS r, pg_catalog.pg_proc AS s
         WHERE p.proname OPERATOR(pg_catalog.=) 'le_acquire' AND p.pronamespace OPERATOR(pg_catalog.=) nsp
           AND s.proname OPERATOR(pg_catalog.=) 'le_set_metadata' AND s.pronamespace OPERATOR(pg_catalog.=) nsp
           AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND r.oid OPERATOR(pg_catalog.=) a.grantee
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %I',
                                  acl.set_fn::pg_catalog.regprocedure, acl.rolname);
    END LOOP;
END
$$;

-- The view gains the column at its end (CREATE OR REPLACE VIEW may only add).
CREATE OR REPLACE VIEW @extschema@.le_leases AS
SELECT l.lease_key,
       l.holder,
       l.holder_role,
       l.fencing_token,
       l.acquired_at,
       l.renewed_at,
       l.expires_at,
       COALESCE(l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp(), false) AS is_valid,
       CASE WHEN l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
            THEN pg_catalog.date_part('epoch', l.expires_at OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())
            ELSE 0 END::double precision AS seconds_remaining,
       l.transitions,
       l.created_at,
       l.metadata
  FROM @extschema@.le_lease AS l;

COMMENT ON VIEW @extschema@.le_leases IS
    'every lease: holder, role, current fencing token, times, whether it is valid now by the server clock, seconds remaining, the number of ownership periods granted (transitions) and the holder''s metadata';
