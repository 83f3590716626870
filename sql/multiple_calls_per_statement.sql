-- G6: Every SQL function of the extension called several times in one
-- statement: in one select list, in FROM, with LATERAL and over
-- generate_series.  Each call's result must be its own (a result built in
-- memory that SPI frees at the end of the call crashed the backend, or showed
-- the next call's row in place of this one's), and must match the state the
-- calls left behind.  Results are kept in temporary tables and compared with
-- le_leases in the next statement, which sees what the calls committed.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY sqlstate
\set ON_ERROR_STOP 0

-- le_acquire three times in one select list: two keys, the first key twice
-- by its owner (the valid holder again: same period, same token).
CREATE TEMP TABLE sl AS
SELECT to_jsonb(x) AS x, to_jsonb(y) AS y, to_jsonb(z) AS z, to_jsonb(refused) AS refused
  FROM (SELECT le_acquire('mc-a', 'o1', '1 hour') AS x,
               le_acquire('mc-b', 'o2', '1 hour') AS y,
               le_acquire('mc-a', 'o1', '1 hour') AS z,
               le_acquire('mc-a', 'o3', '1 hour') AS refused
        OFFSET 0) AS calls;
SELECT x->'acquired' AS x_acq, x->>'holder' AS x_holder,
       y->'acquired' AS y_acq, y->>'holder' AS y_holder,
       z->'acquired' AS z_acq, z->>'holder' AS z_holder,
       refused->'acquired' AS r_acq, refused->>'holder' AS r_holder,
       refused->'fencing_token' AS r_token,
       x->'new_period' AS x_new, y->'new_period' AS y_new, z->'new_period' AS z_new,
       refused->'new_period' AS r_new,
       (x->>'fencing_token')::bigint = a.fencing_token AS x_is_current,
       (z->>'fencing_token')::bigint = a.fencing_token AS z_same_token,
       (y->>'fencing_token')::bigint = b.fencing_token AS y_is_current,
       (z->>'expires_at')::timestamptz = a.expires_at AS z_expiry_is_current,
       (x->>'expires_at')::timestamptz <= (z->>'expires_at')::timestamptz AS z_not_earlier,
       (refused->>'expires_at')::timestamptz = a.expires_at AS r_shows_expiry
  FROM sl,
       le_leases a,
       le_leases b
 WHERE a.lease_key = 'mc-a' AND b.lease_key = 'mc-b';

-- The same key twice by the same owner: both calls report the one period.
CREATE TEMP TABLE twice AS
SELECT to_jsonb(first) AS first, to_jsonb(second) AS second
  FROM (SELECT le_acquire('mc-s', 'o', '1 hour') AS first,
               le_acquire('mc-s', 'o', '1 hour') AS second
        OFFSET 0) AS calls;
SELECT first->'acquired' AS first_acq, second->'acquired' AS second_acq,
       first->'new_period' AS first_new, second->'new_period' AS second_new,
       first->'fencing_token' = second->'fencing_token' AS same_token,
       (second->>'fencing_token')::bigint = l.fencing_token AS is_current,
       (first->>'expires_at')::timestamptz < (second->>'expires_at')::timestamptz AS second_extends,
       (second->>'expires_at')::timestamptz = l.expires_at AS second_is_current
  FROM twice, le_leases l WHERE l.lease_key = 'mc-s';

-- In FROM: two calls, one row each.
CREATE TEMP TABLE fr AS
SELECT f.acquired AS f_acq, f.holder AS f_holder, f.fencing_token AS f_tok, f.new_period AS f_new,
       g.acquired AS g_acq, g.holder AS g_holder, g.fencing_token AS g_tok, g.new_period AS g_new
  FROM le_acquire('mc-c', 'o1', '1 hour') f, le_acquire('mc-d', 'o2', '1 hour') g;
SELECT f_acq, f_holder, f_new, g_acq, g_holder, g_new,
       f_tok = (SELECT fencing_token FROM le_leases WHERE lease_key = 'mc-c') AS f_current,
       g_tok = (SELECT fencing_token FROM le_leases WHERE lease_key = 'mc-d') AS g_current
  FROM fr;

