/*-------------------------------------------------------------------------
 *
 * fence.c
 *		The fence: the le_fence() trigger, le_fence_check(), le_protect()
 *		and le_unprotect().
 *
 * A protected write carries a fencing token.  The fence accepts it only when
 * the token equals the lease's current token and the lease is held and
 * unexpired by the server clock; otherwise it raises LE001 (stale or never
 * issued token) or LE002 (lease not held: released, expired or never
 * acquired).  Each write is checked without a lock, for an early rejection;
 * the commit checks again every lease its writes recorded, under the fence
 * lock (fence_lock.c).  src/README.md ("The fence") explains the two
 * checks, what is judged, and the shortcuts that keep a fenced write cheap.
 *
 * Invariant (G5 in doc/lease-guarantees.md): no protected write commits
 * with a token older than its lease's current one, nor after the lease
 * expired or was released by another transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "leader_election.h"

PG_FUNCTION_INFO_V1(le_fence);
PG_FUNCTION_INFO_V1(le_fence_check);
PG_FUNCTION_INFO_V1(le_protect);
PG_FUNCTION_INFO_V1(le_unprotect);

/* Names of the triggers le_protect() attaches. */
#define LE_FENCE_ROW_TRIGGER		"le_fence"
#define LE_FENCE_TRUNCATE_TRIGGER	"le_fence_truncate"

/*
 * Per-backend cache of where le_lease lives and, per key, where (heap TID,
 * shared buffer) the row was last found and what that read found.  The
 * fence judges a write by the row it reads, or by what the last read found
 * while the page's LSN shows that nothing on it changed since.  A hint is
 * only a place to look first (see le_rows_read_latest); all hints are
 * dropped on any relcache
 * invalidation of le_lease or its index (VACUUM FULL, CLUSTER, TRUNCATE,
 * DROP and CREATE EXTENSION).
 */
typedef struct LeaseIdEntry
{
	char		key[LE_MAX_KEY_LEN + 1];	/* hash key */
	ItemPointerData tid;		/* where the index last found the row */
	Buffer		recent;			/* shared buffer tid's block was last read in */

	/*
	 * What the last read found, reused while the page still has the LSN it
	 * had then (le_rows_page_unchanged): only for a version that was final
	 * (stamp.lsn valid, see le_rows_read_in_place), whose every change
	 * moves that LSN.
	 */
	LeaseRowStamp stamp;
	int64		lease_id;
	int64		token;
	TimestampTz expires_at;
	bool		held;
	NameData	role;
} LeaseIdEntry;

/* Most keys the cache of lease rows holds before it starts afresh. */
#define LE_FENCE_CACHE_MAX	4096

static bool cache_callbacks_registered = false;
static Oid	cache_nsp = InvalidOid;
static Oid	cache_lease_relid = InvalidOid;
static Oid	cache_key_indexid = InvalidOid;
static HTAB *cache_lease_ids = NULL;
static LeaseIdEntry *cache_last_entry = NULL;	/* entry used last, in cache_lease_ids */
static bool cache_stale = false;

/*
 * What the current command last passed the early (lockless) check with, so
 * that the other rows of a multi-row statement need only the clock compared
 * with the expiry (every LE_FENCE_CLOCK_EVERY rows); the next command reads
 * the row again (and so sees a
 * release or grant made meanwhile, by anyone, this transaction included).
 * Reset at the end of every transaction and when a subtransaction rolls
 * back.  Only a shortcut for the early check: the commit-time check is the
 * authority.  One slot per lease for the rows of a group's fence, by
 * partition number modulo LE_FENCE_VERIFIED_SLOTS (a statement whose rows take
 * turns among a few partitions would otherwise read each row's lease again:
 * 1,600 instructions a row, callgrind); slot 0 for every other fence.
 */
#define LE_FENCE_VERIFIED_SLOTS	8

typedef struct FenceVerified
{
	bool		valid;
	CommandId	cid;
	Oid			nsp;
	char		key[LE_MAX_KEY_LEN + 1];
	int64		token;
	TimestampTz expires_at;
	Oid			strict_userid;	/* role that passed the strict check, if any */
	uint32		uses;			/* rows passed on this since it was read */
	const void *origin;			/* trigger's FenceTriggerInfo, or NULL */
	uint64		origin_generation;	/* trigger_infos_generation then */
	int64		partition;		/* of a group trigger's row; -1: none */
} FenceVerified;

static FenceVerified verified[LE_FENCE_VERIFIED_SLOTS];

/* Forget every lease the current command passed (see verified). */
static void
le_fence_verified_forget(void)
{
	int			i;

	for (i = 0; i < LE_FENCE_VERIFIED_SLOTS; i++)
		verified[i].valid = false;
}

/*
 * The rows after the first of a command compare the clock with the expiry
 * only every LE_FENCE_CLOCK_EVERY rows: gettimeofday() was 1% of the
 * backend's CPU in a 100-row INSERT (perf), more than the rest of the
 * shortcut.  A command that outlives the lease is then refused a few rows
 * later, still before it ends; the commit-time check reads the clock again
 * whatever happened in between.
 */
#define LE_FENCE_CLOCK_EVERY	32

/*
 * The row an UPDATE of a fenced table last passed the fence with, in this
 * command: when that UPDATE moves the row to another partition, PostgreSQL
 * deletes it from the old partition, firing the DELETE trigger there for the
 * same tuple; that deletion is judged by the new row's token
 * (sql/fence_partition.sql).  Reset at the end of every transaction.
 */
static struct
{
	bool		valid;
	Oid			relid;
	ItemPointerData tid;
	CommandId	cid;
	SubTransactionId subid;
	int64		token;
}			updated_row;

/*
 * Every (lease, token) this transaction passed the fence with, checked again
 * at commit: a transaction must not commit writes under a lease that has
 * expired meanwhile (say, its process was paused between the write and the
 * COMMIT).  Allocated in TopTransactionContext; entries made in a
 * subtransaction that rolls back are dropped with it.
 */
typedef struct FencedLease
{
	Oid			nsp;
	Oid			lease_relid;	/* le_lease the row was read from */
	int64		lease_id;		/* id of the row read (never a cached one) */
	int64		token;
	TimestampTz expires_at;		/* as last read */
	SubTransactionId subid;		/* (sub)transaction that first passed */
	ItemPointerData tid;
	LeaseRowStamp stamp;		/* of the read that gave expires_at */
	bool		locked_at_once; /* commit check: fence lock had without a wait */
	Oid			relid;			/* table of the first write (refusal counters) */
	char		key[LE_MAX_KEY_LEN + 1];
} FencedLease;

static List *fenced_leases = NIL;

/*
 * Every lease this transaction released with le_release() (lease row id,
 * token, and whether the lease was held and unexpired when released), so
 * that writes made before the release commit: "last write, then hand
 * over".  The release keeps the row locked and the fence lock held
 * exclusively until the transaction ends, so nobody can take the lease
 * between the release and our commit; writes after the release read the
 * freed row and are refused.  Allocated in TopTransactionContext; entries
 * of a subtransaction that rolls back are dropped with it.
 */
typedef struct ReleasedLease
{
	int64		lease_id;
	int64		token;
	bool		was_valid;
	TimestampTz expires_at;		/* the lease's expiry when released */
	SubTransactionId subid;
} ReleasedLease;

static List *released_leases = NIL;

/*
 * Set once the commit-time check has run in this transaction: a fenced
 * write made after it (by another extension's PRE_COMMIT callback that runs
 * after ours) would hold no fence lock and not be checked again, so it is
 * refused.  Cleared when the transaction ends.
 */
static bool commit_checked = false;

/*
 * What a trigger's arguments say, checked against its table; cached per
 * backend by trigger oid until the next relcache or pg_proc invalidation
 * (ALTER TABLE, DROP TRIGGER, ...), so that statements after the first need
 * no catalog lookups.
 */
typedef struct FenceTriggerInfo
{
	Oid			tgoid;			/* hash key */
	Oid			nsp;			/* schema of le_fence, i.e. of the extension */
	char		key[LE_MAX_KEY_LEN + 1];	/* lease key; a group's: "le:group:<g>:" */
	AttrNumber	attnum;			/* token column */
	Oid			atttypid;
	bool		strict;
	Oid			relid;			/* the trigger's table, for the refusal counters */
	/* A fence per partition of a group (4 arguments): */
	bool		group;
	char		group_name[LE_MAX_GROUP_NAME_LEN + 1];
	int			prefix_len;		/* strlen(key) */
	AttrNumber	part_attnum;	/* partition column */
	Oid			part_typid;		/* int2, int4 or int8 */
	LeGroup		group_row;		/* le_group as read last (lsn invalid: read again) */
} FenceTriggerInfo;

static HTAB *trigger_infos = NULL;
static bool trigger_infos_stale = false;
static uint64 trigger_infos_generation = 0;	/* bumped when the hash is rebuilt */

/*
 * The entry of trigger_infos the last trigger call used, so that the next
 * call of the same trigger (the next row, or the next one-row statement)
 * skips the hash lookup; valid while the hash it points into has not been
 * rebuilt (same generation).
 */
static struct
{
	uint64		generation;		/* 0: empty */
	Oid			tgoid;
	FenceTriggerInfo *info;
}			trigger_memo;

/*
 * The group trigger whose group's number of partitions the current command
 * has read from le_group (or found unchanged there): the other rows of the
 * statement take it as it was then, without looking at the page again
 * (840 instructions per row of a 100-row INSERT, callgrind); the next
 * command looks again.  Reset at the end of every transaction and when a
 * subtransaction rolls back, as verified is.
 */
