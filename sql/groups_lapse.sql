-- G15 when the membership a heartbeat renews lapses before the heartbeat
-- has worked on the member's partitions (a ttl shorter than the heartbeat
-- takes): the member still loses its partitions with its membership, so
-- none stays validly held by a member that is not live, and joining again
-- gives them with new tokens; so does a membership that was force
-- released while its partitions were held.  Leaving needs no membership
-- of the owner role.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY terse

CREATE ROLE regress_le_pown;
CREATE ROLE regress_le_pmem IN ROLE regress_le_pown;
SELECT count(*) > 0 AS granted
  FROM unnest(ARRAY['regress_le_pown', 'regress_le_pmem']) AS r, le_grant(r::regrole, 'group');

SET ROLE regress_le_pown;
SELECT le_group_create('lapse', 4);
RESET ROLE;
SET ROLE regress_le_pmem;
CREATE TEMP TABLE first AS SELECT * FROM le_group_heartbeat('lapse', 'a', '1 hour');
SELECT count(*) AS owned FROM first WHERE state = 'owned';
-- A ttl of one microsecond: the membership has lapsed when the
-- heartbeat reads the group.
SELECT count(*) FILTER (WHERE state = 'member') AS member_rows
  FROM le_group_heartbeat('lapse', 'a', '1 microsecond');
SELECT pg_sleep(0.01);
SELECT is_valid, count(*) FROM le_group_members WHERE group_name = 'lapse' GROUP BY 1;
-- Nothing is validly held once the membership lapsed.
SELECT count(*) FILTER (WHERE is_valid) AS partitions_held_validly
  FROM le_group_partitions WHERE group_name = 'lapse';
-- Joining again: every partition in a new period.
SELECT h.state, h.new_period, count(*) AS n,
       bool_or(h.fencing_token = f.fencing_token) AS old_token_reused
  FROM le_group_heartbeat('lapse', 'a', '1 hour') AS h
  LEFT JOIN first AS f ON f.partition = h.partition
 WHERE h.state = 'owned'
 GROUP BY 1, 2;
SELECT le_group_leave('lapse', 'a') AS released;
DROP TABLE first;
RESET ROLE;

-- A membership force released by an administrator leaves its partitions
-- held, to their expiry: the member's next heartbeat joins anew and gives
-- them up (revoke, cut to the new membership), and once it released them
-- it gets them back in new periods.
SET ROLE regress_le_pmem;
CREATE TEMP TABLE before AS SELECT * FROM le_group_heartbeat('lapse', 'a', '1 hour');
RESET ROLE;
SELECT le_force_release('le:group:lapse:member:a') AS forced;
SET ROLE regress_le_pmem;
CREATE TEMP TABLE rejoin AS SELECT * FROM le_group_heartbeat('lapse', 'a', '1 hour');
SELECT state, new_period, count(*) FROM rejoin GROUP BY 1, 2 ORDER BY 1, 2;
SELECT bool_and(p.expires_at <= m.expires_at) AS within_new_membership
  FROM rejoin AS p, rejoin AS m WHERE m.state = 'member' AND p.state = 'revoke';
SELECT count(*) FILTER (WHERE le_release(lease_key, 'a', fencing_token)) AS released
  FROM rejoin WHERE state = 'revoke';
SELECT h.state, h.new_period, count(*) AS n, bool_or(h.fencing_token = b.fencing_token) AS old_token_reused
  FROM le_group_heartbeat('lapse', 'a', '1 hour') AS h
  LEFT JOIN before AS b ON b.partition = h.partition
 WHERE h.state = 'owned' GROUP BY 1, 2;
DROP TABLE before, rejoin;
RESET ROLE;

-- A role taken out of the owner role can no longer heartbeat, but it can
-- still leave, giving up what it holds.
REVOKE regress_le_pown FROM regress_le_pmem;
SET ROLE regress_le_pmem;
SELECT count(*) FROM le_group_heartbeat('lapse', 'a', '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT le_group_leave('lapse', 'a') AS released;
RESET ROLE;
SELECT count(*) FILTER (WHERE is_valid) AS partitions_held_validly
  FROM le_group_partitions WHERE group_name = 'lapse';

SELECT le_revoke(r::regrole, 'group') IS NOT NULL AS revoked
  FROM unnest(ARRAY['regress_le_pown', 'regress_le_pmem']) AS r GROUP BY 1;
DROP ROLE regress_le_pmem, regress_le_pown;
