-- G12: leader_election.history = off: a grant records no period in
-- le_lease_history, and the end of such a period writes nothing either.
-- The session that was granted the period does not even look for its row
-- (no scan of the history's index), also after the setting went back on;
-- another session, or a period pushed out of the backend's memory of them,
-- looks by index and finds nothing.  A period recorded while it was on is
-- still closed when it ends with it off, by release or by takeover.  Tokens
-- rise as ever.  Only superusers may change it (42501).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY sqlstate

CREATE FUNCTION hs_rows(k text, OUT closed bigint, OUT open bigint) LANGUAGE sql AS $$
  SELECT count(*) FILTER (WHERE ended_at IS NOT NULL), count(*) FILTER (WHERE ended_at IS NULL)
    FROM le_lease_history WHERE lease_key = k $$;
-- Scans of the history's index and rows inserted into the history: the
-- counts of the transaction so far, as PostgreSQL 15 keeps them (with
-- earlier transactions' not yet reported), in hs_counts; hs_io(before) the
-- difference since the counts before.
CREATE TABLE hs_counts (scans bigint, inserts bigint);
CREATE FUNCTION hs_mark() RETURNS void LANGUAGE sql AS $$
  DELETE FROM hs_counts;
  INSERT INTO hs_counts SELECT pg_stat_get_xact_numscans('le_lease_history_pkey'::regclass),
                               pg_stat_get_xact_tuples_inserted('le_lease_history'::regclass) $$;
CREATE FUNCTION hs_io(OUT history_scans bigint, OUT history_inserts bigint) LANGUAGE sql AS $$
  SELECT pg_stat_get_xact_numscans('le_lease_history_pkey'::regclass) - scans,
         pg_stat_get_xact_tuples_inserted('le_lease_history'::regclass) - inserts
    FROM hs_counts $$;
CREATE FUNCTION hs_release(k text, o text) RETURNS boolean LANGUAGE sql AS $$
  SELECT le_release(k, o, (SELECT fencing_token FROM le_leases WHERE lease_key = k)) $$;

SHOW leader_election.history;

-- Off: a cycle in one session neither writes nor reads the history.
SET leader_election.history = off;
BEGIN;
SELECT hs_mark();
SELECT acquired, new_period FROM le_acquire('hs1', 'o', '1 minute');
SELECT hs_release('hs1', 'o');
SELECT fencing_token AS t1 FROM le_acquire('hs1', 'o', '1 minute') \gset
SELECT le_release('hs1', 'o', :t1);
SELECT * FROM hs_io();
COMMIT;
SELECT fencing_token > :t1 AS token_rises FROM le_acquire('hs1', 'o', '1 minute');
SELECT hs_release('hs1', 'o');
SELECT * FROM hs_rows('hs1');

-- Recorded while on, released while off: closed.
RESET leader_election.history;
SELECT acquired FROM le_acquire('hs2', 'o', '1 minute');
SET leader_election.history = off;
SELECT hs_release('hs2', 'o');
SELECT holder, end_reason FROM le_lease_history WHERE lease_key = 'hs2';

-- Granted while off, released while on, same session: nothing looked for.
SELECT acquired FROM le_acquire('hs3', 'o', '1 minute');
RESET leader_election.history;
BEGIN;
SELECT hs_mark();
SELECT hs_release('hs3', 'o');
SELECT * FROM hs_io();
COMMIT;
SELECT * FROM hs_rows('hs3');

-- Takeovers after expiry: a recorded period taken over while off is closed
-- as expired (the new one not recorded); that unrecorded period taken over
-- while on leaves no row (and is not looked for), the new one is recorded.
SELECT acquired FROM le_acquire('hs4', 'o', '1 second');
SELECT pg_sleep(1.2);
SET leader_election.history = off;
SELECT acquired, new_period FROM le_acquire('hs4', 'p', '1 second');
SELECT holder, end_reason FROM le_lease_history WHERE lease_key = 'hs4' ORDER BY fencing_token;
SELECT pg_sleep(1.2);
RESET leader_election.history;
BEGIN;
SELECT hs_mark();
SELECT acquired, new_period FROM le_acquire('hs4', 'q', '1 minute');
SELECT * FROM hs_io();
COMMIT;
SELECT holder, end_reason FROM le_lease_history WHERE lease_key = 'hs4' ORDER BY fencing_token;
SELECT hs_release('hs4', 'q');
SELECT holder, end_reason FROM le_lease_history WHERE lease_key = 'hs4' ORDER BY fencing_token;

-- Granted while off, ended by another session (a new backend): it looks by
-- index and finds nothing to close.
SET leader_election.history = off;
SELECT acquired FROM le_acquire('hs5', 'o', '1 minute');
\c
BEGIN;
SELECT hs_mark();
SELECT le_force_release('hs5');
SELECT * FROM hs_io();
COMMIT;
SELECT * FROM hs_rows('hs5');

-- A backend remembers its last 64 unrecorded periods: of 65 held, the
-- first, pushed out, is looked for by index; the last is not.
SET leader_election.history = off;
SELECT count(*) FILTER (WHERE (le_acquire('hsr' || i, 'o', '1 minute')).acquired) AS granted
  FROM generate_series(1, 65) AS i;
RESET leader_election.history;
BEGIN;
SELECT hs_mark();
SELECT hs_release('hsr65', 'o');
SELECT * FROM hs_io();
SELECT hs_mark();
SELECT hs_release('hsr1', 'o');
SELECT * FROM hs_io();
COMMIT;
SELECT count(*) AS history_rows FROM le_lease_history WHERE lease_key LIKE 'hsr%';

-- A grant rolled back while off; granted again while on: recorded.
SET leader_election.history = off;
BEGIN;
SELECT hs_mark();
SELECT acquired FROM le_acquire('hs6', 'o', '1 minute');
ROLLBACK;
RESET leader_election.history;
SELECT acquired FROM le_acquire('hs6', 'o', '1 minute');
SELECT hs_release('hs6', 'o');
SELECT * FROM hs_rows('hs6');

-- The same token drawn twice: a grant rolled back with the history off,
-- the sequence set back by hand (a grant then raises it only above the
-- key's last committed token), the same token granted again with it on.
-- That is another period (another acquired_at): recorded, and closed when
-- it ends, not taken for the unrecorded one.
SELECT fencing_token AS t0 FROM le_acquire('hs8', 'a', '1 minute') \gset
SELECT le_release('hs8', 'a', :t0);
SET leader_election.history = off;
BEGIN;
SELECT fencing_token AS t1 FROM le_acquire('hs8', 'b', '1 minute') \gset
ROLLBACK;
RESET leader_election.history;
SELECT setval('le_token_seq', :t1 % 1099511627776 - 1) IS NOT NULL AS set_back;
SELECT fencing_token = :t1 AS same_token FROM le_acquire('hs8', 'c', '1 minute');
SELECT hs_release('hs8', 'c');
SELECT holder, end_reason FROM le_lease_history WHERE lease_key = 'hs8' ORDER BY fencing_token;

-- Only superusers may switch it: SET fails (42501) once the library is
-- loaded, and a SET before (a placeholder) is dropped with a warning when
-- it loads: the grant is recorded.
SELECT current_user AS hs_su \gset
CREATE ROLE regress_le_hs LOGIN;
SELECT count(*) > 0 AS granted FROM le_grant('regress_le_hs', 'campaign');
SET ROLE regress_le_hs;
SET leader_election.history = off;
SHOW leader_election.history;
RESET ROLE;
\c - regress_le_hs
SET leader_election.history = off;
SELECT acquired FROM le_acquire('hs7', 'o', '1 minute');
SHOW leader_election.history;
\c - :hs_su
SELECT * FROM hs_rows('hs7');

DROP FUNCTION hs_rows(text);
DROP FUNCTION hs_mark();
DROP FUNCTION hs_io();
DROP FUNCTION hs_release(text, text);
DROP TABLE hs_counts;
DROP EXTENSION leader_election;
DROP ROLE regress_le_hs;
