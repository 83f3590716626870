/*-------------------------------------------------------------------------
 *
 * durable.c
 *		Commit rules of a transaction that changed or locked a lease.
 *
 * A lease change must survive a crash and a failover to a synchronous
 * standby once its commit was acknowledged, whatever synchronous_commit the
 * caller runs with; and a transaction that holds a lease's row lock or its
 * fence lock in the mode that changes it must not be prepared, or the lock
 * would outlive its client until COMMIT PREPARED.  The lease calls report
 * what they did (le_durable_commit, le_durable_locks_taken); the
 * transaction callback here enforces both at commit and at PREPARE.
 *
 * Invariant: a transaction that changed a lease commits with
 * synchronous_commit = on at least, and no such transaction, nor one that
 * locked a lease to change it, is ever prepared (0A000).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/guc.h"

#include "leader_election.h"

/* Set by le_durable_commit: this transaction changed a lease. */
static bool le_durable_pending = false;

/*
 * Set by le_durable_locks_taken: this transaction locked a lease row or took a
 * fence lock to change a lease, whether or not it then changed it.
 */
static bool le_durable_locked = false;

/*
 * Before commit of a transaction that changed a lease, raise
 * synchronous_commit to on if the caller runs with less (checked then, so a
 * SET LOCAL after the lease call cannot lower it again).  The commit then
 * waits for the synchronous standbys when synchronous_standby_names names
 * any (and is a plain local flush otherwise), so an acknowledged grant,
 * renewal or release survives a failover to such a standby.  The setting is
 * transaction-local: the caller's own value is back once the commit is done.
 * Such a transaction cannot be prepared (0A000).
 */
static void
le_durable_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:

			/*
			 * A prepared lease change would keep the lease row locked until
			 * COMMIT PREPARED, blocking the holder's renewals and every
			 * takeover.
			 */
			if (le_durable_pending || le_durable_locked)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that changed or locked a lease"),
						 errdetail("A prepared transaction would keep the lease row or its fence lock locked until COMMIT PREPARED; the transaction is rolled back."),
						 errhint("Call le_renew(), le_acquire() and le_release() in transactions committed without two-phase commit.")));
			break;
		case XACT_EVENT_PRE_COMMIT:
			if (le_durable_pending && synchronous_commit < SYNCHRONOUS_COMMIT_ON)
				(void) set_config_option("synchronous_commit", "on",
										 PGC_USERSET, PGC_S_SESSION,
										 GUC_ACTION_LOCAL, true, ERROR, false);
			break;
		case XACT_EVENT_PARALLEL_PRE_COMMIT:
			break;
		default:
			le_durable_pending = false;
			le_durable_locked = false;
			break;
	}
}

/* Register le_durable_xact_callback once per backend. */
static void
le_durable_register_callback(void)
{
	static bool registered = false;

	if (!registered)
	{
		RegisterXactCallback(le_durable_xact_callback, NULL);
		registered = true;
	}
}

/*
 * Note that the current transaction holds a lease's row lock or its fence
 * lock in the mode that changes it: such a transaction cannot be prepared
 * (0A000), even when the call then changed nothing (an acquire that lost the
 * race after it waited for the locks keeps them): prepared, it would block
 * the holder's renewals and every takeover until COMMIT PREPARED.
 */
void
le_durable_locks_taken(void)
{
	le_durable_register_callback();
	le_durable_locked = true;
}

/*
 * Make the commit of the current transaction, which changes a lease, durable
 * locally and on the synchronous standbys, whatever the caller's
 * synchronous_commit (see le_durable_xact_callback).
 */
void
le_durable_commit(void)
{
	ForceSyncCommit();
	le_durable_register_callback();
	le_durable_pending = true;
}

/*
 * Whether the current transaction changed or locked a lease (a wait then
 * would keep those locks for its length, past the leases' expiry).
 */
bool
le_durable_in_use(void)
{
	return le_durable_pending || le_durable_locked;
}
