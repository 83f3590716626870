/*-------------------------------------------------------------------------
 *
 * lease.c
 *		The SQL-callable lease calls: le_acquire (and its wait), le_renew,
 *		le_set_metadata, le_release, le_force_release, le_prune_history,
 *		le_watch and le_unwatch.
 *
 * Every call judges expiry by the server clock at the moment of the
 * decision (after all lock waits, never the transaction start time), and
 * decides on the latest committed version of the lease row.  A refused
 * acquire and a failed renew are answered from a plain read, leaving no
 * lock, transaction id or WAL behind; every call that changes a lease
 * commits durably (durable.c).  src/README.md describes the locks, the
 * token rule and the cheap refusals.
 *
 * Invariant (G1, G3 and G4 in doc/lease-guarantees.md): at most one owner
 * holds a valid lease on a key, each new ownership period gets a new, higher
 * token, and only the holder renews or releases.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "leader_election.h"

PG_FUNCTION_INFO_V1(le_acquire);
PG_FUNCTION_INFO_V1(le_renew);
PG_FUNCTION_INFO_V1(le_set_metadata);
PG_FUNCTION_INFO_V1(le_release);
PG_FUNCTION_INFO_V1(le_force_release);
PG_FUNCTION_INFO_V1(le_prune_history);
PG_FUNCTION_INFO_V1(le_watch);
PG_FUNCTION_INFO_V1(le_unwatch);

/* Does the row's current period belong to this owner id and role? */
static bool
le_lease_is_ours(const LeaseRow *row, const char *owner, const LeaseStoreState *st)
{
	return row->holder != NULL &&
		strcmp(row->holder, owner) == 0 &&
		row->holder_role != NULL &&
		strcmp(row->holder_role, st->caller_name) == 0;
}

/* le_acquire's result type, see le_lease_acquire_result. */
static TupleDesc acquire_desc = NULL;
static Oid	acquire_desc_fn = InvalidOid;
static bool acquire_desc_callback = false;

static void
le_lease_acquire_desc_reset(Datum arg, int cacheid, uint32 hashvalue)
{
	acquire_desc_fn = InvalidOid;
}

/*
 * Build le_acquire's result row; new_period tells whether a granted call
 * started a new ownership period (ignored, and NULL, when not acquired).
 */
static Datum
le_lease_acquire_result(FunctionCallInfo fcinfo, bool acquired, bool new_period,
				  const LeaseRow *row)
{
	TupleDesc	tupdesc;
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};

	/*
	 * The result type is built from pg_proc once per backend and function
	 * (every execution of a FROM-clause call starts with a new FmgrInfo, and
	 * building it was 3% of a cycle's instructions), dropped on any pg_proc
	 * invalidation.
	 */
	if (acquire_desc == NULL || acquire_desc_fn != fcinfo->flinfo->fn_oid)
	{
		MemoryContext old;

		if (!acquire_desc_callback)
		{
			CacheRegisterSyscacheCallback(PROCOID, le_lease_acquire_desc_reset, (Datum) 0);
			acquire_desc_callback = true;
		}
		if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "return type must be a row type");
		old = MemoryContextSwitchTo(TopMemoryContext);
		tupdesc = BlessTupleDesc(CreateTupleDescCopy(tupdesc));
		MemoryContextSwitchTo(old);
		if (acquire_desc != NULL)
			FreeTupleDesc(acquire_desc);
		acquire_desc = tupdesc;
		acquire_desc_fn = fcinfo->flinfo->fn_oid;
	}
	tupdesc = acquire_desc;

	values[0] = BoolGetDatum(acquired);
	values[1] = Int64GetDatum(row->fencing_token);
	nulls[1] = !acquired;
	if (row->holder)
	{
		values[2] = CStringGetTextDatum(row->holder);
		values[3] = TimestampTzGetDatum(row->expires_at);
	}
	else
		nulls[2] = nulls[3] = true;
	values[4] = BoolGetDatum(new_period);
	nulls[4] = !acquired;

	return HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
}

/*
 * When the current period of old ends if it is ended now: at its expiry if
 * it lapsed before (it is then recorded as expired).
 */
static TimestampTz
le_lease_period_end(const LeaseRow *old, TimestampTz now)
{
	return old->expires_at <= now ? old->expires_at : now;
}

/*
 * Fold the end of old's period, ended now, into the history_min_ended_at of
 * row, the version of the lease row about to be written, so that it stays
 * at or below the ended_at of every ended period of the lease in the
 * history (see le_store_prune_plan).  Unknown (NULL, 0 here) stays
 * unknown; 'infinity' (none ended) becomes this end.
 */
static void
le_lease_note_period_end(LeaseRow *row, const LeaseRow *old, TimestampTz now)
{
	TimestampTz ended_at = le_lease_period_end(old, now);

	if (row->history_min_ended_at != 0 && ended_at < row->history_min_ended_at)
		row->history_min_ended_at = ended_at;
}

/*
 * Count the end of old's period, ended now, in row (the version about to
 * be written): kept in the lease row, not only in the history, which is
 * pruned; its ttl is kept too (while a lease is held, le_lease_metrics
 * derives the ttl from expires_at and renewed_at, so a renewal writes no
 * ttl).  A period that had lapsed is an expiry however it ends (as in
 * the history); a valid one that le_force_release ended is a force release.
 */
static void
le_lease_count_end(LeaseRow *row, const LeaseRow *old, TimestampTz now, bool forced)
{
	if (old->holder == NULL)
		return;
	row->ttl_us = old->expires_at - old->renewed_at;
	if (old->expires_at <= now)
		row->expiries++;
	else if (forced)
		row->force_releases++;
}

