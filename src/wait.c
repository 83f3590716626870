/*-------------------------------------------------------------------------
 *
 * wait.c
 *		The server-side wait of le_acquire(..., wait => ...): a queue of
 *		waiters per lease in the lock manager, and the wake-up of its head
 *		when a transaction that freed the lease, or brought its expiry
 *		earlier, commits.
 *
 * Waiters of a lease queue, first come first served, for a lock of our own
 * (the wait tag: the fence lock's tag with another class, so it collides
 * with no user advisory lock and no fence lock).  Only its holder, the
 * head, tries the lease; it sleeps on its latch until the lease's expiry or
 * the wait's end.  A transaction that frees the lease, or moves its expiry
 * earlier (a renewal or the holder's re-acquire with a shorter ttl), finds
 * the head at commit, once the change is visible, as the holder of the wait
 * tag (GetLockConflicts) and sets its latch.  No shared memory of ours, no
 * preloading.  src/README.md ("Waiting for a lease") says why it is sound.
 *
 * Invariant: a head that sleeps is woken by every commit that frees its
 * lease or brings its expiry earlier after its last try, and never sleeps
 * past the lease's expiry or the end of its wait.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/sinvaladt.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "leader_election.h"

/*
 * The last field of the wait tag: user advisory locks use 1 and 2, the
 * fence lock 0x4C45.  Waiters take it in ExclusiveLock, one at a time; the
 * releaser asks who holds it, never takes it.
 */
#define LE_WAIT_TAG_CLASS		0x4C57
#define LE_WAIT_LOCKMODE		ExclusiveLock

/*
 * From libpq/libpq.h, which needs the GSSAPI headers (libpq-be.h) for no
 * use of ours.
 */
extern PGDLLIMPORT WaitEventSet *FeBeWaitSet;
extern bool pq_check_connection(void);
#define FeBeWaitSetSocketPos 0
#define FeBeWaitSetNEvents 3

/*
 * A waiter looks at its client at least this often (milliseconds): one
 * whose client went away ends with the usual FATAL of a lost client instead
 * of being granted a lease nobody would use.
 */
#define LE_WAIT_CLIENT_CHECK_MS	1000

/*
 * Lease ids this transaction freed or whose expiry it brought earlier, to
 * wake their heads at commit.
 */
static int64 *freed_ids = NULL;
static int	freed_count = 0;
static int	freed_size = 0;
static bool callback_registered = false;

static void
le_wait_tag(LOCKTAG *tag, int64 lease_id)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId,
						 (uint32) ((uint64) lease_id >> 32),
						 (uint32) lease_id,
						 LE_WAIT_TAG_CLASS);
}

/* Set the latch of the head of each lease's queue (if any). */
static void
le_wait_wake_heads(void)
{
	int			i;

	for (i = 0; i < freed_count; i++)
	{
		LOCKTAG		tag;
		VirtualTransactionId *vxids;

		le_wait_tag(&tag, freed_ids[i]);
		vxids = GetLockConflicts(&tag, AccessExclusiveLock, NULL);
		for (; VirtualTransactionIdIsValid(*vxids); vxids++)
		{
			PGPROC	   *proc = BackendIdGetProc(vxids->backendId);

			/* A backend gone meanwhile, or its slot reused: a spurious wake. */
			if (proc != NULL)
				SetLatch(&proc->procLatch);
		}
	}
}

/*
 * At commit the change is visible to every new snapshot and every latest
 * version read (ProcArrayEndTransaction ran before the callbacks), and our
 * locks are still held: wake the heads then.  An abort wakes nobody.
 */
static void
le_wait_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT && freed_count > 0)
		le_wait_wake_heads();
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
		freed_count = 0;
}

