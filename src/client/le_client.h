/*-------------------------------------------------------------------------
 *
 * le_client.h
 *		libpq client of the leader_election extension: an elector that
 *		campaigns for a lease, renews it on its own thread and connection,
 *		and ends leadership locally at a safety deadline; and a member of a
 *		partition group, with a local deadline per partition.
 *
 * The invariant: le_elector_is_leader() is true only before the local
 * safety deadline of the current period, (send time of the last confirmed
 * acquire or renewal) + ttl - safety margin, checked against the clock on
 * every call.  Per period the callbacks come in the order on_started(N),
 * on_new_leader, on_renewed(N)..., on_stopped(N), and on_stopped(N) comes
 * before on_started(N+1).  The elector's threads, its periods and the
 * rules for callbacks are described in the "src/client" section of
 * src/README.md and above the callback types below.
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

/*
 * 2: le_elector_period_fd, le_elector_request_stop, le_result_name, le_exec,
 * le_status.last_error and the result codes after LE_ERR_SYSTEM.
 * 3: le_config.defer_release and le_elector_release_period.
 * 4: partition group members (le_group_member_*), LE_STOP_REVOKED.
 */
#define LE_CLIENT_API_VERSION 4

/* Result codes of the functions below. */
typedef enum le_result
{
	LE_OK = 0,
	LE_ERR_CONFIG,				/* invalid configuration or argument */
	LE_ERR_CONNECT,				/* the server could not be reached or refused us */
	LE_ERR_NO_EXTENSION,		/* extension leader_election is not installed */
	LE_ERR_SQL,					/* the server reported an error */
	LE_ERR_SYSTEM,				/* thread, memory or other operating system error */
	LE_ERR_PERMISSION,			/* permission denied (SQLSTATE 42501) */
	LE_ERR_READ_ONLY,			/* connected to a standby / read-only (25006) */
	LE_ERR_TIMEOUT,				/* a statement or connect missed its deadline */
	LE_ERR_OWNER_CONFLICT,		/* another process holds the lease with our owner id */
	LE_ERR_HELD					/* not an error: the lease is held by another owner */
} le_result;