/* What the end of a period does to its history row (le_lease_plan_period_end). */
typedef enum PeriodEnd
{
	LE_PERIOD_UNRECORDED,		/* none to end: the lease was free, or the
								 * period was granted with the history off */
	LE_PERIOD_CLOSE,			/* set its ended_at and end_reason */
	LE_PERIOD_DELETE			/* delete it: past the retention already */
} PeriodEnd;

/*
 * Plan the end of old's period, ended now, before row (the version of the
 * lease row about to be written) is written.  A free lease (no holder) has
 * no open period; a period this backend granted with
 * leader_election.history off has no row (le_rows_period_recorded).
 * One that lapsed longer ago than the retention has its row deleted
 * instead of closed, and its end is not folded into the bound; any other
 * folds its end into row's bound (le_lease_note_period_end).  Decided once per
 * call, for both.
 */
static PeriodEnd
le_lease_plan_period_end(LeaseStoreState *st, LeaseRow *row, const LeaseRow *old, TimestampTz now)
{
	if (old->holder == NULL || !le_rows_period_recorded(st, old))
		return LE_PERIOD_UNRECORDED;
	if (le_store_history_due(le_lease_period_end(old, now), now))
		return LE_PERIOD_DELETE;
	le_lease_note_period_end(row, old, now);
	return LE_PERIOD_CLOSE;
}

/*
 * End the current ownership period of old in the history, now, as planned
 * by le_lease_plan_period_end.
 */
static void
le_lease_close_period(LeaseStoreState *st, const LeaseRow *old, TimestampTz now,
				const char *reason, PeriodEnd plan)
{
	if (plan == LE_PERIOD_UNRECORDED)
		return;
	le_rows_history_close(st, old->lease_id, old->fencing_token, le_lease_period_end(old, now),
						   plan == LE_PERIOD_DELETE ? NULL :
						   old->expires_at <= now ? "expired" : reason);
}

/*
 * A call that locked the lease row and then changed nothing (it lost a race
 * decided on the version locked) keeps that lock, and the fence lock, until
 * its transaction ends, blocking the holder's renewals and fenced commits:
 * inside a transaction block, give the lease a deadline of
 * leader_election.lock_timeout from now, past which a session waiting for
 * its client is ended (see le_holder_bound_idle).
 */
static void
le_lease_bound_refusal(LeaseStoreState *st)
{
	st->idle_bound_us = (int64) le_lock_timeout_ms * 1000;
}

/* What le_acquire asks of the lease row after it waited for the fence lock. */
typedef struct AcquireCheck
{
	const char *owner;
	const LeaseStoreState *st;
	bool		lost;			/* someone else holds it validly now */
} AcquireCheck;

/* Is the row not validly held by someone else (worth locking)? */
static bool
le_lease_acquire_not_lost(const LeaseRow *row, void *arg)
{
	AcquireCheck *ac = (AcquireCheck *) arg;

	ac->lost = le_store_lease_valid(row, GetCurrentTimestamp()) && !le_lease_is_ours(row, ac->owner, ac->st);
	return !ac->lost;
}

/*
 * Grant the lease of *row, which this call locked (or read tentatively),
 * to owner from now until expires_at: a new token, the lapsed period closed, a new
 * one opened, history past the retention pruned.  The caller holds the
 * lease's fence lock in LE_FENCE_CHANGE_LOCKMODE.  false when the row
 * changed since it was read: nothing was written, the caller decides again
 * (the token drawn is skipped: tokens may have gaps, never repeats).
 */
static bool
le_lease_grant(LeaseStoreState *st, LeaseRow *row, char *owner, TimestampTz expires_at,
			   struct varlena *metadata, TimestampTz now)
{
	LeaseRow	old;
	PeriodEnd	lapsed_end;
	TimestampTz busy_end;

	old = *row;
	row->fencing_token = le_token_next(st, row, &row->token_timeline,
									   &row->token_system_id);
	row->holder = owner;
	row->holder_role = st->caller_name;
	row->acquired_at = now;
	row->renewed_at = now;
	row->expires_at = expires_at;
	row->transitions++;
	row->metadata = metadata;
	le_lease_count_end(row, &old, now, false);
	row->renew_margin_us = row->renew_margin_min_us = -1;

	/*
	 * Periods past the retention are found first, so that the bound
	 * they leave goes out with the grant's write (the lapsed period, if
	 * any, is still open in the history then: the scan stops at it),
	 * and deleted after it, under the row's lock.  Then the lapsed
	 * period's end is folded in, unless it is gone already or was
	 * never recorded (le_lease_plan_period_end).
	 */
	le_store_prune_plan(st, row->lease_id, &row->history_min_ended_at, now);
	lapsed_end = le_lease_plan_period_end(st, row, &old, now);

	/* New history rows are written only after the lease row. */
	if (!le_rows_write(st, row))
		return false;
	le_lease_close_period(st, &old, now, "expired", lapsed_end);
	le_rows_history_open(st, row);
	busy_end = le_rows_delete_due_history(st);
	if (busy_end != 0 && busy_end < row->history_min_ended_at)
	{
		/*
		 * Rows another transaction is deleting: look again next time.
		 * (A new command, so that this one sees the version it wrote.)
		 */
		row->history_min_ended_at = busy_end;
		CommandCounterIncrement();
		if (!le_rows_write(st, row))
			elog(ERROR, "leader_election: lease row \"%s\" changed under its lock",
				 row->lease_key);
	}
	le_watch_notify(st, "acquired", row);
	return true;
}

/*
 * le_acquire's refusal of a row of a partition group (55000): its members
 * take and renew it with le_group_heartbeat only.
 */
static void
le_lease_refuse_group_row(const LeaseRow *row)
{
	const char *key = row->lease_key;
	const char *name = key;
	size_t		prefix = strlen(LE_GROUP_KEY_PREFIX);

	if (strncmp(key, LE_GROUP_KEY_PREFIX, prefix) == 0)
		name = key + prefix;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("lease \"%s\" belongs to group \"%s\"", le_check_show(key),
					le_check_show(pnstrdup(name, strcspn(name, ":")))),
			 errhint("Members of a partition group take and renew its leases with le_group_heartbeat.")));
}

