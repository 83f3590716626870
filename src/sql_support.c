/*-------------------------------------------------------------------------
 *
 * sql_support.c
 *		C support for the PL/pgSQL parts of the install script
 *		(src/sql/20_fence.sql, 30_jobs.sql): the bound of their lock waits,
 *		and the calling role of le_fence_advance().
 *
 * Locking rules.  Nothing here takes a lock.  _le_lock_wait_bound() only
 * computes the lock_timeout that a PL/pgSQL function applies (SET LOCAL,
 * restored after the statement that may wait) around its statements that
 * can wait for another transaction: leader_election.lock_timeout, or the
 * caller's own lock_timeout when that is shorter.  Being C, calling it also
 * loads the library, so leader_election.lock_timeout has its real value
 * (with its unit) even in a backend that used no other C function yet.
 *
 * le_fence_advance() is the SQL entry point of the "highest accepted token"
 * fence.  Its work is done by the SECURITY DEFINER PL/pgSQL function
 * _le_fence_advance(), which must know who is calling to enforce the
 * resource's owner role; inside a SECURITY DEFINER function the current
 * user is the definer, so this wrapper, which runs as the caller, reads
 * GetUserId() and passes it on.  _le_fence_advance() is not executable by
 * PUBLIC (whoever may execute it could name any role); the wrapper calls it
 * through fmgr, which does not check EXECUTE, the way the trigger machinery
 * calls a trigger function.
 *
 * le_fence_advance_trigger() is the trigger of le_protect(..., 'advance').
 * Its work is done by the PL/pgSQL trigger _le_fence_advance_trigger();
 * this C wrapper only makes a call outside a trigger fail the way
 * le_fence() does (39P01, trigger protocol violated), where PL/pgSQL itself
 * would raise 0A000 before the function's body runs, and hands the trigger
 * call on unchanged.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_func.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "leader_election.h"

PG_FUNCTION_INFO_V1(le_lock_wait_bound);
PG_FUNCTION_INFO_V1(le_fence_advance);
PG_FUNCTION_INFO_V1(le_fence_advance_trigger);

/*
 * The FmgrInfo of function name (nargs arguments of types argtypes) in the
 * schema of the function being called, kept in its fn_extra.
 */
static FmgrInfo *
le_sibling_function(FunctionCallInfo fcinfo, const char *name, int nargs, Oid *argtypes)
{
	FmgrInfo   *worker = (FmgrInfo *) fcinfo->flinfo->fn_extra;

	if (worker == NULL)
	{
		Oid			nsp = get_func_namespace(fcinfo->flinfo->fn_oid);
		char	   *nspname = get_namespace_name(nsp);
		Oid			worker_oid;

		if (nspname == NULL)
			elog(ERROR, "cache lookup failed for namespace %u", nsp);
		worker_oid = LookupFuncName(list_make2(makeString(nspname), makeString(pstrdup(name))),
									nargs, argtypes, false);
		worker = MemoryContextAlloc(fcinfo->flinfo->fn_mcxt, sizeof(FmgrInfo));
		fmgr_info_cxt(worker_oid, worker, fcinfo->flinfo->fn_mcxt);
		fcinfo->flinfo->fn_extra = worker;
	}
	return worker;
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
 * le_fence_advance(resource, fencing_token): call _le_fence_advance() of
 * the same schema with the calling role.  The worker's FmgrInfo is kept in
 * fn_extra, i.e. for the life of this call site's FmgrInfo (one query).
 */
Datum
le_fence_advance(PG_FUNCTION_ARGS)
{
	Oid			argtypes[3] = {TEXTOID, INT8OID, OIDOID};
	FmgrInfo   *worker;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("resource and fencing_token must not be NULL")));

	worker = le_sibling_function(fcinfo, "_le_fence_advance", 3, argtypes);
	PG_RETURN_DATUM(FunctionCall3Coll(worker, InvalidOid,
									  PG_GETARG_DATUM(0), PG_GETARG_DATUM(1),
									  ObjectIdGetDatum(GetUserId())));
}

/*
 * le_fence_advance_trigger(): refuse a call outside a trigger (39P01), else
 * run _le_fence_advance_trigger() of the same schema with the same trigger
 * data and return what it returns.
 */
Datum
le_fence_advance_trigger(PG_FUNCTION_ARGS)
{
	FmgrInfo   *worker;
	LOCAL_FCINFO(inner, 0);
	Datum		result;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("le_fence_advance_trigger() must be called as a trigger"),
				 errhint("Use le_fence_advance() to advance a resource without a trigger.")));

	worker = le_sibling_function(fcinfo, "_le_fence_advance_trigger", 0, NULL);
	InitFunctionCallInfoData(*inner, worker, 0, InvalidOid, fcinfo->context, NULL);
	result = FunctionCallInvoke(inner);
	fcinfo->isnull = inner->isnull;
	return result;
}
