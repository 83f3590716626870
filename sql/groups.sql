-- G15: partition groups.  le_group_create, le_group_heartbeat,
-- le_group_leave and le_group_assignment with every documented error, the
-- views, the privileges (the group use of le_grant, a role that is not a
-- member of the owner role, another role taking a member id), the lease
-- calls on group rows (le_acquire and le_renew refuse them, le_release,
-- le_set_metadata and le_fence_check work), the reserved key prefix, and an
-- expired membership re-joined with new tokens.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY terse

CREATE ROLE regress_le_gown;
CREATE ROLE regress_le_gmem IN ROLE regress_le_gown;
CREATE ROLE regress_le_gthief IN ROLE regress_le_gown;
CREATE ROLE regress_le_gout;
SELECT count(*) > 0 AS granted
  FROM unnest(ARRAY['regress_le_gown', 'regress_le_gmem', 'regress_le_gthief', 'regress_le_gout']) AS r,
       le_grant(r::regrole, 'group');
SELECT s FROM le_grant('regress_le_gmem', 'group') AS s ORDER BY 1;
SELECT count(*) > 0 AS granted FROM le_grant('regress_le_gmem', 'campaign');

-- Without the grant, nothing but the assignment (readable by everyone).
CREATE ROLE regress_le_gnone;
SET ROLE regress_le_gnone;
SELECT le_group_create('nope', 4);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM le_group_heartbeat('nope', 'm', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_leave('nope', 'm');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM le_group_assignment('nope');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS groups FROM le_groups;
SELECT count(*) AS members FROM le_group_members;
SELECT count(*) AS partitions FROM le_group_partitions;
SELECT * FROM le_group;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- le_group_create: the owner creates, again is idempotent, other settings
-- are refused; bad input.
SET ROLE regress_le_gown;
SELECT le_group_create('orders', 6) AS created;
SELECT le_group_create('orders', 6) AS created_again;
SELECT le_group_create('orders', 6, 1) AS same_default;
SELECT le_group_create('orders', 7);
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_create('orders', 6, 3);
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_create(NULL, 6);
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_create('orders', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_create('', 6);
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_create('a:b', 6);
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_create('a b', 6);
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_create(repeat('g', 64), 6);
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_create(repeat('g', 63), 1) AS longest_name;
SELECT le_group_create('zero', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_create('big', 16385);
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_create('moves', 4, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_create('Big.Group_2-x', 16384, 100) AS largest;
SELECT group_name, partitions, owner_role, max_moves, members, partitions_held
  FROM le_groups ORDER BY 1;
SELECT partition, lease_key, holder, holder_role, fencing_token, expires_at, is_valid
  FROM le_group_partitions WHERE group_name = 'orders' ORDER BY partition;
SELECT count(*) AS rows_of_largest, min(partition), max(partition)
  FROM le_group_partitions WHERE group_name = 'Big.Group_2-x';
RESET ROLE;

-- A key a plain lease took before 1.1 reserved the prefix (made here by
-- hand) makes the group's creation fail; new plain keys of the prefix are
-- refused by le_acquire and le_watch.
INSERT INTO le_lease (lease_key) VALUES ('le:group:clash:1');
SELECT le_group_create('clash', 2);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS clash_groups FROM le_groups WHERE group_name = 'clash';
SELECT acquired FROM le_acquire('le:group:orders:member:x', 'x', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT le_watch('le:group:nothing:0');
\echo :LAST_ERROR_SQLSTATE
-- The plain lease of such a key keeps working.
SELECT acquired FROM le_acquire('le:group:clash:1', 'old', '1 minute');
SELECT le_release('le:group:clash:1', 'old', fencing_token) FROM le_leases WHERE lease_key = 'le:group:clash:1';

-- le_group_heartbeat: the first member gets every partition.
SET ROLE regress_le_gmem;
SELECT partition, lease_key, state, new_period, fencing_token > 0 AS has_token,
       expires_at > clock_timestamp() AS valid
  FROM le_group_heartbeat('orders', 'm1', '1 hour');
-- Every partition expires exactly with the membership.
SELECT count(DISTINCT expires_at) AS expiries
  FROM le_group_heartbeat('orders', 'm1', '1 hour') WHERE state IN ('member', 'owned');
SELECT count(*) FILTER (WHERE new_period) AS new_periods, count(*) AS rows
  FROM le_group_heartbeat('orders', 'm1', '1 hour');
SELECT member_id, member_role, is_valid, partitions_held FROM le_group_members
 WHERE group_name = 'orders';
SELECT partition, holder, holder_role, is_valid FROM le_group_partitions
 WHERE group_name = 'orders' ORDER BY partition;
SELECT partition, holder, target, state FROM le_group_assignment('orders');

-- Errors.
SELECT count(*) FROM le_group_heartbeat('none', 'm1', '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM le_group_heartbeat(NULL, 'm1', '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM le_group_heartbeat('orders', NULL, '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM le_group_heartbeat('orders', 'm1', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM le_group_heartbeat('orders', '', '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM le_group_heartbeat('orders', repeat('m', 121), '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM le_group_heartbeat('orders', 'm1', '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM le_group_heartbeat('orders', 'm1', '100 years');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM le_group_heartbeat('bad name', 'm1', '1 hour');
\echo :LAST_ERROR_SQLSTATE
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) FROM le_group_heartbeat('orders', 'm1', '1 hour');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT le_group_leave('orders', 'm1');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- The longest member id fits.
SELECT count(*) AS rows FROM le_group_heartbeat('orders', repeat('m', 120), '1 hour');
SELECT le_group_leave('orders', repeat('m', 120)) AS left_partitions;

-- A role not in the owner role may not join; its leave gives up nothing
-- (it holds nothing here).
RESET ROLE;
SET ROLE regress_le_gout;
SELECT count(*) FROM le_group_heartbeat('orders', 'm9', '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_leave('orders', 'm9');
-- Anyone reads the assignment.
SELECT count(*) AS partitions FROM le_group_assignment('orders');
RESET ROLE;

-- Another role of the owner role cannot take m1 while its membership is
-- valid (55006), nor release it, nor its partitions.
SET ROLE regress_le_gthief;
SELECT count(*) FROM le_group_heartbeat('orders', 'm1', '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_leave('orders', 'm1');
\echo :LAST_ERROR_SQLSTATE
SELECT le_release(lease_key, holder, fencing_token) AS stolen
  FROM le_group_partitions WHERE group_name = 'orders' AND partition = 0;
SELECT member_id, member_role, is_valid, partitions_held FROM le_group_members
 WHERE group_name = 'orders';
RESET ROLE;

-- The lease calls on group rows: le_acquire and le_renew refuse them
-- (55000), for the holder too.
SET ROLE regress_le_gmem;
SELECT fencing_token AS p0 FROM le_group_partitions
 WHERE group_name = 'orders' AND partition = 0 \gset
SELECT acquired FROM le_acquire('le:group:orders:0', 'm1', '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT acquired FROM le_acquire('le:group:orders:member:m1', 'm1', '1 hour', wait => '1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT le_renew('le:group:orders:0', 'm1', :p0, '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT le_renew('le:group:orders:3', 'nobody', 1, '1 hour');
\echo :LAST_ERROR_SQLSTATE
-- le_fence_check and le_set_metadata work with the partition's token.
SELECT le_fence_check('le:group:orders:0', :p0);
SELECT le_set_metadata('le:group:orders:0', 'm1', :p0, '{"worker": 1}');
SELECT metadata FROM le_leases WHERE lease_key = 'le:group:orders:0';
-- The holder releases a partition; the next heartbeat claims it again,
-- with a new, higher token; the others keep theirs.
SELECT le_release('le:group:orders:0', 'm1', :p0) AS released;
SELECT le_fence_check('le:group:orders:0', :p0);
\echo :LAST_ERROR_SQLSTATE
SELECT partition, state, new_period, CASE WHEN partition = 0 THEN fencing_token > :p0 END AS higher
  FROM le_group_heartbeat('orders', 'm1', '1 hour') WHERE partition IS NOT NULL AND partition < 2;
RESET ROLE;

-- A second member: m1 is asked to give up one partition (max_moves 1 for
-- 6 partitions), m2 waits for it; after the release m2 claims it.
SET ROLE regress_le_gthief;
SELECT partition, state, new_period FROM le_group_heartbeat('orders', 'm2', '1 hour');
RESET ROLE;
SET ROLE regress_le_gmem;
SELECT partition, state FROM le_group_heartbeat('orders', 'm1', '1 hour') WHERE state <> 'owned';
SELECT partition, holder, target, state FROM le_group_assignment('orders');
SELECT le_release(lease_key, 'm1', fencing_token) AS released
  FROM le_group_heartbeat('orders', 'm1', '1 hour') WHERE state = 'revoke';
SELECT partition, holder, target, state FROM le_group_assignment('orders') WHERE state <> 'owned';
RESET ROLE;
SET ROLE regress_le_gthief;
SELECT partition, state, new_period FROM le_group_heartbeat('orders', 'm2', '1 hour');
RESET ROLE;
SELECT group_name, members, partitions_held FROM le_groups WHERE group_name = 'orders';
SELECT member_id, member_role, is_valid, partitions_held FROM le_group_members
 WHERE group_name = 'orders' ORDER BY 1;

-- le_group_leave releases the caller's partitions and membership; its
-- partitions go to the member left.
SET ROLE regress_le_gthief;
SELECT le_group_leave('orders', 'm2') AS released;
SELECT le_group_leave('orders', 'm2') AS released_again;
SELECT count(*) FILTER (WHERE target = 'm1') AS to_m1, count(*) FILTER (WHERE state = 'free') AS free
  FROM le_group_assignment('orders');
SELECT member_id FROM le_group_members WHERE group_name = 'orders' ORDER BY 1;
RESET ROLE;
SET ROLE regress_le_gmem;
SELECT count(*) FILTER (WHERE new_period) AS claimed
  FROM le_group_heartbeat('orders', 'm1', '1 hour') WHERE state = 'owned';
SELECT le_group_leave('orders', 'm1') AS released;
SELECT count(*) FILTER (WHERE state = 'unassigned') AS unassigned FROM le_group_assignment('orders');
SELECT count(*) AS members FROM le_group_members WHERE group_name = 'orders';
SELECT count(*) FROM le_group_leave('none', 'm1');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- An expired membership is joined again with a new token; its partitions,
-- expired with it, are claimed again with new tokens.
SET ROLE regress_le_gown;
SELECT le_group_create('short', 3);
RESET ROLE;
SET ROLE regress_le_gmem;
SELECT max(fencing_token) AS short_t1
  FROM le_group_heartbeat('short', 'm1', '50 milliseconds') \gset
SELECT pg_sleep(0.1);
SELECT is_valid FROM le_group_members WHERE group_name = 'short';
SELECT count(*) FILTER (WHERE state = 'unassigned') AS unassigned FROM le_group_assignment('short');
SELECT partition, state, new_period, fencing_token > :short_t1 AS higher
  FROM le_group_heartbeat('short', 'm1', '1 hour');
-- Now another role may take the lapsed member id m1 of group short?  Not
-- while it is valid again.
RESET ROLE;
SET ROLE regress_le_gthief;
SELECT count(*) FROM le_group_heartbeat('short', 'm1', '1 hour');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE regress_le_gmem;
SELECT le_group_leave('short', 'm1') AS released;
RESET ROLE;
-- ... and once it was left, it may.
SET ROLE regress_le_gthief;
SELECT state, new_period FROM le_group_heartbeat('short', 'm1', '1 hour') WHERE state = 'member';
SELECT member_role FROM le_group_members WHERE group_name = 'short';
SELECT le_group_leave('short', 'm1') AS released;
RESET ROLE;

-- A membership key a plain lease took before 1.1 (made here by hand).
INSERT INTO le_lease (lease_key) VALUES ('le:group:short:member:old');
SET ROLE regress_le_gmem;
SELECT count(*) FROM le_group_heartbeat('short', 'old', '1 hour');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- The history records every partition's periods like any lease's.
SELECT count(*) > 0 AS recorded, count(DISTINCT holder_role) AS roles
  FROM le_lease_history WHERE lease_key LIKE 'le:group:orders:%';

SELECT count(*) > 0 AS revoked FROM le_revoke('regress_le_gmem', 'campaign');
SELECT le_revoke(r::regrole, 'group') IS NOT NULL AS revoked
  FROM unnest(ARRAY['regress_le_gown', 'regress_le_gmem', 'regress_le_gthief', 'regress_le_gout']) AS r
 GROUP BY 1;
DROP ROLE regress_le_gmem, regress_le_gthief, regress_le_gout, regress_le_gnone, regress_le_gown;
