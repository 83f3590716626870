/*-------------------------------------------------------------------------
 *
 * lease_store.c
 *		The token rules, the fence lock, durability and notifications of
 *		the leader_election extension, and the frame of every lease call
 *		(le_store_begin/le_store_end).
 *
 * State lives in ordinary tables (le_lease, le_lease_history) so that it is
 * WAL-logged, replicated, dumped and restored with the data it protects.
 * Callers reach the tables only through the le_store_* functions, run as
 * the extension owner: ordinary roles have no privileges on the tables, and
 * the caller's role is recorded in the row instead.  The rows are read and
 * written by direct access (lease_rows.c), by oid: no SQL runs, so no name
 * is resolved while we act as the extension owner (a kept SPI plan that
 * named the schema would be re-analysed after ALTER SCHEMA ... RENAME and
 * could then reach another role's table and its triggers).
 *
 * Locking rules.  Two locks protect a lease:
 *
 *	- the row lock of its le_lease row (as SELECT ... FOR UPDATE), taken by
 *	  every call that writes the row (acquire, renew, release), so that the
 *	  decision "free / expired / ours" and the write based on it are atomic
 *	  and judged on the latest committed version of the row;
 *
 *	- the fence lock, a transaction-scoped heavyweight lock whose tag is
 *	  built from the lease's surrogate id (never a hash of the key).  Code
 *	  that changes the token or frees the lease takes it in
 *	  LE_FENCE_CHANGE_LOCKMODE; a transaction that wrote protected data takes
 *	  it in LE_FENCE_WRITER_LOCKMODE only at commit (fence.c), then reads the
 *	  token again.  So a write accepted with token T cannot commit after a later
 *	  token was granted, and an idle writer blocks nobody.  Renewals neither change
 *	  the token nor take the fence lock.  Whoever locks the fence of an id
 *	  read earlier checks, after its locked read, that the row still has
 *	  that id.
 *
 * Lock order: the fence lock before the row lock.  A call that already
 * holds the row lock when it finds it needs the fence lock only tries it.
 * (A transaction that renewed the lease, so holds its row lock, and then
 * commits fenced writes does not wait for the fence lock at all: its row
 * lock already keeps token changes out, see fence.c.)  Every wait is bounded by
 * leader_election.lock_timeout (applied as lock_timeout for the duration of
 * our work), so a row locked by a stuck or prepared transaction produces a
 * clear error instead of a hang.
 *
 * Token rule (le_token_next): a token is (range << 40) + a value of the
 * sequence le_token_seq.  The sequence is non-transactional, so a value that
 * reached anyone, even from a grant that rolled back, is never drawn again;
 * its WAL is flushed before a token is returned, so a crash cannot set it
 * back.  The range stays the old token's, except: when the server writes
 * WAL on a newer timeline than the one that issued the old token (after a
 * standby promotion or a point-in-time recovery), it jumps to at least
 * timeline - 1, above anything an older timeline can have issued,
 * acknowledged or not.  Timelines of another cluster (a row restored by
 * pg_dump, or after pg_upgrade: the row's token_system_id is not ours) say
 * nothing about ours, so such a row's next grant jumps by the current
 * timeline's number of 2^40 ranges above its token: a primary and a standby
 * promoted later, both starting from the restored row, then land in
 * different ranges, the later timeline higher.  Per key, the new token must
 * also exceed the row's last one; a sequence found behind it (set back by
 * hand) is raised first, under a lock that excludes every nextval().
 *
 * Durability (le_durable_commit): a lease change is flushed at commit and,
 * when synchronous standbys are configured, waited for by them, even if the
 * caller runs with synchronous_commit off or local.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "access/xlog.h"
#include "commands/async.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
#include "common/int.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "compat.h"
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
 * is shorter.  The bound is put in force by assigning the variable behind
 * lock_timeout (LockTimeout: read when a lock wait begins, no assign hook)
 * for the duration of the call, not by set_config_option in a new GUC nest
 * level: leaving a nest level after a change walks every setting of the
 * server (AtEOXact_GUC; with set_config_option about 5,000 instructions per
 * call, 4 % of an acquire + release cycle).  No SQL and no user code runs
 * while our value is in force, so nobody sees or changes it.
 * le_store_lock_bound_end puts the caller's value back; when an error escapes
 * first, the abort of the (sub)transaction that was current when our value
 * was set does (lease_stuck.spec shows lock_timeout after calls that timed
 * out, at top level and in a subtransaction).
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

/* Finish the work begun by le_store_begin. */
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
 * NULL, unknown; 'infinity': no ended period).  Periods are added and
 * ended only by the lease calls, under the row's lock, and each folds the
 * end it records into that column of the same row version
 * (le_lease_note_period_end in lease.c), so a rollback undoes both; deleting
 * rows (a grant, or le_prune_history(), which leaves the column alone)
 * only raises the true minimum.  So while the bound is not older than the
 * retention nothing can be due, and the index scan is skipped: a grant of
 * a lease with nothing to prune reads none of its history, in a new backend
 * too (the scan was 13,700 instructions with a few periods per lease,
 * 20,700 with tens: callgrind, issue 9).  NULL, from a row written before
 * the column existed (restored from such a dump), makes the grant scan.
 * Periods follow each other, so their ended_at rise with the token; only a
 * server clock that went back can end a later period before an earlier
 * one, and such a row then waits until the row the scan stopped at is due
 * itself (or for le_prune_history()).  now is the grant's time.
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
