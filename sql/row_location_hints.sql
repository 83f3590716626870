-- G1, G12: Each backend remembers where it last found the row of a lease key, and
-- where it inserted the history row of a period, and looks there first.
-- Such a hint is only a place to look: after VACUUM FULL rewrites the
-- table, another key's row (or another period's) sits there, and the call
-- must still act on its own row.  Each step below first shows that the
-- hinted place now holds the other row, then that the call changed the
-- right one.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY sqlstate

-- le_lease, emptied first so that the layout is known: hint-a's row is
-- created first, hint-b's second; renewing hint-a moves its live version
-- behind hint-b's on the page, so a rewrite puts hint-b's row where
-- hint-a's chain began (the hint).
TRUNCATE le_lease, le_lease_history;
SELECT acquired FROM le_acquire('hint-a', 'o', '10 minutes');
SELECT acquired FROM le_acquire('hint-b', 'o', '10 minutes');
SELECT le_renew('hint-a', 'o', (SELECT fencing_token FROM le_leases WHERE lease_key = 'hint-a'), '10 minutes') IS NOT NULL AS renewed;
CREATE TEMP TABLE hint_before AS
  SELECT lease_key, expires_at FROM le_lease WHERE lease_key LIKE 'hint-%';
VACUUM FULL le_lease;
-- hint-a's row was the table's first insert: its chain began at (0,1).
SELECT ctid = '(0,1)' AS b_now_where_a_began FROM le_lease WHERE lease_key = 'hint-b';
SELECT le_renew('hint-a', 'o', (SELECT fencing_token FROM le_leases WHERE lease_key = 'hint-a'), '1 hour') IS NOT NULL AS renewed;
SELECT l.lease_key, l.expires_at > b.expires_at + interval '20 minutes' AS renewed_now
  FROM le_lease l JOIN hint_before b USING (lease_key) ORDER BY 1;
SELECT le_release('hint-a', 'o', (SELECT fencing_token FROM le_leases WHERE lease_key = 'hint-a')) AS released;
SELECT lease_key, holder FROM le_leases WHERE lease_key LIKE 'hint-%' ORDER BY 1;

-- le_lease_history: the periods of hint-x (ended), hint-c and hint-d; the
-- ended period's first version is dead, so a rewrite moves hint-d's period
-- to where hint-c's was inserted.
TRUNCATE le_lease_history;
SELECT le_release('hint-x', 'o', (SELECT fencing_token FROM le_acquire('hint-x', 'o', '1 hour'))) AS released;
SELECT acquired FROM le_acquire('hint-c', 'o', '1 hour');
SELECT acquired FROM le_acquire('hint-d', 'o', '1 hour');
CREATE TEMP TABLE hint_period AS
  SELECT lease_key, ctid AS tid FROM le_lease_history WHERE lease_key IN ('hint-c', 'hint-d');
VACUUM FULL le_lease_history;
SELECT (SELECT tid FROM hint_period WHERE lease_key = 'hint-c') =
       (SELECT ctid FROM le_lease_history WHERE lease_key = 'hint-d') AS d_now_where_c_was;
SELECT le_release('hint-c', 'o', (SELECT fencing_token FROM le_leases WHERE lease_key = 'hint-c')) AS released;
SELECT lease_key, end_reason FROM le_lease_history WHERE lease_key IN ('hint-c', 'hint-d') ORDER BY 1;

-- Rows deleted (by a superuser) and created again land elsewhere: the
-- hint then finds nothing visible and the index is asked.
DELETE FROM le_lease WHERE lease_key = 'hint-b';
SELECT acquired, new_period FROM le_acquire('hint-b', 'p', '1 hour');
SELECT lease_key, holder FROM le_leases WHERE lease_key LIKE 'hint-%' ORDER BY 1;