/*
 * Note that the current transaction freed lease lease_id (a release, a
 * force release) or brought its expiry earlier than it was (a renewal or
 * the valid holder's re-acquire with a shorter ttl): its commit wakes the
 * head of the lease's queue, which tries again and sleeps to the expiry
 * then in force.  Waking at the call instead would be lost: the head
 * would read the version still committed and sleep to its expiry again.
 * A subtransaction rolled back after this only makes the wake spurious.
 */
void
le_wait_note_wake(int64 lease_id)
{
	if (!callback_registered)
	{
		RegisterXactCallback(le_wait_xact_callback, NULL);
		callback_registered = true;
	}
	if (freed_count == freed_size)
	{
		int			size = freed_size == 0 ? 8 : freed_size * 2;

		if (freed_ids == NULL)
			freed_ids = MemoryContextAlloc(TopMemoryContext, size * sizeof(int64));
		else
			freed_ids = repalloc(freed_ids, size * sizeof(int64));
		freed_size = size;
	}
	freed_ids[freed_count++] = lease_id;
}

/*
 * A backend serving a client connection (not a background worker) on a
 * platform that reports a closed socket (as client_connection_check_interval
 * needs).
 */
static bool
le_wait_has_client(void)
{
	return MyProcPort != NULL && FeBeWaitSet != NULL && whereToSendOutput == DestRemote &&
		WaitEventSetCanReportClosed();
}

/* End the backend as a lost client does (FATAL 08006). */
static void
le_wait_client_lost(void)
{
	ClientConnectionLost = true;
	InterruptPending = true;
	CHECK_FOR_INTERRUPTS();
}

/*
 * End the backend if its client went away (a waiter about to be granted,
 * or woken): nobody would use the lease, which would stay held for a ttl.
 */
void
le_wait_check_client(void)
{
	if (le_wait_has_client() && !pq_check_connection())
		le_wait_client_lost();
}

/*
 * During a lock wait, have the client looked at every
 * LE_WAIT_CLIENT_CHECK_MS (the core's client connection check, which keeps
 * the waiter's place in the queue).  Returns the setting to restore.
 */
static int
le_wait_arm_client_check(void)
{
	int			saved = client_connection_check_interval;

	if (le_wait_has_client() && (saved == 0 || saved > LE_WAIT_CLIENT_CHECK_MS))
	{
		client_connection_check_interval = LE_WAIT_CLIENT_CHECK_MS;
		enable_timeout_after(CLIENT_CONNECTION_CHECK_TIMEOUT, LE_WAIT_CLIENT_CHECK_MS);
	}
	return saved;
}

static void
le_wait_disarm_client_check(int saved)
{
	if (client_connection_check_interval == saved)
		return;
	client_connection_check_interval = saved;
	if (saved == 0)
		disable_timeout(CLIENT_CONNECTION_CHECK_TIMEOUT, false);
	else
		enable_timeout_after(CLIENT_CONNECTION_CHECK_TIMEOUT, saved);
}

/*
 * Join the queue of lease lease_id and wait to be its head until deadline.
 * true when this backend is the head (it holds the wait tag to the end of
 * the transaction or le_wait_leave); false when the deadline passed first.
 *
 * The lock manager's wait keeps the queue's order and is ended by a cancel,
 * statement_timeout or termination like any lock wait.  Its bound is
 * lock_timeout, set to the time left for the call; the lock timeout's
 * error is caught in a subtransaction, whose rollback takes this backend
 * out of the lock's wait queue.  The deadlock check of this wait is put off
 * to that bound: a queue of waiters each checking after deadlock_timeout
 * took every lock-table partition lock many times a second and delayed
 * the head's grant (test/bench/wait.sh); a cycle through a queue waiter is
 * still found by the check of any other backend in it, and the wait ends
 * at its bound anyway.  The client is looked at every second meanwhile
 * (le_wait_arm_client_check).
 */