/*
 * Is *row a row that req may acquire?  le_acquire (plain_only) refuses the
 * rows of a group; a group's call refuses a row of another group, or a
 * plain lease that took the key before 1.1 (42710).
 */
static void
le_lease_check_group(const LeaseAcquireRequest *req, const LeaseRow *row)
{
	if (req->plain_only && row->group_id != 0)
		le_lease_refuse_group_row(row);
	if (req->group_id != 0 && row->group_id != req->group_id)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("lease \"%s\" is not a lease of its group", le_check_show(row->lease_key)),
				 errdetail("A plain lease uses this key, taken before version 1.1 reserved it."),
				 errhint("Release that lease for good and use another group name.")));
}

/*
 * Refuse to create, for le_acquire or le_watch, a new key that a partition
 * group would use (22023); plain leases of such keys made under 1.0 go on
 * working.  A 1.0 catalog not yet updated reserves nothing.
 */
static void
le_lease_check_new_key(LeaseStoreState *st, const char *key)
{
	if (strncmp(key, LE_GROUP_KEY_PREFIX, strlen(LE_GROUP_KEY_PREFIX)) == 0 &&
		le_rows_has_groups(st))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease key \"%s\" is reserved for partition groups", le_check_show(key)),
				 errdetail("Keys starting with \"%s\" name the partitions and members of groups.",
						   LE_GROUP_KEY_PREFIX),
				 errhint("Choose another key, or join the group with le_group_heartbeat.")));
}

/*
 * Extend *row, validly held by req's owner, from now to expires_at; a
 * group's heartbeat counts it as a renewal (the margin it had left).
 */
static void
le_lease_extend(LeaseRow *row, const LeaseAcquireRequest *req, TimestampTz now,
				TimestampTz expires_at)
{
	if (req->count_renewal)
	{
		row->renew_margin_us = row->expires_at - now;
		if (row->renew_margin_min_us < 0 || row->renew_margin_us < row->renew_margin_min_us)
			row->renew_margin_min_us = row->renew_margin_us;
	}
	row->renewed_at = now;
	row->expires_at = expires_at;
	if (req->metadata != NULL)
		row->metadata = req->metadata;
}

/*
 * After the write of a change of *row from an expiry of old_expires_at:
 * one that brought the expiry earlier wakes the head of the lease's queue
 * at commit, which sleeps until the expiry it read (le_wait_note_wake).
 * The rows of partition groups have no queue (le_acquire refuses them).
 */
static void
le_lease_note_expiry(const LeaseRow *row, TimestampTz old_expires_at)
{
	if (row->expires_at < old_expires_at && row->group_id == 0)
		le_wait_note_wake(row->lease_id);
}

/*
 * One try to acquire the lease row req->key for req->owner, inside the
 * frame st the caller began (and ends): grants a free or expired lease with
 * a new, higher token (LE_ACQUIRE_GRANTED); extends a lease this owner and
 * role validly hold, keeping their token (LE_ACQUIRE_EXTENDED); otherwise
 * refuses (LE_ACQUIRE_REFUSED), or with fence_try, when the fence lock is
 * taken, does nothing (LE_ACQUIRE_BUSY).  *out is the caller's lease, or
 * the version that decided the refusal.  Expiry is judged by the server
 * clock after the lock waits.  A key without a row gets one (a plain one,
 * or one of req's group).
 *
 * Locks: a refusal on the first read takes none.  Otherwise the fence lock
 * in LE_FENCE_CHANGE_LOCKMODE when the lease may change hands (waited for,
 * or with fence_try only tried: the caller may hold other rows), then the
 * lease row, both to the end of the transaction; a fence lock needed only
 * once the row is held is tried, never waited for (lock order), and one
 * that served no change is given back at once.
 */
