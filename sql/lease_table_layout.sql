-- G6: a lease call refuses an le_lease whose columns are not those of a
-- released version (the 1.0 columns, or those and the metric, metadata and
-- group columns of 1.1, each with its type) with a clean error, also when the
-- table changes after this backend last used it: a column's type changed
-- or a column dropped keeps the number of columns, and must not let a call
-- write a value of the wrong type.  A column added by hand is refused too (a row
-- the calls insert would bypass its NOT NULL or DEFAULT).  Each change is
-- rolled back.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY terse

-- This backend has used the table (and knows its metric columns).
SELECT acquired FROM le_acquire('layout-a', 'a', '1 minute');
SELECT le_renew('layout-a', 'a', fencing_token, '1 minute') IS NOT NULL AS renewed
  FROM le_leases WHERE lease_key = 'layout-a';
SELECT fencing_token AS tok FROM le_leases WHERE lease_key = 'layout-a' \gset

-- A metric column of another type.
BEGIN;
ALTER EXTENSION leader_election DROP VIEW le_lease_metrics;
DROP VIEW le_lease_metrics;
ALTER TABLE le_lease ALTER COLUMN renew_margin_us TYPE text;
SELECT le_renew('layout-a', 'a', :tok, '1 minute') IS NOT NULL AS renewed;
ROLLBACK;

-- A metric column dropped: the metric columns are incomplete.
BEGIN;
ALTER EXTENSION leader_election DROP VIEW le_lease_metrics;
DROP VIEW le_lease_metrics;
ALTER TABLE le_lease DROP COLUMN renew_margin_min_us;
SELECT le_renew('layout-a', 'a', :tok, '1 minute') IS NOT NULL AS renewed;
ROLLBACK;

-- A metric column renamed.
BEGIN;
ALTER TABLE le_lease RENAME COLUMN force_releases TO forced;
SELECT le_renew('layout-a', 'a', :tok, '1 minute') IS NOT NULL AS renewed;
ROLLBACK;

-- The metadata column dropped: the 1.1 columns are incomplete.
BEGIN;
ALTER EXTENSION leader_election DROP VIEW le_leases;
DROP VIEW le_leases;
ALTER TABLE le_lease DROP COLUMN metadata;
SELECT le_renew('layout-a', 'a', :tok, '1 minute') IS NOT NULL AS renewed;
ROLLBACK;

-- The metadata column of another type.
BEGIN;
ALTER EXTENSION leader_election DROP VIEW le_leases;
DROP VIEW le_leases;
ALTER TABLE le_lease ALTER COLUMN metadata TYPE text;
SELECT le_renew('layout-a', 'a', :tok, '1 minute') IS NOT NULL AS renewed;
ROLLBACK;

-- A group column dropped: the 1.1 columns are incomplete.
BEGIN;
ALTER EXTENSION leader_election DROP VIEW le_group_partitions;
DROP VIEW le_group_partitions;
ALTER EXTENSION leader_election DROP VIEW le_group_members;
DROP VIEW le_group_members;
ALTER EXTENSION leader_election DROP VIEW le_groups;
DROP VIEW le_groups;
ALTER TABLE le_lease DROP COLUMN group_partition;
SELECT le_renew('layout-a', 'a', :tok, '1 minute') IS NOT NULL AS renewed;
ROLLBACK;

-- A group column of another type.
BEGIN;
ALTER EXTENSION leader_election DROP VIEW le_group_partitions;
DROP VIEW le_group_partitions;
ALTER EXTENSION leader_election DROP VIEW le_group_members;
DROP VIEW le_group_members;
ALTER EXTENSION leader_election DROP VIEW le_groups;
DROP VIEW le_groups;
ALTER TABLE le_lease ALTER COLUMN group_id TYPE integer;
SELECT le_renew('layout-a', 'a', :tok, '1 minute') IS NOT NULL AS renewed;
ROLLBACK;

-- A column added by hand, with NOT NULL and a DEFAULT a new row would miss.
BEGIN;
ALTER TABLE le_lease ADD COLUMN note text NOT NULL DEFAULT 'x';
SELECT acquired FROM le_acquire('layout-new', 'a', '1 minute');
ROLLBACK;

-- The 1.0 columns alone (all 1.1 columns dropped) are accepted.
BEGIN;
ALTER EXTENSION leader_election DROP VIEW le_lease_metrics;
DROP VIEW le_lease_metrics;
ALTER EXTENSION leader_election DROP VIEW le_leases;
DROP VIEW le_leases;
ALTER EXTENSION leader_election DROP VIEW le_group_partitions;
DROP VIEW le_group_partitions;
ALTER EXTENSION leader_election DROP VIEW le_group_members;
DROP VIEW le_group_members;
ALTER EXTENSION leader_election DROP VIEW le_groups;
DROP VIEW le_groups;
ALTER TABLE le_lease DROP COLUMN metadata, DROP COLUMN expiries, DROP COLUMN force_releases, DROP COLUMN ttl_us,
    DROP COLUMN freed_at, DROP COLUMN renew_margin_us, DROP COLUMN renew_margin_min_us,
    DROP COLUMN group_id, DROP COLUMN group_partition, DROP COLUMN group_held;
SELECT le_renew('layout-a', 'a', :tok, '1 minute') IS NOT NULL AS renewed;
SELECT acquired FROM le_acquire('layout-old', 'a', '1 minute');
ROLLBACK;

-- Back to the table as installed: the calls work again.
SELECT le_renew('layout-a', 'a', :tok, '1 minute') IS NOT NULL AS renewed;
SELECT le_release('layout-a', 'a', :tok);
