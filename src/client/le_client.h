/*-------------------------------------------------------------------------
 *
 * le_client.h
 *		libpq client of the leader_election extension: an elector that
 *		campaigns for a lease, renews it on its own thread and connection,
 *		and ends leadership locally at a safety deadline.
 *
 * An elector owns two threads, each with its own connection:
 *
 *	- the campaign thread LISTENs on channel "leader_election", calls
 *	  le_acquire while not leading (at once when a release is announced,
 *	  otherwise every retry interval with jitter), reports new leaders,
 *	  and releases the lease on resign or stop;
 *	- the renewal thread calls le_renew every renew interval while leading.
 *
 * The local safety deadline of a leadership period is
 *	(monotonic time when the last confirmed acquire/renew was SENT)
 *	+ ttl - safety margin.
 * le_elector_is_leader() compares it with the clock on every call, so a
 * caller learns that leadership ended even before any thread has run (for
 * example right after the process was resumed from SIGSTOP).  Leadership
 * also ends when a renewal returns NULL (the lease is no longer ours) or
 * fails with an error that retrying cannot fix.  A token, once lost, is
 * never used again: if the server hands it back (it still believes we hold
 * it), the elector releases it and acquires a fresh one.
 *
 * Callbacks run on the elector's threads; they must return quickly and must
 * not call le_elector_stop() or le_elector_destroy().
 *
 *-------------------------------------------------------------------------
 */
