-- G5: the fence judges the writer's token, and the row actually stored.
--  * An UPDATE that leaves the token column alone (or assigns it the value
--    it has) keeps the row's token, which may be a newer leader's: it needs
--    the token declared for the transaction (SET LOCAL
--    leader_election.fencing_token, le_fence_check(), or a write of this
--    transaction that carried it), else 22004; a stale declared token gets
--    LE001.  Also MERGE ... WHEN MATCHED THEN UPDATE and INSERT ... ON
--    CONFLICT DO UPDATE.
--  * A BEFORE ROW trigger that fires after the fence (name order) is
--    refused at le_protect() and at every write (09000).
--  * A generated token column is refused at le_protect() and at the write
--    (0A000).
--  * A fenced write, then le_release() in the same transaction: commits.
CREATE EXTENSION leader_election;
\set VERBOSITY sqlstate
\set ON_ERROR_STOP 0

CREATE TABLE jobs (id int PRIMARY KEY, status text, fencing_token bigint NOT NULL);
SELECT le_protect('jobs', 'kept');
SELECT fencing_token AS a FROM le_acquire('kept', 'node-a', '10 minutes') \gset
INSERT INTO jobs VALUES (1, 'new', :a), (2, 'new', :a);

-- In the transaction that wrote the rows with its token, the holder may
-- update them without restamping.
BEGIN;
INSERT INTO jobs VALUES (3, 'new', :a);
UPDATE jobs SET status = 'seen' WHERE id = 3;
COMMIT;

-- node-a's lease ends; node-b takes over and stamps row 1 with its token.
SELECT le_force_release('kept');
SELECT fencing_token AS b FROM le_acquire('kept', 'node-b', '10 minutes') \gset
UPDATE jobs SET status = 'b', fencing_token = :b WHERE id = 1;

-- node-a wakes up and leaves the token column alone: refused (22004).
UPDATE jobs SET status = 'stale-a' WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
UPDATE jobs SET status = 'stale-a', fencing_token = fencing_token WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
MERGE INTO jobs t USING (VALUES (1)) s(id) ON t.id = s.id
  WHEN MATCHED THEN UPDATE SET status = 'stale-a';
\echo :LAST_ERROR_SQLSTATE
-- An upsert fires the fence for its INSERT half first: node-a's token is
-- refused there (LE001), before any conflict.
INSERT INTO jobs VALUES (1, 'x', :a) ON CONFLICT (id) DO UPDATE SET status = 'stale-a';
\echo :LAST_ERROR_SQLSTATE
-- node-a declares its (stale) token: LE001.
BEGIN;
SET LOCAL leader_election.fencing_token = :a;
UPDATE jobs SET status = 'stale-a' WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT le_fence_check('kept', :a);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- A row still carrying node-a's token is stale whatever is declared (LE001).
UPDATE jobs SET status = 'stale-a' WHERE id = 2;
\echo :LAST_ERROR_SQLSTATE
SELECT id, status, fencing_token = :b AS b_token FROM jobs ORDER BY id;

-- node-b, the current holder, declares its token: each form passes.
BEGIN;
SET LOCAL leader_election.fencing_token = :b;
UPDATE jobs SET status = 'b-setting' WHERE id = 1;
COMMIT;
BEGIN;
SELECT le_fence_check('kept', :b);
UPDATE jobs SET status = 'b-check' WHERE id = 1;
MERGE INTO jobs t USING (VALUES (1)) s(id) ON t.id = s.id
  WHEN MATCHED THEN UPDATE SET status = 'b-merge';
INSERT INTO jobs VALUES (1, 'x', :b) ON CONFLICT (id) DO UPDATE SET status = 'b-upsert';
COMMIT;
-- A declared token must agree with the row's (22023).
BEGIN;
SET LOCAL leader_election.fencing_token = :b;
UPDATE jobs SET status = 'b' WHERE id = 3;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- A declaration rolled back to a savepoint is forgotten (22004).
BEGIN;
SAVEPOINT s;
SELECT le_fence_check('kept', :b);
ROLLBACK TO SAVEPOINT s;
UPDATE jobs SET status = 'b-undeclared' WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT id, status, fencing_token = :b AS b_token FROM jobs ORDER BY id;

