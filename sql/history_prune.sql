-- G12: A grant prunes its lease's history rows that ended longer ago than
-- leader_election.history_retention.  The lease row's history_min_ended_at
-- says when a row can next be due and the grant skips the scan until then:
-- these steps check that the shortcut never keeps a row past its due time,
-- after a prune that deleted rows, after one that deleted nothing, when the
-- retention is lowered, and after a rollback; and, at every step (hp_rows'
-- bound_ok), that no ended period lies before that bound.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY sqlstate

CREATE FUNCTION hp_cycle(n int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. n LOOP
    PERFORM le_release('hp', 'o', (SELECT fencing_token FROM le_acquire('hp', 'o', '1 minute')));
  END LOOP;
END $$;
CREATE FUNCTION hp_rows(k text DEFAULT 'hp', OUT closed bigint, OUT open bigint, OUT bound_ok boolean)
LANGUAGE sql AS $$
  SELECT count(*) FILTER (WHERE h.ended_at IS NOT NULL), count(*) FILTER (WHERE h.ended_at IS NULL),
         CASE WHEN min(h.ended_at) IS NULL THEN true
              ELSE coalesce((SELECT l.history_min_ended_at IS NULL OR l.history_min_ended_at <= min(h.ended_at)
                               FROM le_lease AS l WHERE l.lease_key = k), false) END
    FROM le_lease_history AS h WHERE h.lease_key = k $$;
-- A grant of key k and the scans of the history index it made (counted
-- within the transaction: PostgreSQL 15's pending counts also hold earlier
-- transactions').
CREATE FUNCTION hy_grant(k text DEFAULT 'hy', OUT acquired boolean, OUT history_scans bigint) LANGUAGE plpgsql AS $$
DECLARE
  before bigint := pg_stat_get_xact_numscans('le_lease_history_pkey'::regclass);
BEGIN
  acquired := (SELECT a.acquired FROM le_acquire(k, 'o', '1 minute') AS a);
  history_scans := pg_stat_get_xact_numscans('le_lease_history_pkey'::regclass) - before;
END $$;
-- End the period of 'hy' and add one more, both ended.
CREATE FUNCTION hy_two_periods() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM le_release('hy', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hy';
  PERFORM le_release('hy', 'o', (SELECT fencing_token FROM le_acquire('hy', 'o', '1 minute')));
END $$;

-- Three ended periods, all young: every grant keeps them.
SELECT hp_cycle(3);
SELECT * FROM hp_rows();

-- Past a 1 s retention the next grant deletes all three.
SET leader_election.history_retention = 1;
SELECT pg_sleep(1.1);
SELECT acquired FROM le_acquire('hp', 'o', '1 minute');
SELECT * FROM hp_rows();

-- A young row stays (that grant left no ended period, so the release's end
-- is the bound: the grant after it does not scan) ...
SELECT le_release('hp', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hp';
SELECT acquired FROM le_acquire('hp', 'o', '1 minute');
SELECT le_release('hp', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hp';
SELECT * FROM hp_rows();
-- ... and is gone at the first grant after it is due.
SELECT pg_sleep(1.1);
SELECT acquired FROM le_acquire('hp', 'o', '1 minute');
SELECT * FROM hp_rows();

-- The bound is a time, not a verdict: with a long retention a grant finds
-- nothing due; a lower retention set afterwards applies at the next grant.
SET leader_election.history_retention = 3600;
SELECT le_release('hp', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hp';
SELECT hp_cycle(2);
SELECT * FROM hp_rows();
SET leader_election.history_retention = 0;
SELECT pg_sleep(0.01);
SELECT acquired FROM le_acquire('hp', 'o', '1 minute');
SELECT * FROM hp_rows();

-- A prune that rolls back: the rows it deleted come back, with the bound
-- it moved, and the next grant deletes them again.
SELECT le_release('hp', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hp';
SET leader_election.history_retention = 3600;
SELECT hp_cycle(2);
SET leader_election.history_retention = 1;
SELECT pg_sleep(1.1);
BEGIN;
SELECT acquired FROM le_acquire('hp', 'o', '1 minute');
SELECT * FROM hp_rows();
ROLLBACK;
SELECT * FROM hp_rows();
SELECT acquired FROM le_acquire('hp', 'o', '1 minute');
SELECT * FROM hp_rows();

-- A rolled-back transaction whose first prune deleted the due rows and
-- whose later grant then found nothing due: after the rollback the rows are
-- back and the next grant must not trust what that transaction saw (both
-- with a grant's prune and with le_prune_history(), which leaves the bounds
-- alone, doing the deleting).
SELECT le_release('hp', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hp';
SET leader_election.history_retention = 3600;
SELECT hp_cycle(2);
SET leader_election.history_retention = 1;
SELECT pg_sleep(1.1);
BEGIN;
SELECT acquired FROM le_acquire('hp', 'o', '1 minute');
SELECT le_release('hp', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hp';
SELECT acquired FROM le_acquire('hp', 'o', '1 minute');
ROLLBACK;
SELECT * FROM hp_rows();
SELECT le_release('hp', 'o', (SELECT fencing_token FROM le_acquire('hp', 'o', '1 minute')));
SELECT * FROM hp_rows();
SET leader_election.history_retention = 3600;
SELECT hp_cycle(2);
SET leader_election.history_retention = 1;
SELECT pg_sleep(1.1);
BEGIN;
SELECT le_prune_history() > 0 AS pruned;
SELECT acquired FROM le_acquire('hp', 'o', '1 minute');
ROLLBACK;
SELECT * FROM hp_rows();
SELECT le_release('hp', 'o', (SELECT fencing_token FROM le_acquire('hp', 'o', '1 minute')));
SELECT * FROM hp_rows();

-- A lease none of whose periods has ended yet: a grant scans no history at
-- all (not even the first grant of the lease in a backend).
RESET leader_election.history_retention;
SELECT * FROM hy_grant();
-- A lease made long ago (older than the retention) whose ended periods are
-- young: the grant, in a new session, still scans nothing and keeps them.
SELECT hy_two_periods();
UPDATE le_lease SET created_at = created_at - interval '3 hours' WHERE lease_key = 'hy';
\c
\set VERBOSITY sqlstate
SET leader_election.history_retention = 3600;
SELECT * FROM hy_grant();
SELECT * FROM hp_rows('hy');
-- The same periods made two hours old (by hand, as the superuser, bound
-- included: what a clock two hours further would see): the grant, in a new
-- session, scans and deletes them.
SELECT le_release('hy', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hy';
UPDATE le_lease_history SET acquired_at = acquired_at - interval '2 hours',
       ended_at = ended_at - interval '2 hours' WHERE lease_key = 'hy';
UPDATE le_lease SET history_min_ended_at = history_min_ended_at - interval '2 hours' WHERE lease_key = 'hy';
\c
\set VERBOSITY sqlstate
SET leader_election.history_retention = 3600;
SELECT * FROM hy_grant();
SELECT * FROM hp_rows('hy');
-- The bound follows every way a period ends: a release, a lapse taken over
-- by the next grant (ended at its expiry, before the grant's time), a
-- forced release; and it is the oldest end, not the latest.
SELECT le_release('hy', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hy';
SELECT l.history_min_ended_at = h.ended_at AS bound_is_that_release
  FROM le_lease AS l JOIN le_lease_history AS h USING (lease_id, fencing_token) WHERE l.lease_key = 'hy';
SELECT acquired FROM le_acquire('hy', 'lapsing', '10 milliseconds');
SELECT pg_sleep(0.05);
SELECT acquired FROM le_acquire('hy', 'next', '1 minute');
SELECT end_reason, ended_at < acquired_at + interval '1 second' AS ended_at_expiry
  FROM le_lease_history WHERE lease_key = 'hy' AND holder = 'lapsing';
SELECT le_force_release('hy');
SELECT * FROM hp_rows('hy');
SELECT l.history_min_ended_at = min(h.ended_at) AS bound_is_oldest_end
  FROM le_lease AS l JOIN le_lease_history AS h USING (lease_id) WHERE l.lease_key = 'hy'
 GROUP BY l.history_min_ended_at;
-- The first period of a lease that ends by lapsing sets the bound too.
SELECT acquired FROM le_acquire('hz', 'lapsing', '10 milliseconds');
SELECT pg_sleep(0.05);
SELECT acquired FROM le_acquire('hz', 'next', '1 minute');
SELECT * FROM hp_rows('hz');
-- A grant that rolls back takes its bound with it; the prune after it still
-- finds the due rows.
UPDATE le_lease_history SET acquired_at = acquired_at - interval '2 hours',
       ended_at = ended_at - interval '2 hours' WHERE lease_key = 'hy';
UPDATE le_lease SET history_min_ended_at = history_min_ended_at - interval '2 hours' WHERE lease_key = 'hy';
BEGIN;
SELECT * FROM hy_grant();
SELECT * FROM hp_rows('hy');
ROLLBACK;
SELECT * FROM hp_rows('hy');
SELECT * FROM hy_grant();
SELECT * FROM hp_rows('hy');
-- That prune left no ended period and wrote the bound back: the next
-- grant, after a release, scans nothing.
SELECT le_release('hy', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hy';
SELECT * FROM hy_grant();
SELECT * FROM hp_rows('hy');

-- A prune that deletes the due rows and keeps a younger one: the bound
-- becomes the end of the row kept, which the grant after it is due deletes.
SELECT le_release('hw', 'o', (SELECT fencing_token FROM le_acquire('hw', 'o', '1 minute')));
SELECT le_release('hw', 'o', (SELECT fencing_token FROM le_acquire('hw', 'o', '1 minute')));
UPDATE le_lease_history SET acquired_at = acquired_at - interval '2 hours',
       ended_at = ended_at - interval '2 hours'
 WHERE lease_key = 'hw' AND fencing_token = (SELECT min(fencing_token) FROM le_lease_history WHERE lease_key = 'hw');
UPDATE le_lease SET history_min_ended_at = history_min_ended_at - interval '2 hours' WHERE lease_key = 'hw';
SELECT * FROM hy_grant('hw');
SELECT * FROM hp_rows('hw');
SELECT l.history_min_ended_at = h.ended_at AS bound_is_kept_end
  FROM le_lease AS l JOIN le_lease_history AS h USING (lease_id) WHERE l.lease_key = 'hw' AND h.ended_at IS NOT NULL;
SELECT le_release('hw', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hw';
UPDATE le_lease_history SET acquired_at = acquired_at - interval '2 hours', ended_at = ended_at - interval '2 hours'
 WHERE lease_key = 'hw' AND fencing_token = (SELECT min(fencing_token) FROM le_lease_history WHERE lease_key = 'hw');
UPDATE le_lease SET history_min_ended_at = history_min_ended_at - interval '2 hours' WHERE lease_key = 'hw';
SELECT * FROM hy_grant('hw');
SELECT * FROM hp_rows('hw');
-- An unknown bound (NULL: a row restored from a dump made before the
-- column existed) makes the next grant scan, prune the due rows and set it.
SELECT le_release('hw', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hw';
UPDATE le_lease_history SET acquired_at = acquired_at - interval '2 hours', ended_at = ended_at - interval '2 hours'
 WHERE lease_key = 'hw';
UPDATE le_lease SET history_min_ended_at = NULL WHERE lease_key = 'hw';
SELECT * FROM hy_grant('hw');
SELECT * FROM hp_rows('hw');
SELECT history_min_ended_at FROM le_lease WHERE lease_key = 'hw';

-- A lease that lapsed longer ago than the retention: the grant that takes
-- it over deletes the lapsed period's row instead of closing it (it is due
-- already), and so does a release of such a lease by its holder.
SELECT acquired FROM le_acquire('hl', 'gone', '1 minute');
UPDATE le_lease SET acquired_at = acquired_at - interval '3 hours', expires_at = expires_at - interval '3 hours'
 WHERE lease_key = 'hl';
UPDATE le_lease_history SET acquired_at = acquired_at - interval '3 hours' WHERE lease_key = 'hl';
SELECT acquired FROM le_acquire('hl', 'next', '1 minute');
SELECT holder, end_reason FROM le_lease_history WHERE lease_key = 'hl' ORDER BY fencing_token;
SELECT * FROM hp_rows('hl');
UPDATE le_lease SET acquired_at = acquired_at - interval '3 hours', expires_at = expires_at - interval '3 hours'
 WHERE lease_key = 'hl';
SELECT le_release('hl', 'next', fencing_token) FROM le_leases WHERE lease_key = 'hl';
SELECT * FROM hp_rows('hl');

-- A long backlog goes 1,024 rows per grant (the bound left due), the rest
-- at the next grant.
INSERT INTO le_lease_history (lease_id, lease_key, holder, holder_role, fencing_token, acquired_at, ended_at, end_reason)
SELECT l.lease_id, l.lease_key, 'earlier', 'postgres', -g, now() - interval '3 hours', now() - interval '3 hours', 'released'
  FROM le_lease AS l, generate_series(1, 1100) AS g WHERE l.lease_key = 'hl';
UPDATE le_lease SET history_min_ended_at = now() - interval '3 hours' WHERE lease_key = 'hl';
SELECT acquired FROM le_acquire('hl', 'o', '1 minute');
SELECT * FROM hp_rows('hl');
SELECT history_min_ended_at < now() - interval '1 hour' AS bound_due FROM le_lease WHERE lease_key = 'hl';
SELECT le_release('hl', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hl';
SELECT acquired FROM le_acquire('hl', 'o', '1 minute');
SELECT * FROM hp_rows('hl');

-- What a grant's prune allocates is freed by the call: grants that prune,
-- each in a subtransaction, leave no memory context behind.
CREATE FUNCTION hm_loop(n int) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. n LOOP
    BEGIN
      PERFORM le_release('hm', 'o', (SELECT fencing_token FROM le_acquire('hm', 'o', '1 minute')));
    EXCEPTION WHEN others THEN RAISE;
    END;
  END LOOP;
  RETURN (SELECT count(*) FROM pg_backend_memory_contexts WHERE name = 'CurTransactionContext');
END $$;
SET leader_election.history_retention = 0;
SELECT hm_loop(50) AS cur_transaction_contexts;
SELECT * FROM hp_rows('hm');
SET leader_election.history_retention = 3600;
DROP FUNCTION hm_loop(int);

RESET leader_election.history_retention;
DROP FUNCTION hp_cycle(int);
DROP FUNCTION hp_rows(text);
DROP FUNCTION hy_grant(text);
DROP FUNCTION hy_two_periods();
DROP EXTENSION leader_election;
