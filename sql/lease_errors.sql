-- G6: every bad input of le_acquire, le_renew, le_release
-- and le_force_release gets a documented SQLSTATE, changes nothing, and
-- leaves the backend alive.  G3: token overflow is an error, not a wrap.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY terse
SELECT pg_backend_pid() AS start_pid \gset

-- A fingerprint of all lease state: rows and history.
CREATE FUNCTION pg_temp.state() RETURNS text LANGUAGE sql AS $$
  SELECT md5(coalesce((SELECT string_agg(l::text, '|' ORDER BY lease_id) FROM le_lease l), '')
          || coalesce((SELECT string_agg(h::text, '|' ORDER BY history_id) FROM le_lease_history h), ''))
$$;

-- The current token of a lease (tokens come from a sequence shared by all
-- keys, so their values depend on what ran before).
CREATE FUNCTION pg_temp.tok(key text) RETURNS bigint LANGUAGE sql AS $$
  SELECT fencing_token FROM le_lease WHERE lease_key = key
$$;

-- Run one statement; report its SQLSTATE and message (or "ok"), and whether
-- the lease state is unchanged afterwards.
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

-- The lease every bad call below aims at, validly held by 'a'.
SELECT acquired, fencing_token, holder FROM le_acquire('err', 'a', '1 hour');
SELECT lease_key, holder, fencing_token, transitions FROM le_leases WHERE lease_key = 'err';

-- le_acquire: NULL (22004), empty (22023) and oversized (22001) key and owner;
-- bad ttl (22023): NULL is 22004, zero, negative, beyond max_ttl (3600 s).
SELECT t.label, r.*
  FROM (VALUES
    ('key NULL',            $$SELECT le_acquire(NULL, 'b', '1 minute')$$),
    ('key empty',           $$SELECT le_acquire('', 'b', '1 minute')$$),
    ('key 201 bytes',       $$SELECT le_acquire(repeat('k', 201), 'b', '1 minute')$$),
    ('key 202 bytes utf8',  $$SELECT le_acquire(repeat('é', 101), 'b', '1 minute')$$),
    ('owner NULL',          $$SELECT le_acquire('err', NULL, '1 minute')$$),
    ('owner empty',         $$SELECT le_acquire('err', '', '1 minute')$$),
    ('owner 201 bytes',     $$SELECT le_acquire('err', repeat('o', 201), '1 minute')$$),
    ('owner 10000 bytes',   $$SELECT le_acquire('err', repeat('o', 10000), '1 minute')$$),
    ('ttl NULL',            $$SELECT le_acquire('err', 'b', NULL)$$),
    ('ttl zero',            $$SELECT le_acquire('err', 'b', '0')$$),
    ('ttl negative',        $$SELECT le_acquire('err', 'b', '-1 second')$$),
    ('ttl -1 microsecond',  $$SELECT le_acquire('err', 'b', '-0.000001 seconds')$$),
    ('ttl 1 mon -30 days',  $$SELECT le_acquire('err', 'b', '1 mon -30 days')$$),
    ('ttl 1 month',         $$SELECT le_acquire('err', 'b', '1 month')$$),
    ('ttl max_ttl + 1 us',  $$SELECT le_acquire('err', 'b', '3600.000001 seconds')$$),
    ('ttl 1 day',           $$SELECT le_acquire('err', 'b', '1 day')$$),
    ('ttl 178000000 years', $$SELECT le_acquire('err', 'b', '178000000 years')$$),
    ('ttl -178000000 years',$$SELECT le_acquire('err', 'b', '-178000000 years')$$),
    ('ttl -100000000 years',$$SELECT le_acquire('err', 'b', '-100000000 years')$$),
    ('ttl huge days',       $$SELECT le_acquire('err', 'b', '2147483647 days 2562047788 hours')$$),
    ('all NULL',            $$SELECT le_acquire(NULL, NULL, NULL)$$)
  ) AS t(label, stmt), pg_temp.try(t.stmt) AS r;

