-- Issue 3, fence modes and roles: strict mode (the writer's role must be the
-- role that acquired the lease), ordinary roles writing through the
-- trigger without any privilege on the lease tables, the "highest accepted
-- token" fence (le_fence_advance, function and trigger mode), partitioned
-- tables, and leader_election.fencing_token set before the library loads.
CREATE EXTENSION leader_election;
\set VERBOSITY terse
\set ON_ERROR_STOP 0

CREATE ROLE regress_le_a;
CREATE ROLE regress_le_b;
GRANT EXECUTE ON FUNCTION le_acquire(text, text, interval) TO regress_le_a, regress_le_b;

CREATE TABLE strict_t (id serial PRIMARY KEY, who text DEFAULT current_user, fencing_token bigint NOT NULL);
CREATE TABLE loose_t (id serial PRIMARY KEY, who text DEFAULT current_user, fencing_token bigint NOT NULL);
GRANT INSERT, SELECT ON strict_t, loose_t TO regress_le_a, regress_le_b;
GRANT USAGE ON SEQUENCE strict_t_id_seq, loose_t_id_seq TO regress_le_a, regress_le_b;
SELECT le_protect('strict_t', 'strict-lease', mode => 'strict');
SELECT le_protect('loose_t', 'strict-lease');
SELECT pg_catalog.encode(tgargs, 'escape') AS args FROM pg_trigger
 WHERE tgrelid = 'strict_t'::regclass AND tgname = 'le_fence';

SET ROLE regress_le_a;
SELECT acquired, fencing_token FROM le_acquire('strict-lease', 'node-a', '1 minute');
-- The holder's role writes through the fence without any privilege on
-- le_lease (the trigger reads it directly).
INSERT INTO strict_t (fencing_token) VALUES (1);
INSERT INTO loose_t (fencing_token) VALUES (1);
SELECT count(*) FROM le_lease;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- Another role that copied the current token from le_leases: accepted by
-- the ordinary fence, refused by the strict one (42501).
SET ROLE regress_le_b;
SELECT fencing_token FROM le_leases WHERE lease_key = 'strict-lease';
INSERT INTO loose_t (fencing_token) VALUES (1);
INSERT INTO strict_t (fencing_token) VALUES (1);
\echo :LAST_ERROR_SQLSTATE
-- Strict mode still checks the token first.
INSERT INTO strict_t (fencing_token) VALUES (7);
\echo :LAST_ERROR_SQLSTATE
-- Protecting needs EXECUTE on le_protect and the right to create (and, to
-- replace a fence, drop) triggers on the table; unprotecting needs ownership.
SELECT le_protect('loose_t', 'other');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT EXECUTE ON FUNCTION le_protect(regclass, text, name, text), le_unprotect(regclass) TO regress_le_b;
SET ROLE regress_le_b;
SELECT le_protect('loose_t', 'other');
\echo :LAST_ERROR_SQLSTATE
SELECT le_unprotect('loose_t');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT who, fencing_token FROM strict_t ORDER BY id;
SELECT who, fencing_token FROM loose_t ORDER BY id;

-- "Highest accepted token" fence for tokens issued elsewhere.
SELECT le_fence_advance('ext-resource', 5);
SELECT le_fence_advance('ext-resource', 5);
SELECT le_fence_advance('ext-resource', 4);
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_advance('ext-resource', 9);
SELECT le_fence_advance('ext-resource', 5);
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_advance('ext-resource', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_advance(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_advance('', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT resource, highest_token FROM le_fence_resource;

-- Its trigger mode.
CREATE TABLE ext_t (v int, tok bigint);
SELECT le_protect('ext_t', 'ext-table', 'tok', 'advance');
INSERT INTO ext_t VALUES (1, 3);
INSERT INTO ext_t VALUES (2, 4);
INSERT INTO ext_t VALUES (3, 3);
\echo :LAST_ERROR_SQLSTATE
UPDATE ext_t SET v = v + 10;
\echo :LAST_ERROR_SQLSTATE
UPDATE ext_t SET v = v + 10, tok = 4;
INSERT INTO ext_t VALUES (4, NULL);
\echo :LAST_ERROR_SQLSTATE
DELETE FROM ext_t WHERE v = 11;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL leader_election.fencing_token = 3;
DELETE FROM ext_t WHERE v = 11;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT v, tok FROM ext_t ORDER BY v;
BEGIN;
SET LOCAL leader_election.fencing_token = 4;
DELETE FROM ext_t WHERE v = 11;
TRUNCATE ext_t;
COMMIT;
SELECT count(*) FROM ext_t;
SELECT resource, highest_token FROM le_fence_resource ORDER BY resource;

-- Partitioned tables: the row trigger is cloned to every partition.
CREATE TABLE parted (k int, fencing_token bigint) PARTITION BY RANGE (k);
CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (10);
SELECT acquired, fencing_token FROM le_acquire('parted-lease', 'p', '1 minute');
SELECT fencing_token AS pt FROM le_leases WHERE lease_key = 'parted-lease' \gset
SELECT le_protect('parted', 'parted-lease');
INSERT INTO parted VALUES (1, :pt);
INSERT INTO parted VALUES (2, :pt + 1);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO parted_1 VALUES (3, :pt + 1);
\echo :LAST_ERROR_SQLSTATE
-- TRUNCATE of one partition fires only that partition's triggers: the
-- TRUNCATE guard is attached to each partition too.
TRUNCATE parted_1;
\echo :LAST_ERROR_SQLSTATE
SELECT tgrelid::regclass AS rel, tgname FROM pg_trigger
 WHERE tgrelid IN ('parted'::regclass, 'parted_1'::regclass) ORDER BY 1, 2;
SELECT * FROM parted;

-- leader_election.fencing_token set with SET LOCAL in a new session, before
-- the library is loaded (a placeholder until the trigger loads it).
\c
\set VERBOSITY terse
\set ON_ERROR_STOP 0
SELECT count(*) AS loaded FROM pg_settings WHERE name = 'leader_election.lock_timeout';
BEGIN;
SET LOCAL leader_election.fencing_token = :pt;
DELETE FROM parted WHERE k = 1;
COMMIT;
SELECT * FROM parted;
SHOW leader_election.fencing_token;

DROP TABLE strict_t, loose_t, ext_t, parted;
DROP EXTENSION leader_election;
DROP ROLE regress_le_a, regress_le_b;
