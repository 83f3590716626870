/*-------------------------------------------------------------------------
 *
 * le_client.c
 *		Public API of the leader_election client library (see
 *		le_client.h): configuration, creating, starting, querying and
 *		stopping an elector.
 *
 * Locking rules: see le_internal.h.  The functions here take e->mu only
 * for short reads and writes of the shared state; le_elector_stop joins the
 * threads without holding it.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "le_internal.h"
#include "le_notify.h"

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
	char		owner[LE_MAX_OWNER_LEN + 1];
	bool		own_id;

	if (c.lease_key == NULL || c.lease_key[0] == '\0')
	{
		le_set_err(err, errlen, "a lease key is required");
		return NULL;
	}
	if (strlen(c.lease_key) > LE_MAX_KEY_LEN)
	{
		le_set_err(err, errlen, "lease key is longer than %d bytes", LE_MAX_KEY_LEN);
		return NULL;
	}
	if (c.owner_id != NULL && (c.owner_id[0] == '\0' || strlen(c.owner_id) > LE_MAX_OWNER_LEN))
	{
		le_set_err(err, errlen, "owner id must be 1 to %d bytes", LE_MAX_OWNER_LEN);
		return NULL;
	}
	if (!le_valid_utf8(c.lease_key) || (c.owner_id != NULL && !le_valid_utf8(c.owner_id)))
	{
		le_set_err(err, errlen, "%s is not valid UTF-8", le_valid_utf8(c.lease_key) ? "owner id" : "lease key");
		return NULL;
	}
	if (!le_check_timing(c.ttl_ms, &c.safety_margin_ms, &c.renew_ms, c.renew_by_ms, c.retry_ms,
						 c.retry_jitter_pct, c.connect_timeout_ms, c.statement_timeout_ms,
						 "renew interval", err, errlen))
		return NULL;
	if (c.conninfo == NULL)
		c.conninfo = "";
	own_id = c.owner_id == NULL;
	if (own_id)
	{
		le_default_id(owner, sizeof(owner));
		c.owner_id = owner;
	}

	e = calloc(1, sizeof(*e));
	if (e == NULL)
	{
		le_set_err(err, errlen, "out of memory");
		return NULL;
	}
	e->wake[0] = e->wake[1] = e->timer_fd = e->timer_wake = e->period_fd = -1;
	e->cfg = c;
	if (le_build_conn_params(c.conninfo, c.ttl_ms, c.statement_timeout_ms,
							 &e->conn_kw, &e->conn_val, err, errlen) != LE_OK)
	{
		free(e);
		return NULL;
	}
	e->conninfo = strdup(c.conninfo);
	e->lease_key = strdup(c.lease_key);
	e->owner_id = strdup(c.owner_id);
	e->metadata = c.metadata ? strdup(c.metadata) : NULL;
	e->cfg.metadata = e->metadata;
	e->cfg.conninfo = e->conninfo;
	e->cfg.lease_key = e->lease_key;
	e->cfg.owner_id = e->owner_id;
	e->own_owner_id = own_id;
	snprintf(e->ttl_text, sizeof(e->ttl_text), "%" PRId64 " milliseconds", c.ttl_ms);
	e->rng = le_random_u64() | 1;
	if (e->conninfo == NULL || e->lease_key == NULL || e->owner_id == NULL ||
		(c.metadata != NULL && e->metadata == NULL) ||
		pipe2(e->wake, O_NONBLOCK | O_CLOEXEC) != 0 ||
		!le_timer_open(&e->timer_fd, &e->timer_wake))
	{
		le_set_err(err, errlen, "out of memory or file descriptors");
		if (e->wake[0] >= 0)
		{
			close(e->wake[0]);
			close(e->wake[1]);
		}
		le_free_conn_params(e->conn_kw, e->conn_val);
		free(e->conninfo);
		free(e->lease_key);
		free(e->owner_id);
		free(e->metadata);
		free(e);
		return NULL;
	}
	le_sync_init(&e->mu, &e->cv);
	return e;
}

/* Free the SQL texts (build_sql). */
static void
free_sql(le_elector *e)
{
	char	  **texts[] = {
		&e->sql_acquire, &e->sig_acquire, &e->sql_acquire_wait, &e->sig_acquire_wait,
		&e->sql_has_wait, &e->sql_renew, &e->sig_renew, &e->sql_release, &e->sig_release,
		&e->sql_observe, &e->sql_watch, &e->sig_watch
	};

	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
	{
		free(*texts[i]);
		*texts[i] = NULL;
	}
}

