-- G6: bad input of le_acquire's wait and metadata and of le_set_metadata
-- gets a documented SQLSTATE and changes nothing.  G4: only the holder,
-- with its current token, sets the metadata (LE001 otherwise, LE002 when
-- the lease is not held).  The metadata is shown in le_leases, kept by
-- renewals, replaced by a new period and cleared by a release.  A wait of
-- NULL or zero is a single try.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY terse

CREATE FUNCTION pg_temp.state() RETURNS text LANGUAGE sql AS $$
  SELECT md5(coalesce((SELECT string_agg(l::text, '|' ORDER BY lease_id) FROM le_lease l), '')
          || coalesce((SELECT string_agg(h::text, '|' ORDER BY history_id) FROM le_lease_history h), ''))
$$;
CREATE FUNCTION pg_temp.tok(key text) RETURNS bigint LANGUAGE sql AS $$
  SELECT fencing_token FROM le_lease WHERE lease_key = key
$$;
CREATE FUNCTION pg_temp.try(stmt text, OUT state text, OUT message text, OUT unchanged boolean)
LANGUAGE plpgsql AS $$
DECLARE
  before text := pg_temp.state();
BEGIN
  BEGIN
    EXECUTE stmt;
    state := 'ok';
  EXCEPTION WHEN OTHERS THEN
    state := SQLSTATE;
    message := SQLERRM;
  END;
  unchanged := pg_temp.state() = before;
END $$;

-- Two periods of 'a', so that a stale token exists (token values depend
-- on the tests run before: messages show N for numbers).
SELECT acquired FROM le_acquire('meta', 'a', '1 hour');
SELECT pg_temp.tok('meta') AS stale \gset
SELECT le_release('meta', 'a', :stale);
SELECT acquired, holder FROM le_acquire('meta', 'a', '1 hour', metadata => '{"addr": "10.0.0.5:8080"}');
SELECT holder, metadata FROM le_leases WHERE lease_key = 'meta';

-- Bad waits (22023), oversized or too deeply nested metadata (54000), le_set_metadata by others.
SELECT t.label, r.state, regexp_replace(r.message, '[0-9]+', 'N', 'g') AS message, r.unchanged
  FROM (VALUES
    ('wait negative',        $$SELECT le_acquire('meta', 'b', '1 minute', wait => '-1 second')$$),
    ('wait past one day',    $$SELECT le_acquire('meta', 'b', '1 minute', wait => '25 hours')$$),
    ('wait month',           $$SELECT le_acquire('meta', 'b', '1 minute', wait => '1 month')$$),
    ('metadata 4001 bytes',  $$SELECT le_acquire('meta', 'b', '1 minute', metadata => to_jsonb(repeat('x', 3999)))$$),
    ('metadata 9 levels',    $$SELECT le_acquire('meta', 'b', '1 minute', metadata => '[[[[[[[[[1]]]]]]]]]')$$),
    ('set: 9 levels',        format($$SELECT le_set_metadata('meta', 'a', %s, '{"a":[[[[[[[[1]]]]]]]]}')$$, pg_temp.tok('meta'))),
    ('set: stale token',     format($$SELECT le_set_metadata('meta', 'a', %s, '1')$$, :stale)),
    ('set: unissued token',  format($$SELECT le_set_metadata('meta', 'a', %s, '1')$$, pg_temp.tok('meta') + 1)),
    ('set: other owner',     format($$SELECT le_set_metadata('meta', 'b', %s, '1')$$, pg_temp.tok('meta'))),
    ('set: unknown key',     $$SELECT le_set_metadata('nokey', 'a', 1, '1')$$),
    ('set: token NULL',      $$SELECT le_set_metadata('meta', 'a', NULL, '1')$$),
    ('set: token zero',      $$SELECT le_set_metadata('meta', 'a', 0, '1')$$),
    ('set: too long',        format($$SELECT le_set_metadata('meta', 'a', %s, to_jsonb(repeat('x', 3999)))$$, pg_temp.tok('meta')))
  ) AS t(label, stmt), LATERAL pg_temp.try(t.stmt) AS r;

-- A wait of NULL or zero is one try: refused at once.
SELECT acquired, holder FROM le_acquire('meta', 'b', '1 minute', wait => NULL);
SELECT acquired, holder FROM le_acquire('meta', 'b', '1 minute', wait => '0');
-- Metadata of exactly 4000 bytes is accepted.
SELECT length(to_jsonb(repeat('x', 3998))::text) AS bytes,
       pg_temp.try(format($$SELECT le_set_metadata('meta', 'a', %s, to_jsonb(repeat('x', 3998)))$$, pg_temp.tok('meta'))) AS r;

-- The holder sets it; a renewal and a re-acquire without metadata keep it;
-- a re-acquire with metadata replaces it; NULL clears it.
SELECT le_set_metadata('meta', 'a', pg_temp.tok('meta'), '{"addr": "10.0.0.5:8081"}');
SELECT le_renew('meta', 'a', pg_temp.tok('meta'), '1 hour') IS NOT NULL AS renewed;
SELECT acquired, new_period FROM le_acquire('meta', 'a', '1 hour');
SELECT metadata FROM le_leases WHERE lease_key = 'meta';
SELECT acquired, new_period FROM le_acquire('meta', 'a', '1 hour', metadata => '[1, 2]');
SELECT metadata FROM le_leases WHERE lease_key = 'meta';
SELECT le_set_metadata('meta', 'a', pg_temp.tok('meta'), NULL);
SELECT metadata IS NULL AS cleared FROM le_leases WHERE lease_key = 'meta';

-- A release clears it; the next period starts with its own (or none).
SELECT le_set_metadata('meta', 'a', pg_temp.tok('meta'), '"leader a"');
SELECT le_release('meta', 'a', pg_temp.tok('meta'));
SELECT holder, metadata FROM le_leases WHERE lease_key = 'meta';
SELECT pg_temp.try($$SELECT le_set_metadata('meta', 'a', pg_temp.tok('meta'), '1')$$);
SELECT acquired, holder FROM le_acquire('meta', 'b', '1 hour');
SELECT holder, metadata FROM le_leases WHERE lease_key = 'meta';

-- A transaction that changed or locked a lease refuses a wait (0A000).
BEGIN;
SELECT acquired FROM le_acquire('meta2', 'c', '1 hour');
SELECT * FROM pg_temp.try($$SELECT le_acquire('meta', 'c', '1 hour', wait => '1 second')$$);
ROLLBACK;

SELECT le_force_release('meta');

-- A granted wait returns at once; a lapsed lease is taken over at its
-- expiry by a waiter, with a new token.
SELECT acquired, holder FROM le_acquire('meta', 'a', '1 hour', wait => '10 seconds');
SELECT pg_temp.tok('meta') AS t1 \gset
SELECT le_release('meta', 'a', :t1);
SELECT acquired FROM le_acquire('meta', 'a', '200 milliseconds');
SELECT acquired, holder, fencing_token > :t1 AS higher, new_period
  FROM le_acquire('meta', 'b', '1 hour', wait => '30 seconds', metadata => '{"who": "b"}');
SELECT holder, metadata FROM le_leases WHERE lease_key = 'meta';
SELECT end_reason FROM le_lease_history WHERE lease_key = 'meta' AND holder = 'a' ORDER BY fencing_token DESC LIMIT 1;

-- REPEATABLE READ refuses a wait (0A000), not a single try.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT acquired FROM le_acquire('meta', 'c', '1 hour');
SELECT * FROM pg_temp.try($$SELECT le_acquire('meta', 'c', '1 hour', wait => '1 second')$$);
ROLLBACK;

SELECT le_force_release('meta');