#ifndef LE_CLIENT_H
#define LE_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#ifdef __cplusplus
extern "C"
{
#endif

/* Result codes of the functions below. */
typedef enum le_result
{
	LE_OK = 0,
	LE_ERR_CONFIG,				/* invalid configuration or argument */
	LE_ERR_CONNECT,				/* the server could not be reached or refused us */
	LE_ERR_NO_EXTENSION,		/* extension leader_election is not installed */
	LE_ERR_SQL,					/* the server reported an error */
	LE_ERR_SYSTEM				/* thread, memory or other operating system error */
} le_result;

/* Why a leadership period ended. */
typedef enum le_stop_reason
{
	LE_STOP_LOST,				/* le_renew returned NULL: someone else holds the lease */
	LE_STOP_RENEW_FAILED,		/* le_renew failed with an error retrying cannot fix */
	LE_STOP_DEADLINE_PASSED,	/* no renewal confirmed before the local deadline */
	LE_STOP_RELEASED,			/* le_elector_resign(): we gave it up */
	LE_STOP_SHUTDOWN			/* le_elector_stop() */
} le_stop_reason;

/* A leadership period as callbacks and le_elector_is_leader() see it. */
typedef struct le_lease_info
{
	const char *lease_key;
	const char *owner_id;
	int64_t		fencing_token;
	char		expires_at[64]; /* server's expiry, ISO 8601 in UTC */
	int64_t		deadline_ms;	/* local deadline on the le_monotonic_ms() clock */
	uint64_t	period;			/* counts leadership periods of this elector, from 1 */
} le_lease_info;

typedef void (*le_started_cb) (void *arg, const le_lease_info *lease);
typedef void (*le_stopped_cb) (void *arg, const le_lease_info *lease,
							   le_stop_reason reason, const char *detail);
typedef void (*le_renewed_cb) (void *arg, const le_lease_info *lease);
/* token is -1 when the holder is known but its token is not; holder NULL: lease free */
typedef void (*le_new_leader_cb) (void *arg, const char *holder, int64_t token,
								  const char *expires_at);
/* Connection trouble, retries and other things worth a log line. */
typedef void (*le_notice_cb) (void *arg, const char *message);

/* Configuration; fill with le_config_init() and override what you need. */
typedef struct le_config
{
	const char *conninfo;		/* libpq connection string or URI ("" = PG* env) */
	const char *lease_key;		/* required */
	const char *owner_id;		/* NULL: "<host>-<pid>-<random>" */
	int64_t		ttl_ms;			/* default 15000 */
	int64_t		renew_ms;		/* default ttl/3; must be <= (ttl - margin) / 2 */
	int64_t		retry_ms;		/* default 2000; campaign interval while not leading */
	int			retry_jitter_pct;	/* default 20: each wait is retry +/- up to 20% */
	int64_t		safety_margin_ms;	/* default max(ttl/10, 50 ms); < ttl/2 */
	int64_t		connect_timeout_ms; /* default 5000 */
	int64_t		statement_timeout_ms;	/* default 5000; renewals also stop at the deadline */

	le_started_cb on_started;
	le_stopped_cb on_stopped;
	le_renewed_cb on_renewed;
	le_new_leader_cb on_new_leader;
	le_notice_cb on_notice;
	void	   *cb_arg;
} le_config;

/* Snapshot of an elector's state (le_elector_status). */
typedef struct le_status
{
	bool		leading;		/* same test as le_elector_is_leader() */
	int64_t		fencing_token;	/* of the current or last period, 0 if none */
	uint64_t	period;
	uint64_t	attempts;		/* acquire calls answered so far */
	bool		connected;		/* campaign connection is up */
	char		holder[256];	/* last holder observed ("" if none or unknown) */
	char		expires_at[64];
} le_status;

typedef struct le_elector le_elector;

/* Fill cfg with defaults (everything zero, timings as documented above). */
extern void le_config_init(le_config *cfg);

/* Validate cfg and build an elector; NULL with a message in err on failure. */
extern le_elector *le_elector_create(const le_config *cfg, char *err, size_t errlen);

/*
 * Connect, check that the extension is installed, and start campaigning.
 * Returns LE_ERR_CONNECT or LE_ERR_NO_EXTENSION (with a message in err)
 * when the first connection fails; later connection losses are retried.
 */
extern le_result le_elector_start(le_elector *e, char *err, size_t errlen);

/* True while leading and before the local deadline; fills *lease if given. */
extern bool le_elector_is_leader(le_elector *e, le_lease_info *lease);

/* Wait up to timeout_ms (-1: forever) for leadership; true if leading. */
extern bool le_elector_wait_leader(le_elector *e, int64_t timeout_ms);

/* Wait up to timeout_ms for the first acquire attempt to be answered. */
extern bool le_elector_wait_attempt(le_elector *e, int64_t timeout_ms);

extern void le_elector_status(le_elector *e, le_status *st);

/* The owner id in use (generated when not configured). */
extern const char *le_elector_owner_id(le_elector *e);

/*
 * Give up leadership now (stop reason "released"), release the lease so a
 * follower takes over at once, and campaign again after one retry
 * interval.  Returns once the release was attempted.
 */
extern void le_elector_resign(le_elector *e);

/*
 * Stop campaigning; when leading, end leadership (reason "shutdown") and
 * release the lease.  Joins the threads; bounded by the statement timeout.
 */
extern void le_elector_stop(le_elector *e);

/* Free the elector (stops it first if needed). */
extern void le_elector_destroy(le_elector *e);

/* Name of a stop reason: "lost", "renew_failed", "deadline_passed", "released", "shutdown". */
extern const char *le_stop_reason_name(le_stop_reason reason);

/*
 * Parse a duration such as "15s", "500ms", "2m", "1h" or "1.5s" into
 * milliseconds.  A unit is required.  Returns false on bad input.
 */
extern bool le_parse_duration_ms(const char *text, int64_t *ms);

/*
 * Connect within timeout_ms (a connection string or URI; "" uses the PG*
 * environment) and check that extension leader_election is installed;
 * its schema is copied to schema.  LE_ERR_CONNECT or LE_ERR_NO_EXTENSION
 * with a message in err on failure.  appname is the fallback
 * application_name.
 */
extern le_result le_connect(const char *conninfo, const char *appname, int64_t timeout_ms,
							PGconn **conn, char *schema, size_t schemalen,
							char *err, size_t errlen);

/* Milliseconds on a clock that never goes back and keeps counting in suspend. */
extern int64_t le_monotonic_ms(void);

#ifdef __cplusplus
}
#endif

#endif							/* LE_CLIENT_H */