LeaseAcquireResult
le_lease_acquire_row(LeaseStoreState *st, const LeaseAcquireRequest *req, LeaseRow *out)
{
	const char *key = req->key;
	char	   *owner = req->owner;
	LeaseRow	row;
	TimestampTz now;
	TimestampTz expires_at;
	TimestampTz old_expires_at;
	bool		found;
	bool		fenced = false;
	int64		fenced_id = 0;
	AcquireCheck ac;
	int64		tried_fence_id = 0; /* fence lock taken by le_fence_lock_try */
	bool		granted = false;

	/* Fast path: refusals only read. */
	found = le_rows_peek(st, key, &row);
	if (found)
		le_lease_check_group(req, &row);
	if (found && le_store_lease_valid(&row, GetCurrentTimestamp()) &&
		!le_lease_is_ours(&row, owner, st))
	{
		*out = row;
		return LE_ACQUIRE_REFUSED;
	}

	if (!found)
	{
		if (req->plain_only)
			le_lease_check_new_key(st, key);
		le_rows_create(st, key, req->group_id, req->group_id != 0 ? req->group_partition : -1);
	}
	else if (!le_lease_is_ours(&row, owner, st) ||
			 !le_store_lease_valid(&row, GetCurrentTimestamp()))
	{
		/*
		 * Likely a new period, also for a holder whose lease lapsed: fence
		 * lock first, then the row lock (taking them the other way round
		 * deadlocks against a competitor, see lease_lock_order.spec).
		 */
		if (!req->fence_try)
			le_fence_lock(st, row.lease_id, LE_FENCE_CHANGE_LOCKMODE);
		else if (!le_fence_lock_try(row.lease_id, LE_FENCE_CHANGE_LOCKMODE))
		{
			*out = row;
			return LE_ACQUIRE_BUSY;
		}
		fenced = true;
		fenced_id = row.lease_id;
	}

	/*
	 * After a wait for the fence lock, a competitor has often won meanwhile
	 * (many candidates on one key queue there): refuse on the version found,
	 * without locking the row (no transaction id, no WAL, no flush), and give
	 * the fence lock back at once, since nothing was changed under it.
	 */
	ac.owner = owner;
	ac.st = st;
retry:
	ac.lost = false;
	if (!le_rows_lock(st, key, &row, fenced ? le_lease_acquire_not_lost : NULL, &ac))
	{
		if (!ac.lost)
			elog(ERROR, "leader_election: lease row \"%s\" vanished", key);
		le_fence_lock_release(fenced_id, LE_FENCE_CHANGE_LOCKMODE);
		*out = row;
		return LE_ACQUIRE_REFUSED;
	}
	le_lease_check_group(req, &row);
	now = GetCurrentTimestamp();
	expires_at = req->expires_at != 0 ? req->expires_at : now + req->ttl;

	/*
	 * The fence lock protects the row whose id it was taken for: if the row
	 * was replaced meanwhile (DROP and CREATE EXTENSION, a reloaded table),
	 * the lock we hold is not that row's; go the try-lock way below.
	 */
	if (fenced && row.lease_id != fenced_id)
		fenced = false;

	if (le_store_lease_valid(&row, now))
	{
		if (!le_lease_is_ours(&row, owner, st))
		{
			/*
			 * Lost a race to another candidate; a fence lock this call
			 * took to change the token goes back at once (nothing was
			 * changed under it).
			 */
			if (tried_fence_id != 0)
				le_fence_lock_release(tried_fence_id, LE_FENCE_CHANGE_LOCKMODE);
			le_lease_bound_refusal(st);
			*out = row;
			return LE_ACQUIRE_REFUSED;
		}
		/* The valid holder again (e.g. a retry after a lost reply). */
		old_expires_at = row.expires_at;
		le_lease_extend(&row, req, now, expires_at);
		if (!le_rows_write(st, &row))
			goto retry;			/* the row changed since it was read */
		le_lease_note_expiry(&row, old_expires_at);
	}
	else
	{
		if (!fenced && tried_fence_id != row.lease_id)
		{
			/*
			 * A row this call just created (nobody else knows its id yet),
			 * one a concurrent caller created, or our own lease that lapsed
			 * between our two reads: we may hold its row lock already (this
			 * transaction wrote it before, or this is the locked second
			 * try), so waiting for the fence lock now would break the lock
			 * order and could deadlock with a competitor that holds it and
			 * waits for the row (lease_lock_order.spec).  If it is taken,
			 * that competitor (or a writer with the old token) came first:
			 * refuse, like a lost race.  Unless asked for one try, try for
			 * a moment: the transaction that freed the lease may still be
			 * releasing its fence lock (149_rejoin_after_release.pl).
			 */
			if (!(req->fence_try ? le_fence_lock_try(row.lease_id, LE_FENCE_CHANGE_LOCKMODE)
				  : le_fence_lock_try_briefly(row.lease_id, LE_FENCE_CHANGE_LOCKMODE)))
			{
				le_lease_bound_refusal(st);
				*out = row;
				return req->fence_try ? LE_ACQUIRE_BUSY : LE_ACQUIRE_REFUSED;
			}
			tried_fence_id = row.lease_id;
			now = GetCurrentTimestamp();
			if (req->expires_at == 0)
				expires_at = now + req->ttl;
		}

		if (!le_lease_grant(st, &row, owner, expires_at, req->metadata, now))
			goto retry;			/* the row changed since it was read */
		granted = true;
	}

	le_durable_commit();
	st->idle_bound_us = expires_at - now;

	/*
	 * The strings of row are the caller's (owner, st->caller_name) or were
	 * copied into the caller's context by le_rows_lock.
	 */
	*out = row;
	return granted ? LE_ACQUIRE_GRANTED : LE_ACQUIRE_EXTENDED;
}

/* What le_lease_cap_row shortens: the caller's valid lease, token, later. */
typedef struct CapCheck
{
	const char *owner;
	int64		token;
	TimestampTz expires_at;
	const LeaseStoreState *st;
} CapCheck;

/* Is the row the caller's valid lease with this token, expiring later? */
static bool
le_lease_cap_applies(const LeaseRow *row, void *arg)
{
	const CapCheck *cc = (const CapCheck *) arg;

	return le_lease_is_ours(row, cc->owner, cc->st) && row->fencing_token == cc->token &&
		row->expires_at > cc->expires_at && le_store_lease_valid(row, GetCurrentTimestamp());
}

/*
 * Inside the frame st the caller began (and ends): bring the expiry of the
 * lease key that owner and the caller's role validly hold with token down
 * to expires_at when it is later (never later, never a new token); true
 * when shortened, *out then the lease as written.  A partition a member
 * gives up must not outlive its membership (le_group_heartbeat).
 *
 * Locks: none when the first read shows nothing to shorten; else the lease
 * row to the end of the transaction, never the fence lock (the token does
 * not change, and a fenced commit reads the expiry after the row lock).
 */
bool
le_lease_cap_row(LeaseStoreState *st, const char *key, const char *owner, int64 token,
				 TimestampTz expires_at, LeaseRow *out)
{
	LeaseRow	row;
	CapCheck	cc;

	cc.owner = owner;
	cc.token = token;
	cc.expires_at = expires_at;
	cc.st = st;
	memset(&row, 0, sizeof(row));
retry:
	if (!le_rows_lock(st, key, &row, le_lease_cap_applies, &cc))
		return false;
	if (!le_lease_cap_applies(&row, &cc))
	{
		le_lease_bound_refusal(st);
		return false;
	}
	row.expires_at = expires_at;
	if (!le_rows_write(st, &row))
		goto retry;				/* the row changed since it was read */
	le_durable_commit();
	*out = row;
	return true;
}