/*
 * Build the SQL texts for the extension in schema q (quoted), anew: a
 * start after a failed one may have found another schema.  False if out of
 * memory.
 */
static bool
build_sql(le_elector *e, const char *q)
{
	bool		ok;

	free_sql(e);

	/*
	 * Each call goes through le_exec_gated with its function's signature
	 * (sig_...): only while that is a member of the extension.  The
	 * renewal connection does without the extension lookup of the other
	 * connections (le_open_conn_kw), and on any connection the extension
	 * may have been dropped since, an overload of other argument types that
	 * a call resolves to only then left behind.
	 */
	ok = le_sql_text(true, &e->sql_acquire,
					 "SELECT a.*, " LE_ISO("a.expires_at") " AS expires_iso"
					 " FROM %1$s.le_acquire($1, $2, $3::pg_catalog.interval) a", q);
	ok = le_sql_text(ok, &e->sig_acquire,
					 "%1$s.le_acquire(pg_catalog.text,pg_catalog.text,pg_catalog.interval)", q);
	ok = le_sql_text(ok, &e->sql_acquire_wait,
					 "SELECT a.*, " LE_ISO("a.expires_at") " AS expires_iso"
					 " FROM %1$s.le_acquire($1, $2, $3::pg_catalog.interval, $4::pg_catalog.interval,"
					 " $5::pg_catalog.jsonb) a", q);
	ok = le_sql_text(ok, &e->sig_acquire_wait,
					 "%1$s.le_acquire(pg_catalog.text,pg_catalog.text,pg_catalog.interval,"
					 "pg_catalog.interval,pg_catalog.jsonb)", q);
	/* a function of that signature that is not the extension's does not count */
	ok = ok && (e->sql_has_wait = strdup("SELECT " LE_MEMBER("pg_catalog.to_regprocedure($1)"))) != NULL;
	ok = le_sql_text(ok, &e->sql_renew,
					 "SELECT " LE_ISO("%1$s.le_renew($1, $2, $3::pg_catalog.int8, $4::pg_catalog.interval)"),
					 q);
	ok = le_sql_text(ok, &e->sig_renew,
					 "%1$s.le_renew(pg_catalog.text,pg_catalog.text,pg_catalog.int8,pg_catalog.interval)",
					 q);
	ok = le_sql_release(ok, &e->sql_release, &e->sig_release, q);
	ok = le_sql_text(ok, &e->sql_observe,
					 "SELECT holder, fencing_token, " LE_ISO("expires_at")
					 " FROM %1$s.le_leases WHERE lease_key OPERATOR(pg_catalog.=) $1 AND is_valid", q);
	ok = le_sql_text(ok, &e->sql_watch, "SELECT %1$s.le_watch($1)", q);
	ok = le_sql_text(ok, &e->sig_watch, "%1$s.le_watch(pg_catalog.text)", q);
	return ok;
}

/*
 * How deep arrays and objects nest in a JSON text the server accepted (the
 * server refuses metadata deeper than LE_NOTE_MAX_DEPTH, check.c): brackets outside
 * strings, escapes skipped.
 */
static int
json_depth(const char *s)
{
	int			depth = 0,
				max = 0;
	bool		in_string = false;

	for (; *s; s++)
	{
		if (in_string)
		{
			if (*s == '\\' && s[1])
				s++;
			else if (*s == '"')
				in_string = false;
		}
		else if (*s == '"')
			in_string = true;
		else if (*s == '[' || *s == '{')
			max = ++depth > max ? depth : max;
		else if (*s == ']' || *s == '}')
			depth--;
	}
	return max;
}

/*
 * Metadata to publish: the server must have the 1.1 le_acquire, parse it as
 * jsonb, and it must nest at most 8 levels deep (as the server checks it).
 * LE_ERR_CONFIG otherwise (a permanent error: retrying would not help), found
 * before any lease call, so a refused --metadata changes nothing.
 */
