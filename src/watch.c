/*-------------------------------------------------------------------------
 *
 * watch.c
 *		Watches of leases and the NOTIFY that announces their changes.
 *
 * A session watches a lease by holding the lease's fence lock in a mode
 * that conflicts with no mode the fence uses; a lease change asks for a
 * mode that conflicts only with a watch, without waiting, to learn whether
 * anyone watches, and sends its NOTIFY only then (src/README.md, "Watches
 * and notifications", says why this is cheap and why no release goes
 * unheard).
 *
 * Invariant (G11 in doc/lease-guarantees.md): a release or force release
 * of a lease that another session watches is announced at its commit.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "lib/stringinfo.h"
#include "storage/lock.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/jsonb.h"

#include "leader_election.h"

/*
 * A watch holds the fence lock in LE_WATCH_LOCKMODE at session level, which
 * conflicts with no mode the fence uses; a change that holds the fence lock
 * in LE_FENCE_CHANGE_LOCKMODE asks for LE_WATCH_CHANGE_LOCKMODE as well,
 * without waiting, and that fails exactly when another session watches.  A
 * watcher arriving meanwhile waits for the change's transaction to end, so
 * no release goes unheard (lease_watch.spec).  src/README.md, "Watches and
 * notifications", says why this costs a notifying commit nothing when
 * nobody watches.
 */
#define LE_WATCH_LOCKMODE		AccessShareLock
#define LE_WATCH_CHANGE_LOCKMODE AccessExclusiveLock

/*
 * Start watching a lease for this session; false when it already did.
 * Waits (bounded by the lock_timeout in force) for a change in progress.
 */
bool
le_watch_start(int64 lease_id)
{
	LOCKTAG		tag;

	le_fence_lock_tag(&tag, lease_id);
	if (LockHeldByMe(&tag, LE_WATCH_LOCKMODE))
		return false;
	(void) LockAcquire(&tag, LE_WATCH_LOCKMODE, true, false);
	return true;
}

/* Stop watching a lease; false when this session did not watch it. */
bool
le_watch_stop(int64 lease_id)
{
	LOCKTAG		tag;

	le_fence_lock_tag(&tag, lease_id);
	if (!LockHeldByMe(&tag, LE_WATCH_LOCKMODE))
		return false;
	return LockRelease(&tag, LE_WATCH_LOCKMODE, true);
}

/*
 * Does another session watch the lease?  The caller holds its fence lock in
 * LE_FENCE_CHANGE_LOCKMODE; when nobody watches, LE_WATCH_CHANGE_LOCKMODE
 * is kept too until this transaction ends (see above).
 */
static bool
le_watch_by_others(int64 lease_id)
{
	LOCKTAG		tag;

	le_fence_lock_tag(&tag, lease_id);
	return LockAcquire(&tag, LE_WATCH_CHANGE_LOCKMODE, false, true) == LOCKACQUIRE_NOT_AVAIL;
}

/*
 * Announce a change of a lease on LE_NOTIFY_CHANNEL, delivered at commit,
 * unless leader_election.notify leaves this event out or no other session
 * watches the lease (le_watch):
 * {"event": ..., "lease_key": ..., "holder": ..., "fencing_token": N,
 * "expires_at": ISO 8601 or null}.
 */
void
le_watch_notify(const LeaseStoreState *st, const char *event, const LeaseRow *row)
{
	StringInfoData buf;
	char		ts[MAXDATELEN + 1];

	/*
	 * A NOTIFY makes the commit take the notification queue's lock and hold
	 * it through the commit flush, so notifying commits run one at a time
	 * cluster-wide: leader_election.notify can spare grants (followers need
	 * only releases to campaign at once) or everything.
	 */
	if (le_notify_events == LE_NOTIFY_NONE ||
		(le_notify_events == LE_NOTIFY_RELEASES && strcmp(event, "released") != 0 &&
		 strcmp(event, "force_released") != 0) ||
		!le_watch_by_others(row->lease_id))
		return;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"event\":");
	escape_json(&buf, event);
	appendStringInfoString(&buf, ",\"lease_key\":");
	escape_json(&buf, row->lease_key);
	appendStringInfoString(&buf, ",\"holder\":");
	if (row->holder)
		escape_json(&buf, row->holder);
	else
		appendStringInfoString(&buf, "null");
	appendStringInfo(&buf, ",\"fencing_token\":" INT64_FORMAT ",\"expires_at\":",
					 row->fencing_token);
	if (row->holder)
	{
		JsonEncodeDateTime(ts, TimestampTzGetDatum(row->expires_at), TIMESTAMPTZOID, NULL);
		appendStringInfo(&buf, "\"%s\"", ts);
	}
	else
		appendStringInfoString(&buf, "null");
	/* Last, so that readers of the 1.0 members see them where they were. */
	appendStringInfoString(&buf, ",\"metadata\":");
	if (row->metadata != NULL)
	{
		Jsonb	   *jb = (Jsonb *) row->metadata;

		(void) JsonbToCString(&buf, &jb->root, VARSIZE(jb));
	}
	else
		appendStringInfoString(&buf, "null");
	appendStringInfoChar(&buf, '}');
	Async_Notify(LE_NOTIFY_CHANNEL, buf.data);
	pfree(buf.data);
}