/* What le_lease_note_held_row writes to: the caller's membership, token. */
typedef struct HeldCheck
{
	const char *owner;
	int64		token;
	const LeaseStoreState *st;
} HeldCheck;

/* Is the row the caller's lease with this token? */
static bool
le_lease_held_applies(const LeaseRow *row, void *arg)
{
	const HeldCheck *hc = (const HeldCheck *) arg;

	return le_lease_is_ours(row, hc->owner, hc->st) && row->fencing_token == hc->token;
}

/*
 * Inside the frame st the caller began (and ends): set the held list
 * (LeaseRow.group_held) of the membership key that owner and the caller's
 * role hold with token to held, a bytea; true when written (false: not
 * theirs any more, or the list was that already).  Nothing else changes.
 *
 * Locks: the lease row to the end of the transaction (le_group_heartbeat
 * holds it already), never the fence lock (the token does not change).
 */
bool
le_lease_note_held_row(LeaseStoreState *st, const char *key, const char *owner, int64 token,
					   struct varlena *held)
{
	LeaseRow	row;
	HeldCheck	hc;

	hc.owner = owner;
	hc.token = token;
	hc.st = st;
	memset(&row, 0, sizeof(row));
retry:
	if (!le_rows_lock(st, key, &row, le_lease_held_applies, &hc))
		return false;
	if (!le_lease_held_applies(&row, &hc))
		return false;
	if (row.group_held != NULL && VARSIZE_ANY(row.group_held) == VARSIZE_ANY(held) &&
		memcmp(VARDATA_ANY(row.group_held), VARDATA_ANY(held), VARSIZE_ANY_EXHDR(held)) == 0)
		return false;
	row.group_held = held;
	if (!le_rows_write(st, &row))
		goto retry;				/* the row changed since it was read */
	le_durable_commit();
	return true;
}

/*
 * One try of le_acquire: true when granted (*out is the caller's lease,
 * *new_period tells whether the token is new), false when refused (*out is
 * the version that decided it); see le_lease_acquire_row.
 */
static bool
le_lease_try_acquire(FunctionCallInfo fcinfo, char *key, char *owner, int64 ttl,
					 struct varlena *metadata, LeaseRow *out, bool *new_period)
{
	LeaseStoreState st;
	LeaseAcquireRequest req;
	LeaseAcquireResult r;

	memset(&req, 0, sizeof(req));
	req.key = key;
	req.owner = owner;
	req.ttl = ttl;
	req.metadata = metadata;
	req.plain_only = true;
	req.group_partition = -1;
	le_store_begin(&st, fcinfo->flinfo->fn_oid, key);
	r = le_lease_acquire_row(&st, &req, out);
	le_store_end(&st);
	*new_period = (r == LE_ACQUIRE_GRANTED);
	return r == LE_ACQUIRE_GRANTED || r == LE_ACQUIRE_EXTENDED;
}

/* What one try of a waiting le_acquire came to. */
#define LE_TRY_REFUSED		0
#define LE_TRY_GRANTED		1
#define LE_TRY_BUSY			2	/* a lock wait ran out (55P03): *out not set */

/*
 * One try in a subtransaction of its own, kept when granted and rolled
 * back when refused: a refusal that locked the lease row or took the fence
 * lock (a race lost after the locks) gives them back at once, so a waiter
 * never sleeps holding them.  With busy_ok, a lock wait that ran out
 * (leader_election.lock_timeout: a transaction kept the lease's locks, e.g.
 * a slow commit) is LE_TRY_BUSY, to be tried again within the wait.
 */
static int
le_lease_try_acquire_sub(FunctionCallInfo fcinfo, char *key, char *owner, int64 ttl,
						 struct varlena *metadata, bool busy_ok, LeaseRow *out,
						 bool *new_period)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile int result = LE_TRY_REFUSED;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);
	PG_TRY();
	{
		if (le_lease_try_acquire(fcinfo, key, owner, ttl, metadata, out, new_period))
			result = LE_TRY_GRANTED;
		if (result == LE_TRY_GRANTED)
			ReleaseCurrentSubTransaction();
		else
			RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
		if (!busy_ok || edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
		result = LE_TRY_BUSY;
	}
	PG_END_TRY();
	return result;
}

/* Copy the pointed-to parts of row into the current memory context. */
static void
le_lease_row_copy_out(LeaseRow *row)
{
	if (row->lease_key != NULL)
		row->lease_key = pstrdup(row->lease_key);
	if (row->holder != NULL)
		row->holder = pstrdup(row->holder);
	if (row->holder_role != NULL)
		row->holder_role = pstrdup(row->holder_role);
	if (row->metadata != NULL)
	{
		struct varlena *m = palloc(VARSIZE_ANY(row->metadata));

		memcpy(m, row->metadata, VARSIZE_ANY(row->metadata));
		row->metadata = m;
	}
}

/*
 * le_acquire with a wait of wait_us: try; when refused, queue for the
 * lease (le_wait_enter) and, as the head, try again at each release
 * (woken by the releasing commit), at the lease's expiry and at the end of
 * the wait.  The result of the last try is returned.  The wait tag of a
 * grant is kept to the end of the transaction, so that the next waiter
 * tries only once the grant is visible.  Each round runs in a memory
 * context reset at the next one, so that a long wait does not grow.
 */