static struct
{
	bool		valid;
	CommandId	cid;
	const void *info;			/* the trigger's FenceTriggerInfo */
	uint64		generation;		/* trigger_infos_generation then */
}			group_checked;

static void le_fence_cache_prepare(Oid nsp);

/* The table of the trigger call origin (see le_fence_check_token), if any. */
static Oid
le_fence_origin_relid(const void *origin)
{
	return origin != NULL ? ((const FenceTriggerInfo *) origin)->relid : InvalidOid;
}

/*
 * Count a refused write (metrics.c) just before its error is raised: the
 * counter is outside the transaction, which the error rolls back.
 */
#define le_fence_refused(relid)	le_metrics_count_refusal(relid)
static void le_fence_check_token(Oid nsp, const char *key, int64 token, bool strict,
								 const void *origin, int64 partition);

/*
 * Note that le_lease or its index changed (or the relcache was reset): the
 * next check looks the oids up again and, if they changed (the extension
 * was dropped and created again), forgets the lease ids too.  Nothing is
 * freed here: a check in progress keeps using what it looked up.
 */
static void
le_fence_relcache_callback(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == cache_lease_relid || relid == cache_key_indexid)
		cache_stale = true;		/* the hints go too, see le_fence_cache_prepare */
	trigger_infos_stale = true;
}

/* A function changed (e.g. moved): check the triggers' arguments again. */
static void
le_fence_proc_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	trigger_infos_stale = true;
}

/*
 * The lease row as an earlier read judged it, for a check whose page shows
 * that nothing changed since (le_rows_page_unchanged): holder is only
 * tested for NULL, so any non-NULL string stands for it.
 */
static void
le_fence_judged_row(LeaseRow *row, int64 lease_id, int64 token, TimestampTz expires_at,
					char *holder, char *holder_role)
{
	memset(row, 0, sizeof(*row));
	row->lease_id = lease_id;
	row->fencing_token = token;
	row->expires_at = expires_at;
	row->holder = holder;
	row->holder_role = holder_role;
}

/*
 * Did this transaction itself release the lease row lease_id with token,
 * while the lease was held and unexpired (le_fence_note_release), and is
 * it now still before the expiry the lease had then?  Then its writes
 * under that token commit although the lease is free: the lease was valid
 * with that token from the writes to the release (the token never changed,
 * and a lapsed lease cannot be renewed), and the release's row lock and
 * exclusive fence lock, held to our commit, keep everyone else out until
 * then.  The release does not lengthen the lease: a commit after that
 * expiry fails as it would have without the release.
 */
static bool
le_fence_released_here(int64 lease_id, int64 token, TimestampTz now)
{
	ListCell   *lc;

	foreach(lc, released_leases)
	{
		ReleasedLease *rl = (ReleasedLease *) lfirst(lc);

		if (rl->lease_id == lease_id && rl->token == token)
			return rl->was_valid && now < rl->expires_at;
	}
	return false;
}

/*
 * le_release() freed lease row lease_id, which had token and expires_at
 * (and was valid or not): remember it for the commit-time check, and make
 * the next fenced write of this command read the (now free) row again.
 */
void
le_fence_note_release(int64 lease_id, int64 token, bool was_valid,
					  TimestampTz expires_at)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	ReleasedLease *rl = (ReleasedLease *) palloc(sizeof(ReleasedLease));

	rl->lease_id = lease_id;
	rl->token = token;
	rl->was_valid = was_valid;
	rl->expires_at = expires_at;
	rl->subid = GetCurrentSubTransactionId();
	released_leases = lcons(rl, released_leases);	/* the latest first */
	MemoryContextSwitchTo(oldcxt);
	le_fence_verified_forget();
}

/* Order of FencedLeases by lease row id (list_sort comparator). */
static int
le_fence_lease_id_cmp(const ListCell *a, const ListCell *b)
{
	int64		x = ((const FencedLease *) lfirst(a))->lease_id;
	int64		y = ((const FencedLease *) lfirst(b))->lease_id;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * At commit: the authoritative check.  For every lease this
 * transaction passed the fence with, take its fence lock in
 * LE_FENCE_WRITER_LOCKMODE (the wait bounded by
 * leader_election.lock_timeout, 55P03); then hold le_lease
 * (le_rows_hold_lease_table); then, for each, read the latest committed row
 * with a snapshot taken after the locks were granted, and require that it is
 * still the row the write was judged by, that the token is its current one
 * and that the lease is unexpired now.  Otherwise the commit fails with
 * LE001 or LE002 and the transaction is rolled back.  The lock is held from
 * here to the end of the commit.
 * The one case without the lock: it is taken by someone else and the lease
 * row version read was written by this transaction (see below).
 */
static void
le_fence_commit_check(void)
{
	ListCell   *lc;

	if (fenced_leases == NIL)
		return;

	/*
	 * Every fence lock first, then le_lease, then the checks: nothing waits
	 * for a fence lock while holding le_lease, the order of the lease calls:
	 * else a VACUUM FULL of le_lease would queue behind a commit waiting for
	 * its second lease's fence lock, and the taker of that lease behind the
	 * VACUUM FULL (fence_commit_lock_order.spec).  A transaction
	 * that already holds le_lease (it renewed a lease, or read le_leases)
	 * still waits with it held; PostgreSQL's deadlock detector then resolves
	 * such a queue, as for the lease calls.
	 *
	 * The fence locks are taken in the order of the lease row ids, so that
	 * two transactions that take several of them (a writer of several
	 * partitions of a group, le_group_leave releasing them in ascending
	 * order) never wait for each other in a cycle.
	 */
	list_sort(fenced_leases, le_fence_lease_id_cmp);
	foreach(lc, fenced_leases)
	{
		FencedLease *fl = (FencedLease *) lfirst(lc);

		le_fence_cache_prepare(fl->nsp);
		if (cache_lease_relid != fl->lease_relid)
		{
			le_fence_refused(fl->relid);
			ereport(ERROR,
					(errcode(ERRCODE_LE_STALE_FENCING_TOKEN),
					 errmsg("lease \"%s\" was replaced before this transaction committed", fl->key),
					 errdetail("The table le_lease that issued fencing token " INT64_FORMAT " is gone; the transaction is rolled back.",
							   fl->token),
					 errhint("Acquire the lease again for a new token.")));
		}

		fl->locked_at_once = le_fence_lock_try(fl->lease_id, LE_FENCE_WRITER_LOCKMODE);
		if (!fl->locked_at_once)
		{
			LeaseRow	row;
			LeaseRowStamp stamp;
			bool		ours = false;

			/*
			 * A takeover or release is in progress.  If this transaction
			 * itself wrote the lease row (a renewal), it holds the row's lock
			 * to its end, and no token change can commit before it: waiting
			 * for the fence lock would deadlock with the taker, which holds
			 * it and waits for our row.  Otherwise wait (bounded); the row
			 * is read again below, after the lock was granted.
			 */
			if (!le_rows_read_latest(cache_lease_relid, cache_key_indexid, fl->key,
									  &fl->tid, &row, &ours, &stamp) || !ours)
				le_fence_lock_writer(fl->lease_id, fl->key);
		}
	}
	le_rows_hold_lease_table(cache_lease_relid);

	foreach(lc, fenced_leases)
	{
		FencedLease *fl = (FencedLease *) lfirst(lc);
		TimestampTz now;
		LeaseRow	row;
		LeaseRowStamp stamp;
		bool		found;
		bool		ours = false;

		/*
		 * The lock on le_lease read the invalidations queued before it was
		 * granted (a REINDEX CONCURRENTLY, VACUUM FULL, CLUSTER): look the
		 * oids up again if they arrived, rather than use an index oid that
		 * is gone.
		 */
		le_fence_cache_prepare(fl->nsp);
		if (cache_lease_relid != fl->lease_relid)
		{
			le_fence_refused(fl->relid);
			ereport(ERROR,
					(errcode(ERRCODE_LE_STALE_FENCING_TOKEN),
					 errmsg("lease \"%s\" was replaced before this transaction committed", fl->key),
					 errdetail("The table le_lease that issued fencing token " INT64_FORMAT " is gone; the transaction is rolled back.",
							   fl->token),
					 errhint("Acquire the lease again for a new token.")));
		}

		if (fl->locked_at_once && le_rows_row_unchanged(cache_lease_relid, &fl->stamp))
		{
			/*
			 * Nothing on the row's page changed since the write's read
			 * judged it: the lease row, token and expiry are those
			 * recorded, and it was held then (holder is only tested for
			 * NULL below).
			 */
			le_fence_judged_row(&row, fl->lease_id, fl->token, fl->expires_at, fl->key, NULL);
			found = true;
		}
		else
			found = le_rows_read_latest(cache_lease_relid, cache_key_indexid, fl->key,
										 &fl->tid, &row, &ours, &stamp);
		now = GetCurrentTimestamp();
		if (!found || row.lease_id != fl->lease_id)
		{
			le_fence_refused(fl->relid);
			ereport(ERROR,
					(errcode(ERRCODE_LE_STALE_FENCING_TOKEN),
					 errmsg("lease \"%s\" was replaced before this transaction committed", fl->key),
					 errdetail("The lease row that issued fencing token " INT64_FORMAT " is gone; the transaction is rolled back.",
							   fl->token),
					 errhint("Acquire the lease again for a new token.")));
		}
		if (row.fencing_token != fl->token)
		{
			le_fence_refused(fl->relid);
			ereport(ERROR,
					(errcode(ERRCODE_LE_STALE_FENCING_TOKEN),
					 errmsg("fencing token " INT64_FORMAT " of lease \"%s\" became stale before this transaction committed",
							fl->token, fl->key),
					 errdetail("The current fencing token is " INT64_FORMAT "; the transaction is rolled back.",
							   row.fencing_token),
					 errhint("A leader whose token was superseded must stop working, not retry.")));
		}
		if (!le_store_lease_valid(&row, now) &&
			!(ours && row.holder == NULL && le_fence_released_here(fl->lease_id, fl->token, now)))
		{
			le_fence_refused(fl->relid);
			ereport(ERROR,
					(errcode(ERRCODE_LE_LEASE_NOT_HELD),
					 errmsg("lease \"%s\" ended before this transaction committed", fl->key),
					 row.holder == NULL ?
					 errdetail("The transaction wrote with fencing token " INT64_FORMAT "; the lease was released. The transaction is rolled back.",
							   fl->token) :
					 errdetail("The transaction wrote with fencing token " INT64_FORMAT "; the lease expired at %s. The transaction is rolled back.",
							   fl->token, timestamptz_to_str(row.expires_at)),
					 errhint("Renew the lease before it expires, or keep fenced transactions shorter than the ttl.")));
		}
		fl->expires_at = row.expires_at;
	}
}

/*
 * PREPARE TRANSACTION of a transaction that passed the fence: refused.  The
 * commit-time check would hold the fence lock from PREPARE to COMMIT
 * PREPARED, however long that takes (blocking every takeover), and COMMIT
 * PREPARED could still commit the writes after the lease expired.
 */
static void
le_fence_refuse_prepare(void)
{
	FencedLease *fl;

	if (fenced_leases == NIL)
		return;
	fl = (FencedLease *) linitial(fenced_leases);
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("cannot PREPARE a transaction that passed the fence of lease \"%s\"", fl->key),
			 errdetail("A prepared transaction would hold the lease's fence lock until COMMIT PREPARED and could commit after the lease expired; the transaction is rolled back."),
			 errhint("Commit fenced writes, le_fence_check() and le_schedule_job() without two-phase commit.")));
}

