-- G5 and G8, fence modes and roles: strict mode (the writer's role must be the
-- role that acquired the lease), ordinary roles writing through the
-- trigger without any privilege on the lease tables, the "highest accepted
-- token" fence (le_fence_advance, function and trigger mode;
-- only the resource's owner role may advance it, administrators reset
-- and assign), partitioned tables, and leader_election.fencing_token set
-- before the library loads.
CREATE EXTENSION leader_election;
\set VERBOSITY terse
\set ON_ERROR_STOP 0

CREATE ROLE regress_le_a;
CREATE ROLE regress_le_b;
GRANT EXECUTE ON FUNCTION le_acquire(text, text, interval, interval, jsonb) TO regress_le_a, regress_le_b;

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
GRANT EXECUTE ON FUNCTION le_protect(regclass, text, name, text, text, name), le_unprotect(regclass) TO regress_le_b;
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
-- An UPDATE that keeps the row's token (not assigned, or assigned the same
-- value) needs the transaction to declare it: the row's token may be a
-- newer writer's.  Here a writer whose token 3 was superseded by 4 would
-- otherwise rewrite row 2 under 4 (22004).
UPDATE ext_t SET v = v + 100 WHERE v = 2;
\echo :LAST_ERROR_SQLSTATE
UPDATE ext_t SET v = v + 10, tok = 4;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL leader_election.fencing_token = 3;
UPDATE ext_t SET v = v + 100 WHERE v = 2;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SET LOCAL leader_election.fencing_token = 4;
UPDATE ext_t SET v = v + 10, tok = 4;
COMMIT;
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

-- G8: a resource belongs to the role that first advanced it
-- (here the superuser running the test) or that an administrator assigned;
-- other roles cannot push it to 2^63-1 and lock its writers out.
SELECT resource, owner_role = current_user AS mine FROM le_fence_resource ORDER BY resource;
GRANT EXECUTE ON FUNCTION le_fence_advance(text, bigint) TO regress_le_a, regress_le_b;
GRANT INSERT ON ext_t TO regress_le_a;
SET ROLE regress_le_a;
SELECT le_fence_advance('ext-resource', 9223372036854775807);
\echo :LAST_ERROR_SQLSTATE
-- Not through the trigger either.
INSERT INTO ext_t VALUES (5, 9223372036854775807);
\echo :LAST_ERROR_SQLSTATE
-- Its own resource it may advance as it likes, even to the end.
SELECT le_fence_advance('a-resource', 3);
SELECT le_fence_advance('a-resource', 9223372036854775807);
SELECT le_fence_advance('a-resource', 4);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- Nobody else can, and the administrator functions are not theirs.
SET ROLE regress_le_b;
SELECT le_fence_advance('a-resource', 9223372036854775807);
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_reset('a-resource');
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_assign('a-resource', 'regress_le_b');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT resource, highest_token, owner_role FROM le_fence_resource
 WHERE resource NOT LIKE 'ext-%' ORDER BY resource;