-- LATERAL over a list of keys, one key three times by different owners:
-- its first call wins, the other two are refused and name the winner.
CREATE TEMP TABLE lat AS
SELECT v.n, v.k, v.o, r.acquired, r.holder, r.fencing_token, r.new_period
  FROM (VALUES (1, 'mc-l1', 'w1'), (2, 'mc-l2', 'w2'), (3, 'mc-l1', 'w3'), (4, 'mc-l1', 'w4'))
       AS v(n, k, o),
       LATERAL le_acquire(v.k, v.o, '1 hour') AS r;
SELECT lat.n, lat.k, lat.o, lat.acquired, lat.holder, lat.new_period,
       (lat.fencing_token = l.fencing_token) AS token_is_current
  FROM lat JOIN le_leases l ON l.lease_key = lat.k ORDER BY lat.n;

-- Over generate_series: nine calls on three keys, owner by key, so every
-- call is granted; three new periods, six extensions.  Each row also calls
-- le_acquire a second time for a key of its own (results of two calls alive
-- at once in every row).
CREATE TEMP TABLE gs AS
SELECT g, to_jsonb(r) AS r, to_jsonb(own) AS own
  FROM (SELECT g, le_acquire('mc-g' || (g % 3), 'gowner' || (g % 3), '1 hour') AS r,
               le_acquire('mc-own' || g, 'x', '1 hour') AS own
          FROM generate_series(1, 9) AS g OFFSET 0) AS calls;
SELECT g, r->'acquired' AS acquired, r->>'holder' AS holder, r->'new_period' AS new_period,
       (r->>'fencing_token')::bigint = l.fencing_token AS token_is_current
  FROM gs JOIN le_leases l ON l.lease_key = 'mc-g' || (g % 3) ORDER BY g;
SELECT count(DISTINCT r->'fencing_token') AS distinct_tokens,
       count(*) FILTER (WHERE own->>'holder' = 'x' AND (own->>'acquired')::boolean) AS own_granted,
       bool_and((own->>'fencing_token')::bigint = l.fencing_token) AS own_current
  FROM gs JOIN le_leases l ON l.lease_key = 'mc-own' || g;

-- le_renew several times in one select list and over generate_series.
SELECT fencing_token AS tok_a FROM le_leases WHERE lease_key = 'mc-a' \gset
SELECT fencing_token AS tok_b FROM le_leases WHERE lease_key = 'mc-b' \gset
CREATE TEMP TABLE rn AS
SELECT le_renew('mc-a', 'o1', :tok_a, '50 minutes') AS a1,
       le_renew('mc-b', 'o2', :tok_b, '50 minutes') AS b1,
       le_renew('mc-a', 'o2', :tok_a, '50 minutes') AS wrong_owner,
       le_renew('mc-a', 'o1', :tok_a, '55 minutes') AS a2;
SELECT a1 IS NOT NULL AS a1_renewed, b1 IS NOT NULL AS b1_renewed,
       wrong_owner IS NULL AS wrong_owner_null, a1 < a2 AS a2_later,
       a2 = (SELECT expires_at FROM le_leases WHERE lease_key = 'mc-a') AS a2_current,
       b1 = (SELECT expires_at FROM le_leases WHERE lease_key = 'mc-b') AS b1_current
  FROM rn;
SELECT count(*) AS renewed
  FROM generate_series(1, 5) g, LATERAL le_renew('mc-a', 'o1', :tok_a, '1 hour') r
 WHERE r IS NOT NULL;

-- le_fence_check several times: passes for current tokens, each call's
-- error is its own.
SELECT le_fence_check('mc-a', :tok_a), le_fence_check('mc-b', :tok_b), le_fence_check('mc-a', :tok_a);
SELECT count(*) AS checked
  FROM generate_series(1, 4) g, LATERAL le_fence_check(CASE WHEN g % 2 = 0 THEN 'mc-a' ELSE 'mc-b' END,
                                                     CASE WHEN g % 2 = 0 THEN :tok_a ELSE :tok_b END) c;
SELECT le_fence_check('mc-a', :tok_a), le_fence_check('mc-b', :tok_b + 1000000);
\echo :LAST_ERROR_SQLSTATE