-- Trigger order: a BEFORE ROW trigger sorting after le_fence.
CREATE FUNCTION stamp() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN NEW.fencing_token := 999; RETURN NEW; END$$;
CREATE TABLE late (id int, fencing_token bigint);
CREATE TRIGGER z_stamp BEFORE INSERT OR UPDATE ON late FOR EACH ROW EXECUTE FUNCTION stamp();
SELECT le_protect('late', 'kept');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER z_stamp ON late;
SELECT le_protect('late', 'kept');
-- Created after le_protect(): every write is refused (09000).
CREATE TRIGGER z_stamp BEFORE INSERT ON late FOR EACH ROW EXECUTE FUNCTION stamp();
INSERT INTO late VALUES (1, :b);
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE late DISABLE TRIGGER z_stamp;
INSERT INTO late VALUES (1, :b);
ALTER TABLE late ENABLE TRIGGER z_stamp;
CREATE TRIGGER y_stamp BEFORE UPDATE ON late FOR EACH ROW EXECUTE FUNCTION stamp();
BEGIN;
SET LOCAL leader_election.fencing_token = :b;
UPDATE late SET id = 2;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- A trigger sorting before the fence is judged with it; AFTER triggers and
-- DELETE-only triggers do not count.
DROP TRIGGER z_stamp ON late;
DROP TRIGGER y_stamp ON late;
CREATE TRIGGER a_stamp BEFORE INSERT ON late FOR EACH ROW EXECUTE FUNCTION stamp();
CREATE TRIGGER z_after AFTER INSERT ON late FOR EACH ROW EXECUTE FUNCTION stamp();
INSERT INTO late VALUES (3, :b);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER a_stamp ON late;
-- Partitions: a late trigger on one partition is refused too.
CREATE TABLE lp (id int, fencing_token bigint) PARTITION BY RANGE (id);
CREATE TABLE lp1 PARTITION OF lp FOR VALUES FROM (0) TO (10);
CREATE TRIGGER z_stamp BEFORE INSERT ON lp1 FOR EACH ROW EXECUTE FUNCTION stamp();
SELECT le_protect('lp', 'kept');
\echo :LAST_ERROR_SQLSTATE

-- Generated token columns: refused at le_protect() (0A000) ...
CREATE TABLE gen (id int, base bigint, fencing_token bigint GENERATED ALWAYS AS (base) STORED);
SELECT le_protect('gen', 'kept');
\echo :LAST_ERROR_SQLSTATE
-- ... and at the write, for a trigger attached by hand.
CREATE TRIGGER le_fence BEFORE INSERT OR UPDATE OR DELETE ON gen
  FOR EACH ROW EXECUTE FUNCTION le_fence('kept', 'fencing_token');
INSERT INTO gen (id, base) VALUES (1, :b);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM gen;

-- Last write, then hand over: a fenced write and le_release() in one
-- transaction commit; a write after the release is refused (LE002).
BEGIN;
INSERT INTO jobs VALUES (10, 'last', :b);
SELECT le_release('kept', 'node-b', :b);
INSERT INTO jobs VALUES (11, 'after', :b);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
INSERT INTO jobs VALUES (10, 'last', :b);
SELECT le_release('kept', 'node-b', :b);
COMMIT;
SELECT id, status FROM jobs WHERE id = 10;
SELECT holder IS NULL AS free FROM le_leases WHERE lease_key = 'kept';
-- A release rolled back to a savepoint does not count: the lease is still
-- held, and the write commits as usual.
SELECT fencing_token AS c FROM le_acquire('kept', 'node-c', '10 minutes') \gset
BEGIN;
INSERT INTO jobs VALUES (12, 'kept', :c);
SAVEPOINT s;
SELECT le_release('kept', 'node-c', :c);
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT holder FROM le_leases WHERE lease_key = 'kept';
-- A lease that had lapsed before the release: the write does not commit (LE002).
BEGIN;
INSERT INTO jobs VALUES (13, 'lapsed', :c);
UPDATE le_lease SET expires_at = clock_timestamp() - interval '1 second' WHERE lease_key = 'kept';
SELECT le_release('kept', 'node-c', :c);
COMMIT;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM jobs WHERE id = 13;
-- le_force_release() is no hand-over: the write does not commit (LE002).
SELECT le_force_release('kept');
SELECT fencing_token AS d FROM le_acquire('kept', 'node-d', '10 minutes') \gset
BEGIN;
INSERT INTO jobs VALUES (14, 'forced', :d);
SELECT le_force_release('kept');
COMMIT;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM jobs WHERE id = 14;
-- The release does not lengthen the lease: a commit after the expiry the
-- lease had when released fails, as it would without the release (LE002).
-- (node-d still holds the lease: the forced release above was rolled back)
BEGIN;
INSERT INTO jobs VALUES (15, 'slow', :d);
UPDATE le_lease SET expires_at = clock_timestamp() + interval '1 second' WHERE lease_key = 'kept';
SELECT le_release('kept', 'node-d', :d);
SELECT pg_sleep(1.5);
COMMIT;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM jobs WHERE id = 15;
DROP TABLE jobs, late, lp, gen;
DROP FUNCTION stamp();
DROP EXTENSION leader_election;
