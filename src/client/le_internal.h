/*-------------------------------------------------------------------------
 *
 * le_internal.h
 *		Internals of the leader_election client library, shared by its
 *		files (not installed): le_util.c (clocks, strings, durations),
 *		le_conn.c (connections and statements with deadlines), le_notify.c
 *		(NOTIFY payloads), le_period.c (period state machine, timer and
 *		dispatcher threads), le_campaign.c, le_renew.c and le_client.c.
 *
 * Locking rules.  All shared state of an elector lives in struct le_elector
 * and is read and written only under e->mu, except the fields marked
 * "immutable" (set before the threads start).  Period transitions are made
 * only by the functions of le_period.c, under e->mu.  No lock is ever held
 * across network I/O or a callback; each libpq connection is owned by one
 * thread.  Waits on e->cv: see "src/client" in src/README.md.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LE_INTERNAL_H
#define LE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "le_client.h"

#define pg_attribute_printf_le(f, a) __attribute__((format(printf, f, a)))

#define LE_MAX_KEY_LEN		200
#define LE_MAX_OWNER_LEN	200
#define LE_MAX_PARTITIONS	16384	/* of a group, as the server allows */
#define LE_CHANNEL			"leader_election"
#define LE_WAIT_SLICE_MS	100		/* longest single condvar/poll wait */
#define LE_QUEUE_LEN		128		/* callback events waiting for the dispatcher */
#define LE_DETAIL_LEN		600
#define LE_BACKOFF_CAP_MS	30000	/* longest pause after repeated errors */

/*
 * Least time between two queries caused by notifications (an early
 * renewal, a read of the lease, an early le_acquire): a flood of forged
 * notifications costs at most this rate of queries per connection.
 */
#define LE_HINT_GAP_MS		100

/* Expression turning a timestamptz into ISO 8601 UTC text. */
#define LE_ISO(x) "pg_catalog.to_char(pg_catalog.timezone('UTC', " x "), " \
	"'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

/*
 * Condition: the function whose OID expression oid is (a regprocedure) is
 * a member of extension leader_election.  pg_catalog objects only, each
 * named with its schema, so that no role's objects take part.
 */
#define LE_MEMBER(oid) "EXISTS (SELECT FROM pg_catalog.pg_depend p" \
	" JOIN pg_catalog.pg_extension x ON x.oid OPERATOR(pg_catalog.=) p.refobjid" \
	" WHERE p.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass" \
	" AND p.objid OPERATOR(pg_catalog.=) " oid \
	" AND p.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass" \
	" AND p.deptype OPERATOR(pg_catalog.=) 'e'" \
	" AND x.extname OPERATOR(pg_catalog.=) 'leader_election')"

/* Kinds of callback events. */
typedef enum le_event_kind
{
	LE_EV_STARTED,
	LE_EV_RENEWED,
	LE_EV_STOPPED,
	LE_EV_NEW_LEADER,
	LE_EV_NOTICE
} le_event_kind;

/* One queued callback. */
typedef struct le_event
{
	le_event_kind kind;
	le_lease_info info;			/* STARTED, RENEWED, STOPPED */
	le_stop_reason reason;		/* STOPPED */
	bool		has_holder;		/* NEW_LEADER: false = lease free */
	char		holder[LE_MAX_OWNER_LEN + 1];	/* NEW_LEADER */
	int64_t		token;			/* NEW_LEADER */
	char		text[LE_DETAIL_LEN];	/* STOPPED detail, NOTICE text, NEW_LEADER expiry */
} le_event;

/*
 * The outcome of the last attempt (acquire, renewal, heartbeat) as
 * le_status and le_group_status report it.
 */
typedef struct le_errinfo
{
	le_result	rc;
	char		sqlstate[6];	/* "" if none */
	char		message[256];	/* without control characters */
} le_errinfo;

/* Leadership states of the period state machine. */
typedef enum le_state
{
	LE_FOLLOWING,
	LE_LEADING
} le_state;