-- The administrator's way back: forget the resource; the next advance
-- accepts any token and its role owns the resource.
SELECT le_fence_reset('a-resource') AS existed;
SELECT le_fence_reset('a-resource') AS existed;
SET ROLE regress_le_a;
SELECT le_fence_advance('a-resource', 5);
RESET ROLE;
-- Registered before first use for role b: role a cannot claim it first.
SELECT le_fence_assign('b-resource', 'regress_le_b');
SET ROLE regress_le_a;
SELECT le_fence_advance('b-resource', 1);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE regress_le_b;
SELECT le_fence_advance('b-resource', 1);
SELECT le_fence_advance('b-resource', 2);
RESET ROLE;
-- Reassigning keeps the highest token; members of the owner role may
-- advance.
SELECT le_fence_assign('b-resource', 'regress_le_a');
CREATE ROLE regress_le_member IN ROLE regress_le_a;
GRANT EXECUTE ON FUNCTION le_fence_advance(text, bigint) TO regress_le_member;
SET ROLE regress_le_member;
SELECT le_fence_advance('b-resource', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_advance('b-resource', 2);
RESET ROLE;
SELECT resource, highest_token, owner_role FROM le_fence_resource
 WHERE resource NOT LIKE 'ext-%' ORDER BY resource;
-- Argument errors of the administrator functions.
SELECT le_fence_reset(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_assign(NULL, 'regress_le_a');
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_assign('', 'regress_le_a');
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_assign('x', 'regress_le_no_such_role');
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_assign('x', 0::oid::regrole);
\echo :LAST_ERROR_SQLSTATE
REVOKE EXECUTE ON FUNCTION le_fence_advance(text, bigint) FROM regress_le_member;
DROP ROLE regress_le_member;
-- An owner role whose name needs quoting is recognised as such.
CREATE ROLE "Regress LE Mixed";
GRANT EXECUTE ON FUNCTION le_fence_advance(text, bigint) TO "Regress LE Mixed";
SET ROLE "Regress LE Mixed";
SELECT le_fence_advance('mixed-resource', 3);
SELECT le_fence_advance('mixed-resource', 4);
RESET ROLE;
SET ROLE regress_le_a;
SELECT le_fence_advance('mixed-resource', 5);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT resource, highest_token, owner_role FROM le_fence_resource WHERE resource = 'mixed-resource';
REVOKE EXECUTE ON FUNCTION le_fence_advance(text, bigint) FROM "Regress LE Mixed";
DROP ROLE "Regress LE Mixed";
-- Its owner role dropped, the resource admits nobody (superusers included)
-- until an administrator assigns or resets it.
SET ROLE regress_le_a;
SELECT le_fence_advance('mixed-resource', 6);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT le_fence_assign('mixed-resource', 'regress_le_a');
SET ROLE regress_le_a;
SELECT le_fence_advance('mixed-resource', 6);
RESET ROLE;

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

-- Maintenance of a protected table without a token (the
-- path documented in doc/fence.md): the fence applies to superusers too;
-- unprotect, TRUNCATE and protect again in one transaction, or skip the
-- triggers with session_replication_role.
CREATE TABLE maint_t (v int, fencing_token bigint);
SELECT le_protect('maint_t', 'parted-lease');
SELECT fencing_token AS maint_token FROM le_leases WHERE lease_key = 'parted-lease' \gset
INSERT INTO maint_t VALUES (1, :maint_token);
TRUNCATE maint_t;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT le_unprotect('maint_t');
TRUNCATE maint_t;
SELECT le_protect('maint_t', 'parted-lease');
COMMIT;
SELECT tgname FROM pg_trigger WHERE tgrelid = 'maint_t'::regclass ORDER BY 1;
INSERT INTO maint_t VALUES (2, :maint_token);
BEGIN;
SET LOCAL session_replication_role = replica;
TRUNCATE maint_t;
COMMIT;
SELECT count(*) AS left_after_maintenance FROM maint_t;
DROP TABLE maint_t;

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

-- 'advance' mode judges the row stored too: a BEFORE ROW trigger that
-- fires after the fence (here one created after le_protect, which would
-- store token 7 where 5 was accepted) fails every write (09000).
CREATE TABLE adv_late (v int, tok bigint);
SELECT le_protect('adv_late', 'adv-late', 'tok', 'advance');
INSERT INTO adv_late VALUES (1, 5);
CREATE FUNCTION restamp() RETURNS trigger LANGUAGE plpgsql
    AS $$ BEGIN NEW.tok := 7; RETURN NEW; END $$;
CREATE TRIGGER zz_restamp BEFORE INSERT OR UPDATE ON adv_late
    FOR EACH ROW EXECUTE FUNCTION restamp();
BEGIN;
SET LOCAL leader_election.fencing_token = 5;
UPDATE adv_late SET v = 2;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
INSERT INTO adv_late VALUES (3, 5);
\echo :LAST_ERROR_SQLSTATE
SELECT v, tok FROM adv_late;
DROP TABLE adv_late;
DROP FUNCTION restamp();

DROP TABLE strict_t, loose_t, ext_t, parted;
DROP EXTENSION leader_election;
DROP ROLE regress_le_a, regress_le_b;