static bool
le_lease_acquire_waiting(FunctionCallInfo fcinfo, char *key, char *owner, int64 ttl,
						 struct varlena *metadata, int64 wait_us, LeaseRow *row,
						 bool *new_period)
{
	TimestampTz deadline = GetCurrentTimestamp() + wait_us;
	int64		queued_id = 0;
	bool		acquired;
	MemoryContext callcxt = CurrentMemoryContext;
	MemoryContext roundcxt;

	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("le_acquire cannot wait in a REPEATABLE READ or SERIALIZABLE transaction"),
				 errdetail("The transaction's snapshot would not see a release made during the wait."),
				 errhint("Call it with wait in a READ COMMITTED transaction, or without wait.")));
	if (le_durable_in_use())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("le_acquire cannot wait in a transaction that changed or locked a lease"),
				 errdetail("The wait would keep those leases locked for its length, past their expiry."),
				 errhint("Wait in a transaction of its own, or call it without wait.")));

	memset(row, 0, sizeof(*row));
	roundcxt = AllocSetContextCreate(callcxt, "le_acquire wait round", ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		TimestampTz now;
		TimestampTz until;
		int			r;

		MemoryContextReset(roundcxt);
		MemoryContextSwitchTo(roundcxt);

		/* the last try (the wait ran out) raises a 55P03 of its own */
		r = le_lease_try_acquire_sub(fcinfo, key, owner, ttl, metadata,
									 GetCurrentTimestamp() < deadline, row, new_period);
		acquired = r == LE_TRY_GRANTED;
		if (acquired)
			le_wait_check_client(); /* a grant to a client gone ends here */
		now = GetCurrentTimestamp();
		if (r == LE_TRY_BUSY)
		{
			/* busy: again shortly (the head keeps its place in the queue) */
			le_wait_sleep(Min(now + LE_WAIT_RETRY_US, deadline));
			continue;
		}
		if (acquired || now >= deadline)
			break;
		if (queued_id != row->lease_id)
		{
			/* First refusal (or the row was replaced): join its queue. */
			if (queued_id != 0)
				le_wait_leave(queued_id);
			queued_id = 0;
			if (le_wait_enter(row->lease_id, deadline))
				queued_id = row->lease_id;
			else
				deadline = now; /* one last try reports the state then */
			continue;
		}

		/*
		 * Held by someone else: until its expiry, or a release.  A refusal
		 * of a lease not validly held (a fenced writer was committing under
		 * its fence lock) tries again shortly.
		 */
		until = row->holder != NULL && row->expires_at > now ?
			row->expires_at : now + LE_WAIT_RETRY_US;
		le_wait_sleep(Min(until, deadline));
	}
	if (queued_id != 0 && !acquired)
		le_wait_leave(queued_id);
	MemoryContextSwitchTo(callcxt);
	le_lease_row_copy_out(row);
	MemoryContextDelete(roundcxt);
	return acquired;
}

/*
 * le_acquire(lease_key, owner_id, ttl [, wait, metadata]) -> (acquired,
 * fencing_token, holder, expires_at, new_period): one try (see
 * le_lease_try_acquire), or with a wait, tries until granted or the wait
 * ran out (le_lease_acquire_waiting).  The 1.0 catalog calls it with three
 * arguments.
 */
Datum
le_acquire(PG_FUNCTION_ARGS)
{
	char	   *key = le_check_key(fcinfo, 0);
	char	   *owner = le_check_owner(fcinfo, 1);
	int64		ttl = le_check_ttl(fcinfo, 2);
	int64		wait_us = PG_NARGS() > 3 ? le_check_wait(fcinfo, 3) : 0;
	struct varlena *metadata = PG_NARGS() > 4 ? le_check_metadata(fcinfo, 4) : NULL;
	LeaseRow	row;
	bool		new_period = false;
	bool		acquired;

	le_check_writable("acquire");
	if (wait_us > 0)
		acquired = le_lease_acquire_waiting(fcinfo, key, owner, ttl, metadata, wait_us,
											&row, &new_period);
	else
		acquired = le_lease_try_acquire(fcinfo, key, owner, ttl, metadata, &row, &new_period);
	PG_RETURN_DATUM(le_lease_acquire_result(fcinfo, acquired, new_period, &row));
}

/*
 * le_set_metadata's refusal: LE002 when nobody holds the lease validly,
 * LE001 when the token is not the current one or the caller is not its
 * holder.  Never returns.
 */
static void
le_lease_refuse_metadata(const LeaseRow *row, const char *key, int64 token,
						 const char *owner, const LeaseStoreState *st)
{
	if (row->lease_id == 0 || !le_store_lease_valid(row, GetCurrentTimestamp()))
		ereport(ERROR,
				(errcode(ERRCODE_LE_LEASE_NOT_HELD),
				 errmsg("lease \"%s\" is not held", key),
				 errhint("Only the holder of a valid lease sets its metadata; acquire it first.")));
	ereport(ERROR,
			(errcode(ERRCODE_LE_STALE_FENCING_TOKEN),
			 row->fencing_token != token ?
			 errmsg("fencing token " INT64_FORMAT " of lease \"%s\" is not the current one", token, key) :
			 errmsg("lease \"%s\" is held by another owner or role", key),
			 errdetail("The current fencing token is " INT64_FORMAT ".", row->fencing_token),
			 errhint("A leader whose token was superseded must stop working, not retry.")));
}

/* What le_renew asks of the lease row before it locks it. */
typedef struct RenewCheck
{
	const char *owner;
	int64		token;
	const LeaseStoreState *st;
} RenewCheck;

/* Does the row look like the caller's valid lease with its token? */
static bool
le_lease_renew_looks_ours(const LeaseRow *row, void *arg)
{
	const RenewCheck *rc = (const RenewCheck *) arg;

	return le_lease_is_ours(row, rc->owner, rc->st) && row->fencing_token == rc->token &&
		le_store_lease_valid(row, GetCurrentTimestamp());
}

/*
 * le_renew(lease_key, owner_id, fencing_token, ttl) -> new expiry, or NULL
 * when this owner, role and token do not hold a valid lease.  The rows of
 * partition groups are renewed by le_group_heartbeat only (55000).
 *
 * Locks: the lease row to the end of the transaction, never the fence lock
 * (the token does not change); a refusal leaves no lock behind.
 */