/*
 * Transaction end: check the leases written under before commit, refuse
 * PREPARE; forget everything once the transaction is over (its fence locks
 * go with it).
 */
static void
le_fence_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			le_fence_commit_check();
			commit_checked = true;
			break;
		case XACT_EVENT_PRE_PREPARE:
			le_fence_refuse_prepare();
			break;
		case XACT_EVENT_PARALLEL_PRE_COMMIT:
			break;
		default:
			le_fence_verified_forget();
			group_checked.valid = false;
			updated_row.valid = false;
			fenced_leases = NIL;	/* its memory goes with the transaction */
			released_leases = NIL;
			commit_checked = false;
			break;
	}
}

/*
 * A subtransaction ended: drop what it recorded if it rolled back (its
 * writes and fence locks are gone), hand it to the parent if it committed.
 */
static void
le_fence_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						  SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		le_fence_verified_forget();
		group_checked.valid = false;
		updated_row.valid = false;
		foreach(lc, fenced_leases)
		{
			if (((FencedLease *) lfirst(lc))->subid == mySubid)
				fenced_leases = foreach_delete_current(fenced_leases, lc);
		}
		foreach(lc, released_leases)
		{
			if (((ReleasedLease *) lfirst(lc))->subid == mySubid)
				released_leases = foreach_delete_current(released_leases, lc);
		}
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		foreach(lc, fenced_leases)
		{
			FencedLease *fl = (FencedLease *) lfirst(lc);

			if (fl->subid == mySubid)
				fl->subid = parentSubid;
		}
		foreach(lc, released_leases)
		{
			ReleasedLease *rl = (ReleasedLease *) lfirst(lc);

			if (rl->subid == mySubid)
				rl->subid = parentSubid;
		}
	}
}

