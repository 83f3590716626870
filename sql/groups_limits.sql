-- G15 at the edges of a heartbeat: a heartbeat grants, and a
-- le_group_leave releases, at most 1,024 partitions (each change holds a
-- fence lock to its commit), so a member of a 16,384-partition group gets
-- them over a few heartbeats and leaves in a few calls with the default
-- lock table; and the owner role is kept by OID, so renaming it locks no
-- member out.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY terse

CREATE ROLE regress_le_lown;
CREATE ROLE regress_le_lmem IN ROLE regress_le_lown;
SELECT count(*) > 0 AS granted
  FROM unnest(ARRAY['regress_le_lown', 'regress_le_lmem']) AS r, le_grant(r::regrole, 'group');

SET ROLE regress_le_lown;
SELECT le_group_create('cap', 4, max_moves => 1);
RESET ROLE;

-- Claims per heartbeat: one member alone in a group of 16,384 partitions.
SET ROLE regress_le_lown;
SELECT le_group_create('wide', 16384);
RESET ROLE;
SET ROLE regress_le_lmem;
SELECT state, count(*) FROM le_group_heartbeat('wide', 'solo', '1 hour') GROUP BY 1 ORDER BY 1;
-- Heartbeats of their own, each in its own transaction, as a member's.
CREATE PROCEDURE pg_temp.beat_until_owned(INOUT beats int) LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    LOOP
        SELECT count(*) INTO n FROM le_group_heartbeat('wide', 'solo', '1 hour') WHERE state = 'pending';
        COMMIT;
        beats := beats + 1;
        EXIT WHEN n = 0 OR beats > 40;
    END LOOP;
END
$$;
CALL pg_temp.beat_until_owned(1);
SELECT count(*) AS held FROM le_group_partitions WHERE group_name = 'wide' AND holder = 'solo' AND is_valid;
SELECT count(DISTINCT fencing_token) AS tokens FROM le_group_partitions WHERE group_name = 'wide';
-- Leaving releases at most 1,024 partitions per call, the membership in
-- the first; calls until one released none.
SELECT le_group_leave('wide', 'solo') AS released;
SELECT count(*) AS members FROM le_group_members WHERE group_name = 'wide' AND is_valid;
CREATE PROCEDURE pg_temp.leave_all(INOUT calls int, INOUT released int) LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    LOOP
        n := le_group_leave('wide', 'solo');
        COMMIT;
        calls := calls + 1;
        released := released + n;
        EXIT WHEN n = 0 OR calls > 40;
    END LOOP;
END
$$;
CALL pg_temp.leave_all(1, 1024);
SELECT count(*) AS held FROM le_group_partitions WHERE group_name = 'wide' AND holder IS NOT NULL;
DROP PROCEDURE pg_temp.beat_until_owned, pg_temp.leave_all;
RESET ROLE;

-- Renaming the owner role keeps the group and its members working.
ALTER ROLE regress_le_lown RENAME TO regress_le_lown2;
SELECT owner_role FROM le_groups WHERE group_name = 'cap';
SET ROLE regress_le_lmem;
SELECT state, count(*) FROM le_group_heartbeat('cap', 'b', '1 hour') GROUP BY 1 ORDER BY 1;
SELECT le_group_leave('cap', 'b') AS released;
RESET ROLE;
-- A new role that takes the old name is not the owner.
CREATE ROLE regress_le_lown;
CREATE ROLE regress_le_limpostor IN ROLE regress_le_lown;
SELECT count(*) > 0 AS granted FROM le_grant('regress_le_limpostor', 'group');
SET ROLE regress_le_limpostor;
SELECT count(*) FROM le_group_heartbeat('cap', 'i', '1 hour');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT count(*) > 0 AS revoked FROM le_revoke('regress_le_limpostor', 'group');
DROP ROLE regress_le_limpostor, regress_le_lown;
ALTER ROLE regress_le_lown2 RENAME TO regress_le_lown;

SELECT le_revoke(r::regrole, 'group') IS NOT NULL AS revoked
  FROM unnest(ARRAY['regress_le_lown', 'regress_le_lmem']) AS r GROUP BY 1;
DROP ROLE regress_le_lmem, regress_le_lown;
