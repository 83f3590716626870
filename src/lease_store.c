/*-------------------------------------------------------------------------
 *
 * lease_store.c
 *		The frame of every lease call (le_store_begin/le_store_end), the
 *		bound of its lock waits, and the plan of a grant's history prune.
 *
 * Between le_store_begin and le_store_end a lease call runs as the
 * extension owner, with its lock waits bounded by
 * leader_election.lock_timeout, and reaches the tables only through
 * lease_rows.c, by OID.  src/README.md ("State and who may touch it",
 * "Locks", "History") says why.
 *
 * Invariant: no SQL and no user code runs while the frame is open, so
 * neither the owner's rights nor our lock_timeout ever reach the caller's
 * code; le_store_end, or the abort of the (sub)transaction, restores both.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "leader_election.h"

/* Reports which lease we were working on when an error escapes. */
static void
le_store_error_context(void *arg)
{
	LeaseStoreState *st = (LeaseStoreState *) arg;

	if (st->lease_key)
		errcontext("leader_election: working on lease \"%s\" (lock waits are bounded by leader_election.lock_timeout = %d ms)",
				   st->lease_key, le_lock_timeout_ms);
}

/*
 * Bounding lock waits.  Every lease call bounds its lock waits by
 * leader_election.lock_timeout, keeping the caller's lock_timeout when that
 * is shorter, by assigning LockTimeout for the duration of the call (not by
 * set_config_option, whose GUC nest level costs a walk of every setting:
 * src/README.md, "Locks").  le_store_lock_bound_end puts the caller's value
 * back; when an error escapes first, the abort of the (sub)transaction that
 * was current when our value was set does (lease_stuck.spec).
 */
static int	le_store_lock_bound_saved = -1;	/* caller's LockTimeout while ours is in force */
static SubTransactionId le_store_lock_bound_subid = InvalidSubTransactionId;

static void
le_store_lock_bound_restore(void)
{
	if (le_store_lock_bound_saved >= 0)
		LockTimeout = le_store_lock_bound_saved;
	le_store_lock_bound_saved = -1;
	le_store_lock_bound_subid = InvalidSubTransactionId;
}

static void
le_store_lock_bound_xact_callback(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_PRE_COMMIT && event != XACT_EVENT_PARALLEL_PRE_COMMIT &&
		event != XACT_EVENT_PRE_PREPARE)
		le_store_lock_bound_restore();
}

static void
le_store_lock_bound_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
							   SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB && mySubid == le_store_lock_bound_subid)
		le_store_lock_bound_restore();
}

/*
 * Put our bound on lock waits in force; returns whether it did (false: the
 * caller's lock_timeout is as short, or a bound is in force already), to
 * be passed to le_store_lock_bound_end.
 */
bool
le_store_lock_bound_begin(void)
{
	static bool registered = false;

	if (le_store_lock_bound_saved >= 0 ||
		(LockTimeout != 0 && LockTimeout <= le_lock_timeout_ms))
		return false;
	if (!registered)
	{
		RegisterXactCallback(le_store_lock_bound_xact_callback, NULL);
		RegisterSubXactCallback(le_store_lock_bound_subxact_callback, NULL);
		registered = true;
	}
	le_store_lock_bound_saved = LockTimeout;
	le_store_lock_bound_subid = GetCurrentSubTransactionId();
	LockTimeout = le_lock_timeout_ms;
	return true;
}

/* Give the caller's lock_timeout back, if le_store_lock_bound_begin replaced it. */
void
le_store_lock_bound_end(bool began)
{
	if (began)
		le_store_lock_bound_restore();
}

/*
 * Start working on the lease tables: switch to the extension owner, bound
 * lock waits.  fn_oid is the calling SQL function, whose schema
 * tells where the extension lives.
 *
 * Locks: none; from here to le_store_end every lock wait is bounded by
 * leader_election.lock_timeout (or the caller's shorter lock_timeout).
 */
