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
