/*-------------------------------------------------------------------------
 *
 * le_client.c
 *		The elector of the leader_election client library (see le_client.h).
 *
 * Threads and locking rules.  An elector has two threads of its own, each
 * with its own libpq connection that no other thread touches:
 *
 *	- the campaign thread (connection "camp"): LISTEN, le_acquire,
 *	  le_release, observation of other leaders;
 *	- the renewal thread (connection "renew"): le_renew only.
 *
 * All shared state (leadership, period, token, deadline, counters, requests)
 * lives in struct le_elector and is read and written only under e->mu.
 * e->cv (on CLOCK_MONOTONIC) is broadcast on every change of that state.
 * The campaign thread also sleeps in poll() on its socket and a wake pipe,
 * which anyone writes to after changing state it must react to.  Callbacks
 * are always invoked WITHOUT e->mu held.  A leadership period is identified
 * by e->period: whoever ends it passes the period it saw, and only the first
 * end of a given period takes effect (end_leadership), so the renewal
 * thread, the campaign thread and the deadline cannot end it twice.
 *
 * Every network wait is bounded: connects by the connect timeout, queries
 * by the statement timeout and, for renewals, by the leadership deadline.
 * A query that times out abandons its connection (it is reconnected), as
 * statement_timeout on the server cannot end every kind of wait.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "le_client.h"

#define LE_MAX_KEY_LEN		200
#define LE_MAX_OWNER_LEN	200
#define LE_CHANNEL			"leader_election"
#define NAMEDATALEN_MAX		256

/* Pause between attempts to renew after a failed one (upper bound). */
#define LE_RENEW_RETRY_MS	200

/* Spread of the immediate re-campaign after a release is announced. */
#define LE_RELEASE_JITTER_MS 10

/* Expression turning a timestamptz into ISO 8601 UTC text. */
#define LE_ISO(x) "pg_catalog.to_char(pg_catalog.timezone('UTC', " x "), " \
	"'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

struct le_elector
{
	le_config	cfg;			/* callbacks and timings; strings below */
	char	   *conninfo;
	char	   *lease_key;
	char	   *owner_id;
	char		ttl_text[48];	/* ttl as an interval literal */

	/* SQL texts, schema-qualified once the extension's schema is known */
	char	   *sql_acquire;
	char	   *sql_renew;
	char	   *sql_release;
	char	   *sql_observe;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	int			wake[2];		/* wakes the campaign thread */
	uint64_t	rng;			/* jitter; campaign thread only */

	/* everything below is protected by mu */
	bool		started;
	bool		stopped;
	bool		quit;
	uint64_t	resign_requested;
	uint64_t	resign_done;

	bool		leading;
	uint64_t	period;
	int64_t		token;
	int64_t		deadline;		/* le_monotonic_ms() */
	int64_t		last_send;		/* send time of the last confirmed acquire/renew */
	char		expires_at[64];
	int64_t		lost_token;		/* highest token we lost: never use it again */
	int64_t		pending_release;	/* token to release best-effort, 0 = none */
	bool		renew_now;		/* a notification hinted at a loss: confirm at once */

	uint64_t	attempts;
	bool		connected;
	char		holder[256];
	int64_t		holder_token;

	PGconn	   *camp_conn;		/* handed from le_elector_start to the campaign thread */
	pthread_t	camp_thread;
	pthread_t	renew_thread;
};

/* ------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------
 */

