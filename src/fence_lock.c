/*-------------------------------------------------------------------------
 *
 * fence_lock.c
 *		The fence lock of a lease.
 *
 * Every lease has a transaction-scoped heavyweight lock whose tag is built
 * from the lease's surrogate id (never a hash of its key).  Whatever
 * changes the token or frees the lease takes it in
 * LE_FENCE_CHANGE_LOCKMODE; a transaction that wrote protected data takes
 * it in LE_FENCE_WRITER_LOCKMODE at commit and then reads the token again
 * (fence.c); a watch holds it in a mode that conflicts with neither
 * (watch.c).  Lock order: the fence lock before the lease row's lock; a
 * call that already holds the row lock only tries it (le_fence_lock_try).
 *
 * Invariant (G5 in doc/lease-guarantees.md): a write accepted with token T
 * cannot commit after a later token was granted or the lease freed, and an
 * idle writer blocks nobody.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lock.h"
#include "storage/proc.h"

#include "compat.h"

#include "leader_election.h"

/* Class field of our fence lock tags, so they never equal a user's advisory lock. */
#define LE_LOCKTAG_CLASS		0x4C45

/*
 * How many times, 1 ms apart, le_fence_lock_try_briefly tries while a
 * running transaction holds the lock, and while only transactions past
 * their end do (they are giving their locks back; on a busy host one may
 * be off the CPU in the middle of that for much longer than 20 ms).
 */
#define LE_FENCE_TRY_BRIEF_MS	20
#define LE_FENCE_TRY_ENDED_MS	1000

/*
 * The lock tag of a lease's fence lock: advisory lock method, the lease id
 * in the two key fields, and a class of ours in the last (user advisory
 * locks use 1 and 2 there, so they never collide with ours).  No lock.
 */
void
le_fence_lock_tag(LOCKTAG *tag, int64 lease_id)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId,
						 (uint32) ((uint64) lease_id >> 32),
						 (uint32) lease_id,
						 LE_LOCKTAG_CLASS);
}

/*
 * Take the fence lock of a lease in the given mode until the end of the
 * transaction.  Waits are bounded by the lock_timeout in force; before one,
 * the call lets go of le_lease (le_rows_let_go: the table lock a plain read
 * took is given back, as it would be without the wait).
 */
void
le_fence_lock(LeaseStoreState *st, int64 lease_id, LOCKMODE mode)
{
	LOCKTAG		tag;

	le_fence_lock_tag(&tag, lease_id);
	if (LockAcquire(&tag, mode, false, true) == LOCKACQUIRE_NOT_AVAIL)
	{
		le_rows_let_go(st);
		(void) LockAcquire(&tag, mode, false, false);
	}
	if (mode == LE_FENCE_CHANGE_LOCKMODE)
		le_durable_locks_taken();
}

/*
 * Take the fence lock of a lease in the given mode until the end of the
 * transaction if that needs no wait; false when someone else holds it.  For
 * callers that already hold the lease's row lock, and so must not wait for
 * the fence lock (lock order: fence lock, then row lock).
 */