/* Remember that this transaction passed the fence of a lease with a token. */
static void
le_fence_remember(Oid nsp, Oid lease_relid, const char *key, const LeaseRow *row,
				  ItemPointer tid, const LeaseRowStamp *stamp, Oid relid)
{
	ListCell   *lc;
	FencedLease *fl;
	MemoryContext oldcxt;

	/*
	 * The list grows by one entry per lease (a writer of many partitions of
	 * a group has many): the last entry, the lease written last, first.
	 */
	if (fenced_leases != NIL)
	{
		fl = (FencedLease *) llast(fenced_leases);
		if (fl->nsp == nsp && fl->lease_relid == lease_relid &&
			fl->lease_id == row->lease_id && fl->token == row->fencing_token)
		{
			fl->expires_at = row->expires_at;
			fl->stamp = *stamp;
			return;
		}
	}
	foreach(lc, fenced_leases)
	{
		fl = (FencedLease *) lfirst(lc);
		if (fl->nsp == nsp && fl->lease_relid == lease_relid &&
			fl->lease_id == row->lease_id && fl->token == row->fencing_token)
		{
			fl->expires_at = row->expires_at;
			fl->stamp = *stamp;
			return;
		}
	}
	oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	fl = (FencedLease *) palloc(sizeof(FencedLease));
	fl->nsp = nsp;
	fl->lease_relid = lease_relid;
	fl->lease_id = row->lease_id;
	fl->token = row->fencing_token;
	fl->expires_at = row->expires_at;
	fl->subid = GetCurrentSubTransactionId();
	fl->tid = *tid;
	fl->stamp = *stamp;
	fl->relid = relid;
	strlcpy(fl->key, key, sizeof(fl->key));
	fenced_leases = lappend(fenced_leases, fl);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Register the invalidation and transaction callbacks, once per backend
 * (from _PG_init, so that the commit-time check is in place before any
 * commit callback of an extension loaded later can write).
 */
void
le_fence_register_callbacks(void)
{
	if (cache_callbacks_registered)
		return;
	CacheRegisterRelcacheCallback(le_fence_relcache_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(PROCOID, le_fence_proc_callback, (Datum) 0);
	RegisterXactCallback(le_fence_xact_callback, NULL);
	RegisterSubXactCallback(le_fence_subxact_callback, NULL);
	cache_callbacks_registered = true;
}

/*
 * Make sure the caches describe the extension living in schema nsp.  After
 * any invalidation of le_lease or its index the oids are looked up again
 * and every TID hint is dropped: the table may have been rewritten or
 * truncated (VACUUM FULL, CLUSTER, TRUNCATE) or replaced (DROP and CREATE
 * EXTENSION).
 */
static void
le_fence_cache_prepare(Oid nsp)
{
	HASHCTL		ctl;
	Oid			lease_relid;
	Oid			key_indexid;

	le_fence_register_callbacks();
	if (cache_nsp == nsp && !cache_stale && cache_lease_ids != NULL)
		return;

	le_rows_relids(nsp, &lease_relid, &key_indexid);
	cache_stale = false;

	if (cache_lease_ids != NULL)
		hash_destroy(cache_lease_ids);
	cache_lease_ids = NULL;
	cache_last_entry = NULL;
	if (cache_nsp != nsp || lease_relid != cache_lease_relid)
		le_fence_verified_forget();
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = LE_MAX_KEY_LEN + 1;
	ctl.entrysize = sizeof(LeaseIdEntry);
	ctl.hcxt = CacheMemoryContext;
	cache_lease_ids = hash_create("leader_election lease row hints", 64, &ctl,
								  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	cache_nsp = nsp;
	cache_lease_relid = lease_relid;
	cache_key_indexid = key_indexid;
}

/* Reject a lease that has never been acquired. */
static void
le_fence_reject_unknown(const char *key, int64 token, const void *origin)
{
	le_fence_refused(le_fence_origin_relid(origin));
	ereport(ERROR,
			(errcode(ERRCODE_LE_LEASE_NOT_HELD),
			 errmsg("lease \"%s\" has never been acquired", key),
			 errdetail("The write carries fencing token " INT64_FORMAT ".", token),
			 errhint("Writes to data fenced by a lease need a token returned by le_acquire() for that lease.")));
}

/*
 * The early fence check shared by the trigger, le_fence_check() and the
 * jobs functions: accept the token only if it is the lease's current one and
 * the lease is held and unexpired now (in strict mode the current role must
 * also be the role that acquired the lease), judged on the latest committed
 * row, read without any lock; raises LE001, LE002 or 42501 otherwise.  The
 * (lease row, token) is recorded for the commit-time check, which takes
 * the fence lock and decides (le_fence_commit_check).
 */
void
le_fence_check_lease(Oid nsp, const char *key, int64 token, bool strict)
{
	le_fence_check_token(nsp, key, token, strict, NULL, -1);
}

/*
 * The cache entry of key, made when there is none (with no hint yet); the
 * caller has run le_fence_cache_prepare.  No lock.
 */
static LeaseIdEntry *
le_fence_cache_entry(Oid nsp, const char *key)
{
	LeaseIdEntry *entry = cache_last_entry;
	bool		found;

	if (entry != NULL && strcmp(entry->key, key) == 0)
		return entry;

	/*
	 * Bounded: a backend that checks ever new keys (or keys that do not
	 * exist) starts the cache afresh at LE_FENCE_CACHE_MAX entries.
	 */
	if (hash_get_num_entries(cache_lease_ids) >= LE_FENCE_CACHE_MAX &&
		hash_search(cache_lease_ids, key, HASH_FIND, NULL) == NULL)
	{
		cache_stale = true;
		le_fence_cache_prepare(nsp);
	}
	entry = (LeaseIdEntry *) hash_search(cache_lease_ids, key, HASH_ENTER, &found);
	if (!found)
	{
		ItemPointerSetInvalid(&entry->tid);
		entry->recent = InvalidBuffer;
		entry->stamp.lsn = InvalidXLogRecPtr;
	}
	cache_last_entry = entry;
	return entry;
}

/*
 * Raise the fence's error unless token is row's current token and the
 * lease is held and unexpired at now: LE001 for a stale or never issued
 * token, LE002 for a released or expired lease.
 */
static void
le_fence_judge(const LeaseRow *row, const char *key, int64 token, TimestampTz now,
			   const void *origin)
{
	if (row->fencing_token != token)
	{
		le_fence_refused(le_fence_origin_relid(origin));
		ereport(ERROR,
				(errcode(ERRCODE_LE_STALE_FENCING_TOKEN),
				 token < row->fencing_token ?
				 errmsg("fencing token " INT64_FORMAT " of lease \"%s\" is stale", token, key) :
				 errmsg("fencing token " INT64_FORMAT " of lease \"%s\" was never issued", token, key),
				 errdetail("The current fencing token is " INT64_FORMAT ".", row->fencing_token),
				 errhint("A leader whose token was superseded must stop working, not retry.")));
	}

	if (!le_store_lease_valid(row, now))
	{
		le_fence_refused(le_fence_origin_relid(origin));
		if (row->holder == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_LE_LEASE_NOT_HELD),
					 errmsg("lease \"%s\" is not held", key),
					 errdetail("Fencing token " INT64_FORMAT " is the current token, but the lease was released.", token),
					 errhint("A leader whose lease ended must stop working; acquire the lease again for a new token.")));
		ereport(ERROR,
				(errcode(ERRCODE_LE_LEASE_NOT_HELD),
				 errmsg("lease \"%s\" is not held", key),
				 errdetail("Fencing token " INT64_FORMAT " is the current token, but the lease expired at %s.",
						   token, timestamptz_to_str(row->expires_at)),
				 errhint("A leader whose lease ended must stop working; acquire the lease again for a new token.")));
	}
}

/*
 * le_fence_check_lease() for a trigger call too: origin is the trigger's
 * cached arguments (or NULL), so that the next row of the same trigger is
 * known to name the same lease without comparing the key (strcmp per row
 * was a quarter of the per-row shortcut, perf); for a group's trigger,
 * whose rows name different leases, together with the row's partition
 * (-1 for every other call).
 *
 * Locks: none on the warm path; otherwise AccessShareLock on le_lease for
 * the read (le_rows_read_latest).  Never the fence lock: that waits for
 * the commit (le_fence_commit_check).
 */
static void
le_fence_check_token(Oid nsp, const char *key, int64 token, bool strict, const void *origin,
					 int64 partition)
{
	LeaseIdEntry *entry;
	LeaseRow	row;
	LeaseRowStamp stamp;
	bool		found;
	TimestampTz now;
	FenceVerified *v;

	if (commit_checked)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("fenced write after the commit-time check of the fence"),
				 errdetail("Code running at commit after the fence's check (another extension's commit callback) wrote with fencing token " INT64_FORMAT " of lease \"%s\"; the transaction is rolled back.",
						   token, key),
				 errhint("Make fenced writes before COMMIT.")));

	/*
	 * Same lease and token already passed in this command, and le_lease not
	 * invalidated since (le_fence_cache_prepare would have nothing to do).
	 */
	v = &verified[partition < 0 ? 0 : partition % LE_FENCE_VERIFIED_SLOTS];
	if (origin != NULL && v->valid && !cache_stale &&
		v->cid == GetCurrentCommandId(false) &&
		v->token == token &&
		((v->origin == origin && v->partition == partition &&
		  v->origin_generation == trigger_infos_generation) ||
		 (v->nsp == nsp && strcmp(v->key, key) == 0)) &&
		(!strict || v->strict_userid == GetUserId()) &&
		(++v->uses % LE_FENCE_CLOCK_EVERY != 0 ||
		 GetCurrentTimestamp() < v->expires_at))
		return;
	v->valid = false;
	le_fence_cache_prepare(nsp);

	entry = le_fence_cache_entry(nsp, key);

	/*
	 * The latest committed row (and this transaction's own changes): what
	 * the last read found if its page has not changed since; else read
	 * where it was found last time if its block is still in the same
	 * buffer, without a lock on le_lease; else with one.
	 */
	if (le_rows_page_unchanged(cache_lease_relid, &entry->stamp, &found) && found)
	{
		le_fence_judged_row(&row, entry->lease_id, entry->token, entry->expires_at,
							entry->held ? entry->key : NULL,
							entry->held ? NameStr(entry->role) : NULL);
		stamp = entry->stamp;
	}
	else
	{
		entry->stamp.lsn = InvalidXLogRecPtr;
		if (!le_rows_read_unlocked(cache_lease_relid, key, &entry->tid, entry->recent, &row, &stamp) &&
			!le_rows_read_latest(cache_lease_relid, cache_key_indexid, key, &entry->tid, &row, NULL,
								  &stamp))
		{
			entry->recent = InvalidBuffer;
			le_fence_reject_unknown(key, token, origin);
		}
		entry->recent = stamp.buffer;
		entry->lease_id = row.lease_id;
		entry->token = row.fencing_token;
		entry->expires_at = row.expires_at;
		entry->held = (row.holder != NULL);
		namestrcpy(&entry->role, row.holder_role != NULL ? row.holder_role : "");
		entry->stamp = stamp;
	}
	now = GetCurrentTimestamp();

	le_fence_judge(&row, key, token, now, origin);

	v->strict_userid = InvalidOid;
	if (strict)
	{
		Oid			userid = GetUserId();
		char	   *rolname = GetUserNameFromId(userid, false);

		if (strcmp(rolname, row.holder_role) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("role \"%s\" does not hold lease \"%s\"", rolname, key),
					 errdetail("The lease is fenced in strict mode and was acquired by role \"%s\".",
							   row.holder_role),
					 errhint("Write as the role that acquired the lease.")));
		v->strict_userid = userid;
	}

	le_fence_remember(nsp, cache_lease_relid, key, &row, &entry->tid, &stamp,
					  le_fence_origin_relid(origin));

	/*
	 * Only trigger calls set and use the shortcut: they fire for written
	 * rows, and a statement that writes advances the command id for the
	 * next.  A read-only statement does not, so le_fence_check() (and the
	 * job functions) read the lease at every call.
	 */
	if (origin == NULL)
		return;
	v->valid = true;
	v->cid = GetCurrentCommandId(false);
	v->nsp = nsp;
	strlcpy(v->key, key, sizeof(v->key));
	v->token = token;
	v->expires_at = row.expires_at;
	v->uses = 0;
	v->origin = origin;
	v->origin_generation = trigger_infos_generation;
	v->partition = partition;
}

/*
 * Is the fence trigger's mode argument "strict"?  Three arguments (a lease
 * key's fence): the third, when present, must be 'strict'; four (a group's
 * fence): the third is 'lease' or 'strict'.
 */
static bool
le_fence_parse_mode(int nargs, char **args)
{
	if (nargs < 3)
		return false;
	if (strcmp(args[2], "strict") == 0)
		return true;
	if (nargs == 4 && strcmp(args[2], "lease") == 0)
		return false;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid mode \"%s\" for the le_fence trigger", le_check_show(args[2])),
			 nargs == 4 ?
			 errhint("The third argument of a group's fence must be 'lease' or 'strict'.") :
			 errhint("The third argument, when present, must be 'strict'.")));
	return false;				/* keep the compiler quiet */
}

/*
 * The attribute of rel named column, which is to hold what (e.g. "token
 * column"); NULL when there is none.  A generated column is refused
 * (0A000): it is computed after BEFORE triggers, so the fence would judge a
 * value that is not the one stored; hint says what to store instead.
 */
static Form_pg_attribute
le_fence_plain_column(Relation rel, const char *column, const char *what, const char *hint)
{
	TupleDesc	desc = RelationGetDescr(rel);
	int			i;

	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped || strcmp(NameStr(att->attname), column) != 0)
			continue;
		if (att->attgenerated != '\0')
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("%s \"%s\" of table \"%s\" is a generated column",
							what, column, RelationGetRelationName(rel)),
					 errdetail("A generated column is computed after BEFORE triggers, so the fence would judge a value that is not the one stored."),
					 errhint("%s", hint)));
		return att;
	}
	return NULL;
}

/*
 * Check that column of rel can name a row's partition: a plain smallint,
 * integer or bigint column.  Returns its number and type.  Shared by
 * le_protect() and the trigger, like le_fence_validate.
 */
