-- G8: after ALTER SCHEMA ... RENAME of the extension's schema, a role with
-- CREATE on the database takes the old name for a schema of its own and
-- plants there (and in its temporary schema) an object under every name
-- that a PL/pgSQL or SQL body of the extension uses.  Each planted object
-- records that it ran and tries to make its owner a superuser.  Then every
-- function of the extension and every fence trigger mode is called, as that
-- role, as an ordinary writer and as an administrator: all must work, none
-- of the planted objects may run (no "shadow ... runs" NOTICE, no row in
-- le.shadow_log) and the role must not become a superuser.  The bodies find
-- their objects through a search path pinned by OID (src/sql_support.c).
-- A database of its own: the role needs CREATE on it.
SELECT current_database() AS origdb \gset
CREATE DATABASE regress_le_rename;
\c regress_le_rename
\set VERBOSITY terse
SET client_min_messages = notice;
CREATE ROLE regress_le_mallory LOGIN;
CREATE ROLE regress_le_writer LOGIN;
CREATE ROLE regress_le_other;
CREATE SCHEMA le;
CREATE EXTENSION leader_election SCHEMA le;
SELECT count(*) > 0 AS granted
  FROM unnest(ARRAY['campaign', 'fence', 'schedule', 'work', 'monitor', 'protect', 'group']) AS u,
       le.le_grant('regress_le_mallory', u);
SELECT count(*) > 0 AS granted
  FROM unnest(ARRAY['campaign', 'fence']) AS u, le.le_grant('regress_le_writer', u);
GRANT USAGE ON SCHEMA le TO regress_le_mallory, regress_le_writer;
GRANT CREATE ON DATABASE regress_le_rename TO regress_le_mallory;
-- Fenced tables, one per trigger mode.
CREATE TABLE public.t_lease (id int, fencing_token bigint);
CREATE TABLE public.t_strict (id int, fencing_token bigint);
CREATE TABLE public.t_adv (id int, fencing_token bigint);
GRANT ALL ON public.t_lease, public.t_strict, public.t_adv TO regress_le_writer, regress_le_mallory;
SELECT le.le_protect('public.t_lease', 'k');
SELECT le.le_protect('public.t_strict', 'k', mode => 'strict');
SELECT le.le_protect('public.t_adv', 'res-adv', 'fencing_token', 'advance');

ALTER SCHEMA le RENAME TO le_renamed;

