-- ---------------------------------------------------------------------------
-- Metrics: counters kept with each lease row, the le_lease_metrics view,
-- and the counts of writes the fence refused (le_fence_refusals).
--
-- The counters live in le_lease, not only in le_lease_history, because the
-- history is pruned (leader_election.history_retention, le_prune_history)
-- and can be switched off; they are written by the lease calls in C with
-- the same row update they make anyway (src/lease_rows.c finds these
-- columns by name, so the module also works with the 1.0 table).  Counts
-- of refused writes cannot be kept in a table: the refusal rolls its
-- transaction back; they live in shared memory (src/metrics.c) when the
-- module is in shared_preload_libraries, and are absent otherwise.
-- ---------------------------------------------------------------------------

-- Fast defaults: adding these columns does not rewrite le_lease.
ALTER TABLE @extschema@.le_lease
    ADD COLUMN expiries            bigint      NOT NULL DEFAULT 0,
    ADD COLUMN force_releases      bigint      NOT NULL DEFAULT 0,
    ADD COLUMN ttl_us              bigint,
    ADD COLUMN freed_at            timestamptz,
    ADD COLUMN renew_margin_us     bigint,
    ADD COLUMN renew_margin_min_us bigint;
COMMENT ON COLUMN @extschema@.le_lease.expiries IS
    'ownership periods that ended by lapsing (taken over, released or force-released after their expiry), counted since the lease was created or, for leases from before version 1.1, as far as le_lease_history recorded them then';
COMMENT ON COLUMN @extschema@.le_lease.force_releases IS
    'valid ownership periods ended by le_force_release';
COMMENT ON COLUMN @extschema@.le_lease.ttl_us IS
    'ttl of the last ownership period that ended (its expires_at minus its last renewed_at), in microseconds; le_lease_metrics shows the current period''s ttl while the lease is held (NULL: no period ended since version 1.1)';
COMMENT ON COLUMN @extschema@.le_lease.freed_at IS
    'time of the last le_release or le_force_release (NULL: none since version 1.1)';
COMMENT ON COLUMN @extschema@.le_lease.renew_margin_us IS
    'time the lease had left, by the server clock, when its last successful le_renew arrived, in microseconds (NULL: no renewal in the current ownership period, or the lease is free)';
COMMENT ON COLUMN @extschema@.le_lease.renew_margin_min_us IS
    'least renew_margin_us of the current ownership period (NULL: no renewal in it, or the lease is free)';

-- Periods that lapsed before this version: what the history still holds.
UPDATE @extschema@.le_lease AS l
   SET expiries = (SELECT pg_catalog.count(*) FROM @extschema@.le_lease_history AS h
                    WHERE h.lease_id OPERATOR(pg_catalog.=) l.lease_id
                      AND h.end_reason OPERATOR(pg_catalog.=) 'expired'),
       force_releases = (SELECT pg_catalog.count(*) FROM @extschema@.le_lease_history AS h
                          WHERE h.lease_id OPERATOR(pg_catalog.=) l.lease_id
                            AND h.end_reason OPERATOR(pg_catalog.=) 'force_released');

CREATE VIEW @extschema@.le_lease_metrics AS
SELECT l.lease_key,
       l.holder,
       l.holder_role,
       l.fencing_token,
       COALESCE(l.expires_at OPERATOR(pg_catalog.>) n.now, false) AS is_valid,
       CASE WHEN l.expires_at OPERATOR(pg_catalog.>) n.now
            THEN pg_catalog.date_part('epoch', l.expires_at OPERATOR(pg_catalog.-) n.now)
            ELSE 0 END::double precision AS seconds_remaining,
       -- Held: the ttl of the last grant, extension or renewal; free: that
       -- of the period that ended last.
       COALESCE(pg_catalog.date_part('epoch', l.expires_at OPERATOR(pg_catalog.-) l.renewed_at),
                l.ttl_us::double precision OPERATOR(pg_catalog./) 1e6) AS ttl_seconds,
       l.transitions AS periods_granted,
       -- A lapsed period still held is an expiry already, though no call has
       -- ended it yet.
       l.expiries OPERATOR(pg_catalog.+)
           CASE WHEN l.expires_at OPERATOR(pg_catalog.<=) n.now THEN 1 ELSE 0 END
           AS expiries,
       l.force_releases,
       l.renew_margin_us::double precision OPERATOR(pg_catalog./) 1e6 AS renew_margin_seconds,
       l.renew_margin_min_us::double precision OPERATOR(pg_catalog./) 1e6 AS renew_margin_min_seconds,
       -- How long nobody has held it validly: since it lapsed, since it was
       -- freed (or the last recorded end of a period), or since it was made.
       CASE WHEN l.expires_at OPERATOR(pg_catalog.>) n.now THEN 0
            ELSE pg_catalog.date_part('epoch', n.now OPERATOR(pg_catalog.-)
                     COALESCE(l.expires_at, l.freed_at,
                              (SELECT pg_catalog.max(h.ended_at) FROM @extschema@.le_lease_history AS h
                                WHERE h.lease_id OPERATOR(pg_catalog.=) l.lease_id),
                              l.created_at))
            END::double precision AS seconds_without_holder
  FROM @extschema@.le_lease AS l,
       -- One reading of the clock per row: a row is never valid and lapsed at once.
       LATERAL (SELECT pg_catalog.clock_timestamp() AS now) AS n;