static AttrNumber
le_fence_validate_partition(Relation rel, const char *column, const char *token_column,
							Oid *atttypid)
{
	Form_pg_attribute att;

	if (strcmp(column, token_column) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("partition column and token column of table \"%s\" are both \"%s\"",
						RelationGetRelationName(rel), column),
				 errhint("Name the column that holds the row's partition number and the one that holds the writer's token.")));
	att = le_fence_plain_column(rel, column, "partition column",
								"Store the row's partition number in a plain integer column.");
	if (att != NULL)
	{
		if (att->atttypid != INT2OID && att->atttypid != INT4OID && att->atttypid != INT8OID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("partition column \"%s\" of table \"%s\" must be of type smallint, integer or bigint",
							column, RelationGetRelationName(rel)),
					 errdetail("Its type is %s.", format_type_be(att->atttypid))));
		*atttypid = att->atttypid;
		return att->attnum;
	}
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_COLUMN),
			 errmsg("partition column \"%s\" does not exist in table \"%s\"",
					column, RelationGetRelationName(rel)),
			 errhint("Add an integer column holding the row's partition number, or name the column to use.")));
	return InvalidAttrNumber;	/* keep the compiler quiet */
}

/*
 * Check that key and column make sense for relation rel; returns the
 * column's number and type.  Shared by le_protect() and the trigger, so a
 * trigger attached by hand gets the same errors.  key is NULL for a
 * group's fence (its name is checked by le_check_group_name_value).
 */
static AttrNumber
le_fence_validate(Relation rel, const char *key, const char *column, Oid *atttypid)
{
	size_t		keylen = key != NULL ? strlen(key) : 0;
	Form_pg_attribute att;

	if (rel->rd_rel->relkind != RELKIND_RELATION &&
		rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a table", RelationGetRelationName(rel)),
				 errdetail("Only tables and partitioned tables can be fenced.")));
	if (key != NULL && (keylen == 0 || keylen > LE_MAX_KEY_LEN))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid lease key for the fence of table \"%s\"", RelationGetRelationName(rel)),
				 errdetail("A lease key is 1 to %d bytes long.", LE_MAX_KEY_LEN)));

	att = le_fence_plain_column(rel, column, "token column",
								"Store the writer's fencing token in a plain bigint column.");
	if (att != NULL)
	{
		if (att->atttypid != INT8OID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("token column \"%s\" of table \"%s\" must be of type bigint",
							column, RelationGetRelationName(rel)),
					 errdetail("Its type is %s.", format_type_be(att->atttypid)),
					 errhint("Fencing tokens jump to 2^40 and above after a promotion, a point-in-time recovery or a restore into another cluster; use ALTER TABLE %s ALTER COLUMN %s TYPE bigint.",
							 quote_identifier(RelationGetRelationName(rel)), quote_identifier(column))));
		*atttypid = att->atttypid;
		return att->attnum;
	}
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_COLUMN),
			 errmsg("token column \"%s\" does not exist in table \"%s\"",
					column, RelationGetRelationName(rel)),
			 errhint("Add a bigint column holding the writer's fencing token, or name the column to use.")));
	return InvalidAttrNumber;	/* keep the compiler quiet */
}

/* Remember the trigger's entry in trigger_memo, and return it. */
static FenceTriggerInfo *
le_fence_trigger_memo(Oid tgoid, FenceTriggerInfo *info)
{
	trigger_memo.generation = trigger_infos_generation;
	trigger_memo.tgoid = tgoid;
	trigger_memo.info = info;
	return info;
}

/*
 * Parse and check the trigger's arguments, once per trigger (see above);
 * calls of the trigger used last find its entry through trigger_memo.
 */
static FenceTriggerInfo *
le_fence_trigger_info(FunctionCallInfo fcinfo, TriggerData *trigdata)
{
	Trigger    *trigger = trigdata->tg_trigger;
	FenceTriggerInfo *info;
	FenceTriggerInfo checked;
	bool		found;

	if (!trigger_infos_stale && trigger_memo.tgoid == trigger->tgoid &&
		trigger_memo.generation == trigger_infos_generation && trigger_memo.generation != 0)
		return trigger_memo.info;

	le_fence_register_callbacks();
	if (trigger_infos == NULL || trigger_infos_stale)
	{
		HASHCTL		ctl;

		if (trigger_infos != NULL)
			hash_destroy(trigger_infos);
		trigger_infos_stale = false;
		trigger_infos_generation++;
		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(FenceTriggerInfo);
		ctl.hcxt = CacheMemoryContext;
		trigger_infos = hash_create("leader_election fence triggers", 16, &ctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	info = (FenceTriggerInfo *) hash_search(trigger_infos, &trigger->tgoid, HASH_FIND, NULL);
	if (info != NULL)
		return le_fence_trigger_memo(trigger->tgoid, info);

	if (trigger->tgnargs < 2 || trigger->tgnargs > 4)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger \"%s\" on table \"%s\" passes %d arguments to le_fence()",
						trigger->tgname, RelationGetRelationName(trigdata->tg_relation),
						trigger->tgnargs),
				 errdetail("le_fence() takes a lease key, a token column and optionally 'strict'; or a group name, a token column, 'lease' or 'strict', and a partition column."),
				 errhint("Attach the fence with le_protect().")));

	/* Everything that can fail happens before the entry is made. */
	memset(&checked, 0, sizeof(checked));
	checked.group = (trigger->tgnargs == 4);
	if (checked.group)
	{
		le_check_group_name_value(trigger->tgargs[0]);
		checked.part_attnum = le_fence_validate_partition(trigdata->tg_relation, trigger->tgargs[3],
														  trigger->tgargs[1], &checked.part_typid);
		snprintf(checked.key, sizeof(checked.key), LE_GROUP_KEY_PREFIX "%s:", trigger->tgargs[0]);
		strlcpy(checked.group_name, trigger->tgargs[0], sizeof(checked.group_name));
		checked.prefix_len = strlen(checked.key);
	}
	else
		strlcpy(checked.key, trigger->tgargs[0], sizeof(checked.key));
	checked.attnum = le_fence_validate(trigdata->tg_relation,
									   checked.group ? NULL : trigger->tgargs[0],
									   trigger->tgargs[1], &checked.atttypid);
	checked.strict = le_fence_parse_mode(trigger->tgnargs, trigger->tgargs);
	checked.nsp = get_func_namespace(fcinfo->flinfo->fn_oid);
	checked.relid = RelationGetRelid(trigdata->tg_relation);
	checked.group_row.lsn = InvalidXLogRecPtr;	/* read at the first write */

	info = (FenceTriggerInfo *) hash_search(trigger_infos, &trigger->tgoid, HASH_ENTER, &found);
	checked.tgoid = trigger->tgoid;
	*info = checked;
	return le_fence_trigger_memo(trigger->tgoid, info);
}

/*
 * The token in the row's token column; errors when it is NULL or not
 * positive.  Read from the slot the executor made the tuple from, when
 * there is one: its columns are usually deformed already, whereas
 * heap_getattr() walks the tuple past every variable-width column before
 * the token (perf and callgrind: half of the fence's cost per row of a
 * multi-row INSERT).
 */
static int64
le_fence_row_token(FenceTriggerInfo *info, TriggerData *trigdata, HeapTuple tuple,
				   TupleTableSlot *slot)
{
	bool		isnull;
	Datum		d;
	int64		token;
	const char *column;

	if (slot != NULL)
		d = slot_getattr(slot, info->attnum, &isnull);
	else
		d = heap_getattr(tuple, info->attnum, RelationGetDescr(trigdata->tg_relation), &isnull);
	column = trigdata->tg_trigger->tgargs[1];
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("fencing token column \"%s\" of table \"%s\" is NULL",
						column, RelationGetRelationName(trigdata->tg_relation)),
				 errhint("Every write to a fenced table carries the writer's fencing token.")));
	token = DatumGetInt64(d);	/* bigint only, see le_fence_validate */
	if (token <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fencing token column \"%s\" of table \"%s\" must be positive, got " INT64_FORMAT,
						column, RelationGetRelationName(trigdata->tg_relation), token)));
	return token;
}

/* A token set for the transaction must agree with the row's. */
static void
le_fence_setting_agrees(TriggerData *trigdata, int64 token)
{
	if (le_fencing_token_setting != 0 && le_fencing_token_setting != token)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fencing token " INT64_FORMAT " in column \"%s\" disagrees with leader_election.fencing_token = " INT64_FORMAT,
						token, trigdata->tg_trigger->tgargs[1], le_fencing_token_setting),
				 errhint("Write rows with the token the transaction was set up with.")));
}

/*
 * Does this UPDATE leave the old row's token in the new row (not assigned,
 * or assigned the same value)?  The row's token then says nothing about the
 * writer: it may be the token of the leader that wrote the row last, a
 * newer one than the writer's.
 */
static bool
le_fence_keeps_token(FenceTriggerInfo *info, TriggerData *trigdata, int64 token)
{
	bool		isnull;
	Datum		d;

	if (trigdata->tg_trigslot != NULL)
		d = slot_getattr(trigdata->tg_trigslot, info->attnum, &isnull);
	else
		d = heap_getattr(trigdata->tg_trigtuple, info->attnum,
						 RelationGetDescr(trigdata->tg_relation), &isnull);
	return !isnull && DatumGetInt64(d) == token;
}

/*
 * Has this transaction declared token for the lease: passed the fence with
 * it (le_fence_check(), or a write that carried it, not rolled back to a
 * savepoint since)?  leader_election.fencing_token is tested by the caller.
 */
static bool
le_fence_declared(Oid nsp, const char *key, int64 token)
{
	ListCell   *lc;

	foreach(lc, fenced_leases)
	{
		FencedLease *fl = (FencedLease *) lfirst(lc);

		if (fl->nsp == nsp && fl->token == token && strcmp(fl->key, key) == 0)
			return true;
	}
	return false;
}

