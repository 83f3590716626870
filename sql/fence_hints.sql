-- G5, G12: the fence caches, per backend, where (heap TID) the lease
-- row of a key was last found.  VACUUM FULL, CLUSTER and TRUNCATE of
-- le_lease, and a plain VACUUM that truncates empty trailing pages, can
-- leave that block past the end of the table; before the fix every later
-- fenced write in the backend failed with "could not read block".  The
-- hint is now dropped on invalidation and checked against the table's size.
CREATE EXTENSION leader_election;
\set VERBOSITY sqlstate

CREATE TABLE hinted (id serial PRIMARY KEY, fencing_token bigint NOT NULL);
SELECT le_protect('hinted', 'hint-key');

-- Many lease rows whose creation rolled back fill the first pages, so the
-- real row lands on a late page.
BEGIN;
INSERT INTO le_lease (lease_key) SELECT 'rolled-back-' || g FROM generate_series(1, 3000) AS g;
ROLLBACK;
SELECT acquired FROM le_acquire('hint-key', 'a', '10 minutes');
SELECT (ctid::text::point)[0] > 10 AS on_a_late_page FROM le_lease WHERE lease_key = 'hint-key';

-- This backend caches the row's location.
INSERT INTO hinted (fencing_token) SELECT fencing_token FROM le_leases WHERE lease_key = 'hint-key';

-- VACUUM FULL moves the row to the first page and shrinks the table.
VACUUM FULL le_lease;
SELECT (ctid::text::point)[0] AS page_after_vacuum_full FROM le_lease WHERE lease_key = 'hint-key';
INSERT INTO hinted (fencing_token) SELECT fencing_token FROM le_leases WHERE lease_key = 'hint-key';

-- CLUSTER and a plain VACUUM (truncating the pages emptied by another
-- batch of rolled-back rows), each followed by fenced writes.
BEGIN;
INSERT INTO le_lease (lease_key) SELECT 'rolled-back-' || g FROM generate_series(1, 3000) AS g;
ROLLBACK;
INSERT INTO hinted (fencing_token) SELECT fencing_token FROM le_leases WHERE lease_key = 'hint-key';
CLUSTER le_lease USING le_lease_key_unique;
INSERT INTO hinted (fencing_token) SELECT fencing_token FROM le_leases WHERE lease_key = 'hint-key';
VACUUM le_lease;
INSERT INTO hinted (fencing_token) SELECT fencing_token FROM le_leases WHERE lease_key = 'hint-key';

-- A plain VACUUM that truncates the table: an administrator deletes a lease
-- row that sits behind many rolled-back rows (a backend cached its
-- location), VACUUM truncates the table to nothing, and the lease is
-- created again on the first page.
BEGIN;
INSERT INTO le_lease (lease_key) SELECT 'rolled-back-' || g FROM generate_series(1, 3000) AS g;
ROLLBACK;
CREATE TABLE hinted2 (id serial PRIMARY KEY, fencing_token bigint NOT NULL);
SELECT le_protect('hinted2', 'hint-key2');
SELECT acquired FROM le_acquire('hint-key2', 'a', '10 minutes');
SELECT (ctid::text::point)[0] > 10 AS on_a_late_page FROM le_lease WHERE lease_key = 'hint-key2';
INSERT INTO hinted2 (fencing_token) SELECT fencing_token FROM le_leases WHERE lease_key = 'hint-key2';
DELETE FROM le_lease WHERE lease_key = 'hint-key2';
VACUUM le_lease;
SELECT acquired FROM le_acquire('hint-key2', 'b', '10 minutes');
SELECT (ctid::text::point)[0] AS page_after_vacuum FROM le_lease WHERE lease_key = 'hint-key2';
INSERT INTO hinted2 (fencing_token) SELECT fencing_token FROM le_leases WHERE lease_key = 'hint-key2';
SELECT count(*) AS rows_written2 FROM hinted2;
DROP TABLE hinted2;

-- A token never issued is still refused after all this (LE001).
\set ON_ERROR_STOP 0
INSERT INTO hinted (fencing_token) SELECT fencing_token + 1 FROM le_leases WHERE lease_key = 'hint-key';
\echo :LAST_ERROR_SQLSTATE
\set ON_ERROR_STOP 1
SELECT count(*) AS rows_written FROM hinted;

DROP TABLE hinted;
DROP EXTENSION leader_election;