void
le_store_begin(LeaseStoreState *st, Oid fn_oid, const char *lease_key)
{
	Oid			nsp = get_func_namespace(fn_oid);
	Oid			owner;

	st->caller = GetUserId();
	st->caller_name = GetUserNameFromId(st->caller, false);
	st->lease_key = lease_key;
	st->caller_cxt = CurrentMemoryContext;
	st->nsp = nsp;
	st->locked = false;
	st->tentative = false;
	st->must_lock = false;
	st->idle_bound_us = 0;

	st->lease_rel = NULL;
	st->keep_lease_lock = false;
	st->lease_rowex = false;
	st->snap = NULL;
	st->prune_tids = NULL;
	st->prune_ends = NULL;
	st->prune_n = 0;
	st->prune_snap = NULL;
	st->prune_locked = false;
	st->peeked_tuple = NULL;
	st->adopted = false;
	st->scan_snap = NULL;
	ItemPointerSetInvalid(&st->tid);
	st->locked_tuple = NULL;

	le_rows_relids(nsp, &st->lease_relid, &st->key_indexid);
	owner = le_rows_owner(nsp);

	st->errcallback.callback = le_store_error_context;
	st->errcallback.arg = st;
	st->errcallback.previous = error_context_stack;
	error_context_stack = &st->errcallback;

	/* Bound every lock wait (undone by le_store_end, or by abort on error). */
	st->lock_bounded = le_store_lock_bound_begin();

	/* Abort restores the user id too, should anything below fail. */
	GetUserIdAndSecContext(&st->save_userid, &st->save_sec_context);
	SetUserIdAndSecContext(owner, st->save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
}

/*
 * Finish the work begun by le_store_begin.  Locks: gives back the table
 * lock a plain read took on le_lease; the locks of a call that locked the
 * lease row stay to the end of the transaction, under its holder deadline.
 */
void
le_store_end(LeaseStoreState *st)
{
	le_rows_end(st);
	SetUserIdAndSecContext(st->save_userid, st->save_sec_context);
	le_store_lock_bound_end(st->lock_bounded);
	error_context_stack = st->errcallback.previous;
	if (st->locked && st->idle_bound_us > 0 && st->lease_key != NULL)
		le_holder_bound_idle(st->lease_key, st->idle_bound_us);
}

/*
 * Go on to another lease row in the same frame (a group's heartbeat or
 * leave works on many): what the call read, tried or locked of the last
 * row is forgotten (le_rows_next), its locks are kept.  The caller keeps
 * track of whether any row was locked, for the holder deadline.
 */
void
le_store_next_row(LeaseStoreState *st, const char *lease_key)
{
	le_rows_next(st);
	st->lease_key = lease_key;
	st->locked = false;
	st->idle_bound_us = 0;
}

/* Periods that ended before this are past the retention. */
static TimestampTz
le_store_history_cutoff(TimestampTz now)
{
	return now - (int64) le_history_retention_s * USECS_PER_SEC;
}

/*
 * A grant's prune of its lease's history, first half: before the grant
 * writes the lease row, find the history rows past the retention (read
 * only; le_rows_delete_due_history deletes them once the row is written)
 * and set *min_ended_at to the bound the row must then carry.
 *
 * *min_ended_at is the history_min_ended_at of the lease row as read (0:
 * NULL, unknown; 'infinity': no ended period), a lower bound of its
 * periods' ends kept under the row's lock (src/README.md, "History"): while
 * it is not older than the retention nothing can be due, and the index scan
 * is skipped.  now is the grant's time.  The caller holds the lease row
 * (locked or tentatively read, see le_rows_lock).
 */
void
le_store_prune_plan(LeaseStoreState *st, int64 lease_id, TimestampTz *min_ended_at,
					TimestampTz now)
{
	TimestampTz cutoff = le_store_history_cutoff(now);

	if (*min_ended_at != 0 && cutoff <= *min_ended_at)
	{
		/* Nothing due; forget what an earlier try of this call found. */
		le_rows_forget_due_history(st);
		return;
	}
	*min_ended_at = le_rows_find_due_history(st, lease_id, cutoff, now);
}

/*
 * Is a period that ended at ended_at past the retention at now (the
 * calling lease call's time)?  A call that ends such a period (a lease
 * that lapsed longer ago than the retention, taken over or released only
 * now) deletes its history row instead of closing it, as the next grant
 * would.
 */
bool
le_store_history_due(TimestampTz ended_at, TimestampTz now)
{
	return ended_at < le_store_history_cutoff(now);
}

/*
 * Delete the history rows of every lease that ended longer ago than the
 * retention setting (le_prune_history()); returns how many went.
 */
int64
le_store_prune_history(LeaseStoreState *st)
{
	return le_rows_prune_all_history(st, le_store_history_cutoff(GetCurrentTimestamp()));
}

/* Is the lease held and unexpired at server time now? */
bool
le_store_lease_valid(const LeaseRow *row, TimestampTz now)
{
	return row->holder != NULL && row->expires_at > now;
}