-- le_renew: same checks, plus the token: NULL (22004), zero and negative (22023).
SELECT t.label, r.*
  FROM (VALUES
    ('key NULL',        $$SELECT le_renew(NULL, 'a', 1, '1 minute')$$),
    ('key empty',       $$SELECT le_renew('', 'a', 1, '1 minute')$$),
    ('key 201 bytes',   $$SELECT le_renew(repeat('k', 201), 'a', 1, '1 minute')$$),
    ('owner NULL',      $$SELECT le_renew('err', NULL, 1, '1 minute')$$),
    ('owner empty',     $$SELECT le_renew('err', '', 1, '1 minute')$$),
    ('owner 201 bytes', $$SELECT le_renew('err', repeat('o', 201), 1, '1 minute')$$),
    ('token NULL',      $$SELECT le_renew('err', 'a', NULL, '1 minute')$$),
    ('token zero',      $$SELECT le_renew('err', 'a', 0, '1 minute')$$),
    ('token negative',  $$SELECT le_renew('err', 'a', -1, '1 minute')$$),
    ('token min',       $$SELECT le_renew('err', 'a', -9223372036854775808, '1 minute')$$),
    ('ttl NULL',        $$SELECT le_renew('err', 'a', 1, NULL)$$),
    ('ttl zero',        $$SELECT le_renew('err', 'a', 1, '0 seconds')$$),
    ('ttl negative',    $$SELECT le_renew('err', 'a', 1, '-5 minutes')$$),
    ('ttl 1 month',     $$SELECT le_renew('err', 'a', 1, '1 month')$$),
    ('ttl 3601 s',      $$SELECT le_renew('err', 'a', 1, '3601 seconds')$$)
  ) AS t(label, stmt), pg_temp.try(t.stmt) AS r;

-- le_release and le_force_release.
SELECT t.label, r.*
  FROM (VALUES
    ('release key NULL',       $$SELECT le_release(NULL, 'a', 1)$$),
    ('release key empty',      $$SELECT le_release('', 'a', 1)$$),
    ('release key 201 bytes',  $$SELECT le_release(repeat('k', 201), 'a', 1)$$),
    ('release owner NULL',     $$SELECT le_release('err', NULL, 1)$$),
    ('release owner empty',    $$SELECT le_release('err', '', 1)$$),
    ('release owner 201',      $$SELECT le_release('err', repeat('o', 201), 1)$$),
    ('release token NULL',     $$SELECT le_release('err', 'a', NULL)$$),
    ('release token zero',     $$SELECT le_release('err', 'a', 0)$$),
    ('release token negative', $$SELECT le_release('err', 'a', -42)$$),
    ('force key NULL',         $$SELECT le_force_release(NULL)$$),
    ('force key empty',        $$SELECT le_force_release('')$$),
    ('force key 201 bytes',    $$SELECT le_force_release(repeat('k', 201))$$)
  ) AS t(label, stmt), pg_temp.try(t.stmt) AS r;

