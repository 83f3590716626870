/*
 * noop_trigger.c
 *		A C trigger function that does nothing, for the benchmarks only
 *		(never installed: le_bench_noop_trigger in test/lib/cluster.sh builds
 *		it in the benchmark's scratch directory, and baseline.sql creates the
 *		function from that file).  As a row
 *		trigger it returns the row unchanged; as a statement trigger, NULL.
 *		What it costs is what PostgreSQL's executor spends on a trigger of
 *		that kind, the floor under any trigger, the fence included.
 */
#include "postgres.h"

#include "commands/trigger.h"
#include "fmgr.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(noop_trigger);

Datum
noop_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("noop_trigger() must be called as a trigger")));
	if (TRIGGER_FIRED_FOR_ROW(td->tg_event) && TRIGGER_FIRED_BEFORE(td->tg_event))
		return PointerGetDatum(TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? td->tg_newtuple : td->tg_trigtuple);
	return PointerGetDatum(NULL);
}
