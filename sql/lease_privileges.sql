-- G8: ordinary roles cannot forge lease state.  No direct writes to the
-- extension's tables or sequence; the API only after GRANT; a lease belongs
-- to the role that acquired it (another role cannot renew, release or
-- re-acquire it, even with the right owner id and token); the admin
-- functions are not executable by PUBLIC; every function pins search_path
-- and a search_path hijack changes nothing; the extension is not trusted.
-- G8: le_grant(role, use) gives a role everything one use
-- needs (each use exercised below by a role that had nothing before);
-- internal helpers are named _le_*, commented as internal and closed; the
-- view le_jobs is not readable by PUBLIC.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS leader_election;
RESET client_min_messages;
\set VERBOSITY terse

CREATE ROLE regress_le_a;
CREATE ROLE regress_le_b;
GRANT USAGE, CREATE ON SCHEMA public TO regress_le_a, regress_le_b;

-- Run one statement; report its SQLSTATE (or "ok").  SECURITY INVOKER, so it
-- runs as whoever calls it.
CREATE FUNCTION public.regress_le_try(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE stmt;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ' ' || SQLERRM;
END $$;

-- A lease for the ordinary role to attack, held by a superuser session.
SELECT acquired, fencing_token FROM le_acquire('priv-admin', 'admin', '1 hour');

-- No direct access to the tables or the sequence (42501); reading le_leases
-- and le_lease_history is allowed.
SET ROLE regress_le_a;
SELECT t.label, regress_le_try(t.stmt) AS result
  FROM (VALUES
    ('insert le_lease',      $$INSERT INTO le_lease (lease_key) VALUES ('forged')$$),
    ('update le_lease',      $$UPDATE le_lease SET fencing_token = 1$$),
    ('delete le_lease',      $$DELETE FROM le_lease$$),
    ('truncate le_lease',    $$TRUNCATE le_lease$$),
    ('select le_lease',      $$SELECT * FROM le_lease$$),
    ('lock le_lease',        $$LOCK TABLE le_lease IN ROW SHARE MODE$$),
    ('insert history',       $$INSERT INTO le_lease_history (lease_id, lease_key, holder, holder_role, fencing_token, acquired_at) VALUES (1, 'x', 'x', 'x', 1, now())$$),
    ('update history',       $$UPDATE le_lease_history SET fencing_token = 1$$),
    ('delete history',       $$DELETE FROM le_lease_history$$),
    ('truncate history',     $$TRUNCATE le_lease_history$$),
    ('nextval sequence',     $$SELECT nextval('le_lease_id_seq')$$),
    ('setval sequence',      $$SELECT setval('le_lease_id_seq', 1)$$),
    ('nextval history seq',  $$SELECT nextval('le_lease_history_id_seq')$$),
    ('update view',          $$UPDATE le_leases SET fencing_token = 1$$),
    ('select le_leases',     $$SELECT count(*) FROM le_leases$$),
    ('select history',       $$SELECT count(*) FROM le_lease_history$$),
    ('alter table',          $$ALTER TABLE le_lease DISABLE TRIGGER ALL$$),
    ('set max_ttl',          $$SET leader_election.max_ttl = '1d'$$),
    ('set history_retention',$$SET leader_election.history_retention = 0$$),
    ('set lock_timeout',     $$SET leader_election.lock_timeout = 100$$)
  ) AS t(label, stmt);

-- The API is not executable before a GRANT.
SELECT t.label, regress_le_try(t.stmt) AS result
  FROM (VALUES
    ('le_acquire',       $$SELECT le_acquire('priv', 'node1')$$),
    ('le_renew',         $$SELECT le_renew('priv', 'node1', 1)$$),
    ('le_release',       $$SELECT le_release('priv', 'node1', 1)$$),
    ('le_force_release', $$SELECT le_force_release('priv-admin')$$),
    ('le_prune_history', $$SELECT le_prune_history()$$)
  ) AS t(label, stmt);
RESET ROLE;

GRANT EXECUTE ON FUNCTION le_acquire(text, text, interval, interval, jsonb), le_renew(text, text, bigint, interval),
      le_release(text, text, bigint) TO regress_le_a, regress_le_b;
GRANT EXECUTE ON FUNCTION le_protect(regclass, text, name, text, text, name), le_fence() TO regress_le_a;

-- Role a acquires with owner id 'node1'.
SET ROLE regress_le_a;
SELECT acquired, fencing_token, holder FROM le_acquire('priv', 'node1', '1 hour');
SELECT holder, holder_role, fencing_token FROM le_leases WHERE lease_key = 'priv';
SELECT fencing_token AS priv1 FROM le_leases WHERE lease_key OPERATOR(pg_catalog.=) 'priv' \gset
RESET ROLE;

-- Role b knows the owner id and the token, but is a different role: its
-- acquire is refused, its renew returns NULL, its release false.
SET ROLE regress_le_b;
SELECT acquired, fencing_token, holder FROM le_acquire('priv', 'node1', '1 hour');
SELECT le_renew('priv', 'node1', :priv1, '1 hour') IS NULL AS renew_refused;
SELECT le_release('priv', 'node1', :priv1) AS released;
-- Nor can it use the admin functions, still not granted.
SELECT t.label, regress_le_try(t.stmt) AS result
  FROM (VALUES
    ('le_force_release', $$SELECT le_force_release('priv')$$),
    ('le_prune_history', $$SELECT le_prune_history()$$)
  ) AS t(label, stmt);
SELECT holder, holder_role, fencing_token, is_valid, transitions FROM le_leases WHERE lease_key = 'priv';
RESET ROLE;

-- Role a, the real holder, still can.
SET ROLE regress_le_a;
SELECT le_renew('priv', 'node1', :priv1, '1 hour') IS NOT NULL AS renewed;
SELECT le_release('priv', 'node1', :priv1) AS released;
RESET ROLE;
-- Once free, role b may take it (a new period, a new token).
SET ROLE regress_le_b;
SELECT acquired, fencing_token, holder FROM le_acquire('priv', 'node1', '1 hour');
RESET ROLE;
SELECT holder, holder_role, fencing_token, end_reason FROM le_lease_history
 WHERE lease_key = 'priv' ORDER BY fencing_token;

-- Privileges of PUBLIC on the extension's functions: le_force_release and
-- le_prune_history are not executable by PUBLIC, nor anything else.
SELECT p.oid::regprocedure AS function
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leader_election'
 WHERE EXISTS (SELECT FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
 ORDER BY 1;
SELECT has_function_privilege('regress_le_b', 'le_force_release(text)', 'EXECUTE') AS b_can_force,
       has_function_privilege('regress_le_b', 'le_prune_history()', 'EXECUTE') AS b_can_prune;

-- PUBLIC's privileges on the extension's relations: nothing but SELECT
-- anywhere (the list is empty), and SELECT on the view and the history.
SELECT c.relname, a.privilege_type
  FROM pg_class c
  JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leader_election'
  CROSS JOIN LATERAL aclexplode(coalesce(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char", c.relowner))) a
 WHERE a.grantee = 0 AND a.privilege_type <> 'SELECT'
 ORDER BY 1, 2;
SELECT has_table_privilege('public', 'le_leases', 'SELECT') AS public_reads_le_leases,
       has_table_privilege('public', 'le_lease_history', 'SELECT') AS public_reads_history,
       has_table_privilege('public', 'le_lease', 'SELECT') AS public_reads_le_lease;

-- Every function of the extension pins search_path, and there are functions
-- to check.  Accepted exceptions, C code that looks up no object by name:
-- the row trigger le_fence() (its lease lookup is a direct index scan, no
-- SPI), where a SET clause would add a GUC save/restore to every protected
-- row written, and le_acquire, le_renew and le_release (direct index scans;
-- the one SPI statement, a new key's row, names only schema-qualified
-- tables), where it was 6% of an ownership period's instructions; the
-- hijack test below shows them unaffected.  Any other function listed here
-- is a bug.  Lease functions are not SECURITY DEFINER:
-- the C code switches to the extension owner only around its table access.
SELECT count(*) >= 5 AS has_functions
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leader_election';
SELECT p.oid::regprocedure AS unpinned_function, p.prosecdef, p.proconfig
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leader_election'
 WHERE NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)
 ORDER BY 1;
SELECT p.oid::regprocedure AS function, p.prosecdef
  FROM pg_proc p
 WHERE p.proname IN ('le_acquire', 'le_renew', 'le_release', 'le_force_release', 'le_prune_history')
   AND p.pronamespace = 'public'::regnamespace
 ORDER BY 1;

-- The extension is not trusted: only a superuser can create it.
SELECT name, version, superuser, trusted FROM pg_available_extension_versions
 WHERE name = 'leader_election';

-- search_path hijack (CVE-2018-1058 style): role a puts its own schema in
-- front of pg_catalog with look-alike objects: a text = text operator that
-- is always true, and clock_timestamp()/now() stuck in the year 2000 (which
-- would make every lease look valid for ever).  Behaviour does not change.
CREATE SCHEMA regress_le_hijack AUTHORIZATION regress_le_a;
SET ROLE regress_le_a;
CREATE FUNCTION regress_le_hijack.texteq_always(text, text) RETURNS boolean
  LANGUAGE sql IMMUTABLE AS 'SELECT true';
CREATE OPERATOR regress_le_hijack.= (LEFTARG = text, RIGHTARG = text,
  FUNCTION = regress_le_hijack.texteq_always);
CREATE FUNCTION regress_le_hijack.clock_timestamp() RETURNS timestamptz
  LANGUAGE sql AS $$SELECT '2000-01-01 00:00:00+00'::timestamptz$$;
CREATE FUNCTION regress_le_hijack.now() RETURNS timestamptz
  LANGUAGE sql AS $$SELECT '2000-01-01 00:00:00+00'::timestamptz$$;
RESET ROLE;
-- A le_fence_advance resource owned by the superuser, for the hijack below.
SELECT le_fence_advance('priv-res', 5);
GRANT EXECUTE ON FUNCTION le_fence_advance(text, bigint) TO regress_le_a;
-- A fresh session, so no plan was prepared before the hijack.
\c
\set VERBOSITY terse
SET ROLE regress_le_a;
SET search_path = regress_le_hijack, pg_catalog, public;
SELECT 'x'::text = 'y'::text AS hijacked_eq, clock_timestamp() < '2001-01-01' AS hijacked_clock;
-- 'priv' is held by role b: refused, even though '=' would match any key.
SELECT acquired, fencing_token, holder FROM le_acquire('priv', 'node1', '1 hour');
-- A 10 ms lease expires by the real clock, not the fake one.
SELECT acquired, fencing_token FROM le_acquire('priv-hijack', 'node1', '10 milliseconds');
SELECT fencing_token AS hj1 FROM le_leases WHERE lease_key OPERATOR(pg_catalog.=) 'priv-hijack' \gset
SELECT pg_catalog.pg_sleep(0.05);
SELECT le_renew('priv-hijack', 'node1', :hj1, '1 minute') IS NULL AS lapsed_not_renewed;
SELECT lease_key, is_valid FROM le_leases
 WHERE lease_key OPERATOR(pg_catalog.=) ANY (ARRAY['priv', 'priv-hijack']) ORDER BY 1;
SELECT acquired, fencing_token FROM le_acquire('priv-hijack', 'node2', '1 minute');
SELECT fencing_token AS hj2 FROM le_leases WHERE lease_key OPERATOR(pg_catalog.=) 'priv-hijack' \gset
SELECT le_release('priv-hijack', 'node2', :hj2) AS released;
-- The fence trigger (no pinned search_path, see above) under the same
-- hijack: the current token passes, a stale one is refused (LE001), a write
-- after the lease lapsed by the real clock is refused (LE002).
CREATE TABLE regress_le_hijack.jobs (id int, fencing_token bigint);
SELECT le_protect('regress_le_hijack.jobs', 'priv-fence');
SELECT acquired, fencing_token FROM le_acquire('priv-fence', 'node1', '1 minute');
SELECT fencing_token AS pf1 FROM le_leases WHERE lease_key OPERATOR(pg_catalog.=) 'priv-fence' \gset
SELECT le_release('priv-fence', 'node1', :pf1) AS released;
-- (The 10 ms lease is written to at once: its token is kept with \gset by
-- the acquire itself, and shown after the write.)
SELECT acquired AS pf2_acquired, fencing_token AS pf2
  FROM le_acquire('priv-fence', 'node2', '10 milliseconds') \gset
INSERT INTO regress_le_hijack.jobs VALUES (1, :pf2);
SELECT :'pf2_acquired' AS acquired, :pf2 OPERATOR(pg_catalog.>) :pf1 AS higher_token;
INSERT INTO regress_le_hijack.jobs VALUES (2, :pf1);
\echo :LAST_ERROR_SQLSTATE
SELECT pg_catalog.pg_sleep(0.05);
INSERT INTO regress_le_hijack.jobs VALUES (3, :pf2);
\echo :LAST_ERROR_SQLSTATE
SELECT id, fencing_token FROM regress_le_hijack.jobs;
-- le_fence_advance under the same hijack: the always-true '=' finds no other
-- role's resource for role a, which may only create and advance its own.
SELECT le_fence_advance('priv-res', 6);
\echo :LAST_ERROR_SQLSTATE
SELECT le_fence_advance('priv-res-a', 1);
SELECT le_fence_advance('priv-res-a', 2);
RESET ROLE;
RESET search_path;
SELECT resource, highest_token, owner_role = current_user AS superuser_owns FROM le_fence_resource
 WHERE resource LIKE 'priv-res%' ORDER BY 1;
-- Only the keys asked for were touched.
SELECT lease_key, holder, holder_role, fencing_token FROM le_leases
 WHERE lease_key IN ('priv', 'priv-hijack') ORDER BY 1;

-- le_grant(role, use): a role with nothing but CONNECT gets, per use, all
-- it needs; every step below would fail with 42501 without it.
CREATE ROLE regress_le_app;
GRANT USAGE, CREATE ON SCHEMA public TO regress_le_app;
SET ROLE regress_le_app;
SELECT regress_le_try($$SELECT le_acquire('app-lease', 'app-1', '1 minute')$$) AS before_grant;
RESET ROLE;
SELECT le_grant('regress_le_app', u) FROM unnest(ARRAY['campaign', 'fence', 'schedule', 'work', 'protect']) AS u;
SELECT le_grant('regress_le_app', 'nonsense');
\echo :LAST_ERROR_SQLSTATE
SELECT le_grant('regress_le_app', repeat('u', 100000));
\echo :LAST_ERROR_SQLSTATE
SELECT le_revoke(0::oid::regrole, 'monitor');
\echo :LAST_ERROR_SQLSTATE
SELECT le_grant(NULL, 'work');
\echo :LAST_ERROR_SQLSTATE
SET ROLE regress_le_app;
-- campaign
SELECT acquired, fencing_token AS app_token FROM le_acquire('app-lease', 'app-1', '1 minute') \gset
\echo acquired :acquired
SELECT le_renew('app-lease', 'app-1', :app_token, '1 minute') IS NOT NULL AS renewed;
-- protect, and fenced writes (lease and advance mode) and le_fence_check
CREATE TABLE public.app_t (v int, fencing_token bigint);
CREATE TABLE public.app_ext (v int, fencing_token bigint);
SELECT le_protect('public.app_t', 'app-lease');
SELECT le_protect('public.app_ext', 'app-ext-resource', mode => 'advance');
INSERT INTO public.app_t VALUES (1, :app_token);
INSERT INTO public.app_ext VALUES (1, 41);
SELECT le_fence_check('app-lease', :app_token);
SELECT le_fence_advance('app-resource', 7);
-- schedule and work
SELECT le_schedule_job('app-lease', :app_token, 'app-job', 'app', clock_timestamp() - interval '1 second');
SELECT le_schedule_job('app-lease', :app_token, 'app-job-2', 'app', clock_timestamp() - interval '1 second');
SELECT schedule_key FROM le_claim_jobs('app-worker', 10, '1 minute', ARRAY['app']) ORDER BY 1;
SELECT le_complete_job('app-job', 'app-worker');
SELECT le_fail_job('app-job-2', 'app-worker', 'boom');
SELECT schedule_key, status, fencing_token = :app_token AS by_app_token FROM le_jobs ORDER BY job_id;
SELECT le_release('app-lease', 'app-1', :app_token) AS released;
-- Still nothing more: the tables, the admin and internal functions.
SELECT t.label, regress_le_try(t.stmt) AS result
  FROM (VALUES
    ('select jobs table',    $$SELECT count(*) FROM le_scheduled_jobs$$),
    ('update fence resource',$$UPDATE le_fence_resource SET highest_token = 1$$),
    ('le_force_release',     $$SELECT le_force_release('app-lease')$$),
    ('le_fence_reset',       $$SELECT le_fence_reset('app-resource')$$),
    ('le_fence_assign',      $$SELECT le_fence_assign('app-resource', 'regress_le_app')$$),
    ('le_grant',             $$SELECT le_grant('regress_le_app', 'work')$$),
    ('_le_fence_advance',    $$SELECT _le_fence_advance('app-resource', 9, 10)$$),
    ('_le_grant_use',        $$SELECT _le_grant_use('regress_le_app', 'work', true)$$)
  ) AS t(label, stmt);
DROP TABLE public.app_t, public.app_ext;
RESET ROLE;
SELECT le_revoke('regress_le_app', u) FROM unnest(ARRAY['campaign', 'fence', 'schedule', 'work', 'protect']) AS u;
SET ROLE regress_le_app;
SELECT regress_le_try($$SELECT le_acquire('app-lease', 'app-1', '1 minute')$$) AS after_revoke;
RESET ROLE;
REVOKE ALL ON SCHEMA public FROM regress_le_app;
DROP ROLE regress_le_app;

-- Internal helpers: named _le_*, commented as internal, not executable by
-- PUBLIC; no function of the extension outside that prefix says internal,
-- and the old helper names are gone from the API.
SELECT p.proname, left(obj_description(p.oid, 'pg_proc'), 18) AS comment_starts,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_executes
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leader_election'
 WHERE p.proname LIKE '\_le\_%' OR obj_description(p.oid, 'pg_proc') LIKE 'internal%'
 ORDER BY 1;
SELECT count(*) AS old_helper_names FROM pg_proc
 WHERE proname IN ('le_check_worker', 'le_lock_claimed_job');
-- Every function and relation of the extension has a comment.
SELECT d.classid::regclass AS catalog, d.objid
  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leader_election'
 WHERE d.deptype = 'e' AND d.classid IN ('pg_proc'::regclass, 'pg_class'::regclass)
   AND obj_description(d.objid, d.classid::regclass::name) IS NULL
   AND NOT (d.classid = 'pg_class'::regclass
            AND (SELECT relkind FROM pg_class WHERE oid = d.objid) IN ('S', 'i'));
SELECT has_table_privilege('public', 'le_jobs', 'SELECT') AS public_reads_le_jobs,
       has_table_privilege('public', 'le_fence_resource', 'SELECT') AS public_reads_fence_resource;

-- Clean up the roles and their objects.
DROP SCHEMA regress_le_hijack CASCADE;
DROP FUNCTION public.regress_le_try(text);
REVOKE ALL ON SCHEMA public FROM regress_le_a, regress_le_b;
REVOKE ALL ON FUNCTION le_acquire(text, text, interval, interval, jsonb), le_renew(text, text, bigint, interval),
      le_release(text, text, bigint) FROM regress_le_a, regress_le_b;
REVOKE ALL ON FUNCTION le_protect(regclass, text, name, text, text, name), le_fence() FROM regress_le_a;
REVOKE ALL ON FUNCTION le_fence_advance(text, bigint) FROM regress_le_a;
DROP ROLE regress_le_a;
DROP ROLE regress_le_b;
