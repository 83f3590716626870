-- G5, G12: the fence's per-backend shortcuts must never judge a row by
-- another trigger's arguments, another lease or a column read from the
-- wrong place.  The trigger remembers the last trigger's
-- parsed arguments and the last lease's entry (instead of looking them up
-- for every statement), reads the token from the executor's slot, and
-- skips later rows of a command on the first row's check.
CREATE EXTENSION leader_election;
\set VERBOSITY sqlstate
\set ON_ERROR_STOP 0

-- Two leases with different current tokens, :a for 'memo-a', :b (higher)
-- for 'memo-b'.
SELECT acquired FROM le_acquire('memo-a', 'a', '10 minutes');
SELECT acquired FROM le_acquire('memo-b', 'b', '10 minutes');
SELECT le_force_release('memo-b');
SELECT acquired FROM le_acquire('memo-b', 'b', '10 minutes');
SELECT fencing_token AS a FROM le_leases WHERE lease_key = 'memo-a' \gset
SELECT fencing_token AS b FROM le_leases WHERE lease_key = 'memo-b' \gset
SELECT :b > :a AS b_is_higher;

-- Two tables, fenced by different leases, token columns at different
-- positions and with different names.
CREATE TABLE ta (id serial PRIMARY KEY, fencing_token bigint NOT NULL);
CREATE TABLE tb (note text, filler int, tok bigint NOT NULL);
SELECT le_protect('ta', 'memo-a');
SELECT le_protect('tb', 'memo-b', 'tok');

-- Alternating one-row statements: each judged by its own trigger's lease.
INSERT INTO ta (fencing_token) VALUES (:a);
INSERT INTO tb VALUES ('b ok', 7, :b);
INSERT INTO ta (fencing_token) VALUES (:a);
-- memo-a's token on tb: stale for memo-b (LE001).
INSERT INTO tb VALUES ('b stale', 7, :a);
\echo :LAST_ERROR_SQLSTATE
-- memo-b's token on ta: never issued for memo-a (LE001).
INSERT INTO ta (fencing_token) VALUES (:b);
\echo :LAST_ERROR_SQLSTATE
-- The filler column of tb holds a valid-looking token; the fence reads tok.
INSERT INTO tb VALUES ('b filler', :b, :a);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS ta_rows FROM ta;
SELECT note, tok FROM tb ORDER BY note;

-- Both tables in one command (a data-modifying CTE read by the outer
-- INSERT, so that rows alternate: ta, tb, ta, tb ...): two triggers, two
-- leases, rows judged each by its own, although the same token just passed
-- ta's check in the same command.
WITH w AS (INSERT INTO ta (fencing_token) SELECT :a FROM generate_series(1, 3) RETURNING id)
INSERT INTO tb SELECT 'cte', w.id, :b FROM w;
WITH w AS (INSERT INTO ta (fencing_token) SELECT :a FROM generate_series(1, 3) RETURNING id)
INSERT INTO tb SELECT 'cte stale', w.id, :a FROM w;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS ta_rows FROM ta;
SELECT note, count(*) FROM tb GROUP BY note ORDER BY note;

-- A partitioned table whose second partition was created on its own with
-- another column order and then attached: each partition has its own
-- clone of the trigger, and the token sits at another position in each.
-- One INSERT whose rows alternate between the partitions.
CREATE TABLE tp (k int NOT NULL, note text, fencing_token bigint NOT NULL) PARTITION BY LIST ((k % 2));
CREATE TABLE tp_even PARTITION OF tp FOR VALUES IN (0);
CREATE TABLE tp_odd (fencing_token bigint NOT NULL, note text, k int NOT NULL);
ALTER TABLE tp ATTACH PARTITION tp_odd FOR VALUES IN (1);
SELECT le_protect('tp', 'memo-b');
INSERT INTO tp SELECT k, 'p' || k, :b FROM generate_series(1, 6) AS k;
SELECT tableoid::regclass AS part, k, fencing_token FROM tp ORDER BY k;
-- The same with a stale token on every row: nothing is written (LE001).
INSERT INTO tp SELECT k, 'q' || k, :a FROM generate_series(7, 12) AS k;
\echo :LAST_ERROR_SQLSTATE
-- Only the last row stale: the first row's check does not let it through.
INSERT INTO tp SELECT k, 'r' || k, CASE WHEN k < 18 THEN :b ELSE :a END FROM generate_series(13, 18) AS k;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS tp_rows FROM tp;