/* Why a leadership period ended. */
typedef enum le_stop_reason
{
	LE_STOP_LOST,				/* le_renew returned NULL: someone else holds the lease */
	LE_STOP_RENEW_FAILED,		/* le_renew failed with an error retrying cannot fix */
	LE_STOP_DEADLINE_PASSED,	/* no renewal confirmed before the local deadline */
	LE_STOP_RELEASED,			/* le_elector_resign(): we gave it up */
	LE_STOP_SHUTDOWN,			/* le_elector_stop() */
	LE_STOP_REVOKED				/* group: the server moves the partition to another member */
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

/*
 * Callbacks run on the dispatcher thread, never two at a time.  They may
 * call le_elector_is_leader(), le_elector_status(), le_elector_resign()
 * (it does not wait then) and le_elector_request_stop(); le_elector_stop()
 * from a callback only requests the stop (it cannot join its own thread);
 * le_elector_destroy() must not be called from a callback.  Strings passed
 * to callbacks contain no control characters.
 */
typedef void (*le_started_cb) (void *arg, const le_lease_info *lease);
typedef void (*le_stopped_cb) (void *arg, const le_lease_info *lease,
							   le_stop_reason reason, const char *detail);
typedef void (*le_renewed_cb) (void *arg, const le_lease_info *lease);
/*
 * A new holder was seen (read from the server, never taken from a
 * notification): another owner, ourselves when a period begins, or holder
 * NULL when the lease is free.  token is -1 when the holder is known but
 * its token is not.
 */
typedef void (*le_new_leader_cb) (void *arg, const char *holder, int64_t token,
								  const char *expires_at);
/* Connection trouble, retries and other things worth a log line. */
typedef void (*le_notice_cb) (void *arg, const char *message);

/* Configuration; fill with le_config_init() and override what you need. */
typedef struct le_config
{
	const char *conninfo;		/* libpq connection string or URI ("" = PG* env) */
	const char *lease_key;		/* required */
	const char *owner_id;		/* NULL: "<host>-<pid>-<48 random bits>"; must be
								 * unique per process (see LE_ERR_OWNER_CONFLICT) */
	int64_t		ttl_ms;			/* default 15000 */
	int64_t		renew_ms;		/* default ttl/3; must be <= (ttl - margin) / 2 */
	int64_t		retry_ms;		/* default 2000; campaign interval while not leading */
	int			retry_jitter_pct;	/* default 20: each wait is retry +/- up to 20% */
	int64_t		safety_margin_ms;	/* default max(ttl/10, 50 ms); < ttl/2 */
	int64_t		connect_timeout_ms; /* default 5000 */
	int64_t		statement_timeout_ms;	/* default 5000; renewals also stop at the deadline */
	int64_t		renew_by_ms;	/* default 0: a renewal must be confirmed this long
								 * before the local deadline to be of use (pg_leader:
								 * its SIGTERM point); each renewal attempt gets at
								 * most half the time left until then (but not
								 * less than twice the last round trip), and
								 * renew_ms <= (ttl - margin - renew_by_ms) / 2
								 * (its default: a third of that) */

	/*
	 * When a period ends by itself (renew_failed, deadline_passed), the
	 * elector normally releases the lease at once.  With defer_release it
	 * neither releases it nor campaigns again until the caller calls
	 * le_elector_release_period() (or resigns or stops): for callers whose
	 * work under the lease takes a while to stop.
	 */
	bool		defer_release;

	le_started_cb on_started;
	le_stopped_cb on_stopped;
	le_renewed_cb on_renewed;
	le_new_leader_cb on_new_leader;
	le_notice_cb on_notice;
	void	   *cb_arg;

	/*
	 * JSON published with each grant (le_leases.metadata; needs extension
	 * 1.1 on the server), NULL: none.  Checked by le_elector_start: invalid
	 * JSON or a 1.0 server is LE_ERR_CONFIG.
	 */
	const char *metadata;

	/*
	 * Each le_acquire is a single try (no wait inside the server), for a
	 * caller that wants one attempt's answer at once.
	 */
	bool		single_try;
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
	le_result	last_error;		/* outcome of the last acquire/renew attempt: LE_OK,
								 * LE_ERR_HELD, LE_ERR_PERMISSION, LE_ERR_READ_ONLY,
								 * LE_ERR_TIMEOUT, LE_ERR_CONNECT, LE_ERR_SQL, ... */
	char		last_sqlstate[6];	/* its SQLSTATE, "" if none */
	char		last_message[256];	/* its message (holder for LE_ERR_HELD) */
	uint64_t	owner_conflicts;	/* grants refused: our owner id was in use */
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

/*
 * Wait up to timeout_ms for the first acquire attempt to be answered or to
 * fail (then le_elector_status() tells why: last_error).
 */
extern bool le_elector_wait_attempt(le_elector *e, int64_t timeout_ms);

/* Copy the elector's state (see le_status). */
extern void le_elector_status(le_elector *e, le_status *st);

/* The owner id in use (generated when not configured). */
extern const char *le_elector_owner_id(le_elector *e);

/*
 * Give up leadership now (stop reason "released"), release the lease so a
 * follower takes over at once, and campaign again after one retry
 * interval.  Returns once the release was attempted (at once when called
 * from a callback).
 */
extern void le_elector_resign(le_elector *e);

/*
 * Stop campaigning; when leading, end leadership (reason "shutdown") at
 * once and release the lease.  Joins the threads and delivers the
 * callbacks still queued (on_stopped included) before it returns; takes
 * at most about the connect plus the statement timeout (longer only if a
 * DNS lookup hangs).  From a callback it only requests the stop.
 */
extern void le_elector_stop(le_elector *e);

/*
 * Request a stop without waiting (for event loops and callbacks): ends
 * leadership at once (reason "shutdown") and tells the threads to release
 * and end.  le_elector_stop() or le_elector_destroy() later joins them.
 */
extern void le_elector_request_stop(le_elector *e);

/*
 * A pollable handle on the current leadership period: a new file
 * descriptor (an eventfd, close it when done) that becomes readable when
 * this period ends, for whatever reason, including its deadline passing.
 * Fills *lease if given.  Returns -1 (errno ENOENT) when not leading.
 */
extern int	le_elector_period_fd(le_elector *e, le_lease_info *lease);

/*
 * With defer_release: release the lease of a period that ended by itself
 * and campaign again.  Does nothing when no
 * release is held back.  Does not wait for the release.
 */
extern void le_elector_release_period(le_elector *e);

/* Free the elector (stops it first if needed); never from a callback. */
extern void le_elector_destroy(le_elector *e);

/* Name of a result code: "ok", "connect", "permission_denied", "read_only", "timeout", ... */
extern const char *le_result_name(le_result rc);

/* Name of a stop reason: "lost", "renew_failed", "deadline_passed", "released", "shutdown". */
extern const char *le_stop_reason_name(le_stop_reason reason);

/*
 * Parse a duration such as "15s", "500ms", "2m", "1h" or "1.5s" into
 * milliseconds.  A unit is required.  Returns false on bad input.
 */
extern bool le_parse_duration_ms(const char *text, int64_t *ms);

/*
 * Is s well-formed UTF-8?  Lease keys and owner ids must be (the server
 * rejects anything else with SQLSTATE 22021); le_elector_create checks.
 */
extern bool le_valid_utf8(const char *s);

/*
 * Connect within timeout_ms (a connection string or URI; "" uses the PG*
 * environment), with the elector's defaults (TCP keepalives,
 * tcp_user_timeout, target_session_attrs=read-write for several hosts)
 * unless the DSN sets them, in non-blocking mode (PQexec still works, it
 * blocks), and check that extension leader_election is installed;
 * its schema is copied to schema.  LE_ERR_CONNECT or LE_ERR_NO_EXTENSION
 * with a message in err on failure.  appname is the fallback
 * application_name.
 */
extern le_result le_connect(const char *conninfo, const char *appname, int64_t timeout_ms,
							PGconn **conn, char *schema, size_t schemalen,
							char *err, size_t errlen);

/*
 * Run one parameterised statement on conn (e.g. from le_connect), waiting
 * at most timeout_ms for the whole round trip.  Returns the result (check
 * PQresultStatus; an error's message, without control characters, is in
 * err) or NULL when the connection broke or the time ran out; then the
 * connection is unusable: PQfinish it.  *timedout (if not NULL) tells
 * which.
 */
extern PGresult *le_exec(PGconn *conn, const char *sql, int nparams,
						 const char *const *values, int64_t timeout_ms,
						 char *err, size_t errlen, bool *timedout);

/* Milliseconds on a clock that never goes back and keeps counting in suspend. */
extern int64_t le_monotonic_ms(void);

/*
 * Partition groups.  A group member heartbeats le_group_heartbeat(group,
 * member, ttl) on a thread and connection of its own and works on the
 * partitions the server assigns to it.  Each partition it owns has a local
 * deadline, like an elector's period: (send time of the last heartbeat
 * that renewed it) + ttl - safety margin.  A partition is revoked locally
 * when the server says "revoke" (LE_STOP_REVOKED), when a heartbeat no
 * longer lists it (LE_STOP_LOST), when renew_by_ms before its deadline no
 * heartbeat renewed it (LE_STOP_DEADLINE_PASSED), when heartbeats fail
 * with an error retrying cannot fix (LE_STOP_RENEW_FAILED) or at a stop
 * (LE_STOP_SHUTDOWN).  A revoked partition's lease is released only after
 * its on_revoked returned (with defer_release: after
 * le_group_member_release) or its deadline passed (not with
 * defer_release); one that is no longer ours is not released.
 */

/* Longest lease key of a partition: "le:group:" + 63 + ":" + 5 digits. */
#define LE_PARTITION_KEY_LEN 96

/* A partition as callbacks and le_group_member_partitions() see it. */
typedef struct le_partition_info
{
	int			partition;		/* 0 .. partitions - 1 */
	char		lease_key[LE_PARTITION_KEY_LEN];	/* le:group:<group>:<partition> */
	int64_t		fencing_token;	/* pass it to every fenced write */
	char		expires_at[64]; /* server's expiry, ISO 8601 in UTC */
	int64_t		deadline_ms;	/* local deadline on the le_monotonic_ms() clock:
								 * work on it must have stopped by then */
	bool		owned;			/* owned, not revoked, before its deadline */
} le_partition_info;

/*
 * Callbacks run on the member's dispatcher thread, never two at a time;
 * per partition and token on_assigned comes first, on_revoked last, and
 * on_revoked of a token comes before on_assigned of the next token of
 * that partition.  They may call le_group_member_owns(),
 * le_group_member_partitions(), le_group_member_status(),
 * le_group_member_release() and le_group_member_request_stop().
 */
typedef void (*le_assigned_cb) (void *arg, const le_partition_info *p);
typedef void (*le_revoked_cb) (void *arg, const le_partition_info *p,
							   le_stop_reason reason, const char *detail);

/* Configuration of a group member; fill with le_group_config_init(). */
typedef struct le_group_config
{
	const char *conninfo;		/* libpq connection string or URI ("" = PG* env) */
	const char *group_name;		/* required: a group made by le_group_create */
	const char *member_id;		/* NULL: "<host>-<pid>-<48 random bits>"; 1..120
								 * bytes, unique per process */
	int64_t		ttl_ms;			/* default 15000 */
	int64_t		heartbeat_ms;	/* default a third of ttl - margin - renew_by;
								 * at most half of it */
	int64_t		retry_ms;		/* default 2000: pause after an error retrying
								 * cannot fix, doubled per failure (at most 30 s) */
	int			retry_jitter_pct;	/* default 20 */
	int64_t		safety_margin_ms;	/* default max(ttl/10, 50 ms); < ttl/2 */
	int64_t		connect_timeout_ms; /* default 5000 */
	int64_t		statement_timeout_ms;	/* default 5000; heartbeats also stop at
										 * the deadline */
	int64_t		renew_by_ms;	/* default 0: a partition not renewed this long
								 * before its deadline is revoked then (pg_leader:
								 * its SIGTERM point) */
	bool		defer_release;	/* release a revoked partition only when the
								 * caller calls le_group_member_release() */
	le_assigned_cb on_assigned;
	le_revoked_cb on_revoked;
	le_notice_cb on_notice;
	void	   *cb_arg;
} le_group_config;

/* Snapshot of a member's state (le_group_member_status). */
typedef struct le_group_status
{
	bool		member;			/* the membership is valid by the local clock */
	int64_t		member_token;	/* fencing token of the membership (0: none yet) */
	int64_t		deadline_ms;	/* the membership's local deadline */
	uint64_t	heartbeats;		/* heartbeat attempts answered or failed */
	bool		connected;
	int			owned;			/* partitions owned now */
	int			revoking;		/* revoked, not yet released or handed back */
	int			pending;		/* assigned to us, still held by another member */
	le_result	last_error;		/* outcome of the last heartbeat */
	bool		last_permanent; /* ... an error that retrying cannot fix */
	char		last_sqlstate[6];
	char		last_message[256];
	uint64_t	owner_conflicts;	/* joins refused: our member id was in use */
} le_group_status;

typedef struct le_group_member le_group_member;

/* Fill cfg with defaults (everything zero, timings as documented above). */
extern void le_group_config_init(le_group_config *cfg);

/* Validate cfg and build a member; NULL with a message in err on failure. */
extern le_group_member *le_group_member_create(const le_group_config *cfg, char *err,
											   size_t errlen);

/*
 * Connect, check that the extension is installed, and start heartbeating.
 * LE_ERR_CONNECT or LE_ERR_NO_EXTENSION (message in err) when the first
 * connection fails; later losses are retried.
 */
extern le_result le_group_member_start(le_group_member *m, char *err, size_t errlen);

/* Wait up to timeout_ms (-1: forever) for the first heartbeat to be answered or to fail. */
extern bool le_group_member_wait_heartbeat(le_group_member *m, int64_t timeout_ms);

/* True while we own partition (not revoked, before its deadline); fills *info if given. */
extern bool le_group_member_owns(le_group_member *m, int partition, le_partition_info *info);

/*
 * The partitions we hold, ascending (owned, and revoked ones not yet
 * released): fills up to max of them into out and returns how many
 * there are.
 */
extern int	le_group_member_partitions(le_group_member *m, le_partition_info *out, int max);

/* Copy the member's state. */
extern void le_group_member_status(le_group_member *m, le_group_status *st);

/* The member id in use (generated when not configured). */
extern const char *le_group_member_id(le_group_member *m);

/*
 * With defer_release: the work on revoked partition "partition", token
 * "token", has stopped; release its lease.  True when it will be
 * released; false when no such revoked partition is held, it was handed
 * back already, or it is not ours to release (LE_STOP_LOST).  Does not
 * wait for the release.
 */
extern bool le_group_member_release(le_group_member *m, int partition, int64_t token);

/*
 * Leave without waiting: revoke every partition (LE_STOP_SHUTDOWN), stop
 * heartbeating and, once every on_revoked returned (or its partition's
 * deadline passed), release everything with le_group_leave.
 * le_group_member_stop() or le_group_member_destroy() later joins.
 */
extern void le_group_member_request_stop(le_group_member *m);

/*
 * Leave (as le_group_member_request_stop) and wait for it: joins the
 * threads and delivers the callbacks still queued.  From a callback it
 * only requests the stop.  Call it once the work on every partition has
 * stopped: with defer_release too, the leave releases them all.
 */
extern void le_group_member_stop(le_group_member *m);

/* Free the member (stops it first if needed); never from a callback. */
extern void le_group_member_destroy(le_group_member *m);

#ifdef __cplusplus
}
#endif

#endif							/* LE_CLIENT_H */
