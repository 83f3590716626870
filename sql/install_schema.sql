-- G8: Installing into a schema whose name needs quoting: the install script's
-- regclass literals, the C code's schema-qualified statements and the fence's
-- direct reads must all find the extension's own objects there, and nothing
-- may land in public.
\set VERBOSITY terse
CREATE SCHEMA "Le Schema";
CREATE EXTENSION leader_election SCHEMA "Le Schema";
SELECT n.nspname, count(*) AS objects
  FROM pg_depend d
  JOIN pg_class c ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'leader_election')
 GROUP BY 1;
SELECT count(*) AS in_public FROM pg_class WHERE relnamespace = 'public'::regnamespace;
-- The config tables are registered for pg_dump, with their sequences.
SELECT unnest(extconfig)::regclass::text AS dumped FROM pg_extension WHERE extname = 'leader_election' ORDER BY 1;
SET search_path = public;
SELECT acquired, fencing_token FROM "Le Schema".le_acquire('k', 'a', '10 seconds');
SELECT "Le Schema".le_renew('k', 'a', 1) IS NOT NULL AS renewed;
CREATE TABLE public.protected (id int, fencing_token bigint);
SELECT "Le Schema".le_protect('public.protected', 'k');
INSERT INTO public.protected VALUES (1, 1);
\set ON_ERROR_STOP 0
INSERT INTO public.protected VALUES (2, 2);
\echo :LAST_ERROR_SQLSTATE
\set ON_ERROR_STOP 1
SELECT "Le Schema".le_release('k', 'a', 1) AS released;
SELECT acquired, fencing_token FROM "Le Schema".le_acquire('k', 'b', '10 seconds');
SELECT count(*) AS rows_kept FROM public.protected;
-- The PL/pgSQL functions and le_fence_advance's C wrapper (which looks its
-- worker up in the extension's schema) work there too, and le_grant finds
-- the objects it grants there.
SELECT fencing_token AS tok FROM "Le Schema".le_leases WHERE lease_key = 'k' \gset
SELECT "Le Schema".le_schedule_job('k', :tok, 'job', 'work', clock_timestamp() - interval '1 second');
SELECT schedule_key FROM "Le Schema".le_claim_jobs('w');
SELECT "Le Schema".le_fail_job('job', 'w', 'again', '0');
SELECT schedule_key FROM "Le Schema".le_claim_jobs('w');
SELECT "Le Schema".le_complete_job('job', 'w');
SELECT schedule_key, status, attempts FROM "Le Schema".le_jobs;
SELECT "Le Schema".le_fence_advance('res', 3);
SELECT "Le Schema".le_fence_reset('res');
CREATE ROLE regress_le_schema_role;
SELECT "Le Schema".le_grant('regress_le_schema_role', 'monitor');
SELECT "Le Schema".le_revoke('regress_le_schema_role', 'monitor');
DROP ROLE regress_le_schema_role;
DROP TABLE public.protected;
DROP EXTENSION leader_election;
DROP SCHEMA "Le Schema";