struct le_elector
{
	/* immutable after le_elector_create / le_elector_start */
	le_config	cfg;
	char	   *conninfo;
	char	   *lease_key;
	char	   *owner_id;
	char	   *metadata;		/* cfg.metadata copied, or NULL */
	char		ttl_text[48];	/* ttl as an interval literal */
	const char **conn_kw;		/* connection keywords (DSN + defaults) */
	const char **conn_val;
	char		ext_schema[256];	/* the extension's schema on the first connection */
	/* each call's signature, for le_exec_gated (and sql_has_wait) */
	char	   *sql_acquire;
	char	   *sig_acquire;
	char	   *sql_acquire_wait;	/* with a server-side wait (1.1) */
	char	   *sig_acquire_wait;
	char	   *sql_has_wait;	/* is the 1.1 le_acquire the extension's? */
	char	   *sql_renew;
	char	   *sig_renew;
	char	   *sql_release;
	char	   *sig_release;
	char	   *sql_observe;
	char	   *sql_watch;
	char	   *sig_watch;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	int			wake[2];		/* wakes the campaign thread out of poll() */
	int			timer_fd;		/* timerfd on CLOCK_BOOTTIME: the deadline */
	int			timer_wake;		/* eventfd: wakes the timer thread */

	/* everything below is protected by mu */
	bool		started;
	bool		stopped;
	bool		quit;			/* threads must end */
	bool		dispatch_quit;	/* dispatcher ends once the queue is empty */
	uint64_t	resign_requested;
	uint64_t	resign_done;

	le_state	state;
	uint64_t	period;
	int64_t		token;
	int64_t		deadline;		/* le_monotonic_ms() */
	int64_t		last_send;		/* send time of the last confirmed acquire/renew */
	char		expires_at[64];
	int			period_fd;		/* eventfd of the current/last period, -1 none */
	bool		renew_now;		/* a hint that the lease may be lost: confirm now */
	int64_t		lost_token;		/* highest token we lost: never use it again */
	int64_t		pending_release;	/* token to release best-effort, 0 = none */
	bool		release_held;	/* defer_release: pending_release waits for the caller */

	uint64_t	attempts;
	bool		connected;
	bool		have_holder;	/* holder/holder_token describe a lease seen */
	char		holder[LE_MAX_OWNER_LEN + 1];
	int64_t		holder_token;
	uint64_t	owner_conflicts;	/* grants refused: another process has our owner id */
	bool		own_owner_id;	/* owner_id made by le_default_id, unique to us */
	le_errinfo	last;			/* of the last acquire/renew attempt */

	le_event	queue[LE_QUEUE_LEN];
	unsigned	q_head;			/* next to deliver */
	unsigned	q_len;
	uint64_t	dropped;		/* notices dropped for a full queue */
	bool		dispatching;	/* the dispatcher is inside a callback */

	uint64_t	rng;			/* jitter; campaign thread only */

	pthread_t	camp_thread;
	pthread_t	renew_thread;
	pthread_t	timer_thread;
	pthread_t	dispatch_thread;
	bool		have_timer;
	bool		have_dispatch;
	PGconn	   *camp_conn;		/* handed from le_elector_start to the campaign thread */
};

/* le_util.c */
extern void le_errinfo_set(le_errinfo *ei, le_result rc, const char *sqlstate, const char *msg);
extern void le_errinfo_get(const le_errinfo *ei, le_result *rc, char sqlstate[6], char message[256]);
extern void le_set_err(char *err, size_t errlen, const char *fmt,...)
			pg_attribute_printf_le(3, 4);
extern void le_copy_str(char *dst, size_t len, const char *src);
extern void le_copy_msg(char *dst, size_t len, const char *msg);
extern void le_sanitize(char *s);
extern uint64_t le_random_u64(void);
extern uint64_t le_next_rand(uint64_t *state);
extern int64_t le_jittered(uint64_t *rng, int64_t ms, int pct);
extern void le_cv_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until);
extern void le_block_signals(void);
extern int64_t le_attempt_deadline(int64_t renew_by_ms, int64_t now, int64_t deadline,
								   int64_t cap, int64_t floor);
extern int64_t le_retry_pause(int64_t renew_ms, int64_t deadline);
extern int64_t le_backoff_ms(uint64_t *rng, int64_t retry_ms, int jitter_pct, int failures,
							 bool connect_failed);
extern void le_arm_timer(int fd, int64_t at);
extern bool le_timer_open(int *timer_fd, int *wake_fd);
extern void le_timer_wake(int wake_fd);
extern void le_timer_sleep(int timer_fd, int wake_fd, int64_t at);
extern void le_default_id(char *buf, size_t len);
extern void le_sync_init(pthread_mutex_t *mu, pthread_cond_t *cv);
extern bool le_sql_release(bool ok, char **sql, char **sig, const char *q);
extern bool le_sql_text(bool ok, char **dst, const char *fmt, const char *q)
			__attribute__((format(printf, 3, 0)));