-- An earlier BEFORE trigger changes the token: the fence judges the row
-- that will be written (triggers fire in name order: "a_..." before
-- "le_fence").
CREATE FUNCTION set_token() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.fencing_token := NEW.fencing_token - 100;
    RETURN NEW;
END $$;
CREATE TRIGGER a_set_token BEFORE INSERT OR UPDATE ON ta FOR EACH ROW EXECUTE FUNCTION set_token();
INSERT INTO ta (fencing_token) VALUES (:a + 100);
INSERT INTO ta (fencing_token) VALUES (:b + 100);
\echo :LAST_ERROR_SQLSTATE
-- UPDATE: the new row's token, after the earlier trigger (the row's own
-- token kept: declared for the transaction).
BEGIN;
SET LOCAL leader_election.fencing_token = :a;
UPDATE ta SET fencing_token = :a + 100 WHERE id = 1;
COMMIT;
UPDATE ta SET fencing_token = :b + 100 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER a_set_token ON ta;
SELECT count(*) AS ta_rows, count(*) FILTER (WHERE fencing_token = :a) AS with_token_a FROM ta;

-- A prepared statement executed again after its table's fence moved to
-- another lease: judged by the new lease.
PREPARE ins (bigint) AS INSERT INTO ta (fencing_token) VALUES ($1);
EXECUTE ins(:a);
SELECT le_protect('ta', 'memo-b');
EXECUTE ins(:a);
\echo :LAST_ERROR_SQLSTATE
EXECUTE ins(:b);
SELECT count(*) AS ta_rows FROM ta;

-- A command that outlives its lease is refused before it ends, by the
-- early check ("is not held"), not only at COMMIT ("ended before this
-- transaction committed"), although the rows after the first compare the
-- clock with the expiry only every 32 rows.  Row 10 waits past the expiry.
SELECT acquired FROM le_acquire('memo-short', 'c', '1 second');
SELECT fencing_token AS c FROM le_leases WHERE lease_key = 'memo-short' \gset
CREATE TABLE tc (k int, fencing_token bigint NOT NULL);
SELECT le_protect('tc', 'memo-short');
\set VERBOSITY terse
INSERT INTO tc SELECT g, :c FROM generate_series(1, 200) AS g WHERE g <> 10 OR pg_sleep(1.2) IS NOT NULL;
\set VERBOSITY sqlstate
SELECT count(*) AS tc_rows FROM tc;

-- The commit-time check takes the fence lock, then skips reading the row
-- again when the page it was read from has the same LSN as at the write
-- (nothing on it changed since).  That must never let the commit judge by
-- a version that is not final: here the last write read this transaction's
-- own renewal, whose savepoint then rolled back (no page change since); the
-- row written before the savepoint stays, the lease's real expiry passes
-- before COMMIT, which must fail (LE002).
SELECT acquired FROM le_acquire('memo-s', 's', '1 second');
SELECT fencing_token AS s FROM le_leases WHERE lease_key = 'memo-s' \gset
CREATE TABLE ts (fencing_token bigint NOT NULL);
SELECT le_protect('ts', 'memo-s');
BEGIN;
INSERT INTO ts VALUES (:s);
SAVEPOINT renewed;
SELECT le_renew('memo-s', 's', :s, '1 hour') > now() + interval '50 minutes' AS renewed;
INSERT INTO ts VALUES (:s);
ROLLBACK TO SAVEPOINT renewed;
SELECT pg_sleep(1.2);
COMMIT;
-- The same without the savepoint: the page did not change, the expiry
-- recorded at the write passes before COMMIT, which fails.
SELECT acquired FROM le_acquire('memo-s', 's', '1 second');
SELECT fencing_token AS s FROM le_leases WHERE lease_key = 'memo-s' \gset
BEGIN;
INSERT INTO ts VALUES (:s);
SELECT pg_sleep(1.2);
COMMIT;
SELECT count(*) AS ts_rows FROM ts;

DROP TABLE ta, tb, tp, tc, ts;
DROP FUNCTION set_token();
DROP EXTENSION leader_election;
