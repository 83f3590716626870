-- G15: no partition outlives the membership it was given under.  A
-- partition marked revoke is never renewed, and a heartbeat with a shorter
-- ttl brings its expiry down to the membership's new one (never up); the
-- new target claims it once that membership lapses.  A membership that
-- lapses during its own heartbeat (a tiny ttl) leaves none of its
-- partitions valid past it either.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY terse

-- Two partitions, max_moves 1: a holds both, b joins and waits for one.
SELECT le_group_create('rexp', 2, 1) AS created;
SELECT partition, state FROM le_group_heartbeat('rexp', 'a', '1 hour');
SELECT partition, state FROM le_group_heartbeat('rexp', 'b', '1 hour');

-- a heartbeats with '2 seconds': partition 1 is revoked, and no longer
-- valid past the membership's new expiry; partition 0, kept, ends with it.
WITH hb AS (SELECT * FROM le_group_heartbeat('rexp', 'a', '2 seconds'))
SELECT partition, state,
       expires_at <= (SELECT expires_at FROM hb WHERE state = 'member') AS within_membership,
       expires_at < clock_timestamp() + interval '1 minute' AS short
  FROM hb WHERE partition IS NOT NULL ORDER BY partition;
SELECT p.partition, p.holder, p.is_valid, p.expires_at <= m.expires_at AS within_membership
  FROM le_group_partitions AS p, le_group_members AS m
 WHERE p.group_name = 'rexp' AND m.group_name = 'rexp' AND m.member_id = 'a'
 ORDER BY p.partition;
SELECT expires_at AS capped FROM le_group_partitions
 WHERE group_name = 'rexp' AND partition = 1 \gset

-- A longer ttl again does not extend the revoked partition.
SELECT partition, state, expires_at = :'capped' AS unchanged
  FROM le_group_heartbeat('rexp', 'a', '3 seconds') WHERE state = 'revoke';

-- Once a's short membership lapses, b, the target, gets both partitions.
SELECT pg_sleep(3.5);
SELECT partition, state, new_period FROM le_group_heartbeat('rexp', 'b', '1 hour');
SELECT partition, holder, state FROM le_group_assignment('rexp');

-- A membership that lapses within its own heartbeat (1 microsecond): its
-- partitions, held to the hour before, end no later than it did.
SELECT le_group_create('rexp_tiny', 2) AS created;
SELECT count(*) AS owned FROM le_group_heartbeat('rexp_tiny', 'c', '1 hour') WHERE state = 'owned';
SELECT expires_at AS tiny_until FROM le_group_heartbeat('rexp_tiny', 'c', '1 microsecond')
 WHERE state = 'member' \gset
SELECT partition, holder, is_valid, expires_at <= :'tiny_until' AS within_membership
  FROM le_group_partitions WHERE group_name = 'rexp_tiny' ORDER BY partition;
-- Another member gets them at once.
SELECT partition, state, new_period FROM le_group_heartbeat('rexp_tiny', 'd', '1 hour');
