-- G5 and G6, fence trigger: le_protect attaches le_fence; writes are accepted
-- only with the lease's current token while the lease is held (G5), and
-- every refusal has its documented SQLSTATE (G6).
CREATE EXTENSION leader_election;
\set VERBOSITY terse
\set ON_ERROR_STOP 0

CREATE TABLE invoices (id bigserial PRIMARY KEY, customer text, amount numeric,
                       fencing_token bigint NOT NULL);
SELECT le_protect('invoices', 'billing-scheduler');
SELECT tgname, tgtype, pg_catalog.encode(tgargs, 'escape') AS args
  FROM pg_trigger WHERE tgrelid = 'invoices'::regclass ORDER BY tgname;

-- A lease that was never acquired: writes are refused (LE002).
INSERT INTO invoices (customer, amount, fencing_token) VALUES ('acme', 1, 1);
\echo :LAST_ERROR_SQLSTATE

SELECT acquired, fencing_token FROM le_acquire('billing-scheduler', 'a', '1 minute');

-- The current token is accepted; a token never issued is refused with
-- LE001, and nothing is written.
INSERT INTO invoices (customer, amount, fencing_token) VALUES ('acme', 10, 1);
INSERT INTO invoices (customer, amount, fencing_token) VALUES ('acme', 11, 2);
\echo :LAST_ERROR_SQLSTATE
SELECT customer, amount, fencing_token FROM invoices ORDER BY id;

-- Many rows in one statement and one transaction.
INSERT INTO invoices (customer, amount, fencing_token)
SELECT 'bulk', i, 1 FROM generate_series(1, 100) AS i;
SELECT count(*) FROM invoices WHERE customer = 'bulk';

-- Released: the current token no longer passes (LE002).
SELECT le_release('billing-scheduler', 'a', 1);
INSERT INTO invoices (customer, amount, fencing_token) VALUES ('acme', 12, 1);
\echo :LAST_ERROR_SQLSTATE

-- A new holder: its token passes, the old one is stale (LE001).
SELECT acquired, fencing_token FROM le_acquire('billing-scheduler', 'b', '1 minute');
INSERT INTO invoices (customer, amount, fencing_token) VALUES ('acme', 13, 2);
INSERT INTO invoices (customer, amount, fencing_token) VALUES ('acme', 14, 1);
\echo :LAST_ERROR_SQLSTATE

-- UPDATE checks the new row's token: leaving the old token is refused.
UPDATE invoices SET amount = amount + 1 WHERE customer = 'acme';
\echo :LAST_ERROR_SQLSTATE
UPDATE invoices SET amount = amount + 1, fencing_token = 2 WHERE customer = 'acme';
SELECT customer, amount, fencing_token FROM invoices WHERE customer = 'acme' ORDER BY id;

-- DELETE carries its token in leader_election.fencing_token.
DELETE FROM invoices WHERE amount = 100;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL leader_election.fencing_token = 1;
DELETE FROM invoices WHERE amount = 100;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SET LOCAL leader_election.fencing_token = 2;
DELETE FROM invoices WHERE amount = 100;
COMMIT;
SELECT count(*) FROM invoices WHERE customer = 'bulk';
-- SET LOCAL ends with the transaction.
SHOW leader_election.fencing_token;

-- When set, the setting must agree with the row's token (22023).
BEGIN;
SET LOCAL leader_election.fencing_token = 3;
INSERT INTO invoices (customer, amount, fencing_token) VALUES ('acme', 15, 2);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- Not a token at all (22023).
SET leader_election.fencing_token = 'abc';
\echo :LAST_ERROR_SQLSTATE
SET leader_election.fencing_token = -1;
\echo :LAST_ERROR_SQLSTATE

-- NULL and non-positive tokens in the row (22004, 22023).
ALTER TABLE invoices ALTER fencing_token DROP NOT NULL;
INSERT INTO invoices (customer, amount, fencing_token) VALUES ('acme', 16, NULL);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO invoices (customer, amount, fencing_token) VALUES ('acme', 16, 0);
\echo :LAST_ERROR_SQLSTATE