-- The shadows.
SET ROLE regress_le_mallory;
CREATE SCHEMA le;
GRANT USAGE ON SCHEMA le TO PUBLIC;
CREATE TABLE le.shadow_log (what text, run_as name);
GRANT INSERT ON le.shadow_log TO PUBLIC;
CREATE FUNCTION le.shadow_ran(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'shadow % runs as %', what, current_user;
    INSERT INTO le.shadow_log VALUES (what, current_user);
    BEGIN
        ALTER ROLE regress_le_mallory SUPERUSER;
    EXCEPTION WHEN insufficient_privilege THEN NULL;
    END;
END $$;
CREATE FUNCTION le.shadow_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM le.shadow_ran(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME || ' ' || TG_OP);
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END $$;
CREATE TABLE le.le_lease (lease_key text PRIMARY KEY);
CREATE TABLE le.le_fence_resource (resource text, highest_token bigint, updated_at timestamptz,
    owner_role name, CONSTRAINT le_fence_resource_pkey PRIMARY KEY (resource));
CREATE TABLE le.le_scheduled_jobs (LIKE le_renamed.le_jobs,
    payload jsonb, CONSTRAINT le_scheduled_jobs_schedule_key UNIQUE (schedule_key));
CREATE TEMP TABLE le_lease (lease_key text PRIMARY KEY);
CREATE TEMP TABLE le_fence_resource (LIKE le.le_fence_resource INCLUDING ALL);
CREATE TEMP TABLE le_scheduled_jobs (LIKE le.le_scheduled_jobs INCLUDING ALL);
INSERT INTO le.le_fence_resource VALUES ('res-adv', 0, now(), 'regress_le_writer'),
    ('res-m', 0, now(), 'regress_le_mallory'), ('res-x', 0, now(), 'regress_le_mallory');
DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['le.le_lease', 'le.le_fence_resource', 'le.le_scheduled_jobs',
                             'pg_temp.le_lease', 'pg_temp.le_fence_resource', 'pg_temp.le_scheduled_jobs'] LOOP
        EXECUTE format('CREATE TRIGGER shadow BEFORE INSERT OR UPDATE OR DELETE ON %s
                        FOR EACH ROW EXECUTE FUNCTION le.shadow_trigger()', t);
        EXECUTE format('GRANT ALL ON %s TO PUBLIC', t);
    END LOOP;
END $$;
-- Every function name a body uses, and every worker a C entry point runs.
CREATE FUNCTION le.le_fence_check(text, bigint) RETURNS void LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('le_fence_check'); END $$;
CREATE FUNCTION le.le_fence_advance(text, bigint) RETURNS bigint LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('le_fence_advance'); RETURN $2; END $$;
CREATE FUNCTION le._le_lock_wait_bound() RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_lock_wait_bound'); RETURN '1000'; END $$;
CREATE FUNCTION le._le_check_worker(text) RETURNS void LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_check_worker'); END $$;
CREATE FUNCTION le._le_show(text) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_show'); RETURN $1; END $$;
CREATE FUNCTION le._le_lock_claimed_job(text, text) RETURNS le.le_scheduled_jobs LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_lock_claimed_job'); RETURN NULL; END $$;
CREATE FUNCTION le._le_grant_use(regrole, text, boolean) RETURNS SETOF text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_grant_use'); RETURN NEXT 'shadow'; END $$;
CREATE FUNCTION le._le_fence_advance(text, bigint, oid) RETURNS bigint LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_fence_advance'); RETURN $2; END $$;
CREATE FUNCTION le._le_fence_advance_trigger() RETURNS trigger LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_fence_advance_trigger'); RETURN NEW; END $$;
CREATE FUNCTION le._le_schedule_job(text, bigint, text, text, timestamptz, jsonb, integer)
    RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_schedule_job'); RETURN true; END $$;
CREATE FUNCTION le._le_claim_jobs(text, integer, interval, text[]) RETURNS SETOF text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_claim_jobs'); END $$;
CREATE FUNCTION le._le_complete_job(text, text) RETURNS void LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_complete_job'); END $$;
CREATE FUNCTION le._le_fail_job(text, text, text, interval) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_fail_job'); RETURN 'pending'; END $$;
CREATE FUNCTION le._le_fence_reset(text) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_fence_reset'); RETURN true; END $$;
CREATE FUNCTION le._le_fence_assign(text, regrole) RETURNS void LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_fence_assign'); END $$;
CREATE FUNCTION le._le_grant(regrole, text) RETURNS SETOF text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_grant'); END $$;
CREATE FUNCTION le._le_revoke(regrole, text) RETURNS SETOF text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM le.shadow_ran('_le_revoke'); END $$;
-- A table of hers to fence after the rename.
CREATE TABLE le.m_t (id int, fencing_token bigint);

-- The calls as the role that planted them (its own session, so its
-- temporary tables are in reach).  Every one works.
SELECT acquired, fencing_token AS mt FROM le_renamed.le_acquire('km', 'm', '1 minute') \gset
SELECT le_renamed.le_renew('km', 'm', :mt) IS NOT NULL AS renewed;
SELECT le_renamed.le_fence_check('km', :mt);
SELECT le_renamed.le_schedule_job('km', :mt, 'job-1', 'work', clock_timestamp() - interval '1 second');
SELECT le_renamed.le_schedule_job('km', :mt, 'job-1', 'work', clock_timestamp() - interval '1 second');
SELECT schedule_key, attempts FROM le_renamed.le_claim_jobs('w1');
SELECT le_renamed.le_fail_job('job-1', 'w1', 'boom', '0');
SELECT schedule_key, attempts FROM le_renamed.le_claim_jobs('w1', 5, '1 minute', ARRAY['work']);
SELECT le_renamed.le_complete_job('job-1', 'w1');
SELECT schedule_key, status, attempts, last_error FROM le_renamed.le_jobs;
SELECT le_renamed.le_fence_advance('res-m', 5);
SELECT le_renamed.le_watch('km'), le_renamed.le_unwatch('km');
SELECT le_renamed.le_protect('le.m_t', 'km');
INSERT INTO le.m_t VALUES (1, :mt);
SELECT le_renamed.le_unprotect('le.m_t');
-- A partition group of hers: created, joined, read, left.
SELECT le_renamed.le_group_create('gm', 4);
SELECT count(*) AS hb_rows, count(*) FILTER (WHERE state = 'owned' AND new_period) AS claimed
  FROM le_renamed.le_group_heartbeat('gm', 'm1', '1 minute');
SELECT count(*) AS assigned FROM le_renamed.le_group_assignment('gm') WHERE target = 'm1' AND state = 'owned';
SELECT members, partitions_held FROM le_renamed.le_groups WHERE group_name = 'gm';
SELECT member_id, partitions_held FROM le_renamed.le_group_members WHERE group_name = 'gm';
SELECT count(*) AS held FROM le_renamed.le_group_partitions WHERE group_name = 'gm' AND holder = 'm1';
SELECT le_renamed.le_group_leave('gm', 'm1');
-- Errors come from the extension's own objects, with their SQLSTATEs.
\set ON_ERROR_STOP 0
SELECT le_renamed.le_complete_job('job-1', 'w1');
\echo :LAST_ERROR_SQLSTATE
SELECT le_renamed.le_claim_jobs('');
\echo :LAST_ERROR_SQLSTATE
SELECT le_renamed.le_schedule_job('km', :mt + 1, 'job-2', 'work', clock_timestamp());
\echo :LAST_ERROR_SQLSTATE
SELECT le_renamed.le_fence_advance('res-m', 4);
\echo :LAST_ERROR_SQLSTATE
-- The internal workers are not hers to call.
SELECT le_renamed._le_schedule_job('km', :mt, 'job-3', 'work', clock_timestamp(), '{}', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT le_renamed._le_fence_advance('res-m', 9, 'regress_le_writer'::regrole);
\echo :LAST_ERROR_SQLSTATE
-- A write to a fenced table without its lease is refused.
INSERT INTO public.t_lease VALUES (0, :mt);
\echo :LAST_ERROR_SQLSTATE
\set ON_ERROR_STOP 1
SELECT le_renamed.le_release('km', 'm', :mt);

-- The writer, through every trigger mode.
RESET ROLE;
SET ROLE regress_le_writer;
SELECT acquired, fencing_token AS wt FROM le_renamed.le_acquire('k', 'w', '1 minute') \gset
INSERT INTO public.t_lease VALUES (1, :wt);
BEGIN;
SET LOCAL leader_election.fencing_token = :wt;
UPDATE public.t_lease SET id = 2;
COMMIT;
INSERT INTO public.t_strict VALUES (1, :wt);
INSERT INTO public.t_adv VALUES (1, 7);
UPDATE public.t_adv SET fencing_token = 8;
BEGIN;
SET LOCAL leader_election.fencing_token = 8;
DELETE FROM public.t_adv;
TRUNCATE public.t_adv;
COMMIT;
SELECT le_renamed.le_fence_advance('res-w', 3);
\set ON_ERROR_STOP 0
INSERT INTO public.t_adv VALUES (1, 6);
\echo :LAST_ERROR_SQLSTATE
\set ON_ERROR_STOP 1
SELECT resource, highest_token, owner_role FROM le_renamed.le_fence_resource ORDER BY 1;

-- The administrator's functions.
RESET ROLE;
SELECT le_renamed.le_grant('regress_le_other', 'monitor');
SELECT le_renamed.le_revoke('regress_le_other', 'monitor');
SELECT le_renamed.le_fence_assign('res-x', 'regress_le_writer');
SELECT le_renamed.le_fence_reset('res-x');
SELECT le_renamed.le_fence_advance('res-admin', 1);
SELECT le_renamed.le_force_release('k');
SELECT le_renamed.le_prune_history() >= 0 AS pruned;
SELECT le_renamed.le_unprotect('public.t_lease'), le_renamed.le_unprotect('public.t_strict'),
       le_renamed.le_unprotect('public.t_adv');

-- Nothing planted ran, and she is no superuser.
SELECT count(*) AS shadow_runs FROM le.shadow_log;
SELECT rolsuper AS mallory_is_superuser FROM pg_roles WHERE rolname = 'regress_le_mallory';
SELECT count(*) AS shadow_rows FROM le.le_scheduled_jobs;
-- Every function of the extension, to keep this test calling them all: a
-- new function shows up here and needs a call above.
SELECT p.proname FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leader_election'
 ORDER BY 1;

\c :origdb
DROP DATABASE regress_le_rename;
DROP ROLE regress_le_mallory, regress_le_writer, regress_le_other;