static le_result
check_metadata(le_elector *e, PGconn *conn, char *err, size_t errlen)
{
	const char *values[2] = {e->sig_acquire_wait, e->metadata};
	char		msg[512] = "";
	bool		broken,
				timedout;
	PGresult   *r;
	le_result	rc = LE_OK;

	r = le_exec_bounded(conn, "SELECT " LE_MEMBER("pg_catalog.to_regprocedure($1)")
						", $2::pg_catalog.jsonb IS NOT NULL",
						2, values, le_monotonic_ms() + e->cfg.statement_timeout_ms,
						msg, sizeof(msg), &broken, &timedout);
	if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
	{
		le_set_err(err, errlen, "metadata refused by the server: %s%s%s", le_sqlstate_of(r),
				   le_sqlstate_of(r)[0] ? ": " : "", msg);
		rc = broken || timedout ? LE_ERR_CONNECT : LE_ERR_CONFIG;
	}
	else if (strcmp(PQgetvalue(r, 0, 0), "t") != 0)
	{
		le_set_err(err, errlen, "metadata needs leader_election 1.1 on the server (ALTER EXTENSION leader_election UPDATE)");
		rc = LE_ERR_CONFIG;
	}
	else if (json_depth(e->metadata) > LE_NOTE_MAX_DEPTH)
	{
		le_set_err(err, errlen, "metadata is nested too deeply: arrays and objects nest at most 8 levels deep in it");
		rc = LE_ERR_CONFIG;
	}
	PQclear(r);
	return rc;
}

/* Tell the threads to end and join those that were started (not the dispatcher). */
static void
join_workers(le_elector *e, bool camp, bool renew)
{
	pthread_mutex_lock(&e->mu);
	e->quit = true;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	le_wake_campaign(e);
	le_wake_timer(e);
	if (camp)
		pthread_join(e->camp_thread, NULL);
	if (renew)
		pthread_join(e->renew_thread, NULL);
	if (e->have_timer)
		pthread_join(e->timer_thread, NULL);
	e->have_timer = false;
}

/* Let the dispatcher drain its queue, then join it. */
static void
join_dispatcher(le_elector *e)
{
	if (!e->have_dispatch)
		return;
	pthread_mutex_lock(&e->mu);
	e->dispatch_quit = true;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	pthread_join(e->dispatch_thread, NULL);
	e->have_dispatch = false;
}

/* First connection, extension check, then the threads. */
le_result
le_elector_start(le_elector *e, char *err, size_t errlen)
{
	PGconn	   *conn = NULL;
	le_result	rc;
	char		q[600];

	if (e->started)
	{
		le_set_err(err, errlen, "elector already started");
		return LE_ERR_CONFIG;
	}
	rc = le_first_conn(e->conn_kw, e->conn_val, "campaign", e->cfg.connect_timeout_ms, &conn,
					   e->ext_schema, sizeof(e->ext_schema), q, sizeof(q), err, errlen);
	if (rc != LE_OK)
		return rc;
	if (!build_sql(e, q))
	{
		le_set_err(err, errlen, "out of memory");
		PQfinish(conn);
		return LE_ERR_SYSTEM;
	}
	if (e->metadata != NULL && (rc = check_metadata(e, conn, err, errlen)) != LE_OK)
	{
		PQfinish(conn);
		return rc;
	}
	e->camp_conn = conn;
	e->started = true;
	if (pthread_create(&e->dispatch_thread, NULL, le_dispatch_main, e) != 0)
		goto fail;
	e->have_dispatch = true;
	if (pthread_create(&e->timer_thread, NULL, le_timer_main, e) != 0)
		goto fail;
	e->have_timer = true;
	if (pthread_create(&e->renew_thread, NULL, le_renew_main, e) != 0)
		goto fail;
	if (pthread_create(&e->camp_thread, NULL, le_campaign_main, e) != 0)
	{
		join_workers(e, false, true);
		goto fail_joined;
	}
	return LE_OK;

fail:
	join_workers(e, false, false);
fail_joined:
	join_dispatcher(e);
	le_set_err(err, errlen, "could not start the elector's threads");
	if (e->camp_conn)
		PQfinish(e->camp_conn);
	e->camp_conn = NULL;
	e->started = false;
	e->quit = false;
	e->dispatch_quit = false;
	return LE_ERR_SYSTEM;
}

/* True while leading and before the deadline; the deadline test needs no thread. */
bool
le_elector_is_leader(le_elector *e, le_lease_info *lease)
{
	bool		yes;

	pthread_mutex_lock(&e->mu);
	yes = le_leading_now(e);
	if (lease)
		le_fill_info(e, lease);
	pthread_mutex_unlock(&e->mu);
	return yes;
}

/* A dup of the current period's eventfd (see le_client.h); -1 if not leading. */
int
le_elector_period_fd(le_elector *e, le_lease_info *lease)
{
	int			fd = -1;

	pthread_mutex_lock(&e->mu);
	if (le_leading_now(e) && e->period_fd >= 0)
	{
		fd = fcntl(e->period_fd, F_DUPFD_CLOEXEC, 0);
		if (lease)
			le_fill_info(e, lease);
	}
	else
		errno = ENOENT;
	pthread_mutex_unlock(&e->mu);
	return fd;
}

