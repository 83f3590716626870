/*-------------------------------------------------------------------------
 *
 * leader_election.c
 *		Module initialisation and settings of the leader_election extension.
 *
 * The module starts no background worker and all lease state is in the
 * extension's tables, so _PG_init defines settings and, when the module is
 * in shared_preload_libraries, asks for the shared memory of the refusal
 * counters (metrics.c).  Settings are documented in doc/reference.md.
 *
 * Invariant: nothing but per-backend caches and those counters lives
 * outside the tables, so a crash or restart loses nothing that a lease
 * depends on.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
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

/* Whether new ownership periods are recorded in le_lease_history. */
bool		le_history_enabled = true;

/* Which lease changes are announced with NOTIFY (LE_NOTIFY_*). */
int			le_notify_events = LE_NOTIFY_RELEASES;

static const struct config_enum_entry le_notify_options[] = {
	{"all", LE_NOTIFY_ALL, false},
	{"releases", LE_NOTIFY_RELEASES, false},
	{"none", LE_NOTIFY_NONE, false},
	{NULL, 0, false}
};

/*
 * leader_election.fencing_token: the token a transaction's DELETEs and
 * TRUNCATEs of fenced tables carry (meant for SET LOCAL); the text as set,
 * and its value (0 when unset) for the fence.
 */
static char *le_fencing_token_string = NULL;
int64		le_fencing_token_setting = 0;

void		_PG_init(void);

/* Accept an empty leader_election.fencing_token or a positive bigint. */
static bool
le_fencing_token_check(char **newval, void **extra, GucSource source)
{
	int64	   *parsed;
	int64		value = 0;

	if (*newval != NULL && (*newval)[0] != '\0')
	{
		char	   *end;

		errno = 0;
		value = strtoi64(*newval, &end, 10);
		if (errno != 0 || *end != '\0' || end == *newval || value <= 0)
		{
			GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
			GUC_check_errdetail("A fencing token is a positive bigint, or empty for none.");
			return false;
		}
	}
	parsed = (int64 *) malloc(sizeof(int64));	/* freed by the GUC machinery */
	if (parsed == NULL)
		return false;
	*parsed = value;
	*extra = parsed;
	return true;
}

/* Remember the parsed value of leader_election.fencing_token. */
static void
le_fencing_token_assign(const char *newval, void *extra)
{
	le_fencing_token_setting = *(int64 *) extra;
}

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

	DefineCustomEnumVariable("leader_election.notify",
							 "Which lease changes are announced on channel leader_election.",
							 "releases (default): releases and force releases, so followers "
							 "campaign at once, while grants commit without the notification "
							 "queue's lock, which serialises committers; all: grants too; "
							 "none: nothing, followers poll.",
							 &le_notify_events,
							 LE_NOTIFY_RELEASES,
							 le_notify_options,
							 PGC_SUSET,
							 0,
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

	DefineCustomBoolVariable("leader_election.history",
							 "Records every new ownership period in le_lease_history.",
							 "off: a grant writes no history row, and the end of a period "
							 "granted so writes none either; rows already there are closed "
							 "and pruned as before.",
							 &le_history_enabled,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("leader_election.fencing_token",
							   "Fencing token carried by DELETE and TRUNCATE on fenced tables.",
							   "Set it with SET LOCAL in the transaction that deletes or truncates; "
							   "when set, INSERT and UPDATE rows must carry the same token.",
							   &le_fencing_token_string,
							   "",
							   PGC_USERSET,
							   0,
							   le_fencing_token_check, le_fencing_token_assign, NULL);

	le_reserve_guc_prefix("leader_election");

	le_fence_register_callbacks();
	le_metrics_init();
}
