-- G15: the assignment of partition groups is balanced, sticky and
-- deterministic.  Members heartbeat in rounds (revoked partitions released
-- at once, as a client does) until a round changes nothing.  After every
-- join and leave: each member holds N / M or N / M + 1 partitions; a join
-- moves at most ceil(N / M) partitions, all to the new member (none between
-- those that stayed); a leave moves only the partitions of the member that
-- left; no heartbeat marks more than max_moves of a member's partitions
-- revoke.  Two groups driven by the same calls end in the same assignment.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY terse

-- Heartbeat every member once per round until a round makes no change;
-- records the largest number of revokes one heartbeat reported.  Returns
-- the rounds it took.
CREATE TABLE regress_revokes (group_name text, member text, revokes int);
CREATE FUNCTION regress_converge(g text, members text[]) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    rounds int := 0;
    busy boolean;
    m text;
    r record;
    n int;
BEGIN
    LOOP
        rounds := rounds + 1;
        busy := false;
        FOREACH m IN ARRAY members LOOP
            n := 0;
            FOR r IN SELECT * FROM le_group_heartbeat(g, m, '1 hour') LOOP
                IF r.state = 'revoke' THEN
                    PERFORM le_release(r.lease_key, m, r.fencing_token);
                    n := n + 1;
                    busy := true;
                ELSIF r.state = 'pending' OR (r.state = 'owned' AND r.new_period) THEN
                    busy := true;
                END IF;
            END LOOP;
            INSERT INTO regress_revokes VALUES (g, m, n);
        END LOOP;
        EXIT WHEN NOT busy OR rounds >= 200;
    END LOOP;
    RETURN rounds;
END $$;

