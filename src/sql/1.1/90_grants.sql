-- ---------------------------------------------------------------------------
-- What each use of le_grant() gives in 1.1: the function of 1.0
-- (src/sql/40_grants.sql) but for the list of objects, replaced once, after
-- the pieces that create them.  The campaign use gains le_set_metadata
-- (20_metadata.sql also grants it to the roles that could call le_acquire
-- under 1.0); the monitor use gains the metrics of 30_metrics.sql, which
-- roles granted it before get by calling le_grant(role, 'monitor') again;
-- the group use is new (the partition groups of 40_groups.sql).
-- ---------------------------------------------------------------------------

-- Grant or revoke (grant = false) what use needs; returns the statements run.
CREATE OR REPLACE FUNCTION @extschema@._le_grant_use(role regrole, use text, "grant" boolean)
RETURNS SETOF text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ext_nsp oid := (SELECT e.extnamespace FROM pg_catalog.pg_extension AS e
                     WHERE e.extname OPERATOR(pg_catalog.=) 'leader_election');
    -- The schema's name as it is now, read by OID, only to show the
    -- statements: they run with the objects unqualified, resolved in the
    -- search path pinned by OID.  Run qualified by this name, a rename
    -- while the call waits for its lock below would send them to the
    -- objects of whoever then made a schema of the old name.
    ext_nsp_name text := (SELECT pg_catalog.quote_ident(n.nspname) FROM pg_catalog.pg_namespace AS n
                           WHERE n.oid OPERATOR(pg_catalog.=) ext_nsp);
    role_name name;
    uses text[] := ARRAY['campaign', 'fence', 'schedule', 'work', 'monitor', 'protect', 'group'];
    stmt text;
    obj record;
