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
#include "utils/syscache.h"

#include "leader_election.h"

/*
 * Tables counted, over all databases, in an open-addressing table keyed by
 * (database, table, overflow).  A database sees only its own slots.  A
 * refusal that finds no slot is counted in its database's overflow slot;
 * the last LE_METRICS_RESERVED free slots are kept for those, and a
 * refusal that finds none of them either is counted nowhere (lost).  The
 * slot of a dropped table is freed when its database reads the counts
 * (le_metrics_reclaim): only a backend of that database can tell that
 * the table is gone.  A freed slot becomes a tombstone, reused by the next
 * new key probing through it, so that probe sequences stay unbroken.
 */
#define LE_METRICS_SLOTS	1024
#define LE_METRICS_RESERVED	64

typedef enum LeSlotState
{
	LE_SLOT_EMPTY = 0,			/* never used: ends a probe */
	LE_SLOT_USED,
	LE_SLOT_FREED				/* tombstone */
} LeSlotState;

typedef struct LeRefusalSlot
{
	uint8		state;			/* LeSlotState */
	bool		overflow;		/* the database's refusals that found no slot */
	Oid			dboid;
	Oid			relid;			/* InvalidOid: no table (le_fence_check) */
	uint64		refused;
} LeRefusalSlot;

typedef struct LeMetricsShared
{
	slock_t		mutex;
	int			used;			/* slots in state LE_SLOT_USED */
	uint64		lost;			/* refusals that found no slot, not even an overflow one */
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
 * The slot of key (MyDatabaseId, relid, overflow), taken if new and one
 * may be taken; NULL if not.  Caller holds the spinlock.
 */
static LeRefusalSlot *
le_metrics_slot(Oid relid, bool overflow)
{
	uint32		h = ((uint32) MyDatabaseId * 2654435761u) ^ (uint32) relid ^ (overflow ? 0x9e3779b9u : 0);
	LeRefusalSlot *free_slot = NULL;
	int			i;

	for (i = 0; i < LE_METRICS_SLOTS; i++)
	{
		LeRefusalSlot *s = &le_metrics->slots[(h + i) % LE_METRICS_SLOTS];

		if (s->state == LE_SLOT_USED)
		{
			if (s->dboid == MyDatabaseId && s->relid == relid && s->overflow == overflow)
				return s;
			continue;
		}
		if (free_slot == NULL)
			free_slot = s;
		if (s->state == LE_SLOT_EMPTY)
			break;
	}
	if (free_slot == NULL ||
		(!overflow && le_metrics->used >= LE_METRICS_SLOTS - LE_METRICS_RESERVED))
		return NULL;
	free_slot->state = LE_SLOT_USED;
	free_slot->overflow = overflow;
	free_slot->dboid = MyDatabaseId;
	free_slot->relid = relid;
	free_slot->refused = 0;
	le_metrics->used++;
	return free_slot;
}

/*
 * Count one write refused in table relid (InvalidOid: not a table's
 * trigger) of this database.  Does nothing without the preload.  Called
 * just before the refusal's ereport(ERROR), never elsewhere.
 */
void
le_metrics_count_refusal(Oid relid)
{
	LeRefusalSlot *s;

	if (le_metrics == NULL)
		return;
	SpinLockAcquire(&le_metrics->mutex);
	s = le_metrics_slot(relid, false);
	if (s == NULL)
		s = le_metrics_slot(InvalidOid, true);
	if (s != NULL)
		s->refused++;
	else
		le_metrics->lost++;
	SpinLockRelease(&le_metrics->mutex);
}

/*
 * Free the slots of this database's tables that no longer exist (their
 * count goes with them), among those in copy, and mark them in copy (not
 * LE_SLOT_USED any more); the relation lookups happen before the spinlock
 * is taken.
 */
static void
le_metrics_reclaim(LeRefusalSlot *copy)
{
	int			i;
	bool		any = false;

	for (i = 0; i < LE_METRICS_SLOTS; i++)
		if (copy[i].state == LE_SLOT_USED && copy[i].dboid == MyDatabaseId &&
			!copy[i].overflow && copy[i].relid != InvalidOid &&
			!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(copy[i].relid)))
		{
			copy[i].state = LE_SLOT_FREED + 1;	/* to free */
			any = true;
		}
	if (!any)
		return;
	SpinLockAcquire(&le_metrics->mutex);
	for (i = 0; i < LE_METRICS_SLOTS; i++)
	{
		LeRefusalSlot *s = &le_metrics->slots[i];

		if (copy[i].state == LE_SLOT_FREED + 1 && s->state == LE_SLOT_USED &&
			s->dboid == MyDatabaseId && !s->overflow && s->relid == copy[i].relid)
		{
			s->state = LE_SLOT_FREED;
			le_metrics->used--;
		}
	}
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
 * of le_fence_check() and the job functions, NULL for this database's
 * overflow; no rows when nothing is counted.  The slots are copied under
 * the spinlock and returned after it is released; the slots of tables
 * dropped since are freed then (le_metrics_reclaim) and not shown.
 */
Datum
le_fence_refusal_counts(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	LeRefusalSlot *copy;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (le_metrics == NULL)
		return (Datum) 0;
	copy = palloc(sizeof(le_metrics->slots));
	SpinLockAcquire(&le_metrics->mutex);
	memcpy(copy, le_metrics->slots, sizeof(le_metrics->slots));
	SpinLockRelease(&le_metrics->mutex);
	le_metrics_reclaim(copy);

	for (i = 0; i < LE_METRICS_SLOTS; i++)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};

		if (copy[i].state != LE_SLOT_USED || copy[i].dboid != MyDatabaseId)
			continue;
		nulls[0] = copy[i].overflow;
		values[0] = ObjectIdGetDatum(copy[i].relid);
		values[1] = Int64GetDatum((int64) copy[i].refused);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	pfree(copy);
	return (Datum) 0;
}
