-- ---------------------------------------------------------------------------
-- The fence per partition of a group: le_protect gains group_name and
-- partition_column (one table holds the rows of every partition, each row
-- judged by the lease of the partition it names), and lease_key becomes
-- optional.  One new signature replaces 1.0's (regclass, text, name, text),
-- same C entry point (it serves a not yet updated 1.0 catalog too, by its
-- number of arguments).
--
-- The EXECUTE privileges roles (and PUBLIC) had on the 1.0 function (from
-- le_grant's protect use, or a GRANT of their own) are given on the new one,
-- each by its grantor, before the old one is dropped, as 10_wait.sql does
-- for le_acquire.  The DO block finds both functions by name and number of
-- arguments among the extension's schema's functions (the schema by OID,
-- from pg_extension), never by a quoted schema name.
-- ---------------------------------------------------------------------------

CREATE FUNCTION @extschema@.le_protect(
    "table" regclass,
    lease_key text DEFAULT NULL,
    token_column name DEFAULT 'fencing_token',
    mode text DEFAULT 'lease',
    group_name text DEFAULT NULL,
    partition_column name DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_protect';
COMMENT ON FUNCTION @extschema@.le_protect(regclass, text, name, text, text, name) IS
    'attach the fence to a table (triggers le_fence and le_fence_truncate, replacing earlier ones); the token column must be bigint; with lease_key: mode ''lease'' checks the lease''s token, ''strict'' also the writer''s role, ''advance'' uses le_fence_advance() on the resource named lease_key; with group_name and partition_column (smallint, integer or bigint) instead: each row is checked against the lease of the partition of the group it names, le:group:<group_name>:<partition> (modes ''lease'' and ''strict''); runs as the caller';
REVOKE ALL ON FUNCTION @extschema@.le_protect(regclass, text, name, text, text, name) FROM PUBLIC;

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
     WHERE p.proname OPERATOR(pg_catalog.=) 'le_protect' AND p.pronamespace OPERATOR(pg_catalog.=) nsp
       AND p.pronargs OPERATOR(pg_catalog.=) 4;
    SELECT p.oid INTO new_fn FROM pg_catalog.pg_proc AS p
     WHERE p.proname OPERATOR(pg_catalog.=) 'le_protect' AND p.pronamespace OPERATOR(pg_catalog.=) nsp
       AND p.pronargs OPERATOR(pg_catalog.=) 6;
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

DROP FUNCTION @extschema@.le_protect(regclass, text, name, text);

COMMENT ON FUNCTION @extschema@.le_fence() IS
    'fence trigger (BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW, and BEFORE TRUNCATE): arguments lease key, token column [, ''strict'']; or, fencing each row by the lease of its partition of a group, group name, token column, ''lease'' or ''strict'', partition column (TRUNCATE refused); rejects writes whose token is not the lease''s current one (LE001) or whose lease is not held (LE002); attach it with le_protect()';