/*
 * An UPDATE that keeps the row's token (of the lease key, the row's
 * partition's for a group): the writer's token must come from
 * the transaction, never from the row, or a stale writer's UPDATE that does
 * not touch the column would commit under the token the new leader stamped
 * the row with (also MERGE ... WHEN MATCHED THEN UPDATE and INSERT ... ON
 * CONFLICT DO UPDATE, which fire the same trigger).  With
 * leader_election.fencing_token set, that token is judged (LE001/LE002 when
 * stale) and must be the row's; without it, the token must have been
 * declared by le_fence_check() or a write that carried it in this
 * transaction (le_fence_declared), else 22004.  The row's token is checked
 * first either way, so a stale row token still gets LE001.
 */
static void
le_fence_check_kept(FenceTriggerInfo *info, TriggerData *trigdata, const char *key,
					int64 partition, int64 token)
{
	bool		declared;

	if (le_fencing_token_setting != 0)
	{
		le_fence_check_token(info->nsp, key, le_fencing_token_setting, info->strict, info, partition);
		le_fence_setting_agrees(trigdata, token);
		return;
	}
	declared = le_fence_declared(info->nsp, key, token);
	le_fence_check_token(info->nsp, key, token, info->strict, info, partition);
	if (!declared)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("UPDATE of fenced table \"%s\" keeps fencing token " INT64_FORMAT " in column \"%s\" without the transaction declaring it",
						RelationGetRelationName(trigdata->tg_relation), token,
						trigdata->tg_trigger->tgargs[1]),
				 errdetail("A row's own token does not show who writes it: it may be a newer leader's."),
				 errhint("Run SET LOCAL leader_election.fencing_token = <your token>, or SELECT le_fence_check(lease_key, <your token>), in the transaction first.")));
}

/*
 * The fence must be the last BEFORE ROW trigger that can change the row of
 * this event (INSERT or UPDATE): triggers fire in name order, and one that
 * fires after the fence could change the token it judged.  Checked at every
 * firing against the relation's trigger list (a loop over a few entries,
 * no catalog access), so a trigger created after le_protect() is caught at
 * the first write; disabled triggers and other fence triggers do not count.
 */
static void
le_fence_require_last(Relation rel, const Trigger *fence, int16 event)
{
	TriggerDesc *td = rel->trigdesc;
	int			i;

	if (td == NULL)
		return;
	for (i = td->numtriggers - 1; i >= 0; i--)
	{
		const Trigger *t = &td->triggers[i];

		if (t->tgoid == fence->tgoid)
			return;
		if (t->tgenabled == TRIGGER_DISABLED || t->tgfoid == fence->tgfoid ||
			!TRIGGER_FOR_ROW(t->tgtype) || !TRIGGER_FOR_BEFORE(t->tgtype) ||
			(t->tgtype & event) == 0)
			continue;
		ereport(ERROR,
				(errcode(ERRCODE_TRIGGERED_ACTION_EXCEPTION),
				 errmsg("trigger \"%s\" on table \"%s\" fires after the fence trigger \"%s\"",
						t->tgname, RelationGetRelationName(rel), fence->tgname),
				 errdetail("BEFORE ROW triggers fire in name order; one after the fence could change the fencing token the fence judged."),
				 errhint("Rename the trigger so that its name sorts before \"%s\".", fence->tgname)));
	}
}

/*
 * The checks of le_fence() on the row stored, for the trigger of 'advance'
 * mode (le_fence_advance_trigger, whose token rules are in PL/pgSQL): at
 * every INSERT or UPDATE firing, no BEFORE ROW trigger fires after it and
 * the token column is not generated.  Misplaced firings are left to the
 * PL/pgSQL trigger, which refuses them.
 */
void
le_fence_advance_guard(struct TriggerData *trigdata)
{
	TriggerEvent ev = trigdata->tg_event;
	Relation	rel = trigdata->tg_relation;
	TupleDesc	desc = RelationGetDescr(rel);
	const char *column;
	int			i;

	if (!TRIGGER_FIRED_BEFORE(ev) || !TRIGGER_FIRED_FOR_ROW(ev) ||
		trigdata->tg_trigger->tgnargs != 2)
		return;
	if (TRIGGER_FIRED_BY_INSERT(ev))
		le_fence_require_last(rel, trigdata->tg_trigger, TRIGGER_TYPE_INSERT);
	else if (TRIGGER_FIRED_BY_UPDATE(ev))
		le_fence_require_last(rel, trigdata->tg_trigger, TRIGGER_TYPE_UPDATE);
	else
		return;
	column = trigdata->tg_trigger->tgargs[1];
	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && att->attgenerated != '\0' &&
			strcmp(NameStr(att->attname), column) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("token column \"%s\" of table \"%s\" is a generated column",
							column, RelationGetRelationName(rel)),
					 errdetail("A generated column is computed after BEFORE triggers, so the fence would judge a value that is not the one stored."),
					 errhint("Store the writer's fencing token in a plain bigint column.")));
	}
}

/* The token a DELETE or TRUNCATE carries: leader_election.fencing_token. */
static int64
le_fence_setting_token(TriggerData *trigdata, const char *what)
{
	if (le_fencing_token_setting == 0)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s on fenced table \"%s\" needs leader_election.fencing_token",
						what, RelationGetRelationName(trigdata->tg_relation)),
				 errhint("Run SET LOCAL leader_election.fencing_token = <your token> in the transaction first.")));
	return le_fencing_token_setting;
}

/* Remember the row an UPDATE passed the fence with (see updated_row). */
static void
le_fence_note_update(TriggerData *trigdata, int64 token)
{
	updated_row.valid = true;
	updated_row.relid = RelationGetRelid(trigdata->tg_relation);
	updated_row.tid = trigdata->tg_trigtuple->t_self;
	updated_row.cid = GetCurrentCommandId(false);
	updated_row.subid = GetCurrentSubTransactionId();
	updated_row.token = token;
}

/*
 * Is this DELETE the first half of a cross-partition UPDATE whose BEFORE
 * UPDATE trigger just passed the fence for the same tuple in the same
 * command?  Then *token is the new row's token (the INSERT half checks it
 * again in the new partition).
 */
static bool
le_fence_moving_row(TriggerData *trigdata, int64 *token)
{
	bool		moving;

	moving = updated_row.valid &&
		updated_row.relid == RelationGetRelid(trigdata->tg_relation) &&
		ItemPointerEquals(&updated_row.tid, &trigdata->tg_trigtuple->t_self) &&
		updated_row.cid == GetCurrentCommandId(false) &&
		updated_row.subid == GetCurrentSubTransactionId();
	updated_row.valid = false;
	if (moving)
		*token = updated_row.token;
	return moving;
}

/*
 * The number of partitions of the trigger's group, as le_group has it at
 * this statement: what the last read found while its page shows no change
 * since (le_fence_group_unchanged), else read again, once per command
 * (group_checked); 42704 when the group does not exist (or the catalog has
 * no groups: 1.0).
 */
static int32
le_fence_group_partitions(FenceTriggerInfo *info, TriggerData *trigdata)
{
	CommandId	cid = GetCurrentCommandId(false);

	if (group_checked.valid && group_checked.cid == cid && group_checked.info == info &&
		group_checked.generation == trigger_infos_generation)
		return info->group_row.partitions;
	group_checked.valid = false;
	if (!le_fence_group_unchanged(&info->group_row) &&
		!le_fence_group_read(info->nsp, info->group_name, &info->group_row))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("group \"%s\" of the fence of table \"%s\" does not exist",
						info->group_name, RelationGetRelationName(trigdata->tg_relation)),
				 errhint("Create it with le_group_create(), or fence the table with another group.")));
	group_checked.valid = true;
	group_checked.cid = cid;
	group_checked.info = info;
	group_checked.generation = trigger_infos_generation;
	return info->group_row.partitions;
}

/*
 * The row's partition number, *isnull when the partition column is NULL;
 * read from the slot when there is one (see le_fence_row_token).
 */
static int64
le_fence_partition_value(FenceTriggerInfo *info, TriggerData *trigdata, HeapTuple tuple,
						 TupleTableSlot *slot, bool *isnull)
{
	Datum		d;

	if (slot != NULL)
		d = slot_getattr(slot, info->part_attnum, isnull);
	else
		d = heap_getattr(tuple, info->part_attnum, RelationGetDescr(trigdata->tg_relation), isnull);
	if (*isnull)
		return -1;
	if (info->part_typid == INT2OID)
		return DatumGetInt16(d);
	if (info->part_typid == INT4OID)
		return DatumGetInt32(d);
	return DatumGetInt64(d);
}

/*
 * The partition a row of a group's fenced table belongs to, and in key the
 * key of its lease, "le:group:<g>:<p>": the group must exist (42704), the
 * value must not be NULL (22004) and must lie in 0 .. partitions - 1
 * (22003), judged against the group's number of partitions as le_group
 * has it now.  Within that range every such key is a row of the group
 * (le_group_create refuses a group whose keys a lease uses already, and no
 * new lease may take the prefix), so the range check also keeps a lease
 * that is not the group's (one made by 1.0 with a key beyond the last
 * partition) from fencing the row.
 */
