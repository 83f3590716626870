-- Baselines for test/bench/run.sh, loaded into the benchmark's throwaway
-- database next to the extension.  Public SQL facts, re-expressed here so
-- that the benchmark depends on nothing outside this repository.

-- The lock table of cirello-io/pglock (Go), as its Client.CreateTable()
-- creates it: one row per lock name, a record version number drawn from a
-- CYCLE sequence named "<table>_rvn".  The statements its acquire and
-- release send are in pglock_cycle.pgb.
CREATE TABLE locks (
    name                  varchar(255) PRIMARY KEY,
    record_version_number bigint,
    data                  bytea,
    owner                 varchar(255)
);
CREATE SEQUENCE locks_rvn CYCLE OWNED BY locks.record_version_number;

-- The single-row UPDATE a renewal is compared with: the expiry of one row,
-- in a table shaped like le_lease's hot columns (fillfactor 50: HOT updates).
CREATE TABLE raw_lease (
    lease_key  text PRIMARY KEY,
    holder     text,
    expires_at timestamptz
) WITH (fillfactor = 50);
INSERT INTO raw_lease VALUES ('bench', 'me', now() + interval '1 hour');

-- INSERT targets: the same table without and with the fence trigger.
-- Autovacuum stays off for them: it would vacuum the rows one run inserted
-- during the next run, which measures another script.
CREATE TABLE plain_t  (id bigserial PRIMARY KEY, payload text, fencing_token bigint NOT NULL)
    WITH (autovacuum_enabled = false);
CREATE TABLE fenced_t (id bigserial PRIMARY KEY, payload text, fencing_token bigint NOT NULL)
    WITH (autovacuum_enabled = false);

-- The floor of any trigger: the same table with a C trigger function that
-- does nothing (test/bench/noop_trigger.c, built by le_bench_load in the
-- scratch directory and named by psql's variable noop_so, never installed),
-- as a BEFORE ROW trigger (trig_t) and as a BEFORE STATEMENT trigger
-- (stmt_t).  The executor's work for a BEFORE ROW trigger (the row formed as
-- a heap tuple, the call) is what separates trig_t from plain_t.
CREATE FUNCTION noop_trigger() RETURNS trigger LANGUAGE c AS :'noop_so', 'noop_trigger';
COMMENT ON FUNCTION noop_trigger() IS 'benchmark only: a trigger that does nothing';
CREATE TABLE trig_t (id bigserial PRIMARY KEY, payload text, fencing_token bigint NOT NULL)
    WITH (autovacuum_enabled = false);
CREATE TRIGGER noop BEFORE INSERT ON trig_t FOR EACH ROW EXECUTE FUNCTION noop_trigger();
CREATE TABLE stmt_t (id bigserial PRIMARY KEY, payload text, fencing_token bigint NOT NULL)
    WITH (autovacuum_enabled = false);
CREATE TRIGGER noop BEFORE INSERT ON stmt_t FOR EACH STATEMENT EXECUTE FUNCTION noop_trigger();