bool
le_fence_lock_try(int64 lease_id, LOCKMODE mode)
{
	LOCKTAG		tag;

	le_fence_lock_tag(&tag, lease_id);
	if (LockAcquire(&tag, mode, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return false;
	if (mode == LE_FENCE_CHANGE_LOCKMODE)
		le_durable_locks_taken();
	return true;
}

/*
 * Who holds the fence lock of a lease in a mode conflicting with mode: the
 * number of running transactions among them, and in *waiting whether one
 * of those waits for a lock itself.  Such a holder (a competitor that took
 * the fence lock and queued for the lease row the caller holds) keeps the
 * fence lock until the caller's transaction ends, so trying again cannot
 * help.  A transaction past its end is not counted (GetLockConflicts names
 * none: its virtual transaction id is gone before its locks): it only gives
 * its locks back.  Any other holder may be doing so right now too: a
 * subtransaction rolling back (ROLLBACK TO SAVEPOINT, an exception block:
 * its transaction still runs), a fenced writer committing.  Read without
 * the lock partition's lock: a hint for how long to try, never what the
 * lock decides.
 */
static int
le_fence_lock_holders(int64 lease_id, LOCKMODE mode, bool *waiting)
{
	LOCKTAG		tag;
	VirtualTransactionId *vxids;
	int			running = 0;

	*waiting = false;
	le_fence_lock_tag(&tag, lease_id);
	vxids = GetLockConflicts(&tag, mode, NULL);
	for (int i = 0; VirtualTransactionIdIsValid(vxids[i]); i++)
	{
		PGPROC	   *proc = le_vxid_proc(vxids[i]);

		running++;
		/* NULL for a prepared transaction: it waits for nothing */
		if (proc != NULL && proc->lxid == vxids[i].localTransactionId && proc->waitLock != NULL)
			*waiting = true;
	}
	pfree(vxids);
	return running;
}

/*
 * le_fence_lock_try, tried again for a short while: 1 ms apart, while no
 * holder of the lock waits for a lock itself, up to LE_FENCE_TRY_BRIEF_MS
 * attempts while a running transaction holds it, up to
 * LE_FENCE_TRY_ENDED_MS while only transactions past their end do.  For a
 * caller that holds the lease's row lock and would otherwise refuse or
 * fail: a transaction that frees a lease releases its row lock and its
 * fence lock one after the other at commit (or a subtransaction at its
 * rollback), and a caller woken by the first finds the second still held
 * for a moment.  Never waits in the lock manager, so it keeps the lock
 * order (no deadlock); a competitor that took the lock and waits for the
 * row this caller holds gets the refusal at once
 * (150_fence_retry_live_holder.pl), a committed or rolled-back freeing
 * transaction the tries (149_rejoin_after_release.pl), a fenced writer
 * that keeps the lock longer the refusal after them.
 */
bool
le_fence_lock_try_briefly(int64 lease_id, LOCKMODE mode)
{
	int			i;

	for (i = 1; !le_fence_lock_try(lease_id, mode); i++)
	{
		bool		waiting;
		int			running = le_fence_lock_holders(lease_id, mode, &waiting);

		if (waiting || i >= (running > 0 ? LE_FENCE_TRY_BRIEF_MS : LE_FENCE_TRY_ENDED_MS))
			return false;
		pg_usleep(1000L);
		CHECK_FOR_INTERRUPTS();
	}
	return true;
}

/*
 * Give back a fence lock taken by le_fence_lock in this call before the
 * transaction ends: only for a call that then changed nothing (an acquire
 * that lost the race while it waited).  A lock the transaction took before
 * stays held.
 */
void
le_fence_lock_release(int64 lease_id, LOCKMODE mode)
{
	LOCKTAG		tag;

	le_fence_lock_tag(&tag, lease_id);
	(void) LockRelease(&tag, mode, false);
}

/* Names the lease whose fence lock a writer is waiting for. */
static void
le_fence_lock_wait_context(void *arg)
{
	errcontext("leader_election: waiting for the fence lock of lease \"%s\" (bounded by leader_election.lock_timeout = %d ms)",
			   (const char *) arg, le_lock_timeout_ms);
}

/*
 * Take the fence lock of a lease in LE_FENCE_WRITER_LOCKMODE until the end
 * of the transaction; the fence does so only at commit (and PREPARE), see
 * fence.c.  The uncontended path touches no setting; a wait (for a takeover
 * or a release in progress) is bounded by leader_election.lock_timeout, or
 * by the caller's lock_timeout when that is shorter, and fails with 55P03.
 */
void
le_fence_lock_writer(int64 lease_id, const char *key)
{
	LOCKTAG		tag;
	ErrorContextCallback errcallback;
	bool		bounded;

	le_fence_lock_tag(&tag, lease_id);
	if (LockAcquire(&tag, LE_FENCE_WRITER_LOCKMODE, false, true) != LOCKACQUIRE_NOT_AVAIL)
		return;

	errcallback.callback = le_fence_lock_wait_context;
	errcallback.arg = (void *) key;
	errcallback.previous = error_context_stack;
	error_context_stack = &errcallback;
	bounded = le_store_lock_bound_begin();
	(void) LockAcquire(&tag, LE_FENCE_WRITER_LOCKMODE, false, false);
	le_store_lock_bound_end(bounded);
	error_context_stack = errcallback.previous;
}