static int64
le_fence_row_partition(FenceTriggerInfo *info, TriggerData *trigdata, HeapTuple tuple,
					   TupleTableSlot *slot, char *key)
{
	int32		partitions = le_fence_group_partitions(info, trigdata);
	bool		isnull;
	int64		p = le_fence_partition_value(info, trigdata, tuple, slot, &isnull);

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("partition column \"%s\" of table \"%s\" is NULL",
						trigdata->tg_trigger->tgargs[3], RelationGetRelationName(trigdata->tg_relation)),
				 errhint("Every row of a table fenced by group \"%s\" names its partition, 0 to %d.",
						 info->group_name, partitions - 1)));
	if (p < 0 || p >= partitions)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("partition " INT64_FORMAT " in column \"%s\" of table \"%s\" is out of range",
						p, trigdata->tg_trigger->tgargs[3], RelationGetRelationName(trigdata->tg_relation)),
				 errdetail("Group \"%s\" has %d partitions, 0 to %d.",
						   info->group_name, partitions, partitions - 1)));
	memcpy(key, info->key, info->prefix_len);
	pg_lltoa(p, key + info->prefix_len);
	return p;
}

/*
 * An UPDATE of a group's fenced table must keep the row's partition: the
 * row would move from one partition's lease to another's, and the holder of
 * the new one is not the holder of the old (0A000).  Returns the partition.
 */
static int64
le_fence_update_partition(FenceTriggerInfo *info, TriggerData *trigdata, char *key)
{
	int64		p = le_fence_row_partition(info, trigdata, trigdata->tg_newtuple,
										   trigdata->tg_newslot, key);
	bool		old_null;
	int64		old = le_fence_partition_value(info, trigdata, trigdata->tg_trigtuple,
											   trigdata->tg_trigslot, &old_null);

	if (old_null || old != p)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("UPDATE of table \"%s\" changes partition column \"%s\"",
						RelationGetRelationName(trigdata->tg_relation), trigdata->tg_trigger->tgargs[3]),
				 old_null ?
				 errdetail("The row had no partition; the new row names partition " INT64_FORMAT ".", p) :
				 errdetail("The row belongs to partition " INT64_FORMAT "; the new row names partition " INT64_FORMAT ".",
						   old, p),
				 errhint("Delete the row with the token of its partition and insert it with the token of the new one.")));
	return p;
}

/* TRUNCATE of a group's fenced table: refused, no one token covers every partition. */
static void
le_fence_refuse_group_truncate(FenceTriggerInfo *info, TriggerData *trigdata)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("cannot TRUNCATE table \"%s\", fenced per partition of group \"%s\"",
					RelationGetRelationName(trigdata->tg_relation), info->group_name),
			 errdetail("Each row is fenced by the lease of its own partition; no one token covers them all."),
			 errhint("Delete the rows of each partition with its token (DELETE ... WHERE %s = <partition>), or take the fence off for maintenance.",
					 quote_identifier(trigdata->tg_trigger->tgargs[3]))));
}

/*
 * le_fence(): BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW trigger, and
 * BEFORE TRUNCATE FOR EACH STATEMENT trigger, with arguments (lease key,
 * token column [, 'strict']), or, for a table fenced per partition of a
 * group, (group name, token column, 'lease' or 'strict', partition column):
 * each row is then judged by the lease of the partition it names.  Attach
 * it with le_protect().
 */
Datum
le_fence(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata;
	FenceTriggerInfo *info;
	TriggerEvent ev;
	HeapTuple	result;
	int64		token;
	char		group_key[LE_MAX_KEY_LEN + 1];
	const char *key;
	int64		part = -1;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("le_fence() must be called as a trigger"),
				 errhint("Use le_fence_check() to check a token without a trigger.")));
	trigdata = (TriggerData *) fcinfo->context;
	ev = trigdata->tg_event;

	if (!TRIGGER_FIRED_BEFORE(ev))
		ereport(ERROR,
				(errcode(ERRCODE_TRIGGERED_ACTION_EXCEPTION),
				 errmsg("trigger \"%s\" on table \"%s\" must fire BEFORE the write",
						trigdata->tg_trigger->tgname, RelationGetRelationName(trigdata->tg_relation)),
				 errhint("Attach the fence with le_protect().")));

	if (TRIGGER_FIRED_BY_TRUNCATE(ev))
	{
		info = le_fence_trigger_info(fcinfo, trigdata);
		if (info->group)
			le_fence_refuse_group_truncate(info, trigdata);
		token = le_fence_setting_token(trigdata, "TRUNCATE");
		le_fence_check_token(info->nsp, info->key, token, info->strict, info, -1);
		return PointerGetDatum(NULL);
	}

	if (!TRIGGER_FIRED_FOR_ROW(ev))
		ereport(ERROR,
				(errcode(ERRCODE_TRIGGERED_ACTION_EXCEPTION),
				 errmsg("trigger \"%s\" on table \"%s\" must fire FOR EACH ROW",
						trigdata->tg_trigger->tgname, RelationGetRelationName(trigdata->tg_relation)),
				 errdetail("A statement-level trigger cannot see the tokens of the rows written."),
				 errhint("Attach the fence with le_protect().")));

	info = le_fence_trigger_info(fcinfo, trigdata);
	key = info->group ? group_key : info->key;
	if (TRIGGER_FIRED_BY_INSERT(ev))
	{
		le_fence_require_last(trigdata->tg_relation, trigdata->tg_trigger, TRIGGER_TYPE_INSERT);
		result = trigdata->tg_trigtuple;
		token = le_fence_row_token(info, trigdata, result, trigdata->tg_trigslot);
		le_fence_setting_agrees(trigdata, token);
		if (info->group)
			part = le_fence_row_partition(info, trigdata, result, trigdata->tg_trigslot, group_key);
	}
	else if (TRIGGER_FIRED_BY_UPDATE(ev))
	{
		le_fence_require_last(trigdata->tg_relation, trigdata->tg_trigger, TRIGGER_TYPE_UPDATE);
		result = trigdata->tg_newtuple;
		token = le_fence_row_token(info, trigdata, result, trigdata->tg_newslot);
		if (info->group)
			part = le_fence_update_partition(info, trigdata, group_key);
		if (le_fence_keeps_token(info, trigdata, token))
			le_fence_check_kept(info, trigdata, key, part, token);
		else
		{
			/* Restamped: judged by the new row's token, as an INSERT. */
			le_fence_setting_agrees(trigdata, token);
			le_fence_check_token(info->nsp, key, token, info->strict, info, part);
		}
		le_fence_note_update(trigdata, token);
		return PointerGetDatum(result);
	}
	else
	{
		/* The OLD row's partition: the lease its data lives under. */
		result = trigdata->tg_trigtuple;
		if (le_fencing_token_setting != 0 || !le_fence_moving_row(trigdata, &token))
			token = le_fence_setting_token(trigdata, "DELETE");
		if (info->group)
			part = le_fence_row_partition(info, trigdata, result, trigdata->tg_trigslot, group_key);
	}

	le_fence_check_token(info->nsp, key, token, info->strict, info, part);
	return PointerGetDatum(result);
}

/*
 * le_fence_check(lease_key, fencing_token): the fence's check and lock for
 * code that writes without a trigger; returns nothing or raises the
 * fence's error.  The fence lock is kept until the transaction ends.
 */
Datum
le_fence_check(PG_FUNCTION_ARGS)
{
	char	   *key = le_check_key(fcinfo, 0);
	int64		token = le_check_token(fcinfo, 1);
	Oid		   *nsp = (Oid *) fcinfo->flinfo->fn_extra;

	if (nsp == NULL)
	{
		nsp = MemoryContextAlloc(fcinfo->flinfo->fn_mcxt, sizeof(Oid));
		*nsp = get_func_namespace(fcinfo->flinfo->fn_oid);
		fcinfo->flinfo->fn_extra = nsp;
	}
	le_fence_check_lease(*nsp, key, token, false);
	PG_RETURN_VOID();
}

/* Run one DDL command built from quoted identifiers and literals. */
static void
le_fence_ddl(const char *sql)
{
	int			rc = SPI_execute(sql, false, 0);

	if (rc != SPI_OK_UTILITY)
		elog(ERROR, "leader_election: \"%s\" returned %s", sql, SPI_result_code_string(rc));
}

/* The schema-qualified, quoted name of a relation. */
static char *
le_fence_qualified_name(Oid relid)
{
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
									  get_rel_name(relid));
}

/*
 * The relations that carry a fence's TRUNCATE trigger: the table and every
 * partition or inheritance child below it (TRUNCATE of one child fires only
 * that child's triggers).
 */
static List *
le_fence_truncate_targets(Oid relid)
{
	return find_all_inheritors(relid, AccessShareLock, NULL);
}

/*
 * The relations that carry a fence's row trigger: the table and, for a plain
 * table, every inheritance child below it (an UPDATE or DELETE through the
 * parent fires the child's row triggers, not the parent's).  Row triggers of
 * a partitioned table are cloned to its partitions by PostgreSQL itself.
 */
static List *
le_fence_row_targets(Oid relid)
{
	if (get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE)
		return list_make1_oid(relid);
	return find_all_inheritors(relid, AccessShareLock, NULL);
}

/* Drop our fence triggers from a table (and its partitions); true when there was one. */
static bool
le_fence_drop_triggers(Oid relid)
{
	bool		dropped = false;
	ListCell   *lc;

	foreach(lc, le_fence_row_targets(relid))
	{
		Oid			target = lfirst_oid(lc);

		if (!OidIsValid(get_trigger_oid(target, LE_FENCE_ROW_TRIGGER, true)))
			continue;
		le_fence_ddl(psprintf("DROP TRIGGER %s ON %s", quote_identifier(LE_FENCE_ROW_TRIGGER),
							  le_fence_qualified_name(target)));
		dropped = true;
	}
	foreach(lc, le_fence_truncate_targets(relid))
	{
		Oid			target = lfirst_oid(lc);

		if (!OidIsValid(get_trigger_oid(target, LE_FENCE_TRUNCATE_TRIGGER, true)))
			continue;
		le_fence_ddl(psprintf("DROP TRIGGER %s ON %s", quote_identifier(LE_FENCE_TRUNCATE_TRIGGER),
							  le_fence_qualified_name(target)));
		dropped = true;
	}
	return dropped;
}


