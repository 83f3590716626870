-- G5 per partition: one table holds the rows of every partition of a group
-- (le_protect(t, group_name => g, partition_column => c)), and each write is
-- judged by the lease of the row's partition, le:group:<g>:<value>: a token
-- of another partition is stale (LE001), a NULL partition is 22004, one out
-- of range 22003 (judged against le_group as it is at the statement), an UPDATE
-- that moves a row to another partition 0A000, TRUNCATE 0A000; a DELETE's
-- token is checked against the old row's partition; strict mode judges the
-- role of the row's partition's holder.  The race at COMMIT is
-- test/specs/fence_partition_takeover.spec.
CREATE EXTENSION leader_election;
\set VERBOSITY terse
\set ON_ERROR_STOP 0

CREATE ROLE regress_le_gowner;
CREATE ROLE regress_le_ga IN ROLE regress_le_gowner;
CREATE ROLE regress_le_gb IN ROLE regress_le_gowner;
SELECT count(*) > 0 AS granted FROM le_grant('regress_le_gowner', 'group');
SET ROLE regress_le_gowner;
SELECT le_group_create('orders', 4);
RESET ROLE;
CREATE TABLE orders (id serial PRIMARY KEY, shard integer, note text, fencing_token bigint);
GRANT ALL ON orders, orders_id_seq TO PUBLIC;
SELECT le_protect('orders', group_name => 'orders', partition_column => 'shard');

-- Before any member, no partition has a token yet (LE001: never issued).
INSERT INTO orders (shard, note, fencing_token) VALUES (0, 'early', 1);
\echo :LAST_ERROR_SQLSTATE

-- Member A (role regress_le_ga) joins alone and owns the four partitions.
SET ROLE regress_le_ga;
SELECT max(fencing_token) FILTER (WHERE partition = 0) AS a0,
       max(fencing_token) FILTER (WHERE partition = 1) AS a1,
       max(fencing_token) FILTER (WHERE partition = 2) AS a2,
       max(fencing_token) FILTER (WHERE partition = 3) AS a3
  FROM le_group_heartbeat('orders', 'A', '1 hour') WHERE state = 'owned' \gset
SELECT partition, holder, holder_role FROM le_group_partitions WHERE group_name = 'orders' ORDER BY 1;

-- Rows of every partition in one statement, each with its partition's token.
INSERT INTO orders (shard, note, fencing_token)
VALUES (0, 'a0', :a0), (1, 'a1', :a1), (2, 'a2', :a2), (3, 'a3', :a3);
-- Tokens are unique across keys: partition 3's token is not partition 2's.
INSERT INTO orders (shard, note, fencing_token) VALUES (2, 'wrong', :a3);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO orders (shard, note, fencing_token) VALUES (3, 'wrong', :a2);
\echo :LAST_ERROR_SQLSTATE
-- NULL (22004), out of range (22003); a bad row fails the whole statement.
INSERT INTO orders (shard, note, fencing_token) VALUES (NULL, 'null', :a0);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO orders (shard, note, fencing_token) VALUES (4, 'beyond', :a3);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO orders (shard, note, fencing_token) VALUES (-1, 'below', :a0);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO orders (shard, note, fencing_token) VALUES (0, 'ok', :a0), (1, 'bad', :a0);
\echo :LAST_ERROR_SQLSTATE
SELECT shard, note FROM orders ORDER BY id;

-- UPDATE: a row stays in its partition (0A000), whatever the token.
UPDATE orders SET shard = 1, fencing_token = :a1 WHERE note = 'a0';
\echo :LAST_ERROR_SQLSTATE
UPDATE orders SET shard = 2 WHERE note = 'a1';
\echo :LAST_ERROR_SQLSTATE
-- ... restamped with another partition's token, LE001.
UPDATE orders SET note = 'a1 restamped', fencing_token = :a2 WHERE note = 'a1';
\echo :LAST_ERROR_SQLSTATE
-- ... keeping the row's token, it needs the token declared for the
-- partition's lease (22004 without), by le_fence_check or the setting.
UPDATE orders SET note = 'a1 kept' WHERE note = 'a1';
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT le_fence_check('le:group:orders:1', :a1);
UPDATE orders SET note = 'a1 kept' WHERE note = 'a1';
COMMIT;
BEGIN;
SELECT set_config('leader_election.fencing_token', :'a2', true) IS NOT NULL AS token_set;
UPDATE orders SET note = 'a2 kept' WHERE note = 'a2';
-- the setting is partition 2's: a row of partition 3 is refused
UPDATE orders SET note = 'a3 kept' WHERE note = 'a3';
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT shard, note FROM orders ORDER BY id;