-- le_protect / le_unprotect several times in one select list.
CREATE TABLE mc_t1 (id int, fencing_token bigint);
CREATE TABLE mc_t2 (id int, tok bigint);
SELECT le_protect('mc_t1', 'mc-a'), le_protect('mc_t2', 'mc-b', 'tok'), le_protect('mc_t1', 'mc-a');
INSERT INTO mc_t1 VALUES (1, :tok_a);
INSERT INTO mc_t2 VALUES (1, :tok_b);
INSERT INTO mc_t2 VALUES (2, :tok_b + 1000000);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS fence_triggers FROM pg_trigger
 WHERE tgrelid IN ('mc_t1'::regclass, 'mc_t2'::regclass) AND NOT tgisinternal;
SELECT le_unprotect('mc_t1') AS u1, le_unprotect('mc_t2') AS u2, le_unprotect('mc_t1') AS u1_again;
SELECT count(*) AS fence_triggers FROM pg_trigger
 WHERE tgrelid IN ('mc_t1'::regclass, 'mc_t2'::regclass) AND NOT tgisinternal;
SELECT le_protect(t::regclass, 'mc-a') FROM (VALUES ('mc_t1'), ('mc_t2')) v(t) WHERE false;
SELECT count(*) AS protected
  FROM (VALUES ('mc_t1'), ('mc_t1')) v(t), LATERAL le_protect(v.t::regclass, 'mc-a') p;
SELECT le_unprotect('mc_t1') AS u1;
DROP TABLE mc_t1, mc_t2;

-- le_fence_advance several times in one select list, in FROM and over
-- generate_series: each call returns its own accepted token.
SELECT le_fence_advance('mc-r1', 5) AS r1_5, le_fence_advance('mc-r2', 3) AS r2_3,
       le_fence_advance('mc-r1', 7) AS r1_7, le_fence_advance('mc-r1', 7) AS r1_7_again;
SELECT * FROM le_fence_advance('mc-r1', 8) a, le_fence_advance('mc-r2', 9) b;
SELECT g, le_fence_advance('mc-r3', g * 10) FROM generate_series(1, 4) g ORDER BY g;
SELECT resource, highest_token FROM le_fence_resource WHERE resource LIKE 'mc-%' ORDER BY resource;
SELECT le_fence_advance('mc-r1', 9), le_fence_advance('mc-r1', 2);
\echo :LAST_ERROR_SQLSTATE

-- The jobs functions several times per statement.
SELECT fencing_token AS tok_j FROM le_acquire('mc-jobs', 'leader', '1 hour') \gset
SELECT le_schedule_job('mc-jobs', :tok_j, 'mc:1', 't', clock_timestamp() - interval '1 minute') AS j1,
       le_schedule_job('mc-jobs', :tok_j, 'mc:2', 't', clock_timestamp() - interval '1 minute') AS j2,
       le_schedule_job('mc-jobs', :tok_j, 'mc:1', 't', clock_timestamp() - interval '1 minute') AS j1_again;
SELECT g, le_schedule_job('mc-jobs', :tok_j, 'mc:g' || g, 't', clock_timestamp() - interval '1 minute')
  FROM generate_series(1, 3) g ORDER BY g;
SELECT count(*) AS claimed_by_wa FROM generate_series(1, 2) g, LATERAL le_claim_jobs('wa', 1) c;
SELECT a.schedule_key IS NOT NULL AS a_claimed, b.schedule_key IS NOT NULL AS b_claimed,
       a.schedule_key <> b.schedule_key AS different_jobs, a.claimed_by, b.claimed_by
  FROM le_claim_jobs('wb', 1) a, le_claim_jobs('wc', 1) b;
SELECT claimed_by, count(*) FROM le_scheduled_jobs WHERE status = 'running' GROUP BY claimed_by ORDER BY claimed_by;
SELECT schedule_key AS ka FROM le_scheduled_jobs WHERE claimed_by = 'wa' ORDER BY job_id LIMIT 1 \gset
SELECT schedule_key AS kb FROM le_scheduled_jobs WHERE claimed_by = 'wb' \gset
SELECT schedule_key AS kc FROM le_scheduled_jobs WHERE claimed_by = 'wc' \gset
SELECT le_complete_job(:'ka', 'wa'), le_fail_job(:'kb', 'wb', 'boom', '1 hour') AS b_fail,
       le_fail_job(:'kc', 'wc', 'bang', '1 hour') AS c_fail;
SELECT schedule_key = :'ka' AS is_a, schedule_key = :'kb' AS is_b, status, attempts, last_error
  FROM le_scheduled_jobs WHERE schedule_key IN (:'ka', :'kb', :'kc') ORDER BY schedule_key = :'ka' DESC, last_error;