-- The holders now, kept under a label, and what moved between two labels.
CREATE TABLE regress_holders (label text, group_name text, partition int, holder text);
CREATE FUNCTION regress_keep(label text, g text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO regress_holders
    SELECT label, g, partition, holder FROM le_group_partitions
     WHERE group_name = g AND is_valid $$;
CREATE FUNCTION regress_moves(g text, a text, b text,
                              OUT moved bigint, OUT to_whom text[], OUT from_whom text[])
LANGUAGE sql AS $$
    SELECT count(*), array_agg(DISTINCT y.holder ORDER BY y.holder),
           array_agg(DISTINCT x.holder ORDER BY x.holder)
      FROM regress_holders x JOIN regress_holders y USING (group_name, partition)
     WHERE x.label = a AND y.label = b AND group_name = g AND x.holder <> y.holder $$;
-- Balance: every member's count, and max - min.
CREATE FUNCTION regress_balance(g text, OUT members bigint, OUT held bigint, OUT spread int)
LANGUAGE sql AS $$
    SELECT count(*), sum(partitions_held), max(partitions_held) - min(partitions_held)
      FROM le_group_members WHERE group_name = g AND is_valid $$;

SELECT le_group_create('bal', 64) AS created;
SELECT regress_converge('bal', ARRAY['m1']) AS rounds;
SELECT * FROM regress_balance('bal');
SELECT regress_keep('1', 'bal');
-- Joins one by one up to 7 members.
SELECT regress_converge('bal', ARRAY['m1', 'm2']) > 1 AS rounds;
SELECT regress_keep('2', 'bal');
SELECT * FROM regress_balance('bal');
SELECT * FROM regress_moves('bal', '1', '2');
SELECT regress_converge('bal', ARRAY['m1', 'm2', 'm3']) > 1 AS rounds;
SELECT regress_keep('3', 'bal');
SELECT * FROM regress_balance('bal');
SELECT * FROM regress_moves('bal', '2', '3');
SELECT regress_converge('bal', ARRAY['m1', 'm2', 'm3', 'm4']) > 1 AS rounds;
SELECT regress_keep('4', 'bal');
SELECT regress_converge('bal', ARRAY['m1', 'm2', 'm3', 'm4', 'm5']) > 1 AS rounds;
SELECT regress_keep('5', 'bal');
SELECT * FROM regress_balance('bal');
SELECT * FROM regress_moves('bal', '4', '5');
SELECT regress_converge('bal', ARRAY['m1', 'm2', 'm3', 'm4', 'm5', 'm6']) > 1 AS rounds;
SELECT regress_keep('6', 'bal');
SELECT regress_converge('bal', ARRAY['m1', 'm2', 'm3', 'm4', 'm5', 'm6', 'm7']) > 1 AS rounds;
SELECT regress_keep('7', 'bal');
SELECT * FROM regress_balance('bal');
SELECT * FROM regress_moves('bal', '6', '7');
SELECT member_id, partitions_held FROM le_group_members WHERE group_name = 'bal' ORDER BY 1;
-- Every join moved at most ceil(64 / M) partitions, all to the newcomer.
SELECT b.label, m.moved, m.moved <= ceil(64.0 / b.label::int) AS within_bound,
       m.to_whom = ARRAY['m' || b.label] AS all_to_newcomer
  FROM (VALUES ('2'), ('3'), ('4'), ('5'), ('6'), ('7')) AS b(label),
       regress_moves('bal', (b.label::int - 1)::text, b.label) AS m
 ORDER BY 1;
-- No heartbeat revoked more than max_moves (8 for 64 partitions).
SELECT max(revokes) AS most_revokes, max(revokes) <= 8 AS within_max_moves
  FROM regress_revokes WHERE group_name = 'bal';
-- Converged: nothing moving, nothing free.
SELECT state, count(*) FROM le_group_assignment('bal') GROUP BY 1 ORDER BY 1;

-- m4 leaves: only its partitions move, spread over the others.
SELECT le_group_leave('bal', 'm4') AS released;
SELECT regress_converge('bal', ARRAY['m1', 'm2', 'm3', 'm5', 'm6', 'm7']) AS rounds;
SELECT regress_keep('leave', 'bal');
SELECT * FROM regress_balance('bal');
SELECT moved, from_whom FROM regress_moves('bal', '7', 'leave');
SELECT count(*) AS moved_not_from_m4
  FROM regress_holders x JOIN regress_holders y USING (group_name, partition)
 WHERE x.label = '7' AND y.label = 'leave' AND group_name = 'bal' AND x.holder <> y.holder
   AND x.holder <> 'm4';

-- max_moves bounds the revokes of one heartbeat: 2 of 40 partitions.
SELECT le_group_create('slow', 40, 2) AS created;
SELECT regress_converge('slow', ARRAY['a']) AS rounds;
SELECT count(*) FILTER (WHERE state = 'pending') AS b_pending
  FROM le_group_heartbeat('slow', 'b', '1 hour');
SELECT count(*) FILTER (WHERE state = 'revoke') AS a_revokes,
       count(*) FILTER (WHERE state = 'owned') AS a_owned
  FROM le_group_heartbeat('slow', 'a', '1 hour');
SELECT regress_converge('slow', ARRAY['a', 'b']) AS rounds;
SELECT * FROM regress_balance('slow');
SELECT max(revokes) AS most_revokes FROM regress_revokes WHERE group_name = 'slow';

-- Determinism: two groups driven by the same calls end alike (member ids
-- given out of their sort order).
SELECT le_group_create('det1', 23, 3), le_group_create('det2', 23, 3);
SELECT regress_converge('det1', ARRAY['z', 'b']), regress_converge('det2', ARRAY['z', 'b']);
SELECT regress_converge('det1', ARRAY['z', 'b', 'k', 'a']), regress_converge('det2', ARRAY['z', 'b', 'k', 'a']);
SELECT le_group_leave('det1', 'b'), le_group_leave('det2', 'b');
SELECT regress_converge('det1', ARRAY['z', 'k', 'a']), regress_converge('det2', ARRAY['z', 'k', 'a']);
SELECT count(*) AS same_holder
  FROM le_group_partitions x JOIN le_group_partitions y USING (partition)
 WHERE x.group_name = 'det1' AND y.group_name = 'det2' AND x.holder = y.holder;
SELECT * FROM regress_balance('det1');
-- The assignment read twice is the same, and says what the heartbeats did.
SELECT (SELECT array_agg(target ORDER BY partition) FROM le_group_assignment('det1')) =
       (SELECT array_agg(target ORDER BY partition) FROM le_group_assignment('det1')) AS stable,
       (SELECT array_agg(target ORDER BY partition) FROM le_group_assignment('det1')) =
       (SELECT array_agg(holder ORDER BY partition) FROM le_group_partitions WHERE group_name = 'det1')
         AS as_held;
-- With q = 23 / 3 = 7 and r = 2, the two members that held most keep 8.
SELECT member_id, partitions_held FROM le_group_members WHERE group_name = 'det1' AND is_valid ORDER BY 1;

DROP FUNCTION regress_converge(text, text[]), regress_keep(text, text), regress_moves(text, text, text),
    regress_balance(text);
DROP TABLE regress_revokes, regress_holders;