-- DELETE: the setting's token, checked against the old row's partition.
DELETE FROM orders WHERE shard = 1;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT set_config('leader_election.fencing_token', :'a0', true) IS NOT NULL AS token_set;
-- rows of partitions 0 and 2: refused at partition 2's row, nothing deleted
DELETE FROM orders WHERE shard IN (0, 2);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SELECT set_config('leader_election.fencing_token', :'a1', true) IS NOT NULL AS token_set;
DELETE FROM orders WHERE shard = 1;
COMMIT;
-- TRUNCATE: refused whatever the token (0A000).
BEGIN;
SELECT set_config('leader_election.fencing_token', :'a0', true) IS NOT NULL AS token_set;
TRUNCATE orders;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT shard, note FROM orders ORDER BY id;

-- Member B (role regress_le_gb) joins: partition 2 is revoked from A,
-- pending for B; A hands it over (le_release) and B's next heartbeat takes
-- it with a new token.
SET ROLE regress_le_gb;
SELECT partition, state FROM le_group_heartbeat('orders', 'B', '1 hour')
 WHERE partition IS NOT NULL ORDER BY 1;
SET ROLE regress_le_ga;
SELECT partition, state FROM le_group_heartbeat('orders', 'A', '1 hour')
 WHERE partition IS NOT NULL ORDER BY 1;
SELECT le_release('le:group:orders:2', 'A', :a2);
SET ROLE regress_le_gb;
SELECT max(fencing_token) FILTER (WHERE partition = 2) AS b2
  FROM le_group_heartbeat('orders', 'B', '1 hour') WHERE state = 'owned' \gset
SELECT partition, holder, holder_role FROM le_group_partitions WHERE group_name = 'orders' ORDER BY 1;
-- A's token of partition 2 is stale now; B's passes; A's other partitions
-- are A's still.
SET ROLE regress_le_ga;
INSERT INTO orders (shard, note, fencing_token) VALUES (2, 'a2 late', :a2);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO orders (shard, note, fencing_token) VALUES (0, 'a0 again', :a0);
-- A's UPDATE of its old row of partition 2, even with its token declared
-- (the row keeps it), is stale; B restamps the row with its token.
BEGIN;
SELECT set_config('leader_election.fencing_token', :'a2', true) IS NOT NULL AS token_set;
UPDATE orders SET note = 'a2 late' WHERE note = 'a2';
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SET ROLE regress_le_gb;
INSERT INTO orders (shard, note, fencing_token) VALUES (2, 'b2', :b2);
UPDATE orders SET note = 'a2 restamped by B', fencing_token = :b2 WHERE note = 'a2';

-- Strict mode, per partition: the writer's role must be the role that holds
-- the row's partition; A's role cannot use B's token (42501), nor B's role
-- A's.
RESET ROLE;
SELECT le_protect('orders', group_name => 'orders', partition_column => 'shard', mode => 'strict');
SET ROLE regress_le_ga;
INSERT INTO orders (shard, note, fencing_token) VALUES (2, 'copied', :b2);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO orders (shard, note, fencing_token) VALUES (0, 'a0 strict', :a0);
SET ROLE regress_le_gb;
INSERT INTO orders (shard, note, fencing_token) VALUES (0, 'copied', :a0);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO orders (shard, note, fencing_token) VALUES (2, 'b2 strict', :b2);
RESET ROLE;
SELECT shard, note FROM orders ORDER BY id;