bool
le_wait_enter(int64 lease_id, TimestampTz deadline)
{
	LOCKTAG		tag;
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	int			saved_timeout = LockTimeout;
	int			saved_deadlock = DeadlockTimeout;
	volatile int saved_check = 0;
	long		secs;
	int			usecs;
	int64		ms;
	volatile bool got = true;

	/*
	 * The lock belongs to the transaction, not to the portal running the
	 * call, so that le_wait_leave finds it there.
	 */
	le_wait_tag(&tag, lease_id);
	CurrentResourceOwner = CurTransactionResourceOwner;
	got = LockAcquire(&tag, LE_WAIT_LOCKMODE, false, true) != LOCKACQUIRE_NOT_AVAIL;
	CurrentResourceOwner = oldowner;
	if (got)
		return true;
	got = true;

	TimestampDifference(GetCurrentTimestamp(), deadline, &secs, &usecs);
	ms = (int64) secs * 1000 + (usecs + 999) / 1000;
	if (ms <= 0)
		return false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);
	PG_TRY();
	{
		LockTimeout = (int) Min(ms, (int64) PG_INT32_MAX);
		DeadlockTimeout = Max(DeadlockTimeout, LockTimeout);
		saved_check = le_wait_arm_client_check();
		(void) LockAcquire(&tag, LE_WAIT_LOCKMODE, false, false);
		le_wait_disarm_client_check(saved_check);
		LockTimeout = saved_timeout;
		DeadlockTimeout = saved_deadlock;
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		le_wait_disarm_client_check(saved_check);
		LockTimeout = saved_timeout;
		DeadlockTimeout = saved_deadlock;
		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;

		/*
		 * Only a lock wait ends with 55P03 here (the lock timeout of ours:
		 * the call did not ask not to wait); a cancel, statement_timeout,
		 * deadlock or termination goes on as the error it is.
		 */
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
		got = false;
	}
	PG_END_TRY();
	return got;
}

/*
 * Leave the head of lease lease_id's queue (the wait ended): the next
 * waiter becomes the head.  The lock is the transaction's (a subtransaction
 * that took it passed it on when it committed).
 */
void
le_wait_leave(int64 lease_id)
{
	LOCKTAG		tag;
	ResourceOwner oldowner = CurrentResourceOwner;

	le_wait_tag(&tag, lease_id);
	CurrentResourceOwner = CurTransactionResourceOwner;
	(void) LockRelease(&tag, LE_WAIT_LOCKMODE, false);
	CurrentResourceOwner = oldowner;
}

/*
 * Sleep until woken (a release of the lease committed), until, or an
 * interrupt; a cancel, statement_timeout or termination ends the call
 * with its error, and so does a client that went away (its socket closed).
 */
void
le_wait_sleep(TimestampTz until)
{
	long		secs;
	int			usecs;
	int64		ms;
	long		timeout;

	TimestampDifference(GetCurrentTimestamp(), until, &secs, &usecs);
	ms = (int64) secs * 1000 + (usecs + 999) / 1000;
	timeout = (long) Min(ms, (int64) PG_INT32_MAX);
	if (ms > 0 && le_wait_has_client())
	{
		WaitEvent	events[FeBeWaitSetNEvents];
		int			n;
		int			i;

		/*
		 * The client's wait set (its socket, our latch, the postmaster);
		 * every user of its socket sets the events it waits for.
		 */
		ModifyWaitEvent(FeBeWaitSet, FeBeWaitSetSocketPos, WL_SOCKET_CLOSED, NULL);
		n = WaitEventSetWait(FeBeWaitSet, timeout, events, lengthof(events),
							 PG_WAIT_EXTENSION);
		for (i = 0; i < n; i++)
		{
			if (events[i].events & WL_POSTMASTER_DEATH)
				ereport(FATAL,
						(errcode(ERRCODE_ADMIN_SHUTDOWN),
						 errmsg("terminating connection due to unexpected postmaster exit")));
			if (events[i].events & WL_SOCKET_CLOSED)
				le_wait_client_lost();
		}
	}
	else if (ms > 0)
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}