-- The same errors straight from psql: the message, and the SQLSTATE psql saw.
SELECT le_acquire('', 'b');
\echo :LAST_ERROR_SQLSTATE
SELECT le_renew('err', 'a', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT le_acquire('err', 'b', '2 hours');
\echo :LAST_ERROR_SQLSTATE
SELECT le_release('err', repeat('o', 201), 1);
\echo :LAST_ERROR_SQLSTATE

-- Nothing changed: 'a' still holds 'err' with its token, one period in history.
SELECT lease_key, holder, fencing_token, transitions, is_valid FROM le_leases WHERE lease_key = 'err';
SELECT holder, fencing_token, ended_at FROM le_lease_history WHERE lease_key = 'err';

-- Exactly at the limits is accepted: 200-byte key and owner (bytes, not
-- characters: 100 two-byte characters), ttl equal to max_ttl.
SELECT t.label, r.*
  FROM (VALUES
    ('key 200 bytes',      $$SELECT le_acquire(repeat('k', 200), 'b', '1 minute')$$),
    ('key 200 bytes utf8', $$SELECT le_acquire(repeat('é', 100), 'b', '1 minute')$$),
    ('owner 200 bytes',    $$SELECT le_acquire('err-200', repeat('o', 200), '3600 seconds')$$)
  ) AS t(label, stmt), pg_temp.try(t.stmt) AS r;
SELECT length(lease_key) AS key_chars, octet_length(lease_key) AS key_bytes,
       octet_length(holder) AS owner_bytes, fencing_token
  FROM le_leases WHERE lease_key IN (repeat('k', 200), repeat('é', 100), 'err-200')
  ORDER BY lease_key;
SELECT le_renew('err-200', repeat('o', 200), pg_temp.tok('err-200'), '1 hour') > clock_timestamp() AS renewed_at_max_ttl;
SELECT le_release('err-200', repeat('o', 200), pg_temp.tok('err-200')) AS released;

-- A superuser lowers leader_election.max_ttl: the new bound applies at once,
-- to acquire and renew; raising it again restores the old bound.
SET leader_election.max_ttl = '10min';
SELECT t.label, r.*
  FROM (VALUES
    ('acquire 601 s', $$SELECT le_acquire('err-ttl', 'b', '601 seconds')$$),
    ('acquire 1 h',   $$SELECT le_acquire('err-ttl', 'b', '1 hour')$$),
    ('renew 601 s',   $$SELECT le_renew('err', 'a', 1, '601 seconds')$$),
    ('acquire 600 s', $$SELECT le_acquire('err-ttl', 'b', '600 seconds')$$)
  ) AS t(label, stmt), pg_temp.try(t.stmt) AS r;
SELECT le_acquire('err-ttl', 'b', '11 minutes');
\echo :LAST_ERROR_SQLSTATE
SET leader_election.max_ttl = '2h';
SELECT (le_renew('err-ttl', 'b', pg_temp.tok('err-ttl'), '2 hours') - clock_timestamp()) > interval '119 minutes' AS renewed_2h;
SELECT t.label, r.* FROM (VALUES
    ('renew 2 h + 1 s', $$SELECT le_renew('err-ttl', 'b', pg_temp.tok('err-ttl'), '7201 seconds')$$)
  ) AS t(label, stmt), pg_temp.try(t.stmt) AS r;
RESET leader_election.max_ttl;
SHOW leader_election.max_ttl;

-- Token overflow (G3): the last token issued is 2^63-1; the next grant
-- fails with 22003 and changes nothing, neither the row nor the history.
SELECT acquired, fencing_token FROM le_acquire('err-ovf', 'a', '1 hour');
SELECT le_release('err-ovf', 'a', pg_temp.tok('err-ovf')) AS released;
UPDATE le_lease SET fencing_token = 9223372036854775807 WHERE lease_key = 'err-ovf';
SELECT pg_temp.state() AS before_ovf \gset
SELECT t.label, r.* FROM (VALUES
    ('acquire after max token', $$SELECT le_acquire('err-ovf', 'b', '1 minute')$$)
  ) AS t(label, stmt), pg_temp.try(t.stmt) AS r;
SELECT * FROM le_acquire('err-ovf', 'b', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.state() = :'before_ovf' AS unchanged;
SELECT holder, fencing_token, transitions FROM le_leases WHERE lease_key = 'err-ovf';
-- The same when the last holder's period lapsed instead of being released:
-- the period is not closed by the failed grant.
UPDATE le_lease SET fencing_token = 1 WHERE lease_key = 'err-ovf';
SELECT acquired, fencing_token FROM le_acquire('err-ovf', 'c', '10 milliseconds');
UPDATE le_lease SET fencing_token = 9223372036854775807 WHERE lease_key = 'err-ovf';
SELECT pg_sleep(0.05);
SELECT pg_temp.state() AS before_ovf \gset
SELECT t.label, r.* FROM (VALUES
    ('acquire expired max token', $$SELECT le_acquire('err-ovf', 'b', '1 minute')$$)
  ) AS t(label, stmt), pg_temp.try(t.stmt) AS r;
SELECT pg_temp.state() = :'before_ovf' AS unchanged;
SELECT holder, fencing_token, end_reason, ended_at IS NOT NULL AS ended FROM le_lease_history
 WHERE lease_key = 'err-ovf' ORDER BY history_id;
-- Renewing and releasing at the largest token still work (no arithmetic).
SELECT le_renew('err-ovf', 'c', 9223372036854775807, '1 minute') IS NULL AS lapsed_not_renewed;
SELECT le_release('err-ovf', 'c', 9223372036854775807) AS released_at_max;

-- A read-only transaction: changes fail with 25006 and change nothing; a
-- refusal only reads, so it is answered.
BEGIN TRANSACTION READ ONLY;
SELECT t.label, r.*
  FROM (VALUES
    ('acquire free lease',  $$SELECT le_acquire('err-ro', 'b', '1 minute')$$),
    ('acquire held lease',  $$SELECT le_acquire('err', 'b', '1 minute')$$),
    ('re-acquire own',      $$SELECT le_acquire('err', 'a', '1 minute')$$),
    ('renew',               $$SELECT le_renew('err', 'a', 1, '1 minute')$$),
    ('release',             $$SELECT le_release('err', 'a', pg_temp.tok('err'))$$),
    ('force release',       $$SELECT le_force_release('err')$$),
    ('prune history',       $$SELECT le_prune_history()$$)
  ) AS t(label, stmt), pg_temp.try(t.stmt) AS r;
SELECT acquired, fencing_token, holder FROM le_acquire('err', 'b', '1 minute');
SELECT le_renew('err', 'a', 1, '1 minute');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SET default_transaction_read_only = on;
SELECT le_release('err', 'a', pg_temp.tok('err'));
\echo :LAST_ERROR_SQLSTATE
RESET default_transaction_read_only;

-- After all of that: the lease is intact and usable, the backend is the same.
SELECT lease_key, holder, fencing_token, transitions, is_valid FROM le_leases WHERE lease_key = 'err';
SELECT le_renew('err', 'a', pg_temp.tok('err'), '1 minute') IS NOT NULL AS renewed;
SELECT le_release('err', 'a', pg_temp.tok('err')) AS released;
SELECT acquired, fencing_token, holder FROM le_acquire('err', 'b', '1 minute');
SELECT pg_backend_pid() = :start_pid AS same_backend;
