-- G5, G6, the fence per partition of a group: every wrong way to attach
-- it (le_protect(..., group_name, partition_column), or the trigger by
-- hand) gets a clear error with its SQLSTATE and attaches nothing.
CREATE EXTENSION leader_election;
\set VERBOSITY terse
\set ON_ERROR_STOP 0

CREATE TABLE orders (id bigserial, shard integer, note text, fencing_token bigint,
                     shard_text text, shard_num numeric, tok_int integer,
                     shard_gen integer GENERATED ALWAYS AS (id % 4) STORED);

-- Either a lease key, or a group and a partition column (22023).
SELECT le_protect('orders', 'k', group_name => 'orders', partition_column => 'shard');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('orders', group_name => 'orders');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('orders', partition_column => 'shard');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('orders', 'k', partition_column => 'shard');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('orders');
\echo :LAST_ERROR_SQLSTATE
-- 'advance' fences tokens issued elsewhere, never a group's (22023).
SELECT le_protect('orders', group_name => 'orders', partition_column => 'shard', mode => 'advance');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('orders', group_name => 'orders', partition_column => 'shard', mode => 'lenient');
\echo :LAST_ERROR_SQLSTATE
-- Group names as le_group_create takes them (22023).
SELECT le_protect('orders', group_name => 'no spaces', partition_column => 'shard');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('orders', group_name => '', partition_column => 'shard');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('orders', group_name => repeat('g', 64), partition_column => 'shard');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('orders', group_name => 'a:b', partition_column => 'shard');
\echo :LAST_ERROR_SQLSTATE
-- The partition column: missing (42703), not an integer type (42804),
-- generated (0A000: computed after the BEFORE triggers), the token column
-- itself (22023).  The token column keeps its rules (bigint only).
SELECT le_protect('orders', group_name => 'orders', partition_column => 'no_such_column');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('orders', group_name => 'orders', partition_column => 'shard_text');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('orders', group_name => 'orders', partition_column => 'shard_num');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('orders', group_name => 'orders', partition_column => 'shard_gen');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('orders', group_name => 'orders', partition_column => 'fencing_token');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('orders', token_column => 'tok_int', group_name => 'orders', partition_column => 'shard');
\echo :LAST_ERROR_SQLSTATE
-- A group that does not exist (42704).
SELECT le_protect('orders', group_name => 'no_such_group', partition_column => 'shard');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS triggers_after_errors FROM pg_trigger WHERE tgrelid = 'orders'::regclass;

-- The trigger attached by hand gets the same checks at the first write.
CREATE TRIGGER le_fence BEFORE INSERT OR UPDATE OR DELETE ON orders FOR EACH ROW
    EXECUTE FUNCTION le_fence('no_such_group', 'fencing_token', 'lease', 'shard');
CREATE TRIGGER le_fence_truncate BEFORE TRUNCATE ON orders FOR EACH STATEMENT
    EXECUTE FUNCTION le_fence('no_such_group', 'fencing_token', 'lease', 'shard');
INSERT INTO orders (shard, fencing_token) VALUES (0, 1);
\echo :LAST_ERROR_SQLSTATE
-- TRUNCATE is refused whatever the token: none covers every partition.
BEGIN;
SET LOCAL leader_election.fencing_token = 1;
TRUNCATE orders;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
DROP TRIGGER le_fence ON orders;
DROP TRIGGER le_fence_truncate ON orders;
CREATE TRIGGER fm BEFORE INSERT ON orders FOR EACH ROW
    EXECUTE FUNCTION le_fence('orders', 'fencing_token', 'loose', 'shard');
INSERT INTO orders (shard, fencing_token) VALUES (0, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fm ON orders;
CREATE TRIGGER fg BEFORE INSERT ON orders FOR EACH ROW
    EXECUTE FUNCTION le_fence('bad name', 'fencing_token', 'lease', 'shard');
INSERT INTO orders (shard, fencing_token) VALUES (0, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fg ON orders;
CREATE TRIGGER fc BEFORE INSERT ON orders FOR EACH ROW
    EXECUTE FUNCTION le_fence('orders', 'fencing_token', 'strict', 'shard_text');
INSERT INTO orders (shard, fencing_token) VALUES (0, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fc ON orders;
CREATE TRIGGER fx BEFORE INSERT ON orders FOR EACH ROW
    EXECUTE FUNCTION le_fence('orders', 'fencing_token', 'strict', 'no_such_column');
INSERT INTO orders (shard, fencing_token) VALUES (0, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fx ON orders;
SELECT count(*) AS rows_written FROM orders;

-- The lease key form of 1.1's signature works as 1.0's, by position and
-- by name.
SELECT acquired FROM le_acquire('plain', 'a', '1 minute');
SELECT fencing_token AS tok FROM le_leases WHERE lease_key = 'plain' \gset
SELECT le_protect('orders', 'plain');
INSERT INTO orders (shard, fencing_token) VALUES (NULL, :tok);
SELECT le_protect('orders', lease_key => 'plain', mode => 'strict');
INSERT INTO orders (shard, fencing_token) VALUES (NULL, :tok);
SELECT tgname, pg_get_triggerdef(oid) LIKE '%le_fence(''plain'', ''fencing_token'', ''strict'')' AS strict_fence
  FROM pg_trigger WHERE tgrelid = 'orders'::regclass ORDER BY 1;
SELECT count(*) AS rows_written FROM orders;
SELECT le_unprotect('orders');

DROP TABLE orders;
DROP EXTENSION leader_election;
