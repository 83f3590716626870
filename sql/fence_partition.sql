-- G5: an UPDATE that moves a row of a fenced partitioned table
-- to another partition deletes it from the old partition, which fires the
-- fence's DELETE trigger there.  Before the fix that DELETE needed
-- leader_election.fencing_token and the UPDATE failed with 22004; now the
-- deletion half of a row move is judged by the token of the new row, which
-- the fence checks on the UPDATE and again on the INSERT into the new
-- partition.  A plain DELETE still needs the setting.
CREATE EXTENSION leader_election;
\set VERBOSITY sqlstate
\set ON_ERROR_STOP 0

CREATE TABLE moved (k int, note text, fencing_token bigint NOT NULL) PARTITION BY RANGE (k);
CREATE TABLE moved_low PARTITION OF moved FOR VALUES FROM (0) TO (10);
CREATE TABLE moved_high PARTITION OF moved FOR VALUES FROM (10) TO (20);
SELECT le_protect('moved', 'mover');
SELECT acquired FROM le_acquire('mover', 'a', '10 minutes');
SELECT fencing_token AS tok FROM le_leases WHERE lease_key = 'mover' \gset
INSERT INTO moved VALUES (1, 'one', :tok), (2, 'two', :tok);

-- The row moves with the current token, declared for the transaction by
-- le_fence_check() (the row keeps its token), without the setting.
BEGIN;
SELECT le_fence_check('mover', :tok);
UPDATE moved SET k = 11, note = 'moved' WHERE k = 1;
COMMIT;
SELECT tableoid::regclass AS part, k, note FROM moved ORDER BY k;

-- A move with a token never issued is refused, and nothing moves (LE001).
UPDATE moved SET k = 12, fencing_token = :tok + 1 WHERE k = 2;
\echo :LAST_ERROR_SQLSTATE
-- A move that keeps the row's token while the lease has a new one (LE001).
SELECT le_force_release('mover');
SELECT acquired FROM le_acquire('mover', 'b', '10 minutes');
UPDATE moved SET k = 12 WHERE k = 2;
\echo :LAST_ERROR_SQLSTATE
SELECT tableoid::regclass AS part, k, note FROM moved ORDER BY k;

-- The new holder moves the row back with its token.
SELECT fencing_token AS tok FROM le_leases WHERE lease_key = 'mover' \gset
UPDATE moved SET k = 3, fencing_token = :tok WHERE k = 11;
SELECT tableoid::regclass AS part, k, note, fencing_token = :tok AS current_token FROM moved ORDER BY k;

-- A plain DELETE still needs the setting (22004), and passes with it.
DELETE FROM moved WHERE k = 2;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT set_config('leader_election.fencing_token', :'tok', true) IS NOT NULL AS token_set;
DELETE FROM moved WHERE k = 2;
COMMIT;
SELECT tableoid::regclass AS part, k, note FROM moved ORDER BY k;

DROP TABLE moved;
DROP EXTENSION leader_election;