Datum
le_renew(PG_FUNCTION_ARGS)
{
	char	   *key = le_check_key(fcinfo, 0);
	char	   *owner = le_check_owner(fcinfo, 1);
	int64		token = le_check_token(fcinfo, 2);
	int64		ttl = le_check_ttl(fcinfo, 3);
	LeaseStoreState st;
	LeaseRow	row;
	TimestampTz now;
	TimestampTz old_expires_at;
	RenewCheck	rc;

	le_check_writable("renew");
	le_store_begin(&st, fcinfo->flinfo->fn_oid, key);
	rc.owner = owner;
	rc.token = token;
	rc.st = &st;

	/*
	 * Not ours, another token or lapsed: refused on the version found,
	 * before any lock, so that a failed renew locks nothing (a caller's open
	 * transaction would otherwise keep the holder's row locked and block its
	 * renewals and every takeover).  Looks like ours: locked, and decided
	 * again on what the row holds now.
	 */
	memset(&row, 0, sizeof(row));
retry:
	if (!le_rows_lock(&st, key, &row, le_lease_renew_looks_ours, &rc))
	{
		if (row.group_id != 0)
			le_lease_refuse_group_row(&row);
		le_store_end(&st);
		PG_RETURN_NULL();
	}
	if (row.group_id != 0)
		le_lease_refuse_group_row(&row);
	now = GetCurrentTimestamp();
	if (!le_lease_is_ours(&row, owner, &st) || row.fencing_token != token ||
		!le_store_lease_valid(&row, now))
	{
		le_lease_bound_refusal(&st);
		le_store_end(&st);
		PG_RETURN_NULL();
	}

	/* How much of the ttl was left when the renewal arrived. */
	row.renew_margin_us = row.expires_at - now;
	if (row.renew_margin_min_us < 0 || row.renew_margin_us < row.renew_margin_min_us)
		row.renew_margin_min_us = row.renew_margin_us;
	old_expires_at = row.expires_at;
	row.renewed_at = now;
	row.expires_at = now + ttl;
	if (!le_rows_write(&st, &row))
		goto retry;				/* the row changed since it was read */
	le_lease_note_expiry(&row, old_expires_at);
	le_durable_commit();
	st.idle_bound_us = ttl;
	le_store_end(&st);
	PG_RETURN_TIMESTAMPTZ(row.expires_at);
}

/*
 * le_set_metadata(lease_key, owner_id, fencing_token, metadata): the
 * holder's compare-and-set of the metadata of its lease.  Raises LE001
 * when the token is not the lease's current one or the caller (owner and
 * role) does not hold it, LE002 when the lease is released or expired;
 * nothing changes then.
 *
 * Locks: the lease row to the end of the transaction, as le_renew; none
 * when refused.
 */
Datum
le_set_metadata(PG_FUNCTION_ARGS)
{
	char	   *key = le_check_key(fcinfo, 0);
	char	   *owner = le_check_owner(fcinfo, 1);
	int64		token = le_check_token(fcinfo, 2);
	struct varlena *metadata = le_check_metadata(fcinfo, 3);
	LeaseStoreState st;
	LeaseRow	row;
	TimestampTz now;
	RenewCheck	rc;

	le_check_writable("change the metadata of");
	memset(&row, 0, sizeof(row));
	le_store_begin(&st, fcinfo->flinfo->fn_oid, key);
	rc.owner = owner;
	rc.token = token;
	rc.st = &st;
retry:
	if (!le_rows_lock(&st, key, &row, le_lease_renew_looks_ours, &rc))
		le_lease_refuse_metadata(&row, key, token, owner, &st);
	now = GetCurrentTimestamp();
	if (!le_lease_is_ours(&row, owner, &st) || row.fencing_token != token ||
		!le_store_lease_valid(&row, now))
		le_lease_refuse_metadata(&row, key, token, owner, &st);
	row.metadata = metadata;
	if (!le_rows_write(&st, &row))
		goto retry;				/* the row changed since it was read */
	le_watch_notify(&st, "metadata", &row);
	le_durable_commit();
	st.idle_bound_us = row.expires_at - now;
	le_store_end(&st);
	PG_RETURN_VOID();
}

/* What le_lease_free asks of the lease row. */
typedef struct FreeCheck
{
	const char *owner;			/* NULL: whoever holds it */
	int64		token;
	const LeaseStoreState *st;
} FreeCheck;

/* Is the row held, and by this owner and token when one is given? */
static bool
le_lease_free_applies(const LeaseRow *row, void *arg)
{
	const FreeCheck *fc = (const FreeCheck *) arg;

	return row->holder != NULL &&
		(fc->owner == NULL || (le_lease_is_ours(row, fc->owner, fc->st) && row->fencing_token == fc->token));
}

/*
 * Free a lease inside the frame st the caller began (and ends): the work
 * shared by le_release and le_group_leave (only for its holder, role and
 * token) and le_force_release (owner == NULL: whoever holds it).  true
 * when it was held (valid or lapsed) and is free now.
 *
 * Locks: none when the first read shows nothing to free; else the fence
 * lock in LE_FENCE_CHANGE_LOCKMODE, then the lease row, both to the end of
 * the transaction (the fence lock only tried when the row is held first).
 */