extern bool le_stop_claim(bool started, bool *stopped, bool have_dispatch, pthread_t dispatcher);
extern bool le_check_timing(int64_t ttl_ms, int64_t *margin_ms, int64_t *renew_ms,
							int64_t renew_by_ms, int64_t retry_ms, int jitter_pct,
							int64_t connect_ms, int64_t statement_ms, const char *what,
							char *err, size_t errlen);

/* le_conn.c */
typedef enum le_errclass
{
	LE_EC_OK,					/* no error */
	LE_EC_TRANSIENT,			/* retry on the same connection */
	LE_EC_RECONNECT,			/* retry on a new connection (standby, broken) */
	LE_EC_PERMANENT				/* retrying cannot fix it */
} le_errclass;

extern le_result le_build_conn_params(const char *conninfo, int64_t ttl_ms,
									  int64_t stmt_ms, const char ***kw,
									  const char ***val, char *err, size_t errlen);
extern void le_free_conn_params(const char **kw, const char **val);
extern int	le_wait_fd(int fd, bool for_write, int64_t deadline);
extern PGconn *le_connect_params(const char *const *kw, const char *const *val,
								 int64_t deadline, char *err, size_t errlen, bool *timedout);
extern le_result le_open_conn_kw(const char *const *kw, const char *const *conn_val,
								 const char *role, int64_t deadline, const char *expect,
								 PGconn **out, char *schema, size_t schemalen, char *err,
								 size_t errlen);
extern le_result le_first_conn(const char *const *kw, const char *const *conn_val,
							   const char *role, int64_t timeout_ms, PGconn **out,
							   char *schema, size_t schemalen, char *q, size_t qlen,
							   char *err, size_t errlen);
extern le_result le_check_extension(PGconn *c, int64_t deadline, const char *expect,
									char *schema, size_t schemalen, char *err, size_t errlen);
extern PGresult *le_exec_bounded(PGconn *c, const char *sql, int nparams,
								 const char *const *values, int64_t deadline,
								 char *err, size_t errlen, bool *broken, bool *timedout);
extern PGresult *le_exec_gated(PGconn *c, const char *sig, const char *sql, int nparams,
							   const char *const *values, int64_t deadline, char *err,
							   size_t errlen, bool *broken, bool *timedout);
extern const char *le_sqlstate_of(const PGresult *r);
extern le_errclass le_classify(const char *sqlstate);
extern le_result le_result_of_sqlstate(const char *sqlstate);
extern le_errclass le_failure_of(const PGresult *r, bool broken, bool timedout,
								 const char **state, le_result *rc);

/* le_period.c */
extern bool le_period_begin(le_elector *e, int64_t token, int64_t t_send, const char *expires_at);
extern void le_period_renewed(le_elector *e, uint64_t period, int64_t t_send, const char *expires_at);
extern bool le_period_end(le_elector *e, uint64_t period, le_stop_reason reason, const char *detail);
extern bool le_period_end_locked(le_elector *e, uint64_t period, le_stop_reason reason, const char *detail);
extern bool le_leading_now(le_elector *e);
extern void le_fill_info(le_elector *e, le_lease_info *info);
extern void le_observed(le_elector *e, bool has_holder, const char *holder, int64_t token,
						const char *expires_at);
extern void le_notice(le_elector *e, const char *fmt,...) pg_attribute_printf_le(2, 3);
extern void le_record_error(le_elector *e, le_result rc, const char *sqlstate, const char *msg);
extern bool le_queue_has_room(le_elector *e, unsigned n);
extern void le_wake_campaign(le_elector *e);
extern void le_wake_timer(le_elector *e);
extern void *le_timer_main(void *arg);
extern void *le_dispatch_main(void *arg);

/* le_campaign.c, le_renew.c */
extern void *le_campaign_main(void *arg);
extern void *le_renew_main(void *arg);
extern le_result le_open_conn(le_elector *e, const char *role, bool check, int64_t deadline,
							  PGconn **out, char *err, size_t errlen);

#endif							/* LE_INTERNAL_H */
