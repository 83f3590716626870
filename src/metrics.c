/*-------------------------------------------------------------------------
 *
 * metrics.c
 *		Counters of writes the fence refused, per table, in shared memory
 *		(le_metrics_*), and the SQL functions that read them.
 *
 * A refused write rolls its transaction back, and a counter kept in a
 * table would roll back with it; so these live in shared memory, which
 * exists only when the module is in shared_preload_libraries.  Without
 * the preload nothing is counted and le_fence_refusals_counted() says so.
 * The counters start at zero when the server starts.
 *
 * Invariant: counting never raises an error, allocates nothing and waits
 * for nothing but a spinlock held for a few instructions, so the error a
 * refusal raises next is the one the caller sees; nothing the fence or a
 * lease decides depends on a counter.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"

#include "leader_election.h"

/*
 * Tables counted, over all databases (slots are never freed: a dropped
 * table's count stays until the restart); a refusal that finds no slot is
 * counted in overflow, shown in every database.
 */
#define LE_METRICS_SLOTS	1024

typedef struct LeRefusalSlot
{
	Oid			dboid;			/* InvalidOid: slot unused */
	Oid			relid;			/* InvalidOid: no table (le_fence_check) */
	uint64		refused;
} LeRefusalSlot;

typedef struct LeMetricsShared
{
	slock_t		mutex;
	uint64		overflow;		/* refusals that found no slot */
	LeRefusalSlot slots[LE_METRICS_SLOTS];
} LeMetricsShared;

static LeMetricsShared *le_metrics = NULL;
static shmem_request_hook_type le_metrics_prev_request = NULL;
static shmem_startup_hook_type le_metrics_prev_startup = NULL;

PG_FUNCTION_INFO_V1(le_fence_refusals_counted);
PG_FUNCTION_INFO_V1(le_fence_refusal_counts);

static void
le_metrics_request(void)
{
	if (le_metrics_prev_request)
		le_metrics_prev_request();
	RequestAddinShmemSpace(MAXALIGN(sizeof(LeMetricsShared)));
}

static void
le_metrics_startup(void)
{
	bool		found;

	if (le_metrics_prev_startup)
		le_metrics_prev_startup();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	le_metrics = ShmemInitStruct("leader_election fence refusals", sizeof(LeMetricsShared), &found);
	if (!found)
	{
		memset(le_metrics, 0, sizeof(LeMetricsShared));
		SpinLockInit(&le_metrics->mutex);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Ask for the shared memory, from _PG_init while shared_preload_libraries
 * is processed; a later load (CREATE EXTENSION, LOAD) leaves it off.
 */
void
le_metrics_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	le_metrics_prev_request = shmem_request_hook;
	shmem_request_hook = le_metrics_request;
	le_metrics_prev_startup = shmem_startup_hook;
	shmem_startup_hook = le_metrics_startup;
}

/*
 * Count one write refused in table relid (InvalidOid: not a table's
 * trigger) of this database.  Does nothing without the preload.  Called
 * just before the refusal's ereport(ERROR), never elsewhere.
 */
void
le_metrics_count_refusal(Oid relid)
{
	uint32		h;
	int			i;

	if (le_metrics == NULL)
		return;
	h = ((uint32) MyDatabaseId * 2654435761u) ^ (uint32) relid;
	SpinLockAcquire(&le_metrics->mutex);
	for (i = 0; i < LE_METRICS_SLOTS; i++)
	{
		LeRefusalSlot *s = &le_metrics->slots[(h + i) % LE_METRICS_SLOTS];

		if (s->dboid == InvalidOid)
		{
			s->dboid = MyDatabaseId;
			s->relid = relid;
		}
		if (s->dboid == MyDatabaseId && s->relid == relid)
		{
			s->refused++;
			SpinLockRelease(&le_metrics->mutex);
			return;
		}
	}
	le_metrics->overflow++;
	SpinLockRelease(&le_metrics->mutex);
}

/* le_fence_refusals_counted() -> are refused writes being counted? */
Datum
le_fence_refusals_counted(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(le_metrics != NULL);
}

/*
 * le_fence_refusal_counts() -> (relid, refused) of this database since the
 * server started: one row per table with a refusal, relid 0 for refusals
 * of le_fence_check() and the job functions, NULL for the overflow; no
 * rows when nothing is counted.  The slots are copied under the spinlock
 * and returned after it is released.
 */
Datum
le_fence_refusal_counts(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	LeRefusalSlot *copy;
	uint64		overflow;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (le_metrics == NULL)
		return (Datum) 0;
	copy = palloc(sizeof(le_metrics->slots));
	SpinLockAcquire(&le_metrics->mutex);
	memcpy(copy, le_metrics->slots, sizeof(le_metrics->slots));
	overflow = le_metrics->overflow;
	SpinLockRelease(&le_metrics->mutex);

	for (i = 0; i < LE_METRICS_SLOTS; i++)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};

		if (copy[i].dboid != MyDatabaseId)
			continue;
		values[0] = ObjectIdGetDatum(copy[i].relid);
		values[1] = Int64GetDatum((int64) copy[i].refused);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	if (overflow > 0)
	{
		Datum		values[2] = {(Datum) 0, Int64GetDatum((int64) overflow)};
		bool		nulls[2] = {true, false};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	pfree(copy);
	return (Datum) 0;
}