bool
le_lease_free_row(LeaseStoreState *st, const char *key, const char *owner,
				  int64 token, const char *reason)
{
	LeaseRow	row;
	TimestampTz now;
	int64		locked_id;
	FreeCheck	fc;
	LeaseRow	old;
	PeriodEnd	end;

	fc.owner = owner;
	fc.token = token;
	fc.st = st;

	/* Not ours (or nothing to free): answer from a plain read. */
	if (!le_rows_peek(st, key, &row) || !le_lease_free_applies(&row, &fc))
		return false;

	/*
	 * Freeing ends the token's validity: exclude fenced writers first.  A
	 * takeover we waited for there makes the release refuse on the version
	 * then found, without locking the row, and give the fence lock back.
	 */
	locked_id = row.lease_id;
	le_fence_lock(st, locked_id, LE_FENCE_CHANGE_LOCKMODE);
retry:
	if (!le_rows_lock(st, key, &row, le_lease_free_applies, &fc))
	{
		if (!st->locked)
			le_fence_lock_release(locked_id, LE_FENCE_CHANGE_LOCKMODE);
		return false;
	}
	if (!le_lease_free_applies(&row, &fc))
	{
		le_lease_bound_refusal(st);
		return false;
	}

	/*
	 * The row was replaced between the two reads: we hold its row lock, so
	 * we must not wait for its fence lock (lock order).
	 */
	if (row.lease_id != locked_id &&
		!le_fence_lock_try(row.lease_id, LE_FENCE_CHANGE_LOCKMODE))
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("lease \"%s\" changed while it was being released", key),
				 errdetail("Its row was replaced and a fenced writer is committing under it."),
				 errhint("Retry the call.")));

	now = GetCurrentTimestamp();
	old = row;
	row.holder = NULL;
	row.holder_role = NULL;
	row.expires_at = 0;
	row.metadata = NULL;
	row.freed_at = now;
	row.renew_margin_us = row.renew_margin_min_us = -1;
	le_lease_count_end(&row, &old, now, owner == NULL);
	end = le_lease_plan_period_end(st, &row, &old, now);
	if (!le_rows_write(st, &row))
		goto retry;				/* the row changed since it was read */
	if (owner != NULL)
		le_fence_note_release(old.lease_id, old.fencing_token, le_store_lease_valid(&old, now),
							  old.expires_at);
	le_lease_close_period(st, &old, now, reason, end);
	le_watch_notify(st, reason, &row);
	le_wait_note_wake(old.lease_id);
	le_durable_commit();
	return true;
}

/* le_lease_free_row in a frame of its own. */
static bool
le_lease_free(FunctionCallInfo fcinfo, const char *key, const char *owner,
			  int64 token, const char *reason)
{
	LeaseStoreState st;
	bool		freed;

	le_store_begin(&st, fcinfo->flinfo->fn_oid, key);
	freed = le_lease_free_row(&st, key, owner, token, reason);
	le_store_end(&st);
	return freed;
}

/*
 * le_release(lease_key, owner_id, fencing_token) -> true when this owner,
 * role and token held the lease (valid or lapsed) and it is now free.
 */
Datum
le_release(PG_FUNCTION_ARGS)
{
	char	   *key = le_check_key(fcinfo, 0);
	char	   *owner = le_check_owner(fcinfo, 1);
	int64		token = le_check_token(fcinfo, 2);

	le_check_writable("release");
	PG_RETURN_BOOL(le_lease_free(fcinfo, key, owner, token, "released"));
}

/*
 * le_force_release(lease_key) -> true when the lease had a holder.  For
 * administrators only (EXECUTE is not granted to PUBLIC).
 */
Datum
le_force_release(PG_FUNCTION_ARGS)
{
	char	   *key = le_check_key(fcinfo, 0);

	le_check_writable("release");
	PG_RETURN_BOOL(le_lease_free(fcinfo, key, NULL, 0, "force_released"));
}

/* le_prune_history() -> number of history rows past the retention deleted. */
Datum
le_prune_history(PG_FUNCTION_ARGS)
{
	LeaseStoreState st;
	int64		deleted;

	le_check_writable("prune the history of");
	le_store_begin(&st, fcinfo->flinfo->fn_oid, NULL);
	deleted = le_store_prune_history(&st);
	le_store_end(&st);
	PG_RETURN_INT64(deleted);
}

/*
 * le_watch(lease_key) -> true when this session starts watching the lease,
 * false when it already did.  Releases (and, with leader_election.notify =
 * all, grants) of a lease send their NOTIFY only while another session
 * watches it (see lease_store.c).  Call it after LISTEN and before the next
 * le_acquire.  Creates the key's (free) row when there is none yet.
 */
Datum
le_watch(PG_FUNCTION_ARGS)
{
	char	   *key = le_check_key(fcinfo, 0);
	LeaseStoreState st;
	LeaseRow	row;
	bool		started;

	le_check_writable("watch");
	le_store_begin(&st, fcinfo->flinfo->fn_oid, key);
	if (!le_rows_peek(&st, key, &row))
	{
		/*
		 * The new row stays uncommitted, and every candidate for the key
		 * waits for it, until this transaction ends: refuse PREPARE and
		 * bound its idle time, as after a grant.
		 */
		le_lease_check_new_key(&st, key);
		le_rows_create(&st, key, 0, -1);
		le_durable_locks_taken();
		st.locked = true;
		le_lease_bound_refusal(&st);
		if (!le_rows_peek(&st, key, &row))
			elog(ERROR, "leader_election: lease row \"%s\" vanished", key);
	}
	le_rows_let_go(&st);		/* no table lock of ours while we wait */
	started = le_watch_start(row.lease_id);
	le_store_end(&st);
	PG_RETURN_BOOL(started);
}

/* le_unwatch(lease_key) -> true when this session watched the lease. */
Datum
le_unwatch(PG_FUNCTION_ARGS)
{
	char	   *key = le_check_key(fcinfo, 0);
	LeaseStoreState st;
	LeaseRow	row;
	bool		stopped = false;

	le_store_begin(&st, fcinfo->flinfo->fn_oid, key);
	if (le_rows_peek(&st, key, &row))
		stopped = le_watch_stop(row.lease_id);
	le_store_end(&st);
	PG_RETURN_BOOL(stopped);
}
