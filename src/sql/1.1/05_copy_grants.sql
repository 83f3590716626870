-- ---------------------------------------------------------------------------
-- A helper of this update script only (dropped by 99_drop_helpers.sql):
-- 1.1 replaces some 1.0 functions with new signatures (more arguments,
-- same C entry point).  _le_copy_execute_grants(name, old_nargs, new_nargs)
-- gives every role (and PUBLIC) that had EXECUTE on the old function the
-- same on the new one, each grant made again by its own grantor (the
-- owner's first, so that a role given the grant option can pass it on),
-- with its grant option.  Both functions are found by name and number of
-- arguments among the extension's schema's functions (the schema by OID,
-- from pg_extension), never by a quoted schema name.
-- ---------------------------------------------------------------------------

CREATE FUNCTION @extschema@._le_copy_execute_grants(fn_name name, old_nargs integer, new_nargs integer)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp oid := (SELECT e.extnamespace FROM pg_catalog.pg_extension AS e
                 WHERE e.extname OPERATOR(pg_catalog.=) 'leader_election');
    old_fn oid;
    new_fn oid;
    acl record;
    me name := current_user;
BEGIN
    SELECT p.oid INTO STRICT old_fn FROM pg_catalog.pg_proc AS p
     WHERE p.proname OPERATOR(pg_catalog.=) fn_name AND p.pronamespace OPERATOR(pg_catalog.=) nsp
       AND p.pronargs OPERATOR(pg_catalog.=) old_nargs;
    SELECT p.oid INTO STRICT new_fn FROM pg_catalog.pg_proc AS p
     WHERE p.proname OPERATOR(pg_catalog.=) fn_name AND p.pronamespace OPERATOR(pg_catalog.=) nsp
       AND p.pronargs OPERATOR(pg_catalog.=) new_nargs;
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
COMMENT ON FUNCTION @extschema@._le_copy_execute_grants(name, integer, integer) IS
    'internal, exists only while the 1.0 to 1.1 update runs: copy EXECUTE grants from a replaced function to its new signature';
REVOKE ALL ON FUNCTION @extschema@._le_copy_execute_grants(name, integer, integer) FROM PUBLIC;