SELECT le_complete_job(:'ka', 'wa'), le_complete_job(:'kb', 'wb');
\echo :LAST_ERROR_SQLSTATE

-- le_release and le_force_release several times in one select list: each
-- answer is its own, and the state matches.
CREATE TEMP TABLE rel AS
SELECT le_release('mc-a', 'o1', :tok_a) AS a, le_release('mc-b', 'o2', :tok_b) AS b,
       le_release('mc-a', 'o1', :tok_a) AS a_again, le_release('mc-c', 'o2', 1) AS c_wrong;
SELECT * FROM rel;
SELECT lease_key, holder, is_valid FROM le_leases WHERE lease_key IN ('mc-a', 'mc-b', 'mc-c') ORDER BY 1;
SELECT le_force_release('mc-c') AS c, le_force_release('mc-d') AS d, le_force_release('mc-c') AS c_again,
       le_force_release('mc-none') AS none;
SELECT k, f FROM (VALUES ('mc-l1'), ('mc-l2'), ('mc-l1')) v(k), LATERAL le_force_release(v.k) f;
SELECT count(*) FILTER (WHERE r) AS released, count(*) FILTER (WHERE NOT r) AS not_held
  FROM generate_series(0, 5) g, LATERAL le_force_release('mc-g' || (g % 3)) r;
SELECT count(*) AS still_held FROM le_leases WHERE lease_key LIKE 'mc-%' AND holder IS NOT NULL;

-- History: one closed period per grant that was released, each token once.
SELECT lease_key, holder, end_reason
  FROM le_lease_history WHERE lease_key IN ('mc-a', 'mc-b', 'mc-c', 'mc-d', 'mc-l1', 'mc-l2')
 ORDER BY lease_key;
SELECT count(*) = count(DISTINCT (lease_id, fencing_token)) AS tokens_unique
  FROM le_lease_history WHERE lease_key LIKE 'mc-%';

-- le_prune_history several times: nothing is past the retention yet, then
-- everything ended is (the first call deletes, the others find nothing).
SELECT le_prune_history() AS p1, le_prune_history() AS p2;
SET leader_election.history_retention = 0;
SELECT pg_sleep(0.01);
CREATE TEMP TABLE pr AS SELECT le_prune_history() AS p1, le_prune_history() AS p2, le_prune_history() AS p3;
SELECT p1 > 0 AS first_deleted, p2, p3 FROM pr;
SELECT g, le_prune_history() FROM generate_series(1, 3) g ORDER BY g;
SELECT count(*) AS open_periods FROM le_lease_history WHERE ended_at IS NULL AND lease_key LIKE 'mc-%';
RESET leader_election.history_retention;

-- The view several times in one statement.
SELECT count(*) AS pairs FROM le_leases a JOIN le_leases b USING (lease_key)
 WHERE a.fencing_token = b.fencing_token AND lease_key LIKE 'mc-%';


-- Calls that fail inside the lease code (after it switched user, bounded
-- lock waits and connected SPI), caught by a PL/pgSQL exception block
-- several times in a row: the caller's lock_timeout and user are back,
-- and a later unrelated error carries no context of the lease.
SET lock_timeout = '7s';
SELECT acquired FROM le_acquire('mc-err', 'o', '1 minute');
SELECT le_force_release('mc-err');
UPDATE le_lease SET fencing_token = 9223372036854775807 WHERE lease_key = 'mc-err';
\set VERBOSITY terse
DO $$
DECLARE
  caught int := 0;
BEGIN
  FOR i IN 1 .. 3 LOOP
    BEGIN
      PERFORM le_acquire('mc-err', 'o', '1 minute'), le_acquire('mc-err2', 'o', '1 minute');
    EXCEPTION WHEN numeric_value_out_of_range THEN
      caught := caught + 1;
    END;
  END LOOP;
  RAISE NOTICE 'caught %, lock_timeout %, current_user is session_user: %',
    caught, current_setting('lock_timeout'), current_user = session_user;
END $$;
\set VERBOSITY sqlstate
SHOW lock_timeout;
SELECT current_user = session_user AS same_user;
SELECT count(*) AS mc_err2_rows FROM le_lease WHERE lease_key = 'mc-err2';
\set VERBOSITY default
SELECT 1 / 0;
\set VERBOSITY sqlstate
RESET lock_timeout;