/* Has an acquire attempt been answered (or failed)?  mu must be held. */
static bool
attempted(le_elector *e)
{
	return e->attempts > 0;
}

/* Wait until cond holds, the elector stops or timeout_ms (-1 forever) passes. */
static bool
wait_for_state(le_elector *e, int64_t timeout_ms, bool (*cond) (le_elector *))
{
	int64_t		until = le_monotonic_ms() + timeout_ms;
	bool		yes;

	pthread_mutex_lock(&e->mu);
	for (;;)
	{
		yes = cond(e);
		if (yes || e->quit || (timeout_ms >= 0 && le_monotonic_ms() >= until))
			break;
		le_cv_wait_until(&e->cv, &e->mu, timeout_ms < 0 ? -1 : until);
	}
	pthread_mutex_unlock(&e->mu);
	return yes;
}

/* Wait for leadership up to timeout_ms (-1 forever). */
bool
le_elector_wait_leader(le_elector *e, int64_t timeout_ms)
{
	return wait_for_state(e, timeout_ms, le_leading_now);
}

/* Wait until at least one acquire attempt was answered or failed. */
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
	st->leading = le_leading_now(e);
	st->fencing_token = e->token;
	st->period = e->period;
	st->attempts = e->attempts;
	st->connected = e->connected;
	le_copy_str(st->holder, sizeof(st->holder), e->have_holder ? e->holder : "");
	le_sanitize(st->holder);
	le_copy_str(st->expires_at, sizeof(st->expires_at), e->expires_at);
	le_errinfo_get(&e->last, &st->last_error, st->last_sqlstate, st->last_message);
	st->owner_conflicts = e->owner_conflicts;
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
	bool		self = false;

	pthread_mutex_lock(&e->mu);
	if (!e->started || e->quit)
	{
		pthread_mutex_unlock(&e->mu);
		return;
	}
	if (e->state == LE_LEADING)
		le_period_end_locked(e, e->period, LE_STOP_RELEASED, NULL);
	e->release_held = false;
	seq = ++e->resign_requested;
	if (e->have_dispatch && pthread_equal(pthread_self(), e->dispatch_thread))
		self = true;			/* from a callback: do not wait */
	pthread_mutex_unlock(&e->mu);
	le_wake_campaign(e);
	if (self)
		return;
	pthread_mutex_lock(&e->mu);
	while (e->resign_done < seq && !e->quit)
		le_cv_wait_until(&e->cv, &e->mu, -1);
	pthread_mutex_unlock(&e->mu);
}

/* Let the campaign thread release a period's lease held back by defer_release. */
void
le_elector_release_period(le_elector *e)
{
	bool		wake;

	pthread_mutex_lock(&e->mu);
	wake = e->release_held;
	if (wake)
	{
		e->release_held = false;
		pthread_cond_broadcast(&e->cv);
	}
	pthread_mutex_unlock(&e->mu);
	if (wake)
		le_wake_campaign(e);
}

/* End leadership (reason "shutdown") and tell the threads to stop; does not wait. */
void
le_elector_request_stop(le_elector *e)
{
	pthread_mutex_lock(&e->mu);
	if (e->started && !e->quit)
	{
		if (e->state == LE_LEADING)
			le_period_end_locked(e, e->period, LE_STOP_SHUTDOWN, NULL);
		e->release_held = false;
		e->quit = true;
		pthread_cond_broadcast(&e->cv);
	}
	pthread_mutex_unlock(&e->mu);
	le_wake_campaign(e);
	le_wake_timer(e);
}

/* Stop: end leadership with "shutdown", release, join the threads, drain callbacks. */
void
le_elector_stop(le_elector *e)
{
	bool		join;

	le_elector_request_stop(e);
	pthread_mutex_lock(&e->mu);
	join = le_stop_claim(e->started, &e->stopped, e->have_dispatch, e->dispatch_thread);
	pthread_mutex_unlock(&e->mu);
	if (!join)
		return;					/* not started, already stopped, or called from a callback */
	join_workers(e, true, true);
	join_dispatcher(e);
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
	close(e->timer_fd);
	close(e->timer_wake);
	if (e->period_fd >= 0)
		close(e->period_fd);
	if (e->camp_conn)
		PQfinish(e->camp_conn);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	le_free_conn_params(e->conn_kw, e->conn_val);
	free_sql(e);
	free(e->conninfo);
	free(e->lease_key);
	free(e->metadata);
	free(e->owner_id);
	free(e);
}
