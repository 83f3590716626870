-- G12: a refused acquire only reads (no transaction id, so no row lock,
-- no commit record and no commit flush; no WAL at all); renewals are HOT
-- updates that change no indexed column, so constant renewal keeps the
-- lease table small.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY terse

SELECT acquired, fencing_token FROM le_acquire('cheap', 'leader', '1 hour');
SELECT fencing_token AS cheap_tok FROM le_leases WHERE lease_key OPERATOR(pg_catalog.=) 'cheap' \gset

-- A refusal inside an open transaction: no transaction id is assigned (a
-- row lock, a WAL record or a commit record would need one), no fence lock
-- and no tuple or transaction lock is held.  At READ COMMITTED the refusal
-- reads the row directly, without the executor, and keeps not even the
-- relation and index read locks of a plain SELECT.
BEGIN;
SELECT acquired, fencing_token, holder FROM le_acquire('cheap', 'follower', '1 hour');
SELECT acquired, fencing_token, holder FROM le_acquire('cheap', 'follower2', '1 hour');
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
SELECT locktype, mode FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype NOT IN ('relation', 'virtualxid')
 ORDER BY 1, 2;
SELECT relation::regclass AS relation, mode FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'relation'
   AND relation::regclass::text LIKE 'le\_%'
 ORDER BY 1, 2;
COMMIT;

-- For contrast, a grant in an open transaction takes all of them: an xid,
-- the fence lock (advisory tag, ExclusiveLock) and the row lock (xid).
BEGIN;
SELECT acquired, fencing_token FROM le_acquire('cheap-grant', 'leader', '1 hour');
SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS has_xid;
SELECT locktype, mode FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype NOT IN ('relation', 'virtualxid')
 ORDER BY 1, 2;
COMMIT;

-- No WAL: 200 refusals in a row leave the WAL insert position where it was.
-- A background process (autovacuum, checkpointer) or the pruning of dead row
-- versions by the first read may write WAL meanwhile, so try up to 5 quiet
-- windows; a refusal that wrote WAL would make every window fail.
CREATE FUNCTION pg_temp.refusals_write_wal() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  lsn pg_lsn;
  r record;
BEGIN
  FOR attempt IN 1..5 LOOP
    lsn := pg_current_wal_insert_lsn();
    FOR i IN 1..200 LOOP
      SELECT * INTO r FROM le_acquire('cheap', 'follower-' || i, '1 hour');
      IF r.acquired THEN
        RETURN 'a refusal was granted';
      END IF;
    END LOOP;
    IF pg_current_wal_insert_lsn() = lsn THEN
      RETURN 'no WAL written';
    END IF;
    PERFORM pg_sleep(0.2);
  END LOOP;
  RETURN 'WAL written in every window';
END $$;
SELECT pg_temp.refusals_write_wal();
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;

-- Only lease_id and lease_key are indexed; renewals change neither.
SELECT i.indexrelid::regclass AS index, a.attname
  FROM pg_index i
  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
 WHERE i.indrelid = 'le_lease'::regclass
 ORDER BY 1, 2;
SELECT reloptions FROM pg_class WHERE oid = 'le_lease'::regclass;

-- 300 renewals, each its own transaction as a client sends them: every one
-- is a HOT update, and the table grows by at most one page (fillfactor 50
-- leaves room on the page; pruning of older versions reclaims it).
SELECT pg_stat_force_next_flush();
SELECT n_tup_upd AS upd0, n_tup_hot_upd AS hot0,
       pg_relation_size('le_lease') / current_setting('block_size')::int AS pages0
  FROM pg_stat_user_tables WHERE relid = 'le_lease'::regclass \gset
\set ECHO none
\o /dev/null
SELECT format('SELECT le_renew(''cheap'', ''leader'', %s, ''1 hour'')', :cheap_tok) FROM generate_series(1, 300) \gexec
\o
\set ECHO all
SELECT pg_stat_force_next_flush();
SELECT n_tup_upd - :upd0 AS updates, n_tup_hot_upd - :hot0 AS hot_updates,
       pg_relation_size('le_lease') / current_setting('block_size')::int - :pages0 <= 1 AS grew_at_most_one_page,
       pg_relation_size('le_lease') / current_setting('block_size')::int <= 4 AS small
  FROM pg_stat_user_tables WHERE relid = 'le_lease'::regclass;
SELECT holder, fencing_token, transitions FROM le_leases WHERE lease_key = 'cheap';

-- The WAL records of a renewal, a first grant, a release and a grant
-- (pg_walinspect; those of the call's transaction only, xid <> 0, so not a
-- page pruned on the way): the lease row is updated in place without a
-- separate row-lock record (Heap/LOCK) when nobody else has the row; a grant
-- also inserts its history row with its index entry, a release closes it.
CREATE EXTENSION pg_walinspect;
SELECT pg_current_wal_insert_lsn() AS w0 \gset
SELECT le_renew('cheap', 'leader', :cheap_tok, '1 hour') IS NOT NULL AS renewed;
SELECT pg_current_wal_insert_lsn() AS w1 \gset
SELECT acquired FROM le_acquire('cheap-wal', 'w', '1 minute');
SELECT pg_current_wal_insert_lsn() AS w2 \gset
SELECT le_release('cheap-wal', 'w', fencing_token) FROM le_leases WHERE lease_key = 'cheap-wal';
SELECT pg_current_wal_insert_lsn() AS w3 \gset
SELECT acquired FROM le_acquire('cheap-wal', 'w', '1 minute');
SELECT pg_current_wal_insert_lsn() AS w4 \gset
SELECT step, string_agg(resource_manager || '/' || record_type, ' ' ORDER BY start_lsn) AS records
  FROM (VALUES (1, 'renewal', :'w0'::pg_lsn, :'w1'::pg_lsn), (2, 'first grant', :'w1', :'w2'),
               (3, 'release', :'w2', :'w3'), (4, 'grant', :'w3', :'w4')) AS s(n, step, a, b),
       LATERAL pg_get_wal_records_info(a, b) AS r
 WHERE r.xid <> '0' AND resource_manager IN ('Heap', 'Heap2', 'Btree')
 GROUP BY n, step ORDER BY n;
DROP EXTENSION pg_walinspect;