COMMENT ON VIEW @extschema@.le_lease_metrics IS
    'one row per lease for monitoring: holder, token, seconds remaining, ttl, periods granted, expiries, force releases, the time left when the last renewal arrived (and its least in this period), and how long the lease has had no valid holder; readable through le_grant(role, ''monitor'')';
REVOKE ALL ON @extschema@.le_lease_metrics FROM PUBLIC;

CREATE FUNCTION @extschema@.le_fence_refusals_counted()
RETURNS boolean
LANGUAGE c STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_fence_refusals_counted';
COMMENT ON FUNCTION @extschema@.le_fence_refusals_counted() IS
    'true when writes the fence refuses are counted (le_fence_refusals): the module is in shared_preload_libraries';
REVOKE ALL ON FUNCTION @extschema@.le_fence_refusals_counted() FROM PUBLIC;

CREATE FUNCTION @extschema@._le_fence_refusal_counts(OUT relid oid, OUT refused_writes bigint)
RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'le_fence_refusal_counts';
COMMENT ON FUNCTION @extschema@._le_fence_refusal_counts() IS
    'internal, not API: the shared-memory counts behind le_fence_refusals';
REVOKE ALL ON FUNCTION @extschema@._le_fence_refusal_counts() FROM PUBLIC;

CREATE VIEW @extschema@.le_fence_refusals AS
SELECT CASE WHEN c.relid OPERATOR(pg_catalog.<>) 0 THEN c.relid::pg_catalog.regclass END AS relation,
       c.relid IS NOT NULL AND c.relid OPERATOR(pg_catalog.=) 0 AS without_table,
       c.refused_writes
  FROM @extschema@._le_fence_refusal_counts() AS c;
COMMENT ON VIEW @extschema@.le_fence_refusals IS
    'writes the fence refused (LE001, LE002) in this database since the server started, per table (without_table: refusals of le_fence_check() and the job functions; relation NULL and without_table false: refusals that found no counter slot); empty unless le_fence_refusals_counted(); readable through le_grant(role, ''monitor'')';
REVOKE ALL ON @extschema@.le_fence_refusals FROM PUBLIC;

-- The monitor use also reads the metrics (the same function as in 1.0 but
-- for the list of objects).  Roles granted it before need le_grant(role,
-- 'monitor') again for the new objects.
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
    uses text[] := ARRAY['campaign', 'fence', 'schedule', 'work', 'monitor', 'protect'];
    stmt text;
    obj record;
BEGIN
    IF role IS NULL OR use IS NULL THEN
        RAISE EXCEPTION 'role and use must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF NOT use OPERATOR(pg_catalog.=) ANY (uses) THEN
        RAISE EXCEPTION 'unknown use "%"', _le_show(use)
            USING ERRCODE = '22023',
                  HINT = 'Use one of campaign, fence, schedule, work, monitor, protect.';
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
        ('protect',  'function', 'le_fence_advance_trigger'))
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
    'administrators only: grant role what one use of the extension needs and return the GRANT statements run; use is campaign (le_acquire, le_renew, le_release, le_watch, le_unwatch), fence (le_fence_check, le_fence_advance), schedule (le_schedule_job, le_fence_check), work (le_claim_jobs, le_complete_job, le_fail_job, view le_jobs), monitor (views le_jobs, le_lease_metrics and le_fence_refusals, le_fence_refusals_counted) or protect (le_protect, le_unprotect and the trigger functions); runs as the caller';