-- The number of partitions is read from le_group at each statement, never
-- trusted from an earlier one: changed under the fence (a superuser
-- writing the extension's table, for the test), it applies at once.
UPDATE le_group SET partitions = 3 WHERE group_name = 'orders';
SET ROLE regress_le_ga;
INSERT INTO orders (shard, note, fencing_token) VALUES (3, 'a3 cut', :a3);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
UPDATE le_group SET partitions = 4 WHERE group_name = 'orders';
SET ROLE regress_le_ga;
INSERT INTO orders (shard, note, fencing_token) VALUES (3, 'a3 back', :a3);

-- A leaves: its partitions are released, its writes fail (LE002).
SELECT le_group_leave('orders', 'A');
INSERT INTO orders (shard, note, fencing_token) VALUES (0, 'a0 gone', :a0);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- The rows of one statement that go round several partitions are each
-- judged by their own partition's lease, also partitions 1 and 9 and 17,
-- whose rows the fence's per-statement shortcut keeps in the same place.
SET ROLE regress_le_gowner;
SELECT le_group_create('wide', 24);
SET ROLE regress_le_ga;
SELECT max(fencing_token) FILTER (WHERE partition = 1) AS w1,
       max(fencing_token) FILTER (WHERE partition = 9) AS w9,
       max(fencing_token) FILTER (WHERE partition = 17) AS w17
  FROM le_group_heartbeat('wide', 'A', '1 hour') WHERE state = 'owned' \gset
RESET ROLE;
CREATE TABLE wide (shard integer, fencing_token bigint);
SELECT le_protect('wide', group_name => 'wide', partition_column => 'shard');
INSERT INTO wide SELECT p, CASE p WHEN 1 THEN :w1 WHEN 9 THEN :w9 ELSE :w17 END
  FROM generate_series(1, 40), unnest(ARRAY[1, 9, 17]) AS p;
INSERT INTO wide VALUES (1, :w1), (9, :w9), (17, :w17), (1, :w1), (9, :w1);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO wide VALUES (17, :w17), (9, :w9), (17, :w9);
\echo :LAST_ERROR_SQLSTATE
SELECT shard, count(*) FROM wide GROUP BY 1 ORDER BY 1;

-- smallint and bigint partition columns, and a partitioned table (the row
-- trigger is cloned to its partitions): the same rules.
CREATE TABLE small_orders (shard smallint, fencing_token bigint);
CREATE TABLE big_orders (shard bigint, fencing_token bigint);
CREATE TABLE part_orders (shard integer, region text, fencing_token bigint) PARTITION BY LIST (region);
CREATE TABLE part_orders_eu PARTITION OF part_orders FOR VALUES IN ('eu');
CREATE TABLE part_orders_us PARTITION OF part_orders FOR VALUES IN ('us');
SELECT le_protect('small_orders', group_name => 'orders', partition_column => 'shard');
SELECT le_protect('big_orders', group_name => 'orders', partition_column => 'shard');
SELECT le_protect('part_orders', group_name => 'orders', partition_column => 'shard');
INSERT INTO small_orders VALUES (2, :b2);
INSERT INTO small_orders VALUES (1, :b2);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO big_orders VALUES (2, :b2);
INSERT INTO big_orders VALUES (4294967298, :b2);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO part_orders VALUES (2, 'eu', :b2), (2, 'us', :b2);
INSERT INTO part_orders VALUES (1, 'us', :b2);
\echo :LAST_ERROR_SQLSTATE
-- a row moving between the table's partitions keeps its group partition
BEGIN;
SELECT set_config('leader_election.fencing_token', :'b2', true) IS NOT NULL AS token_set;
UPDATE part_orders SET region = 'us' WHERE region = 'eu';
COMMIT;
UPDATE part_orders SET shard = 3, fencing_token = :b2 WHERE region = 'us';
\echo :LAST_ERROR_SQLSTATE
SELECT tableoid::regclass, shard FROM part_orders ORDER BY 1, 2;
SELECT (SELECT count(*) FROM small_orders) AS small, (SELECT count(*) FROM big_orders) AS big;

DROP TABLE orders, small_orders, big_orders, part_orders, wide;
DROP EXTENSION leader_election;
DROP ROLE regress_le_ga, regress_le_gb, regress_le_gowner;