/*
 * Open the relation that le_protect() or le_unprotect() was given, in
 * AccessShareLock (kept to the end of the transaction): a regclass argument
 * is only an OID, and one that names no relation (0, or a table dropped
 * since) must get a clean 42P01, not relation_open()'s internal error.
 */
static Relation
le_fence_open_target(Oid relid)
{
	Relation	rel = try_relation_open(relid, AccessShareLock);

	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid),
				 errhint("Pass an existing table, e.g. 'my_schema.my_table'::regclass.")));
	return rel;
}

/*
 * Refuse to fence a table of this extension itself (le_lease,
 * le_lease_history, le_scheduled_jobs, le_fence_resource, ...): the
 * extension writes them without a fencing token, so such a fence would make
 * every lease change fail.  A table is the extension's when it is a member
 * (pg_depend deptype 'e') of the extension that owns this function.
 */
static void
le_fence_refuse_own_table(FunctionCallInfo fcinfo, Relation rel)
{
	Oid			ours = getExtensionOfObject(ProcedureRelationId, fcinfo->flinfo->fn_oid);

	if (OidIsValid(ours) &&
		getExtensionOfObject(RelationRelationId, RelationGetRelid(rel)) == ours)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("cannot fence table \"%s\" of extension leader_election",
						RelationGetRelationName(rel)),
				 errdetail("The extension writes its own tables without fencing tokens; a fence on them would make every lease change fail."),
				 errhint("Fence the tables of your application.")));
}

/*
 * Refuse, at le_protect(), a BEFORE ROW INSERT or UPDATE trigger that fires
 * after the fence on the table or any of its partitions or children (the
 * trigger checks the same at every firing, see le_fence_require_last).
 */
static void
le_fence_refuse_late_triggers(Oid relid)
{
	ListCell   *lc;

	foreach(lc, find_all_inheritors(relid, AccessShareLock, NULL))
	{
		Relation	rel = relation_open(lfirst_oid(lc), AccessShareLock);
		TriggerDesc *td = rel->trigdesc;
		int			i;

		for (i = 0; td != NULL && i < td->numtriggers; i++)
		{
			if (strcmp(td->triggers[i].tgname, LE_FENCE_ROW_TRIGGER) != 0)
				continue;
			le_fence_require_last(rel, &td->triggers[i], TRIGGER_TYPE_INSERT);
			le_fence_require_last(rel, &td->triggers[i], TRIGGER_TYPE_UPDATE);
		}
		relation_close(rel, AccessShareLock);
	}
}

/*
 * The arguments of le_protect() after the table: a lease key, or (1.1) a
 * group name and partition column; either the one or the other (22023).
 * Sets *key or *group_name and *part_column (the others NULL).  A 1.0
 * catalog calls with four arguments, lease_key required.
 */
static void
le_fence_protect_args(FunctionCallInfo fcinfo, const char *mode, char **key, char **group_name,
				char **part_column)
{
	bool		has_key = !PG_ARGISNULL(1);
	bool		has_group = PG_NARGS() >= 6 && !PG_ARGISNULL(4);
	bool		has_column = PG_NARGS() >= 6 && !PG_ARGISNULL(5);

	*key = NULL;
	*group_name = NULL;
	*part_column = NULL;
	if (PG_NARGS() < 6 || (has_key && !has_group && !has_column))
	{
		*key = le_check_key(fcinfo, 1);
		return;
	}
	if (has_key || !has_group || !has_column)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("le_protect() needs either lease_key, or group_name and partition_column"),
				 has_key ?
				 errdetail("A table is fenced by one lease, or per row by the lease of the row's partition of a group, not both.") :
				 (has_group || has_column) ?
				 errdetail("A group's fence needs both the group and the column that names each row's partition.") :
				 errdetail("Neither was given."),
				 errhint("E.g. le_protect('orders', group_name => 'orders', partition_column => 'shard').")));
	*group_name = le_check_group_name(fcinfo, 4);
	*part_column = pstrdup(NameStr(*PG_GETARG_NAME(5)));
	if (strcmp(mode, "advance") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("mode 'advance' cannot fence a table per partition of a group"),
				 errdetail("A group's partitions are leases of this database; 'advance' fences tokens issued elsewhere."),
				 errhint("Use mode 'lease' or 'strict' with a group.")));
}

/*
 * le_protect(table, lease_key, token_column, mode[, group_name,
 * partition_column]): attach the fence to a table (the TRUNCATE guard also
 * to each of its partitions, both also to each inheritance child; run it
 * again after adding partitions or children), replacing a fence attached
 * before.  mode 'lease' (default) checks the lease's token; 'strict' also
 * requires the writer's role to be the role that acquired the lease;
 * 'advance' fences with le_fence_advance() on the resource named lease_key
 * instead of a lease.  With group_name and partition_column (1.1) each row
 * is judged by the lease of the partition of the group its partition
 * column names ('lease' or 'strict'); the group must exist (42704).  Runs
 * as the caller, who needs the privilege to create triggers on the table.
 */
Datum
le_protect(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *key;
	char	   *group_name;
	char	   *part_column;
	char	   *column;
	char	   *mode;
	Oid			nsp = get_func_namespace(fcinfo->flinfo->fn_oid);
	const char *function;
	char	   *args;
	Relation	rel;
	Oid			atttypid;
	OverrideSearchPath path;
	ListCell   *lc;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(2) || PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("table, token_column and mode must not be NULL")));
	relid = PG_GETARG_OID(0);
	column = NameStr(*PG_GETARG_NAME(2));
	mode = text_to_cstring(PG_GETARG_TEXT_PP(3));

	if (strcmp(mode, "lease") == 0)
		function = "le_fence";
	else if (strcmp(mode, "strict") == 0)
		function = "le_fence";
	else if (strcmp(mode, "advance") == 0)
		function = "le_fence_advance_trigger";
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid fence mode \"%s\"", le_check_show(mode)),
				 errhint("Use 'lease', 'strict' or 'advance'.")));
	le_fence_protect_args(fcinfo, mode, &key, &group_name, &part_column);

	rel = le_fence_open_target(relid);
	le_fence_refuse_own_table(fcinfo, rel);
	(void) le_fence_validate(rel, key, column, &atttypid);
	if (group_name != NULL)
	{
		LeGroup		group;

		(void) le_fence_validate_partition(rel, part_column, column, &atttypid);
		if (!le_fence_group_read(nsp, group_name, &group))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("group \"%s\" does not exist", group_name),
					 errhint("Create it with le_group_create() first.")));
	}
	relation_close(rel, AccessShareLock);

	if (group_name != NULL)
		args = psprintf("%s, %s, %s, %s", quote_literal_cstr(group_name), quote_literal_cstr(column),
						quote_literal_cstr(mode), quote_literal_cstr(part_column));
	else
		args = psprintf("%s, %s%s", quote_literal_cstr(key), quote_literal_cstr(column),
						strcmp(mode, "strict") == 0 ? ", 'strict'" : "");
	/*
	 * The function is named unqualified and found in a search path pinned
	 * by OID to pg_catalog and this schema: the DDL below may wait for the
	 * table's lock, and a name read before the wait would, after an ALTER
	 * SCHEMA ... RENAME during it, name whatever schema then has the old
	 * name (test/specs/protect_schema_rename.spec).  The abort of the
	 * (sub)transaction pops the path on error.
	 */
	path.schemas = list_make1_oid(nsp);
	path.addCatalog = true;
	path.addTemp = false;
	function = quote_identifier(function);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	le_push_search_path(&path);
	(void) le_fence_drop_triggers(relid);
	foreach(lc, le_fence_row_targets(relid))
		le_fence_ddl(psprintf("CREATE TRIGGER %s BEFORE INSERT OR UPDATE OR DELETE ON %s"
							  " FOR EACH ROW EXECUTE FUNCTION %s(%s)",
							  quote_identifier(LE_FENCE_ROW_TRIGGER),
							  le_fence_qualified_name(lfirst_oid(lc)), function, args));
	foreach(lc, le_fence_truncate_targets(relid))
		le_fence_ddl(psprintf("CREATE TRIGGER %s BEFORE TRUNCATE ON %s"
							  " FOR EACH STATEMENT EXECUTE FUNCTION %s(%s)",
							  quote_identifier(LE_FENCE_TRUNCATE_TRIGGER),
							  le_fence_qualified_name(lfirst_oid(lc)), function, args));
	le_pop_search_path();
	SPI_finish();
	le_fence_refuse_late_triggers(relid);
	PG_RETURN_VOID();
}

/* le_unprotect(table): remove the fence; true when the table had one. */
Datum
le_unprotect(PG_FUNCTION_ARGS)
{
	Oid			relid;
	bool		dropped;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("table must not be NULL")));
	relid = PG_GETARG_OID(0);
	/* Only to refuse a relation that does not exist; the lock is kept. */
	relation_close(le_fence_open_target(relid), NoLock);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	dropped = le_fence_drop_triggers(relid);
	SPI_finish();
	PG_RETURN_BOOL(dropped);
}
