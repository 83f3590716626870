-- A grant prunes its lease's history rows that ended longer ago than
-- leader_election.history_retention.  Each backend remembers, per lease,
-- when a row can next be due and skips the scan until then: these steps
-- check that the shortcut never keeps a row past its due time, after a
-- prune that deleted rows, after one that deleted nothing, when the
-- retention is lowered, and after a rollback.
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
CREATE FUNCTION hp_rows(k text DEFAULT 'hp', OUT closed bigint, OUT open bigint) LANGUAGE sql AS $$
  SELECT count(*) FILTER (WHERE ended_at IS NOT NULL), count(*) FILTER (WHERE ended_at IS NULL)
    FROM le_lease_history WHERE lease_key = k $$;
-- A grant of key 'hy' and the scans of the history index it made (counted
-- within the transaction: PostgreSQL 15's pending counts also hold earlier
-- transactions').
CREATE FUNCTION hy_grant(OUT acquired boolean, OUT history_scans bigint) LANGUAGE plpgsql AS $$
DECLARE
  before bigint := pg_stat_get_xact_numscans('le_lease_history_pkey'::regclass);
BEGIN
  acquired := (SELECT a.acquired FROM le_acquire('hy', 'o', '1 minute') AS a);
  history_scans := pg_stat_get_xact_numscans('le_lease_history_pkey'::regclass) - before;
END $$;
-- End the period of 'hy', add one more, make both end two hours earlier,
-- and give the lease row the creation time made_at (by hand, as the
-- superuser: what a clock that was off would have left).
CREATE FUNCTION hy_age(made_at timestamptz) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM le_release('hy', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hy';
  PERFORM le_release('hy', 'o', (SELECT fencing_token FROM le_acquire('hy', 'o', '1 minute')));
  UPDATE le_lease_history SET acquired_at = acquired_at - interval '2 hours',
         ended_at = ended_at - interval '2 hours' WHERE lease_key = 'hy';
  UPDATE le_lease SET created_at = made_at WHERE lease_key = 'hy';
END $$;

-- Three ended periods, all young: every grant keeps them.
SELECT hp_cycle(3);
SELECT * FROM hp_rows();

-- Past a 1 s retention the next grant deletes all three.
SET leader_election.history_retention = 1;
SELECT pg_sleep(1.1);
SELECT acquired FROM le_acquire('hp', 'o', '1 minute');
SELECT * FROM hp_rows();

-- That grant deleted rows, so the next one scans again: a young row stays
-- (this grant deletes nothing and remembers when that row is due) ...
SELECT le_release('hp', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hp';
SELECT acquired FROM le_acquire('hp', 'o', '1 minute');
SELECT le_release('hp', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hp';
SELECT * FROM hp_rows();
-- ... and is gone at the first grant after it is due.
SELECT pg_sleep(1.1);
SELECT acquired FROM le_acquire('hp', 'o', '1 minute');
SELECT * FROM hp_rows();

-- With a long retention a grant remembers "nothing due for an hour"; a
-- lower retention set afterwards still applies at the next grant.
SET leader_election.history_retention = 3600;
SELECT le_release('hp', 'o', fencing_token) FROM le_leases WHERE lease_key = 'hp';
SELECT hp_cycle(2);
SELECT * FROM hp_rows();
SET leader_election.history_retention = 0;
SELECT pg_sleep(0.01);
SELECT acquired FROM le_acquire('hp', 'o', '1 minute');
SELECT * FROM hp_rows();

-- A prune that rolls back: the rows it deleted come back, and the next
-- grant, right after it (a prune that deleted rows remembers nothing),
-- deletes them again.
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
-- with a grant's prune and with le_prune_history() doing the deleting).
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

-- Every history row of a lease ended after its le_lease row was created, so
-- while that row is younger than the retention no row can be due: a grant
-- then scans no history at all (not even the first grant of the lease in
-- a backend, which otherwise scans once).
RESET leader_election.history_retention;
SELECT * FROM hy_grant();
-- Once the row is older than the retention, the grant (in a new session:
-- no backend shortcut) prunes as before.
SELECT hy_age((SELECT created_at - interval '3 hours' FROM le_lease WHERE lease_key = 'hy'));
\c
\set VERBOSITY sqlstate
SET leader_election.history_retention = 3600;
SELECT * FROM hy_grant();
SELECT * FROM hp_rows('hy');
-- A row made "in the future" (a clock that was ahead: stepped back since,
-- or another server's before a restore or failover) is not trusted: the
-- grant scans, and prunes the due rows.
SELECT hy_age(clock_timestamp() + interval '1 day');
\c
\set VERBOSITY sqlstate
SET leader_election.history_retention = 3600;
SELECT * FROM hy_grant();
SELECT * FROM hp_rows('hy');

RESET leader_election.history_retention;
DROP FUNCTION hp_cycle(int);
DROP FUNCTION hp_rows(text);
DROP FUNCTION hy_grant();
DROP FUNCTION hy_age(timestamptz);
DROP EXTENSION leader_election;
