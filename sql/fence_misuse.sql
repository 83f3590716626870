-- G6, fence misuse: every wrong way to attach or call the fence gets a
-- clear error with its SQLSTATE, never a silent pass.
CREATE EXTENSION leader_election;
\set VERBOSITY terse
\set ON_ERROR_STOP 0

SELECT acquired FROM le_acquire('misuse', 'a', '1 minute');
CREATE TABLE t (v int, fencing_token bigint, tok_text text, tok_int integer);

-- le_protect: bad table, column, type, mode, key.
CREATE VIEW v AS SELECT * FROM t;
SELECT le_protect('v', 'misuse');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('t', 'misuse', 'no_such_column');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('t', 'misuse', 'tok_text');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('t', 'misuse', 'fencing_token', 'lenient');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('t', '');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('t', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('t', repeat('k', 201));
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect(NULL, 'misuse');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('no_such_table', 'misuse');
\echo :LAST_ERROR_SQLSTATE
-- A regclass that names no relation: 42P01, for le_unprotect too.
SELECT le_protect(0::oid::regclass, 'misuse');
\echo :LAST_ERROR_SQLSTATE
SELECT le_unprotect(0::oid::regclass);
\echo :LAST_ERROR_SQLSTATE
-- A bad mode is quoted cut to 64 characters, with its length.
SELECT le_protect('t', 'misuse', 'fencing_token', repeat('m', 100000));
\echo :LAST_ERROR_SQLSTATE
-- The extension's own tables cannot be fenced (42809): the extension
-- writes them without tokens, so every lease change would fail.
SELECT le_protect('le_lease', 'misuse');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('le_lease_history', 'misuse');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('le_scheduled_jobs', 'misuse', 'fencing_token');
\echo :LAST_ERROR_SQLSTATE
SELECT le_protect('le_fence_resource', 'misuse', 'highest_token', 'advance');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS fences_on_extension_tables FROM pg_trigger
 WHERE tgrelid IN ('le_lease'::regclass, 'le_lease_history'::regclass,
                   'le_scheduled_jobs'::regclass, 'le_fence_resource'::regclass)
   AND NOT tgisinternal;
SELECT acquired FROM le_acquire('misuse-after', 'a', '1 minute');
SELECT count(*) AS triggers_after_errors FROM pg_trigger WHERE tgrelid = 't'::regclass;

-- Only bigint token columns.  Tokens jump to 2^40 and
-- above after a promotion, a point-in-time recovery or a restore into
-- another cluster, so integer and smallint columns are refused (42804), by
-- le_protect and by a trigger attached by hand (at the first write).
SELECT le_protect('t', 'misuse', 'tok_int');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE t ADD COLUMN tok_small smallint;
SELECT le_protect('t', 'misuse', 'tok_small');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS triggers_after_integer_columns FROM pg_trigger WHERE tgrelid = 't'::regclass;
CREATE TRIGGER fi BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION le_fence('misuse', 'tok_int');
INSERT INTO t (v, tok_int) VALUES (1, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fi ON t;
ALTER TABLE t DROP COLUMN tok_small;
SELECT count(*) AS rows_written FROM t;

-- Triggers attached by hand: missing or extra arguments.
CREATE TRIGGER f0 BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION le_fence();
INSERT INTO t VALUES (1, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER f0 ON t;
CREATE TRIGGER f1 BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION le_fence('misuse');
INSERT INTO t VALUES (1, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER f1 ON t;
CREATE TRIGGER f5 BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION le_fence('misuse', 'fencing_token', 'strict', 'x', 'y');
INSERT INTO t VALUES (1, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER f5 ON t;
-- Wrong mode, missing column, non-integer column, empty key.
CREATE TRIGGER fm BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION le_fence('misuse', 'fencing_token', 'loose');
INSERT INTO t VALUES (1, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fm ON t;
CREATE TRIGGER fc BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION le_fence('misuse', 'nope');
INSERT INTO t VALUES (1, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fc ON t;
CREATE TRIGGER ft BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION le_fence('misuse', 'tok_text');
INSERT INTO t VALUES (1, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER ft ON t;
CREATE TRIGGER fk BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION le_fence('', 'fencing_token');
INSERT INTO t VALUES (1, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fk ON t;
-- FOR EACH STATEMENT, AFTER: refused, not silently passed.
CREATE TRIGGER fs BEFORE INSERT ON t FOR EACH STATEMENT EXECUTE FUNCTION le_fence('misuse', 'fencing_token');
INSERT INTO t VALUES (1, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fs ON t;
CREATE TRIGGER fa AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION le_fence('misuse', 'fencing_token');
INSERT INTO t VALUES (1, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fa ON t;
-- Unknown lease key: writes are refused (LE002).
CREATE TRIGGER fu BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION le_fence('no-such-lease', 'fencing_token');
INSERT INTO t VALUES (1, 1);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER fu ON t;
-- A correct hand-made trigger works like le_protect's.
CREATE TRIGGER ok BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION le_fence('misuse', 'fencing_token');
INSERT INTO t VALUES (2, 1);
INSERT INTO t VALUES (3, 2);
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER ok ON t;
SELECT v, fencing_token, tok_int FROM t ORDER BY v;

-- Called directly, not as a trigger (39P01 from the trigger protocol).
SELECT le_fence();
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_advance_trigger();
\echo :LAST_ERROR_SQLSTATE

-- le_fence_check argument errors (22004, 22023, 22001) and results.
SELECT le_fence_check(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_check('misuse', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_check('misuse', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_check('', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_check(repeat('k', 201), 1);
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_check('misuse', 1);
SELECT le_fence_check('misuse', 2);
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_check('no-such-lease', 1);
\echo :LAST_ERROR_SQLSTATE

DROP VIEW v;

-- The trigger's checks are cached per backend and made again after ALTER
-- TABLE: a token column changed to text, dropped, added again.
SELECT le_protect('t', 'misuse');
INSERT INTO t (v, fencing_token) VALUES (10, 1);
ALTER TABLE t ALTER COLUMN fencing_token TYPE text;
INSERT INTO t (v, fencing_token) VALUES (11, '1');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE t DROP COLUMN fencing_token;
INSERT INTO t (v) VALUES (12);
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE t ADD COLUMN fencing_token bigint;
INSERT INTO t (v, fencing_token) VALUES (13, 1);
INSERT INTO t (v, fencing_token) VALUES (14, 2);
\echo :LAST_ERROR_SQLSTATE
SELECT v, fencing_token FROM t WHERE v >= 10 ORDER BY v;

DROP TABLE t;
DROP EXTENSION leader_election;