BEGIN
    IF role IS NULL OR use IS NULL THEN
        RAISE EXCEPTION 'role and use must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF NOT use OPERATOR(pg_catalog.=) ANY (uses) THEN
        RAISE EXCEPTION 'unknown use "%"', _le_show(use)
            USING ERRCODE = '22023',
                  HINT = 'Use one of campaign, fence, schedule, work, monitor, protect, group.';
    END IF;
    role_name := (SELECT a.rolname FROM pg_catalog.pg_roles AS a
                   WHERE a.oid OPERATOR(pg_catalog.=) role::pg_catalog.oid);
    IF role_name IS NULL THEN
        RAISE EXCEPTION 'role with OID % does not exist', role::pg_catalog.oid USING ERRCODE = '22023';
    END IF;
    IF role_name OPERATOR(pg_catalog.=) 'public' THEN
        RAISE EXCEPTION 'le_grant() does not grant to PUBLIC' USING ERRCODE = '22023';
    END IF;
    -- GRANT and REVOKE take no lock on the objects they change: without
    -- this lock, a DROP EXTENSION that committed while this call waited
    -- for it would leave it updating deleted catalog rows (XX000 "tuple
    -- concurrently deleted").  DROP EXTENSION locks every table of the
    -- extension first, so this waits for it and then fails cleanly (42P01:
    -- the table no longer exists); and a DROP that comes later waits for
    -- this transaction.
    LOCK TABLE le_lease IN ACCESS SHARE MODE;
    -- The objects each use needs: kind 'function' gets EXECUTE, 'view' SELECT.
    FOR obj IN
        WITH use_objects (use, kind, name) AS (VALUES
        ('campaign', 'function', 'le_acquire'::name),
        ('campaign', 'function', 'le_renew'),
        ('campaign', 'function', 'le_release'),
        ('campaign', 'function', 'le_watch'),
        ('campaign', 'function', 'le_unwatch'),
        ('campaign', 'function', 'le_set_metadata'),
        ('fence',    'function', 'le_fence_check'),
        ('fence',    'function', 'le_fence_advance'),
        ('schedule', 'function', 'le_schedule_job'),
        ('schedule', 'function', 'le_fence_check'),
        ('work',     'function', 'le_claim_jobs'),
        ('work',     'function', 'le_complete_job'),
        ('work',     'function', 'le_fail_job'),
        ('work',     'view',     'le_jobs'),
        ('monitor',  'view',     'le_jobs'),
        ('monitor',  'view',     'le_lease_metrics'),
        ('monitor',  'view',     'le_fence_refusals'),
        ('monitor',  'function', 'le_fence_refusals_counted'),
        ('monitor',  'function', '_le_fence_refusal_counts'),
        ('protect',  'function', 'le_protect'),
        ('protect',  'function', 'le_unprotect'),
        ('protect',  'function', 'le_fence'),
        ('protect',  'function', 'le_fence_advance_trigger'),
        ('group',    'function', 'le_group_create'),
        ('group',    'function', 'le_group_heartbeat'),
        ('group',    'function', 'le_group_leave'),
        ('group',    'function', 'le_group_assignment'),
        ('group',    'function', 'le_release'),
        ('group',    'function', 'le_fence_check'))
        -- regprocedure and regclass print a visible name unqualified.
        SELECT 'FUNCTION ' AS kind, p.oid::pg_catalog.regprocedure::pg_catalog.text AS target,
               'EXECUTE' AS privilege
          FROM use_objects AS u
          JOIN pg_catalog.pg_proc AS p ON p.proname OPERATOR(pg_catalog.=) u.name
                                      AND p.pronamespace OPERATOR(pg_catalog.=) ext_nsp
          JOIN pg_catalog.pg_depend AS d
            ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.objid OPERATOR(pg_catalog.=) p.oid AND d.deptype OPERATOR(pg_catalog.=) 'e'
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension AS e
                                                   WHERE e.extname OPERATOR(pg_catalog.=) 'leader_election')
         WHERE u.use OPERATOR(pg_catalog.=) _le_grant_use.use AND u.kind OPERATOR(pg_catalog.=) 'function'
        UNION ALL
        SELECT 'TABLE ', pg_catalog.quote_ident(c.relname), 'SELECT'
          FROM use_objects AS u
          JOIN pg_catalog.pg_class AS c ON c.relname OPERATOR(pg_catalog.=) u.name
                                       AND c.relnamespace OPERATOR(pg_catalog.=) ext_nsp
         WHERE u.use OPERATOR(pg_catalog.=) _le_grant_use.use AND u.kind OPERATOR(pg_catalog.=) 'view'
         ORDER BY 1, 2
    LOOP
        IF "grant" THEN
            stmt := 'GRANT %s ON %s%s%s TO %I';
        ELSE
            stmt := 'REVOKE %s ON %s%s%s FROM %I';
        END IF;
        EXECUTE pg_catalog.format(stmt, obj.privilege, obj.kind, '', obj.target, role_name);
        RETURN NEXT pg_catalog.format(stmt, obj.privilege, obj.kind,
                                      ext_nsp_name OPERATOR(pg_catalog.||) '.', obj.target, role_name);
    END LOOP;
END
$$;
COMMENT ON FUNCTION @extschema@._le_grant_use(regrole, text, boolean) IS
    'internal, not API: the work of le_grant() and le_revoke()';
COMMENT ON FUNCTION @extschema@.le_grant(regrole, text) IS
    'administrators only: grant role what one use of the extension needs and return the GRANT statements run; use is campaign (le_acquire, le_renew, le_release, le_watch, le_unwatch, le_set_metadata), fence (le_fence_check, le_fence_advance), schedule (le_schedule_job, le_fence_check), work (le_claim_jobs, le_complete_job, le_fail_job, view le_jobs), monitor (views le_jobs, le_lease_metrics and le_fence_refusals, le_fence_refusals_counted), protect (le_protect, le_unprotect and the trigger functions) or group (le_group_create, le_group_heartbeat, le_group_leave, le_group_assignment, le_release, le_fence_check); runs as the caller';
