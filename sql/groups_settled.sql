-- G15: the heartbeat of a settled group.  Each membership row lists the
-- partitions its member held at its last heartbeat (le_lease.group_held, a
-- superset of those it holds validly).  When the lists of the live members
-- are disjoint, cover the group and each has N / M or N / M + 1 partitions,
-- and the caller's own list is exactly what it holds, a heartbeat reads
-- only the memberships and the caller's partitions, and returns what
-- reading the whole group would (le_group_assign_settled).  A list that
-- overstates (a partition given up since) sends its member's next
-- heartbeat back to the whole group, which writes the list again.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY terse

-- One heartbeat in a transaction of its own: its partitions' states and
-- how many are new periods, with the heartbeat's DEBUG1 line telling
-- whether it found the group settled.
CREATE FUNCTION regress_beat(g text, m text, OUT states text, OUT new_periods int)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('client_min_messages', 'debug1', true);
    SELECT string_agg(partition || ':' || state, ' ' ORDER BY partition),
           count(*) FILTER (WHERE new_period AND partition IS NOT NULL)
      INTO states, new_periods
      FROM le_group_heartbeat(g, m, '1 hour') WHERE partition IS NOT NULL;
    PERFORM set_config('client_min_messages', 'notice', true);
END $$;

-- A heartbeat of m that releases at once what it is told to give up.
CREATE FUNCTION regress_shed(g text, m text) RETURNS bigint
LANGUAGE sql AS $$
    SELECT count(le_release(lease_key, m, fencing_token))
      FROM le_group_heartbeat(g, m, '1 hour') WHERE state = 'revoke' $$;

-- A member's list as partition numbers.
CREATE FUNCTION regress_list(g text, m text) RETURNS int[]
LANGUAGE sql AS $$
    SELECT array_agg(p ORDER BY p)
      FROM le_lease l, le_group gr, generate_series(0, gr.partitions - 1) p
     WHERE gr.group_name = g AND l.lease_key = 'le:group:' || g || ':member:' || m
       AND get_bit(l.group_held, p) = 1 $$;

SELECT le_group_create('st', 8, 8);

-- The first heartbeat reads the whole group (no list yet) and lists what
-- it took.
SELECT * FROM regress_beat('st', 'a');
SELECT regress_list('st', 'a');
-- Settled now: the next one reads the membership and its own 8 partitions.
SELECT * FROM regress_beat('st', 'a');

-- A join: the newcomer's list is not known, so every heartbeat reads the
-- whole group until the lists settle again, 4 each.
SELECT * FROM regress_beat('st', 'b');
SELECT * FROM regress_beat('st', 'a');
SELECT regress_shed('st', 'a');
SELECT * FROM regress_beat('st', 'b');
SELECT * FROM regress_beat('st', 'a');
SELECT regress_list('st', 'a') AS a, regress_list('st', 'b') AS b;
SELECT * FROM regress_beat('st', 'a');
SELECT * FROM regress_beat('st', 'b');

-- A partition of a given up behind its back (an administrator's force
-- release): a's list overstates.  b's heartbeat still finds the group
-- settled and takes nothing (the partition is a's to claim again anyway);
-- a's finds its list wrong, reads the whole group and claims it again
-- under a new token.
SELECT le_force_release('le:group:st:0') AS forced;
SELECT * FROM regress_beat('st', 'b');
SELECT * FROM regress_beat('st', 'a');
SELECT regress_list('st', 'a') AS a;
SELECT * FROM regress_beat('st', 'a');

-- With N % M = 1 (9 partitions, 2 members: 5 and 4), the lists rank the
-- member holding 5 first, here b (it came first).  When it loses one behind
-- the lists' back, both hold 4 and the assignment gives the free partition
-- to the first member in id order, a: a still reads the lists as settled
-- and waits; b's next heartbeat finds its list wrong, takes nothing (its
-- target is 4 now) and writes its list again; then a's reads the whole
-- group and claims it.
SELECT le_group_create('odd', 9, 9);
SELECT * FROM regress_beat('odd', 'b');
SELECT * FROM regress_beat('odd', 'a');
SELECT regress_shed('odd', 'b');
SELECT * FROM regress_beat('odd', 'a');
SELECT * FROM regress_beat('odd', 'b');
SELECT regress_list('odd', 'a') AS a, regress_list('odd', 'b') AS b;
SELECT le_force_release('le:group:odd:' || min(partition)) AS forced
  FROM le_group_partitions WHERE group_name = 'odd' AND holder = 'b';
