/*-------------------------------------------------------------------------
 *
 * leader_election.c
 *		Module initialisation and settings of the leader_election extension.
 *
 * The module holds no shared memory and starts no background worker: all
 * state is in the extension's tables, so _PG_init only defines settings.
 * They are documented in README.md ("Settings").
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/guc.h"

#include "compat.h"
#include "leader_election.h"

PG_MODULE_MAGIC;

/* Longest wait for a lease's row or fence lock, in milliseconds. */
int			le_lock_timeout_ms = 2000;

/* Longest ttl a caller may ask for, in seconds. */
int			le_max_ttl_s = 3600;

/* How long ended ownership periods stay in le_lease_history, in seconds. */
int			le_history_retention_s = 7 * 24 * 3600;

void		_PG_init(void);

/* Define the extension's settings. */
void
_PG_init(void)
{
	DefineCustomIntVariable("leader_election.lock_timeout",
							"Longest wait for a lease locked by another transaction.",
							"Acquire, renew and release give up with SQLSTATE 55P03 after this "
							"wait, e.g. when a stuck or prepared transaction holds the lease row "
							"or a fenced writer holds the fence lock.",
							&le_lock_timeout_ms,
							2000, 1, 600000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("leader_election.max_ttl",
							"Longest ttl that le_acquire and le_renew accept.",
							"A crashed holder blocks its lease for up to one ttl.",
							&le_max_ttl_s,
							3600, 1, 30 * 24 * 3600,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("leader_election.history_retention",
							"How long ended ownership periods are kept in le_lease_history.",
							"Older rows of a lease are deleted when it is next granted, or by "
							"le_prune_history().",
							&le_history_retention_s,
							7 * 24 * 3600, 0, PG_INT32_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	le_reserve_guc_prefix("leader_election");
}