/* Milliseconds on CLOCK_BOOTTIME: monotonic and counting during suspend. */
int64_t
le_monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* snprintf into an error buffer that may be NULL. */
static void
set_err(char *err, size_t errlen, const char *fmt,...)
{
	va_list		ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* Copy a string, truncating it to fit. */
static void
copy_str(char *dst, size_t len, const char *src)
{
	size_t		n = strnlen(src, len - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* Copy a libpq message without its trailing newline. */
static void
copy_msg(char *dst, size_t len, const char *msg)
{
	size_t		n;

	copy_str(dst, len, msg ? msg : "");
	n = strlen(dst);
	while (n > 0 && (dst[n - 1] == '\n' || dst[n - 1] == ' '))
		dst[--n] = '\0';
}

/* Name of a stop reason, as logged by pg_leader. */
const char *
le_stop_reason_name(le_stop_reason reason)
{
	switch (reason)
	{
		case LE_STOP_LOST:
			return "lost";
		case LE_STOP_RENEW_FAILED:
			return "renew_failed";
		case LE_STOP_DEADLINE_PASSED:
			return "deadline_passed";
		case LE_STOP_RELEASED:
			return "released";
		case LE_STOP_SHUTDOWN:
			return "shutdown";
	}
	return "unknown";
}

/* Parse "15s", "500ms", "2m", "1h", "1.5s" into milliseconds. */
bool
le_parse_duration_ms(const char *text, int64_t *ms)
{
	char	   *end;
	double		v;
	double		scale;

	if (text == NULL || *text == '\0' || *text == '-' || *text == '+' ||
		*text == ' ')
		return false;
	errno = 0;
	v = strtod(text, &end);
	if (errno != 0 || end == text || v != v)
		return false;
	if (strcmp(end, "ms") == 0)
		scale = 1;
	else if (strcmp(end, "s") == 0)
		scale = 1000;
	else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
		scale = 60000;
	else if (strcmp(end, "h") == 0)
		scale = 3600000;
	else
		return false;
	v *= scale;
	if (v < 1 || v > 30.0 * 24 * 3600 * 1000)
		return false;
	*ms = (int64_t) (v + 0.5);
	return true;
}

/* Strong random bytes for owner ids and the jitter seed. */
static uint64_t
random_u64(void)
{
	uint64_t	v = 0;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint64_t) le_monotonic_ms() ^ ((uint64_t) getpid() << 32);
	return v;
}

/* xorshift64*: cheap jitter that differs between processes. */
static uint64_t
next_rand(le_elector *e)
{
	e->rng ^= e->rng >> 12;
	e->rng ^= e->rng << 25;
	e->rng ^= e->rng >> 27;
	return e->rng * 2685821657736338717ULL;
}

/* The retry interval with +/- jitter applied. */
static int64_t
jittered_retry(le_elector *e)
{
	int64_t		spread = e->cfg.retry_ms * e->cfg.retry_jitter_pct / 100;
	int64_t		v = e->cfg.retry_ms;

	if (spread > 0)
		v += (int64_t) (next_rand(e) % (uint64_t) (2 * spread + 1)) - spread;
	return v > 1 ? v : 1;
}

/* Wait on e->cv for at most ms milliseconds; mu must be held. */
static void
cv_wait_ms(le_elector *e, int64_t ms)
{
	struct timespec ts;

	if (ms < 0)
	{
		pthread_cond_wait(&e->cv, &e->mu);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000)
	{
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&e->cv, &e->mu, &ts);
}

/* Wake the campaign thread out of poll(). */
static void
wake_campaign(le_elector *e)
{
	char		c = 1;
	ssize_t		rc;

	rc = write(e->wake[1], &c, 1);
	(void) rc;					/* a full pipe already wakes it */
}

/* Report something worth a log line through on_notice. */
static void
notice(le_elector *e, const char *fmt,...)
{
	char		buf[1024];
	va_list		ap;

	if (e->cfg.on_notice == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	e->cfg.on_notice(e->cfg.cb_arg, buf);
}

/* Library threads leave every signal to the application's threads. */
static void
block_signals(void)
{
	sigset_t	all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
}

/* ------------------------------------------------------------------------
 * libpq with deadlines
 * ------------------------------------------------------------------------
 */

/* Wait until fd is ready or the deadline passes: 1 ready, 0 timeout, -1 error. */
static int
wait_fd(int fd, bool for_write, int64_t deadline)
{
	for (;;)
	{
		struct pollfd p = {.fd = fd, .events = for_write ? POLLOUT : POLLIN};
		int64_t		left = deadline - le_monotonic_ms();
		int			rc;

		if (left <= 0)
			return 0;
		rc = poll(&p, 1, left > 60000 ? 60000 : (int) left);
		if (rc > 0)
			return 1;
		if (rc < 0 && errno != EINTR)
			return -1;
	}
}

/* Open a connection without blocking past timeout_ms. */
static PGconn *
connect_bounded(const char *conninfo, const char *appname, int64_t timeout_ms,
				char *err, size_t errlen)
{
	const char *kw[] = {"dbname", "fallback_application_name", NULL};
	const char *val[] = {conninfo, appname, NULL};
	int64_t		deadline = le_monotonic_ms() + timeout_ms;
	PostgresPollingStatusType st = PGRES_POLLING_WRITING;
	PGconn	   *c;

	c = PQconnectStartParams(kw, val, 1);
	if (c == NULL)
	{
		set_err(err, errlen, "out of memory");
		return NULL;
	}
	if (PQstatus(c) == CONNECTION_BAD)
	{
		copy_msg(err, errlen, PQerrorMessage(c));
		PQfinish(c);
		return NULL;
	}
	while (st != PGRES_POLLING_OK)
	{
		int			rc;

		if (st == PGRES_POLLING_FAILED)
		{
			copy_msg(err, errlen, PQerrorMessage(c));
			PQfinish(c);
			return NULL;
		}
		rc = wait_fd(PQsocket(c), st == PGRES_POLLING_WRITING, deadline);
		if (rc == 0)
		{
			set_err(err, errlen, "connection timed out after %" PRId64 " ms", timeout_ms);
			PQfinish(c);
			return NULL;
		}
		if (rc < 0)
		{
			set_err(err, errlen, "poll failed: %s", strerror(errno));
			PQfinish(c);
			return NULL;
		}
		st = PQconnectPoll(c);
	}
	return c;
}

/*
 * Run one parameterised statement, waiting at most until deadline.  Returns
 * the result (check PQresultStatus) or NULL when the connection broke or
 * the deadline passed; then *broken is set and the connection must go.
 */
static PGresult *
exec_bounded(PGconn *c, const char *sql, int nparams, const char *const *values,
			 int64_t deadline, char *err, size_t errlen, bool *broken)
{
	PGresult   *keep = NULL;
	PGresult   *r;
	int			rc;

	*broken = false;
	if (!PQsendQueryParams(c, sql, nparams, NULL, values, NULL, NULL, 0))
		goto broken;
	while ((rc = PQflush(c)) == 1)
		if (wait_fd(PQsocket(c), true, deadline) <= 0)
			goto timeout;
	if (rc < 0)
		goto broken;
	for (;;)
	{
		while (PQisBusy(c))
		{
			int			w = wait_fd(PQsocket(c), false, deadline);

			if (w == 0)
				goto timeout;
			if (w < 0 || !PQconsumeInput(c))
				goto broken;
		}
		r = PQgetResult(c);
		if (r == NULL)
			break;
		/* keep the first error, else the last result */
		if (keep == NULL || PQresultStatus(keep) != PGRES_FATAL_ERROR)
		{
			PQclear(keep);
			keep = r;
		}
		else
			PQclear(r);
	}
	if (PQstatus(c) == CONNECTION_BAD)
	{
		PQclear(keep);
		goto broken;
	}
	if (keep && PQresultStatus(keep) == PGRES_FATAL_ERROR)
		copy_msg(err, errlen, PQresultErrorMessage(keep));
	return keep;

timeout:
	set_err(err, errlen, "statement timed out");
	*broken = true;
	PQclear(keep);
	return NULL;
broken:
	copy_msg(err, errlen, PQerrorMessage(c));
	if (err && errlen && err[0] == '\0')
		set_err(err, errlen, "connection lost");
	*broken = true;
	return NULL;
}

/* SQLSTATE of an error result, "" if none. */
static const char *
sqlstate_of(const PGresult *r)
{
	const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;

	return s ? s : "";
}

/* Errors after which a renewal may succeed if simply tried again. */
static bool
sqlstate_is_transient(const char *s)
{
	return strncmp(s, "08", 2) == 0 ||	/* connection exception */
		strncmp(s, "53", 2) == 0 ||	/* insufficient resources */
		strncmp(s, "57P", 3) == 0 ||	/* admin/crash shutdown, starting up */
		strcmp(s, "57014") == 0 ||	/* canceled */
		strcmp(s, "55P03") == 0 ||	/* lock wait timed out */
		strcmp(s, "40001") == 0 || strcmp(s, "40P01") == 0;
}

/* Connect within timeout_ms and find the schema of the extension (see le_client.h). */
le_result
le_connect(const char *conninfo, const char *appname, int64_t timeout_ms,
		   PGconn **conn, char *schema, size_t schemalen, char *err, size_t errlen)
{
	char		msg[512] = "";
	PGconn	   *c;
	PGresult   *r;
	bool		broken;
	int64_t		deadline = le_monotonic_ms() + timeout_ms;

	*conn = NULL;
	c = connect_bounded(conninfo ? conninfo : "", appname, timeout_ms, msg, sizeof(msg));
	if (c == NULL)
	{
		set_err(err, errlen, "could not connect to the server: %s", msg);
		return LE_ERR_CONNECT;
	}
	r = exec_bounded(c, "SELECT n.nspname FROM pg_catalog.pg_extension x"
					 " JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) x.extnamespace"
					 " WHERE x.extname OPERATOR(pg_catalog.=) 'leader_election'",
					 0, NULL, deadline, msg, sizeof(msg), &broken);
	if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK)
	{
		set_err(err, errlen, "could not check for extension leader_election: %s", msg);
		PQclear(r);
		PQfinish(c);
		return LE_ERR_CONNECT;
	}
	if (PQntuples(r) != 1)
	{
		set_err(err, errlen,
				"extension \"leader_election\" is not installed in database \"%s\" (run CREATE EXTENSION leader_election)",
				PQdb(c));
		PQclear(r);
		PQfinish(c);
		return LE_ERR_NO_EXTENSION;
	}
	if (schema)
		copy_str(schema, schemalen, PQgetvalue(r, 0, 0));
	PQclear(r);
	*conn = c;
	return LE_OK;
}

/*
 * Open one of the elector's connections within timeout_ms; builds the SQL
 * texts on first success.  Returns LE_OK, LE_ERR_CONNECT or
 * LE_ERR_NO_EXTENSION.
 */
static le_result
open_conn(le_elector *e, const char *role, int64_t timeout_ms, PGconn **out,
		  char *err, size_t errlen)
{
	char		appname[64];
	char		schema[NAMEDATALEN_MAX];
	PGconn	   *c;
	le_result	rc;

	snprintf(appname, sizeof(appname), "pg_leader %s", role);
	rc = le_connect(e->conninfo, appname, timeout_ms, &c, schema, sizeof(schema), err, errlen);
	if (rc != LE_OK)
		return rc;
	pthread_mutex_lock(&e->mu);
	if (e->sql_acquire == NULL)
	{
		char	   *q = PQescapeIdentifier(c, schema, strlen(schema));

		if (q == NULL ||
			asprintf(&e->sql_acquire,
					 "SELECT acquired, fencing_token, holder, " LE_ISO("expires_at")
					 " FROM %s.le_acquire($1, $2, $3::pg_catalog.interval)", q) < 0 ||
			asprintf(&e->sql_renew,
					 "SELECT " LE_ISO("%s.le_renew($1, $2, $3::pg_catalog.int8, $4::pg_catalog.interval)"),
					 q) < 0 ||
			asprintf(&e->sql_release,
					 "SELECT %s.le_release($1, $2, $3::pg_catalog.int8)", q) < 0 ||
			asprintf(&e->sql_observe,
					 "SELECT holder, fencing_token, " LE_ISO("expires_at")
					 " FROM %s.le_leases WHERE lease_key OPERATOR(pg_catalog.=) $1 AND is_valid", q) < 0)
			abort();			/* out of memory at startup */
		PQfreemem(q);
	}
	pthread_mutex_unlock(&e->mu);
	*out = c;
	return LE_OK;
}

/* ------------------------------------------------------------------------
 * Leadership state
 * ------------------------------------------------------------------------
 */

/* Fill a lease info from the elector; mu must be held. */
static void
fill_info(le_elector *e, le_lease_info *info)
{
	info->lease_key = e->lease_key;
	info->owner_id = e->owner_id;
	info->fencing_token = e->token;
	copy_str(info->expires_at, sizeof(info->expires_at), e->expires_at);
	info->deadline_ms = e->deadline;
	info->period = e->period;
}

/*
 * End leadership period "period" for "reason", once.  If its deadline has
 * passed, the reason is "deadline_passed" whatever was noticed (the period
 * ended then).  Unless the lease is known to be someone else's, its token is
 * queued for a best-effort release so a follower need not wait for expiry.
 * Called without mu.
 */
static void
end_leadership(le_elector *e, uint64_t period, le_stop_reason reason, const char *detail)
{
	le_lease_info info;

	pthread_mutex_lock(&e->mu);
	if (!e->leading || e->period != period)
	{
		pthread_mutex_unlock(&e->mu);
		return;
	}
	e->leading = false;
	if (le_monotonic_ms() >= e->deadline && reason != LE_STOP_DEADLINE_PASSED)
	{
		/* leadership already ended at the deadline, before what we noticed now */
		reason = LE_STOP_DEADLINE_PASSED;
		detail = "the local deadline passed before this was noticed";
	}
	if (e->token > e->lost_token)
		e->lost_token = e->token;
	if (reason != LE_STOP_LOST)
		e->pending_release = e->token;
	fill_info(e, &info);
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	wake_campaign(e);
	if (e->cfg.on_stopped)
		e->cfg.on_stopped(e->cfg.cb_arg, &info, reason, detail);
}

/* Is the elector leading now?  mu must be held. */
static bool
leading_now(le_elector *e)
{
	return e->leading && le_monotonic_ms() < e->deadline;
}

/* True while leading and before the deadline; the deadline test needs no thread. */
bool
le_elector_is_leader(le_elector *e, le_lease_info *lease)
{
	bool		yes;

	pthread_mutex_lock(&e->mu);
	yes = leading_now(e);
	if (lease)
		fill_info(e, lease);
	pthread_mutex_unlock(&e->mu);
	return yes;
}

/* ------------------------------------------------------------------------
 * Renewal thread
 * ------------------------------------------------------------------------
 */

/* Renew the lease every renew interval while leading, on its own connection. */
static void *
renew_main(void *arg)
{
	le_elector *e = arg;
	PGconn	   *conn = NULL;
	char		msg[512];

	block_signals();
	pthread_mutex_lock(&e->mu);
	for (;;)
	{
		uint64_t	period;
		int64_t		now,
					next,
					deadline,
					t_send,
					stmt_deadline;
		char		token_text[32];
		const char *values[4];
		PGresult   *r;
		bool		broken;
		le_result	rc;

		if (e->quit)
			break;
		if (!e->leading)
		{
			cv_wait_ms(e, -1);
			continue;
		}
		period = e->period;
		deadline = e->deadline;
		now = le_monotonic_ms();
		if (now >= deadline)
		{
			pthread_mutex_unlock(&e->mu);
			end_leadership(e, period, LE_STOP_DEADLINE_PASSED,
						   "no renewal was confirmed before the local deadline");
			pthread_mutex_lock(&e->mu);
			continue;
		}
		next = e->last_send + e->cfg.renew_ms;
		if (now < next && !e->renew_now)
		{
			cv_wait_ms(e, (next < deadline ? next : deadline) - now);
			continue;
		}
		e->renew_now = false;
		snprintf(token_text, sizeof(token_text), "%" PRId64, e->token);
		pthread_mutex_unlock(&e->mu);

		if (conn == NULL)
		{
			int64_t		left = deadline - le_monotonic_ms();

			if (left > e->cfg.connect_timeout_ms)
				left = e->cfg.connect_timeout_ms;
			rc = open_conn(e, "renew", left > 1 ? left : 1, &conn, msg, sizeof(msg));
			if (rc != LE_OK)
			{
				notice(e, "renewal connection: %s", msg);
				conn = NULL;
				pthread_mutex_lock(&e->mu);
				cv_wait_ms(e, LE_RENEW_RETRY_MS);
				continue;
			}
		}

		values[0] = e->lease_key;
		values[1] = e->owner_id;
		values[2] = token_text;
		values[3] = e->ttl_text;
		t_send = le_monotonic_ms();
		stmt_deadline = t_send + e->cfg.statement_timeout_ms;
		if (stmt_deadline > deadline)
			stmt_deadline = deadline;
		msg[0] = '\0';
		r = exec_bounded(conn, e->sql_renew, 4, values, stmt_deadline, msg, sizeof(msg), &broken);

		pthread_mutex_lock(&e->mu);
		if (!e->leading || e->period != period)
		{
			PQclear(r);
			if (broken)
			{
				PQfinish(conn);
				conn = NULL;
			}
			continue;
		}
		if (le_monotonic_ms() >= e->deadline)
		{
			/* confirmation (if any) came too late: the deadline rules */
			PQclear(r);
			if (broken)
			{
				PQfinish(conn);
				conn = NULL;
			}
			continue;			/* the top of the loop ends the period */
		}
		if (r != NULL && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
		{
			if (!PQgetisnull(r, 0, 0))
			{
				le_lease_info info;

				e->deadline = t_send + e->cfg.ttl_ms - e->cfg.safety_margin_ms;
				e->last_send = t_send;
				copy_str(e->expires_at, sizeof(e->expires_at), PQgetvalue(r, 0, 0));
				fill_info(e, &info);
				pthread_cond_broadcast(&e->cv);
				pthread_mutex_unlock(&e->mu);
				PQclear(r);
				if (e->cfg.on_renewed)
					e->cfg.on_renewed(e->cfg.cb_arg, &info);
			}
			else
			{
				pthread_mutex_unlock(&e->mu);
				PQclear(r);
				end_leadership(e, period, LE_STOP_LOST,
							   "le_renew returned NULL: the lease is no longer held with this token");
			}
			pthread_mutex_lock(&e->mu);
			continue;
		}
		pthread_mutex_unlock(&e->mu);
		if (broken)
		{
			notice(e, "renewal failed, reconnecting: %s", msg);
			PQfinish(conn);
			conn = NULL;
		}
		else if (r != NULL && sqlstate_is_transient(sqlstate_of(r)))
			notice(e, "renewal failed, retrying: %s", msg);
		else
		{
			char		detail[600];

			snprintf(detail, sizeof(detail), "SQLSTATE %s: %s", sqlstate_of(r), msg);
			PQclear(r);
			end_leadership(e, period, LE_STOP_RENEW_FAILED, detail);
			pthread_mutex_lock(&e->mu);
			continue;
		}
		PQclear(r);
		pthread_mutex_lock(&e->mu);
		/* try again soon, well before the deadline */
		{
			int64_t		pause = e->cfg.renew_ms / 4;

			if (pause > LE_RENEW_RETRY_MS)
				pause = LE_RENEW_RETRY_MS;
			if (!broken)
				cv_wait_ms(e, pause);
		}
	}
	pthread_mutex_unlock(&e->mu);
	if (conn)
		PQfinish(conn);
	return NULL;
}

/* ------------------------------------------------------------------------
 * Campaign thread
 * ------------------------------------------------------------------------
 */

/* Decode a JSON string starting at *p (at the opening quote) into out. */
static bool
json_string(const char **p, char *out, size_t len)
{
	const char *s = *p;
	size_t		n = 0;

	if (*s != '"')
		return false;
	s++;
	while (*s && *s != '"')
	{
		unsigned int c = (unsigned char) *s++;

		if (c == '\\')
		{
			c = (unsigned char) *s++;
			switch (c)
			{
				case 'b':
					c = '\b';
					break;
				case 'f':
					c = '\f';
					break;
				case 'n':
					c = '\n';
					break;
				case 'r':
					c = '\r';
					break;
				case 't':
					c = '\t';
					break;
				case 'u':
					{
						char		hex[5] = {0};

						if (strlen(s) < 4)
							return false;
						memcpy(hex, s, 4);
						c = (unsigned int) strtoul(hex, NULL, 16);
						s += 4;
						/* encode as UTF-8 (surrogate pairs are not expected in keys) */
						if (c >= 0x80)
						{
							char		u[3];
							int			k = 0;

							if (c < 0x800)
							{
								u[k++] = (char) (0xC0 | (c >> 6));
								u[k++] = (char) (0x80 | (c & 0x3F));
							}
							else
							{
								u[k++] = (char) (0xE0 | (c >> 12));
								u[k++] = (char) (0x80 | ((c >> 6) & 0x3F));
								u[k++] = (char) (0x80 | (c & 0x3F));
							}
							for (int i = 0; i < k; i++)
								if (n + 1 < len)
									out[n++] = u[i];
							continue;
						}
						break;
					}
				case '\0':
					return false;
				default:
					break;		/* \" \\ \/ */
			}
		}
		if (n + 1 < len)
			out[n++] = (char) c;
	}
	if (*s != '"')
		return false;
	out[n] = '\0';
	*p = s + 1;
	return true;
}

/* Fields of a NOTIFY payload of the extension. */
typedef struct le_note
{
	char		event[32];
	char		lease_key[256];
	char		holder[256];	/* "" for null */
	int64_t		token;
	char		expires_at[64];
} le_note;

/* Parse the flat JSON object the extension sends; false if malformed. */
static bool
parse_note(const char *s, le_note *n)
{
	memset(n, 0, sizeof(*n));
	while (*s == ' ')
		s++;
	if (*s++ != '{')
		return false;
	for (;;)
	{
		char		key[32];
		char		sval[256];

		while (*s == ' ' || *s == ',')
			s++;
		if (*s == '}')
			return n->event[0] != '\0';
		if (!json_string(&s, key, sizeof(key)))
			return false;
		while (*s == ' ')
			s++;
		if (*s++ != ':')
			return false;
		while (*s == ' ')
			s++;
		if (*s == '"')
		{
			if (!json_string(&s, sval, sizeof(sval)))
				return false;
			if (strcmp(key, "event") == 0)
				copy_str(n->event, sizeof(n->event), sval);
			else if (strcmp(key, "lease_key") == 0)
				copy_str(n->lease_key, sizeof(n->lease_key), sval);
			else if (strcmp(key, "holder") == 0)
				copy_str(n->holder, sizeof(n->holder), sval);
			else if (strcmp(key, "expires_at") == 0)
				copy_str(n->expires_at, sizeof(n->expires_at), sval);
		}
		else
		{
			char	   *end;
			long long	v = strtoll(s, &end, 10);

			if (end != s)
			{
				if (strcmp(key, "fencing_token") == 0)
					n->token = v;
				s = end;
			}
			else if (strncmp(s, "null", 4) == 0)
				s += 4;
			else
				return false;
		}
	}
}

/* Report holder as the leader seen, if it differs from the last one reported. */
static void
observed(le_elector *e, const char *holder, int64_t token, const char *expires_at)
{
	bool		changed;

	pthread_mutex_lock(&e->mu);
	changed = strcmp(e->holder, holder) != 0 || (token > 0 && e->holder_token != token);
	if (changed)
	{
		copy_str(e->holder, sizeof(e->holder), holder);
		e->holder_token = token;
	}
	pthread_mutex_unlock(&e->mu);
	if (changed && holder[0] != '\0' && strcmp(holder, e->owner_id) != 0 && e->cfg.on_new_leader)
		e->cfg.on_new_leader(e->cfg.cb_arg, holder, token, expires_at);
}

/* Best-effort release of a token we no longer lead with; clears pending_release. */
static void
release_token(le_elector *e, PGconn *conn, int64_t token, bool *broken)
{
	char		token_text[32];
	const char *values[3];
	char		msg[512] = "";
	PGresult   *r;

	snprintf(token_text, sizeof(token_text), "%" PRId64, token);
	values[0] = e->lease_key;
	values[1] = e->owner_id;
	values[2] = token_text;
	r = exec_bounded(conn, e->sql_release, 3, values,
					 le_monotonic_ms() + e->cfg.statement_timeout_ms,
					 msg, sizeof(msg), broken);
	if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK)
		notice(e, "release of token %" PRId64 " failed: %s", token, msg);
	PQclear(r);
	pthread_mutex_lock(&e->mu);
	if (e->pending_release == token)
		e->pending_release = 0;
	pthread_mutex_unlock(&e->mu);
}

/*
 * Ask the renewal thread to renew at once: a notification hinted that the
 * lease may be lost.  Notifications are unauthenticated (any role may send
 * one), so only the server's answer to le_renew ends leadership.
 */
static void
confirm_leadership(le_elector *e)
{
	pthread_mutex_lock(&e->mu);
	if (e->leading)
	{
		e->renew_now = true;
		pthread_cond_broadcast(&e->cv);
	}
	pthread_mutex_unlock(&e->mu);
}

/* Read the lease from the server and report its holder; false if the connection broke. */
static bool
observe_lease(le_elector *e, PGconn *conn)
{
	const char *v1[1] = {e->lease_key};
	char		msg[512] = "";
	bool		broken;
	PGresult   *r;

	r = exec_bounded(conn, e->sql_observe, 1, v1,
					 le_monotonic_ms() + e->cfg.statement_timeout_ms,
					 msg, sizeof(msg), &broken);
	if (r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
		observed(e, PQgetvalue(r, 0, 0), strtoll(PQgetvalue(r, 0, 1), NULL, 10),
				 PQgetvalue(r, 0, 2));
	else if (r && PQresultStatus(r) == PGRES_TUPLES_OK)
		observed(e, "", 0, "");
	else
		notice(e, "could not read the lease: %s", msg);
	PQclear(r);
	return !broken;
}

/*
 * Drain notifications; returns the time of the next campaign attempt.
 * Payloads are hints only: they wake us to ask the server (le_renew when
 * leading, a read of the lease, or le_acquire when it may be free); *observe
 * is set when the lease should be read.
 */
static int64_t
handle_notifies(le_elector *e, PGconn *conn, int64_t next_attempt, bool *observe)
{
	PGnotify   *nt;

	while ((nt = PQnotifies(conn)) != NULL)
	{
		le_note		n;

		if (strcmp(nt->relname, LE_CHANNEL) == 0 && parse_note(nt->extra, &n) &&
			strcmp(n.lease_key, e->lease_key) == 0)
		{
			bool		leading;
			int64_t		lost;

			pthread_mutex_lock(&e->mu);
			leading = e->leading;
			lost = e->lost_token;
			pthread_mutex_unlock(&e->mu);
			if (leading)
				confirm_leadership(e);
			else
				*observe = true;
			/* a release of our own last token is ours: wait for the retry interval */
			if (strcmp(n.event, "acquired") != 0 && !leading && n.token != lost)
			{
				/* maybe free now: campaign at once, spread a little */
				int64_t		soon = le_monotonic_ms() +
					(int64_t) (next_rand(e) % (LE_RELEASE_JITTER_MS + 1));

				if (soon < next_attempt)
					next_attempt = soon;
			}
		}
		PQfreemem(nt);
	}
	return next_attempt;
}

/* One le_acquire call; returns the time of the next attempt. */
static int64_t
campaign_once(le_elector *e, PGconn **connp)
{
	const char *values[3] = {e->lease_key, e->owner_id, e->ttl_text};
	char		msg[512] = "";
	int64_t		t_send = le_monotonic_ms();
	PGresult   *r;
	bool		broken;
	int64_t		token;

	r = exec_bounded(*connp, e->sql_acquire, 3, values, t_send + e->cfg.statement_timeout_ms,
					 msg, sizeof(msg), &broken);
	if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
	{
		notice(e, "acquire failed%s: %s", broken ? ", reconnecting" : "", msg);
		if (!broken)
		{
			pthread_mutex_lock(&e->mu);
			e->attempts++;
			pthread_cond_broadcast(&e->cv);
			pthread_mutex_unlock(&e->mu);
		}
		PQclear(r);
		if (broken)
		{
			PQfinish(*connp);
			*connp = NULL;
		}
		return le_monotonic_ms() + jittered_retry(e);
	}
	if (strcmp(PQgetvalue(r, 0, 0), "t") != 0)
	{
		char		holder[256];
		char		expires[64];
		bool		changed;

		copy_str(holder, sizeof(holder), PQgetvalue(r, 0, 2));
		copy_str(expires, sizeof(expires), PQgetvalue(r, 0, 3));
		PQclear(r);
		/* polling fallback for observation: learn the token on a change of holder */
		pthread_mutex_lock(&e->mu);
		changed = strcmp(e->holder, holder) != 0;
		pthread_mutex_unlock(&e->mu);
		if (changed)
		{
			const char *v1[1] = {e->lease_key};
			int64_t		tok = -1;

			r = exec_bounded(*connp, e->sql_observe, 1, v1,
							 le_monotonic_ms() + e->cfg.statement_timeout_ms,
							 msg, sizeof(msg), &broken);
			if (r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
				strcmp(PQgetvalue(r, 0, 0), holder) == 0)
				tok = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
			PQclear(r);
			if (broken)
			{
				PQfinish(*connp);
				*connp = NULL;
			}
			observed(e, holder, tok, expires);
		}
		pthread_mutex_lock(&e->mu);
		e->attempts++;
		pthread_cond_broadcast(&e->cv);
		pthread_mutex_unlock(&e->mu);
		return le_monotonic_ms() + jittered_retry(e);
	}

	token = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
	pthread_mutex_lock(&e->mu);
	e->attempts++;
	if (token <= e->lost_token || le_monotonic_ms() >= t_send + e->cfg.ttl_ms - e->cfg.safety_margin_ms)
	{
		/* a token we lost already, or a grant that arrived too late to use */
		e->pending_release = token;
		pthread_cond_broadcast(&e->cv);
		pthread_mutex_unlock(&e->mu);
		PQclear(r);
		notice(e, "not using token %" PRId64 " (lost before or granted too late); releasing it", token);
		release_token(e, *connp, token, &broken);
		if (broken)
		{
			PQfinish(*connp);
			*connp = NULL;
		}
		pthread_mutex_lock(&e->mu);
		if (token > e->lost_token)
			e->lost_token = token;
		pthread_mutex_unlock(&e->mu);
		return le_monotonic_ms();
	}
	{
		le_lease_info info;

		e->leading = true;
		e->period++;
		e->token = token;
		e->deadline = t_send + e->cfg.ttl_ms - e->cfg.safety_margin_ms;
		e->last_send = t_send;
		copy_str(e->expires_at, sizeof(e->expires_at), PQgetvalue(r, 0, 3));
		copy_str(e->holder, sizeof(e->holder), e->owner_id);
		e->holder_token = token;
		fill_info(e, &info);
		pthread_cond_broadcast(&e->cv);
		pthread_mutex_unlock(&e->mu);
		PQclear(r);
		if (e->cfg.on_started)
			e->cfg.on_started(e->cfg.cb_arg, &info);
	}
	return le_monotonic_ms() + jittered_retry(e);
}

/* LISTEN on the extension's channel; false if the connection broke. */
static bool
listen_on(le_elector *e, PGconn *conn)
{
	char		msg[256] = "";
	bool		broken;
	PGresult   *r;

	r = exec_bounded(conn, "LISTEN " LE_CHANNEL, 0, NULL,
					 le_monotonic_ms() + e->cfg.statement_timeout_ms, msg, sizeof(msg), &broken);
	if (r == NULL || PQresultStatus(r) != PGRES_COMMAND_OK)
		notice(e, "LISTEN failed, falling back to polling every retry interval: %s", msg);
	PQclear(r);
	return !broken;
}

/* Campaign, observe, resign and release, on the campaign connection. */
static void *
campaign_main(void *arg)
{
	le_elector *e = arg;
	PGconn	   *conn;
	int64_t		next_attempt = 0;
	char		msg[512];

	block_signals();
	pthread_mutex_lock(&e->mu);
	conn = e->camp_conn;
	e->camp_conn = NULL;
	pthread_mutex_unlock(&e->mu);
	if (conn && !listen_on(e, conn))
	{
		PQfinish(conn);
		conn = NULL;
	}

	for (;;)
	{
		bool		quit,
					leading,
					resign;
		uint64_t	period,
					resign_seq;
		int64_t		release,
					now,
					timeout;
		struct pollfd fds[2];
		int			nfds = 1;
		bool		observe = false;

		pthread_mutex_lock(&e->mu);
		quit = e->quit;
		leading = e->leading;
		period = e->period;
		resign_seq = e->resign_requested;
		resign = resign_seq != e->resign_done;
		e->connected = conn != NULL;
		pthread_mutex_unlock(&e->mu);

		if (quit && leading)
			end_leadership(e, period, LE_STOP_SHUTDOWN, NULL);
		else if (resign && leading)
		{
			end_leadership(e, period, LE_STOP_RELEASED, NULL);
			next_attempt = le_monotonic_ms() + jittered_retry(e);
		}

		if (conn == NULL)
		{
			le_result	rc = open_conn(e, "campaign", e->cfg.connect_timeout_ms, &conn,
										   msg, sizeof(msg));

			if (rc == LE_OK && !listen_on(e, conn))
			{
				PQfinish(conn);
				conn = NULL;
				snprintf(msg, sizeof(msg), "connection lost during LISTEN");
			}
			if (conn == NULL)
			{
				if (quit)
					break;		/* cannot release; the lease will expire */
				notice(e, "campaign connection: %s", msg);
				pthread_mutex_lock(&e->mu);
				if (resign)
				{
					e->resign_done = resign_seq;
					pthread_cond_broadcast(&e->cv);
				}
				if (!e->quit)
					cv_wait_ms(e, jittered_retry(e));
				pthread_mutex_unlock(&e->mu);
				continue;
			}
			notice(e, "campaign connection established");
		}

		pthread_mutex_lock(&e->mu);
		release = e->pending_release;
		pthread_mutex_unlock(&e->mu);
		if (release > 0)
		{
			bool		broken;

			release_token(e, conn, release, &broken);
			if (broken)
			{
				PQfinish(conn);
				conn = NULL;
			}
		}
		if (resign)
		{
			pthread_mutex_lock(&e->mu);
			e->resign_done = resign_seq;
			pthread_cond_broadcast(&e->cv);
			pthread_mutex_unlock(&e->mu);
		}
		if (quit)
			break;
		if (conn == NULL)
			continue;

		now = le_monotonic_ms();
		if (!leading && now >= next_attempt)
		{
			next_attempt = campaign_once(e, &conn);
			if (conn == NULL)
				continue;
			next_attempt = handle_notifies(e, conn, next_attempt, &observe);
			if (observe && !observe_lease(e, conn))
			{
				PQfinish(conn);
				conn = NULL;
			}
			continue;
		}

		/* sleep until the next attempt, a notification or a wake-up */
		timeout = leading ? e->cfg.retry_ms : next_attempt - now;
		if (timeout < 0)
			timeout = 0;
		fds[0].fd = e->wake[0];
		fds[0].events = POLLIN;
		fds[1].fd = PQsocket(conn);
		fds[1].events = POLLIN;
		nfds = 2;
		if (poll(fds, nfds, timeout > 60000 ? 60000 : (int) timeout) > 0)
		{
			if (fds[0].revents)
			{
				char		buf[64];

				while (read(e->wake[0], buf, sizeof(buf)) == (ssize_t) sizeof(buf))
					;
			}
			if (fds[1].revents)
			{
				if (!PQconsumeInput(conn))
				{
					copy_msg(msg, sizeof(msg), PQerrorMessage(conn));
					notice(e, "campaign connection lost: %s", msg);
					PQfinish(conn);
					conn = NULL;
					continue;
				}
			}
		}
		next_attempt = handle_notifies(e, conn, next_attempt, &observe);
		if (observe && !observe_lease(e, conn))
		{
			PQfinish(conn);
			conn = NULL;
		}
	}
	if (conn)
		PQfinish(conn);
	pthread_mutex_lock(&e->mu);
	e->connected = false;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

/* ------------------------------------------------------------------------
 * Public API
 * ------------------------------------------------------------------------
 */

/* Defaults: ttl 15 s, renew ttl/3-ish, retry 2 s +/- 20%, timeouts 5 s. */
void
le_config_init(le_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->conninfo = "";
	cfg->ttl_ms = 15000;
	cfg->retry_ms = 2000;
	cfg->retry_jitter_pct = 20;
	cfg->connect_timeout_ms = 5000;
	cfg->statement_timeout_ms = 5000;
}

/* Validate the configuration and build an elector. */
le_elector *
le_elector_create(const le_config *cfg, char *err, size_t errlen)
{
	le_elector *e;
	le_config	c = *cfg;
	pthread_condattr_t ca;
	char		owner[LE_MAX_OWNER_LEN + 1];

	if (c.lease_key == NULL || c.lease_key[0] == '\0')
	{
		set_err(err, errlen, "a lease key is required");
		return NULL;
	}
	if (strlen(c.lease_key) > LE_MAX_KEY_LEN)
	{
		set_err(err, errlen, "lease key is longer than %d bytes", LE_MAX_KEY_LEN);
		return NULL;
	}
	if (c.owner_id != NULL && (c.owner_id[0] == '\0' || strlen(c.owner_id) > LE_MAX_OWNER_LEN))
	{
		set_err(err, errlen, "owner id must be 1 to %d bytes", LE_MAX_OWNER_LEN);
		return NULL;
	}
	if (c.ttl_ms < 100 || c.ttl_ms > (int64_t) 30 * 24 * 3600 * 1000)
	{
		set_err(err, errlen, "ttl must be between 100ms and 30 days, got %" PRId64 " ms", c.ttl_ms);
		return NULL;
	}
	if (c.safety_margin_ms == 0)
	{
		c.safety_margin_ms = c.ttl_ms / 10 > 50 ? c.ttl_ms / 10 : 50;
		if (c.safety_margin_ms > c.ttl_ms / 4)
			c.safety_margin_ms = c.ttl_ms / 4;
	}
	if (c.safety_margin_ms < 0 || c.safety_margin_ms * 2 >= c.ttl_ms)
	{
		set_err(err, errlen, "safety margin (%" PRId64 " ms) must be below half the ttl (%" PRId64 " ms)",
				c.safety_margin_ms, c.ttl_ms);
		return NULL;
	}
	if (c.renew_ms == 0)
		c.renew_ms = (c.ttl_ms - c.safety_margin_ms) / 3;
	if (c.renew_ms < 1 || c.renew_ms * 2 > c.ttl_ms - c.safety_margin_ms)
	{
		set_err(err, errlen,
				"renew interval (%" PRId64 " ms) must be at most half of ttl minus safety margin (%" PRId64 " ms), so that a failed renewal can be retried before the lease runs out",
				c.renew_ms, (c.ttl_ms - c.safety_margin_ms) / 2);
		return NULL;
	}
	if (c.retry_ms < 1 || c.retry_ms > (int64_t) 24 * 3600 * 1000)
	{
		set_err(err, errlen, "retry interval must be between 1ms and 24h");
		return NULL;
	}
	if (c.retry_jitter_pct < 0 || c.retry_jitter_pct > 100)
	{
		set_err(err, errlen, "retry jitter must be 0 to 100 percent");
		return NULL;
	}
	if (c.connect_timeout_ms < 1 || c.statement_timeout_ms < 1)
	{
		set_err(err, errlen, "connect and statement timeouts must be positive");
		return NULL;
	}
	if (c.conninfo == NULL)
		c.conninfo = "";
	else
	{
		char	   *perr = NULL;
		PQconninfoOption *opts = c.conninfo[0] ? PQconninfoParse(c.conninfo, &perr) : NULL;

		if (c.conninfo[0] && opts == NULL)
		{
			char		m[400];

			copy_msg(m, sizeof(m), perr ? perr : "out of memory");
			set_err(err, errlen, "invalid connection string: %s", m);
			PQfreemem(perr);
			return NULL;
		}
		PQconninfoFree(opts);
	}
	if (c.owner_id == NULL)
	{
		char		host[128] = "host";

		gethostname(host, sizeof(host) - 1);
		host[sizeof(host) - 1] = '\0';
		snprintf(owner, sizeof(owner), "%s-%d-%06" PRIx64, host, (int) getpid(),
				 random_u64() & 0xFFFFFF);
		c.owner_id = owner;
	}

	e = calloc(1, sizeof(*e));
	if (e == NULL)
	{
		set_err(err, errlen, "out of memory");
		return NULL;
	}
	e->cfg = c;
	e->conninfo = strdup(c.conninfo);
	e->lease_key = strdup(c.lease_key);
	e->owner_id = strdup(c.owner_id);
	e->cfg.conninfo = e->conninfo;
	e->cfg.lease_key = e->lease_key;
	e->cfg.owner_id = e->owner_id;
	snprintf(e->ttl_text, sizeof(e->ttl_text), "%" PRId64 " milliseconds", c.ttl_ms);
	e->rng = random_u64() | 1;
	if (e->conninfo == NULL || e->lease_key == NULL || e->owner_id == NULL ||
		pipe2(e->wake, O_NONBLOCK | O_CLOEXEC) != 0)
	{
		set_err(err, errlen, "out of memory or file descriptors");
		free(e->conninfo);
		free(e->lease_key);
		free(e->owner_id);
		free(e);
		return NULL;
	}
	pthread_mutex_init(&e->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->cv, &ca);
	pthread_condattr_destroy(&ca);
	return e;
}

/* First connection, extension check, then the two threads. */
le_result
le_elector_start(le_elector *e, char *err, size_t errlen)
{
	PGconn	   *conn = NULL;
	le_result	rc;

	if (e->started)
	{
		set_err(err, errlen, "elector already started");
		return LE_ERR_CONFIG;
	}
	rc = open_conn(e, "campaign", e->cfg.connect_timeout_ms, &conn, err, errlen);
	if (rc != LE_OK)
		return rc;
	e->camp_conn = conn;
	e->started = true;
	if (pthread_create(&e->renew_thread, NULL, renew_main, e) != 0)
	{
		set_err(err, errlen, "could not start the renewal thread");
		PQfinish(conn);
		e->started = false;
		return LE_ERR_SYSTEM;
	}
	if (pthread_create(&e->camp_thread, NULL, campaign_main, e) != 0)
	{
		set_err(err, errlen, "could not start the campaign thread");
		pthread_mutex_lock(&e->mu);
		e->quit = true;
		pthread_cond_broadcast(&e->cv);
		pthread_mutex_unlock(&e->mu);
		pthread_join(e->renew_thread, NULL);
		PQfinish(conn);
		e->started = false;
		return LE_ERR_SYSTEM;
	}
	return LE_OK;
}

/* Has an acquire attempt been answered?  mu must be held. */
static bool
attempted(le_elector *e)
{
	return e->attempts > 0;
}

/* Wait on e->cv until cond holds, the elector stops or timeout_ms (-1 forever) passes. */
static bool
wait_for_state(le_elector *e, int64_t timeout_ms, bool (*cond) (le_elector *))
{
	int64_t		until = le_monotonic_ms() + timeout_ms;
	bool		yes;

	pthread_mutex_lock(&e->mu);
	for (;;)
	{
		int64_t		now = le_monotonic_ms();

		yes = cond(e);
		if (yes || e->quit || (timeout_ms >= 0 && now >= until))
			break;
		cv_wait_ms(e, timeout_ms < 0 ? 1000 : until - now);
	}
	pthread_mutex_unlock(&e->mu);
	return yes;
}

/* Wait for leadership up to timeout_ms (-1 forever). */
bool
le_elector_wait_leader(le_elector *e, int64_t timeout_ms)
{
	return wait_for_state(e, timeout_ms, leading_now);
}

/* Wait until at least one acquire attempt was answered. */
bool
le_elector_wait_attempt(le_elector *e, int64_t timeout_ms)
{
	return wait_for_state(e, timeout_ms, attempted);
}

/* Copy the elector's state. */
void
le_elector_status(le_elector *e, le_status *st)
{
	pthread_mutex_lock(&e->mu);
	memset(st, 0, sizeof(*st));
	st->leading = leading_now(e);
	st->fencing_token = e->token;
	st->period = e->period;
	st->attempts = e->attempts;
	st->connected = e->connected;
	copy_str(st->holder, sizeof(st->holder), e->holder);
	copy_str(st->expires_at, sizeof(st->expires_at), e->expires_at);
	pthread_mutex_unlock(&e->mu);
}

/* The owner id this elector campaigns with. */
const char *
le_elector_owner_id(le_elector *e)
{
	return e->owner_id;
}

/* Release leadership now and campaign again after a retry interval. */
void
le_elector_resign(le_elector *e)
{
	uint64_t	seq;

	pthread_mutex_lock(&e->mu);
	if (!e->started || e->quit)
	{
		pthread_mutex_unlock(&e->mu);
		return;
	}
	seq = ++e->resign_requested;
	pthread_mutex_unlock(&e->mu);
	wake_campaign(e);
	pthread_mutex_lock(&e->mu);
	while (e->resign_done < seq && !e->quit)
		cv_wait_ms(e, 1000);
	pthread_mutex_unlock(&e->mu);
}

/* Stop: end leadership with "shutdown", release, join the threads. */
void
le_elector_stop(le_elector *e)
{
	pthread_mutex_lock(&e->mu);
	if (!e->started || e->stopped)
	{
		pthread_mutex_unlock(&e->mu);
		return;
	}
	e->quit = true;
	e->stopped = true;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	wake_campaign(e);
	pthread_join(e->camp_thread, NULL);
	pthread_join(e->renew_thread, NULL);
}

/* Stop if needed and free everything. */
void
le_elector_destroy(le_elector *e)
{
	if (e == NULL)
		return;
	le_elector_stop(e);
	close(e->wake[0]);
	close(e->wake[1]);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	free(e->sql_acquire);
	free(e->sql_renew);
	free(e->sql_release);
	free(e->sql_observe);
	free(e->conninfo);
	free(e->lease_key);
	free(e->owner_id);
	free(e);
}