SELECT * FROM regress_beat('odd', 'a');
SELECT * FROM regress_beat('odd', 'b');
SELECT regress_list('odd', 'b') AS b;
SELECT * FROM regress_beat('odd', 'a');
SELECT * FROM regress_beat('odd', 'a');
SELECT * FROM regress_beat('odd', 'b');

-- A member that left is not live: its list counts for nothing, and the
-- other reads the whole group and claims its partitions.
SELECT le_group_leave('odd', 'b');
SELECT * FROM regress_beat('odd', 'a');
SELECT * FROM regress_beat('odd', 'a');

-- Random calls, each heartbeat of a live member checked against the
-- assignment as le_group_assignment reads the whole group just before: it
-- marks revoke exactly the member's partitions that are moving, and keeps
-- every partition the assignment keeps for it; beyond those it may only
-- claim free ones assigned to it (which a settled heartbeat leaves for
-- later).  Also counts the heartbeats that used the lists (more than one
-- scan of the group index).
CREATE FUNCTION regress_random(g text, members text[], steps int,
                               OUT checked int, OUT wrong int, OUT used_lists int)
LANGUAGE plpgsql AS $$
DECLARE
    m text;
    op float8;
    keep int[];
    may int[];
    moving int[];
    owned int[];
    revoked int[];
    scans bigint;
    live boolean;
    r record;
BEGIN
    checked := 0; wrong := 0; used_lists := 0;
    FOR i IN 1 .. steps LOOP
        m := members[1 + floor(random() * array_length(members, 1))::int];
        op := random();
        IF op < 0.75 THEN
            SELECT coalesce(array_agg(partition ORDER BY partition)
                              FILTER (WHERE target = m AND state = 'owned'), '{}'),
                   coalesce(array_agg(partition ORDER BY partition)
                              FILTER (WHERE target = m AND state IN ('owned', 'free')), '{}'),
                   coalesce(array_agg(partition ORDER BY partition)
                              FILTER (WHERE holder = m AND state = 'moving'), '{}')
              INTO keep, may, moving
              FROM le_group_assignment(g);
            -- a member that is not live joins: the assignment read is not its
            live := EXISTS (SELECT 1 FROM le_group_members
                             WHERE group_name = g AND member_id = m AND is_valid);
            scans := pg_stat_get_xact_numscans('le_lease_group'::regclass);
            owned := '{}'; revoked := '{}';
            FOR r IN SELECT * FROM le_group_heartbeat(g, m, '1 hour') WHERE partition IS NOT NULL LOOP
                IF r.state = 'owned' THEN
                    owned := owned || r.partition;
                ELSIF r.state = 'revoke' THEN
                    revoked := revoked || r.partition;
                    IF random() < 0.7 THEN
                        PERFORM le_release(r.lease_key, m, r.fencing_token);
                    END IF;
                END IF;
            END LOOP;
            IF pg_stat_get_xact_numscans('le_lease_group'::regclass) - scans > 1 THEN
                used_lists := used_lists + 1;
            END IF;
            IF live THEN
                checked := checked + 1;
                IF revoked <> moving OR NOT (owned @> keep AND may @> owned) THEN
                    wrong := wrong + 1;
                    RAISE NOTICE 'step %: member % kept % revoked % (assignment: keep %, may %, moving %)',
                        i, m, owned, revoked, keep, may, moving;
                END IF;
            END IF;
        ELSIF op < 0.85 THEN
            -- an administrator frees one of m's partitions
            PERFORM le_force_release(lease_key) FROM le_group_partitions
              WHERE group_name = g AND holder = m AND is_valid ORDER BY random() LIMIT 1;
        ELSIF op < 0.92 THEN
            -- m releases one of its partitions itself
            PERFORM le_release(lease_key, m, fencing_token) FROM le_group_partitions
              WHERE group_name = g AND holder = m AND is_valid ORDER BY random() LIMIT 1;
        ELSE
            PERFORM le_group_leave(g, m);
        END IF;
    END LOOP;
END $$;
SELECT setseed(0.5);
SELECT le_group_create('rand7', 7, 2);
SELECT checked > 300 AS checked, wrong, used_lists > 50 AS used_lists
  FROM regress_random('rand7', ARRAY['a', 'b', 'c'], 600);
SELECT le_group_create('rand16', 16, 3);
SELECT checked > 300 AS checked, wrong, used_lists > 50 AS used_lists
  FROM regress_random('rand16', ARRAY['a', 'b', 'c', 'd'], 600);

DROP FUNCTION regress_beat(text, text), regress_shed(text, text), regress_list(text, text),
    regress_random(text, text[], int);