-- TRUNCATE is refused without the current token, allowed with it.
TRUNCATE invoices;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL leader_election.fencing_token = 1;
TRUNCATE invoices;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) > 0 AS rows_kept FROM invoices;
BEGIN;
SET LOCAL leader_election.fencing_token = 2;
TRUNCATE invoices;
COMMIT;
SELECT count(*) AS rows_after_truncate FROM invoices;

-- Expiry is judged by the server clock at the write, even inside one
-- transaction that verified the token before (LE002).
SELECT acquired, fencing_token FROM le_acquire('short', 'a', '2 seconds');
SELECT fencing_token AS st FROM le_leases WHERE lease_key = 'short' \gset
CREATE TABLE short_t (v int, fencing_token bigint);
CREATE TABLE plain_log (note text);
SELECT le_protect('short_t', 'short');
BEGIN;
INSERT INTO short_t VALUES (1, :st);
SELECT pg_sleep(2.2);
INSERT INTO short_t VALUES (2, :st);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- A write rolled back to a savepoint leaves nothing to check at COMMIT,
-- even after the lease expired.
SELECT acquired, fencing_token FROM le_acquire('short', 'b', '2 seconds');
SELECT fencing_token AS st FROM le_leases WHERE lease_key = 'short' \gset
BEGIN;
SAVEPOINT s;
INSERT INTO short_t VALUES (11, :st);
ROLLBACK TO SAVEPOINT s;
SELECT pg_sleep(2.2);
INSERT INTO plain_log VALUES ('kept');
COMMIT;
SELECT * FROM plain_log;

-- The commit itself: a transaction cannot commit fenced writes once its
-- lease has expired (LE002 at COMMIT, nothing written), whatever the clock
-- said at the write.
SELECT acquired, fencing_token FROM le_acquire('short', 'b', '2 seconds');
SELECT fencing_token AS st FROM le_leases WHERE lease_key = 'short' \gset
BEGIN;
INSERT INTO short_t VALUES (10, :st);
SELECT pg_sleep(2.2);
COMMIT;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS short_rows FROM short_t;

-- ... and a renewal in between extends it: the fence reads the row again
-- before rejecting, and the commit goes through.
SELECT acquired, fencing_token FROM le_acquire('short', 'a', '2 seconds');
SELECT fencing_token AS st FROM le_leases WHERE lease_key = 'short' \gset
BEGIN;
INSERT INTO short_t VALUES (3, :st);
SELECT le_renew('short', 'a', :st, '1 minute') IS NOT NULL AS renewed;
SELECT pg_sleep(2.2);
INSERT INTO short_t VALUES (4, :st);
COMMIT;
SELECT * FROM short_t ORDER BY v;

-- A transaction that wrote with its token and then releases the lease
-- itself cannot keep writing with it: the fence reads the row again when
-- the transaction holds the fence lock exclusively.
SELECT le_release('short', 'a', :st);
SELECT acquired, fencing_token FROM le_acquire('short', 'c', '1 minute');
SELECT fencing_token AS st FROM le_leases WHERE lease_key = 'short' \gset
BEGIN;
INSERT INTO short_t VALUES (5, :st);
SELECT le_release('short', 'c', :st);
INSERT INTO short_t VALUES (6, :st);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT * FROM short_t ORDER BY v;

-- le_unprotect removes the fence.
SELECT le_unprotect('short_t');
SELECT le_unprotect('short_t');
INSERT INTO short_t VALUES (7, 999);
SELECT count(*) FROM short_t;

-- le_protect again replaces the fence (e.g. another key or column).
SELECT le_protect('invoices', 'billing-scheduler');
SELECT count(*) FROM pg_trigger WHERE tgrelid = 'invoices'::regclass;

DROP TABLE invoices, short_t, plain_log;
DROP EXTENSION leader_election;
