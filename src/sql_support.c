/*-------------------------------------------------------------------------
 *
 * sql_support.c
 *		C support for the PL/pgSQL parts of the install script
 *		(src/sql/20_fence.sql, 30_jobs.sql): the entry points that run
 *		their bodies, the bound of their lock waits, and the calling role
 *		of le_fence_advance().
 *
 * Every PL/pgSQL and SQL body of the extension is entered through a C
 * function here, which runs it with the search path pinned by OID to
 * pg_catalog and the extension's schema.  Nothing here takes a lock.
 * src/README.md ("SQL bodies and the search path pinned by OID") explains.
 *
 * Invariant: no name in a body is ever resolved through a schema name, so
 * renaming the extension's schema cannot redirect a body to another role's
 * objects.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "compat.h"
#include "leader_election.h"

PG_FUNCTION_INFO_V1(le_lock_wait_bound);
PG_FUNCTION_INFO_V1(le_fence_advance);
PG_FUNCTION_INFO_V1(le_fence_advance_trigger);
PG_FUNCTION_INFO_V1(le_call_worker);

/* A worker of a C entry point, kept in the entry point's fn_extra. */
typedef struct LeWorker
{
	FmgrInfo	flinfo;			/* the worker */
	OverrideSearchPath path;	/* pg_catalog, then the extension's schema */
} LeWorker;

/*
 * The worker name (nargs arguments of types argtypes) in the schema of the
 * function being called, found by the schema's OID, never by its name;
 * kept in fn_extra for the life of the call site's FmgrInfo (one query).
 */
static LeWorker *
le_sql_worker(FunctionCallInfo fcinfo, const char *name, int nargs, Oid *argtypes)
{
	LeWorker   *worker = (LeWorker *) fcinfo->flinfo->fn_extra;

	if (worker == NULL)
	{
		Oid			nsp = get_func_namespace(fcinfo->flinfo->fn_oid);
		Oid			worker_oid;
		MemoryContext old;

		worker_oid = GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid,
									 CStringGetDatum(name),
									 PointerGetDatum(buildoidvector(argtypes, nargs)),
									 ObjectIdGetDatum(nsp));
		if (!OidIsValid(worker_oid))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_FUNCTION),
					 errmsg("function %s of extension leader_election does not exist", name),
					 errhint("Reinstall the extension.")));
		old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
		worker = palloc0(sizeof(LeWorker));
		fmgr_info_cxt(worker_oid, &worker->flinfo, fcinfo->flinfo->fn_mcxt);
		worker->flinfo.fn_expr = fcinfo->flinfo->fn_expr;
		worker->path.schemas = list_make1_oid(nsp);
		worker->path.addCatalog = true;
		worker->path.addTemp = false;
		MemoryContextSwitchTo(old);
		fcinfo->flinfo->fn_extra = worker;
	}
	return worker;
}

/*
 * Call worker with the arguments and the context, result and set-result
 * information of fcinfo, under the worker's pinned search path.  On error
 * the (sub)transaction's abort pops the search path.
 */
static Datum
le_sql_run_worker(FunctionCallInfo fcinfo, LeWorker *worker, int nargs, NullableDatum *args)
{
	FunctionCallInfo inner = palloc(SizeForFunctionCallInfo(nargs));
	Datum		result;

	InitFunctionCallInfoData(*inner, &worker->flinfo, nargs, fcinfo->fncollation,
							 fcinfo->context, fcinfo->resultinfo);
	if (nargs > 0)
		memcpy(inner->args, args, nargs * sizeof(NullableDatum));
	le_push_search_path(&worker->path);
	result = FunctionCallInvoke(inner);
	le_pop_search_path();
	fcinfo->isnull = inner->isnull;
	pfree(inner);
	return result;
}

/*
 * The lock_timeout, in milliseconds as text, that bounds a wait of the SQL
 * functions: leader_election.lock_timeout, or the caller's shorter one.
 */
Datum
le_lock_wait_bound(PG_FUNCTION_ARGS)
{
	int			bound = le_lock_timeout_ms;
	char		buf[32];

	if (LockTimeout > 0 && LockTimeout < bound)
		bound = LockTimeout;
	snprintf(buf, sizeof(buf), "%d", bound);
	PG_RETURN_TEXT_P(cstring_to_text(buf));
}

/*
 * le_fence_advance(resource, fencing_token): call _le_fence_advance() of the
 * same schema with the calling role, which the SECURITY DEFINER worker cannot
 * see itself (its current user is the definer) and needs to enforce the
 * resource's owner role.  _le_fence_advance() is not executable by PUBLIC: fmgr
 * calls it without an EXECUTE check.  The worker's FmgrInfo is kept in
 * fn_extra, i.e. for the life of this call site's FmgrInfo (one query).
 */
Datum
le_fence_advance(PG_FUNCTION_ARGS)
{
	Oid			argtypes[3] = {TEXTOID, INT8OID, OIDOID};
	LeWorker   *worker;
	NullableDatum args[3];

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("resource and fencing_token must not be NULL")));

	worker = le_sql_worker(fcinfo, "_le_fence_advance", 3, argtypes);
	args[0] = fcinfo->args[0];
	args[1] = fcinfo->args[1];
	args[2].value = ObjectIdGetDatum(GetUserId());
	args[2].isnull = false;
	return le_sql_run_worker(fcinfo, worker, 3, args);
}

/*
 * le_fence_advance_trigger(): refuse a call outside a trigger (39P01, as
 * le_fence() does; PL/pgSQL would raise 0A000 before the body ran), else
 * run _le_fence_advance_trigger() of the same schema with the same trigger
 * data and return what it returns.
 */
Datum
le_fence_advance_trigger(PG_FUNCTION_ARGS)
{
	LeWorker   *worker;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("le_fence_advance_trigger() must be called as a trigger"),
				 errhint("Use le_fence_advance() to advance a resource without a trigger.")));

	le_fence_advance_guard((TriggerData *) fcinfo->context);
	worker = le_sql_worker(fcinfo, "_le_fence_advance_trigger", 0, NULL);
	return le_sql_run_worker(fcinfo, worker, 0, NULL);
}

/*
 * The C entry point of a PL/pgSQL function of the API (le_schedule_job,
 * le_claim_jobs, le_complete_job, le_fail_job, le_fence_reset,
 * le_fence_assign, le_grant, le_revoke): runs the worker of the same
 * schema named "_" + its own name, with the same argument types, on the
 * same arguments and result information (le_claim_jobs returns a set), under
 * the pinned search path.
 */
Datum
le_call_worker(PG_FUNCTION_ARGS)
{
	LeWorker   *worker = (LeWorker *) fcinfo->flinfo->fn_extra;

	if (worker == NULL)
	{
		HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
		Form_pg_proc proc;
		char	   *name;

		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for function %u", fcinfo->flinfo->fn_oid);
		proc = (Form_pg_proc) GETSTRUCT(tup);
		name = psprintf("_%s", NameStr(proc->proname));
		worker = le_sql_worker(fcinfo, name, proc->pronargs, proc->proargtypes.values);
		ReleaseSysCache(tup);
	}
	return le_sql_run_worker(fcinfo, worker, fcinfo->nargs, fcinfo->args);
}
