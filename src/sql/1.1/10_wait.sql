-- ---------------------------------------------------------------------------
-- le_acquire gains a server-side wait and the leader's metadata: one new
-- signature replaces 1.0's (text, text, interval), same C entry point (it
-- serves a not yet updated 1.0 catalog too, by its number of arguments).
--
-- The EXECUTE privileges roles (and PUBLIC) had on the 1.0 function (from
-- le_grant's campaign use, or a GRANT of their own) are given on the new
-- one, each by its grantor, before the old one is dropped.  The DO block finds both functions by name and
-- number of arguments among the extension's schema's functions (the
-- schema by OID, from pg_extension), never by a quoted schema name.
-- ---------------------------------------------------------------------------

CREATE FUNCTION @extschema@.le_acquire(
    lease_key text,
    owner_id text,
    ttl interval DEFAULT '15 seconds',
    wait interval DEFAULT NULL,
    metadata jsonb DEFAULT NULL,
    OUT acquired boolean,
    OUT fencing_token bigint,
    OUT holder text,
    OUT expires_at timestamptz,
    OUT new_period boolean)
RETURNS record
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'le_acquire';
COMMENT ON FUNCTION @extschema@.le_acquire(text, text, interval, interval, jsonb) IS
    'try to take the lease; returns the caller''s fencing token when granted (new_period true: a new, higher token; false: the valid holder again, same token and a new expiry), or the current holder and its expiry when refused (new_period NULL); with wait, waits in the server (first come, first served) until granted or wait ran out, woken by releases and at the expiry; metadata is published with the lease (le_leases.metadata)';
REVOKE ALL ON FUNCTION @extschema@.le_acquire(text, text, interval, interval, jsonb) FROM PUBLIC;

DO $$
DECLARE
    nsp oid := (SELECT e.extnamespace FROM pg_catalog.pg_extension AS e
                 WHERE e.extname OPERATOR(pg_catalog.=) 'leader_election');
    old_fn oid;
    new_fn oid;
    acl record;
    me name := current_user;
BEGIN
    SELECT p.oid INTO old_fn FROM pg_catalog.pg_proc AS p
     WHERE p.proname OPERATOR(pg_catalog.=) 'le_acquire' AND p.pronamespace OPERATOR(pg_catalog.=) nsp
       AND p.pronargs OPERATOR(pg_catalog.=) 3;
    SELECT p.oid INTO new_fn FROM pg_catalog.pg_proc AS p
     WHERE p.proname OPERATOR(pg_catalog.=) 'le_acquire' AND p.pronamespace OPERATOR(pg_catalog.=) nsp
       AND p.pronargs OPERATOR(pg_catalog.=) 5;
    -- Each grant is made again by its grantor (the owner's first, so that
    -- a role given the grant option can pass it on), PUBLIC's too.
    FOR acl IN
        SELECT a.grantee, a.grantor, a.is_grantable, a.grantor OPERATOR(pg_catalog.=) p.proowner AS by_owner
          FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
         WHERE p.oid OPERATOR(pg_catalog.=) old_fn
           AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
         ORDER BY 4 DESC
    LOOP
        IF NOT acl.by_owner THEN
            EXECUTE pg_catalog.format('SET LOCAL ROLE %I',
                                      (SELECT r.rolname FROM pg_catalog.pg_roles AS r
                                        WHERE r.oid OPERATOR(pg_catalog.=) acl.grantor));
        END IF;
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s',
                                  new_fn::pg_catalog.regprocedure,
                                  CASE WHEN acl.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                                       ELSE pg_catalog.quote_ident(
                                                (SELECT r.rolname FROM pg_catalog.pg_roles AS r
                                                  WHERE r.oid OPERATOR(pg_catalog.=) acl.grantee)) END,
                                  CASE WHEN acl.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        IF NOT acl.by_owner THEN
            EXECUTE pg_catalog.format('SET LOCAL ROLE %I', me);
        END IF;
    END LOOP;
END
$$;

DROP FUNCTION @extschema@.le_acquire(text, text, interval);
