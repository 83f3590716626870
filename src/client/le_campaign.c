/*-------------------------------------------------------------------------
 *
 * le_campaign.c
 *		The campaign thread of an elector: le_acquire, leaders, releases.
 *
 * Locking rules: the thread owns its connection; it reads shared state
 * under e->mu and begins periods only through le_period.c.
 *
 * Against extension 1.1 a follower waits inside le_acquire and the
 * connection neither LISTENs nor watches (see listen_on); against 1.0 it
 * LISTENs, watches the lease and polls.  Notifications are unauthenticated
 * (any role may NOTIFY on the channel): they only wake this thread.  While
 * leading, a notification about our key makes the renewal thread renew at
 * once (only the server's answer ends the period); while following, it
 * makes this thread read the lease, and a "released" one makes it campaign
 * at once.
 *
 * Errors: a broken or timed-out connection is replaced; errors that
 * retrying on the same connection cannot fix (permission denied, a standby)
 * back off exponentially (retry interval doubled per failure, capped at
 * LE_BACKOFF_CAP_MS) instead of spinning; a failed connection is tried
 * again after at most twice the retry interval.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "le_internal.h"
#include "le_notify.h"

/* Spread of the immediate re-campaign after a release is announced. */
#define LE_RELEASE_JITTER_MS 10

/* Longest sleep of the campaign loop between looks at the state. */
#define LE_CAMPAIGN_SLICE_MS 1000

/* Campaign-thread state that no other thread sees. */
typedef struct campaign
{
	le_elector *e;
	PGconn	   *conn;
	int64_t		next_attempt;
	int64_t		reconnect_at;	/* no new connection before this (after an error) */
	int64_t		last_attempt;	/* when le_acquire was last sent */
	int			failures;		/* consecutive failed attempts */
	bool		observe_due;	/* a notification asked for a read of the lease */
	int64_t		last_observe;	/* when the lease was last read */
	bool		watching;		/* le_watch succeeded on this connection */
	bool		listening;		/* this connection LISTENs and watches (1.0) */
	bool		yielding;		/* next_attempt lets the others go first */
	bool		unsettled;		/* an le_acquire sent broke or timed out unanswered */
	int			server_wait;	/* le_acquire waits in the server: -1 not known yet */
} campaign;

/*
 * Longest server-side wait of one le_acquire: at most the retry interval, a
 * quarter of the ttl (the client counts its lease from the moment it sent
 * the call, so a grant late in the wait shortens its first period by up to
 * this), half the statement timeout, and the campaign slice (a stop waits
 * for the call to return); none for a single try.
 */
static int64_t
server_wait_ms(const le_elector *e)
{
	int64_t		ms = e->cfg.single_try ? 0 : e->cfg.retry_ms;

	if (ms > e->cfg.ttl_ms / 4)
		ms = e->cfg.ttl_ms / 4;
	if (ms > e->cfg.statement_timeout_ms / 2)
		ms = e->cfg.statement_timeout_ms / 2;
	if (ms > LE_CAMPAIGN_SLICE_MS)
		ms = LE_CAMPAIGN_SLICE_MS;
	return ms;
}

/*
 * Does this connection's server have le_acquire's wait (extension 1.1)?
 * Asked once per connection; an error counts as no (the 1.0 way: polls
 * and NOTIFY).  A function of that signature that is not the extension's
 * (one any role with CREATE on the schema could make beside 1.0) is no.
 */
static bool
has_server_wait(campaign *c)
{
	le_elector *e = c->e;
	const char *values[1] = {e->sig_acquire_wait};
	char		msg[512] = "";
	bool		broken,
				timedout;
	PGresult   *r;

	if (c->server_wait >= 0)
		return c->server_wait == 1;
	r = le_exec_bounded(c->conn, e->sql_has_wait, 1, values,
						le_monotonic_ms() + e->cfg.statement_timeout_ms, msg, sizeof(msg),
						&broken, &timedout);
	c->server_wait = r != NULL && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
		strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	if (c->server_wait && server_wait_ms(e) > 0)
		le_notice(e, "the server waits for the lease (le_acquire with wait, up to %" PRId64 " ms per call)",
				  server_wait_ms(e));
	return c->server_wait == 1;
}

/* The pause after a failed attempt (see le_backoff_ms). */
static int64_t
backoff(campaign *c, bool connect_failed)
{
	le_elector *e = c->e;

	return le_backoff_ms(&e->rng, e->cfg.retry_ms, e->cfg.retry_jitter_pct, c->failures,
						 connect_failed);
}

/* Drop the connection. */
static void
drop_conn(campaign *c)
{
	if (c->conn)
		PQfinish(c->conn);
	c->conn = NULL;
	c->watching = false;
	c->listening = false;
	c->server_wait = -1;
}

/* Count an answered (or failed) acquire attempt; wakes le_elector_wait_attempt. */
static void
count_attempt(le_elector *e)
{
	pthread_mutex_lock(&e->mu);
	e->attempts++;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

/* Best-effort release of a token we no longer lead with; clears pending_release. */
static void
release_token(campaign *c, int64_t token)
{
	le_elector *e = c->e;
	char		token_text[32];
	const char *values[3];
	char		msg[512] = "";
	PGresult   *r;
	bool		broken;

	snprintf(token_text, sizeof(token_text), "%" PRId64, token);
	values[0] = e->lease_key;
	values[1] = e->owner_id;
	values[2] = token_text;
	r = le_exec_gated(c->conn, e->sig_release, e->sql_release, 3, values,
					  le_monotonic_ms() + e->cfg.statement_timeout_ms,
					  msg, sizeof(msg), &broken, NULL);
	if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK)
		le_notice(e, "release of token %" PRId64 " failed: %s", token, msg);
	PQclear(r);
	if (broken)
		drop_conn(c);
	pthread_mutex_lock(&e->mu);
	if (e->pending_release == token)
		e->pending_release = 0;
	pthread_mutex_unlock(&e->mu);
}

/* Read the lease from the server and report its holder. */
static void
observe_lease(campaign *c)
{
	le_elector *e = c->e;
	const char *v1[1] = {e->lease_key};
	char		msg[512] = "";
	bool		broken;
	PGresult   *r;

	c->observe_due = false;
	c->last_observe = le_monotonic_ms();
	r = le_exec_bounded(c->conn, e->sql_observe, 1, v1,
						le_monotonic_ms() + e->cfg.statement_timeout_ms,
						msg, sizeof(msg), &broken, NULL);
	if (r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
		le_observed(e, true, PQgetvalue(r, 0, 0), strtoll(PQgetvalue(r, 0, 1), NULL, 10),
					PQgetvalue(r, 0, 2));
	else if (r && PQresultStatus(r) == PGRES_TUPLES_OK)
		le_observed(e, false, NULL, 0, NULL);
	else
		le_notice(e, "could not read the lease: %s", msg);
	PQclear(r);
	if (broken)
		drop_conn(c);
}

/* Drain notifications (hints only, see the file header). */
static void
handle_notifies(campaign *c)
{
	le_elector *e = c->e;
	PGnotify   *nt;

	while ((nt = PQnotifies(c->conn)) != NULL)
	{
		le_note		n;

		if (strcmp(nt->relname, LE_CHANNEL) == 0 && le_parse_note(nt->extra, &n) &&
			strcmp(n.lease_key, e->lease_key) == 0)
		{
			bool		leading;
			int64_t		lost;

			/* "metadata" (1.1): the holder set new metadata, like "acquired" a holder's news */
			bool		holder_news = strcmp(n.event, "acquired") == 0 || strcmp(n.event, "metadata") == 0;

			pthread_mutex_lock(&e->mu);
			leading = e->state == LE_LEADING;
			lost = e->lost_token;
			/*
			 * While leading, confirm at once what may mean a loss; a payload
			 * that only repeats what we believe (our own acquire) needs no
			 * check.
			 */
			if (leading &&
				!(holder_news && n.has_holder &&
				  strcmp(n.holder, e->owner_id) == 0 && n.has_token && n.token == e->token))
			{
				e->renew_now = true;
				pthread_cond_broadcast(&e->cv);
			}
			pthread_mutex_unlock(&e->mu);
			if (!leading)
				c->observe_due = true;
			/* a release of our own last token is ours: wait for the retry interval */
			if (!leading && !holder_news &&
				!(n.has_token && n.token == lost))
			{
				/* maybe free now: campaign at once, spread a little */
				int64_t		soon = le_monotonic_ms() +
					(int64_t) (le_next_rand(&e->rng) % (LE_RELEASE_JITTER_MS + 1));

				if (soon < c->last_attempt + LE_HINT_GAP_MS)
					soon = c->last_attempt + LE_HINT_GAP_MS;
				if (soon < c->next_attempt)
					c->next_attempt = soon;
			}
		}
		PQfreemem(nt);
	}
	if (c->observe_due && c->conn && le_monotonic_ms() >= c->last_observe + LE_HINT_GAP_MS)
		observe_lease(c);
}

/* Column number of name in r, or -1. */
static int
col(const PGresult *r, const char *name)
{
	return PQfnumber(r, name);
}

/*
 * A grant from not leading that did not start a new ownership period: the
 * lease was already held under our owner id.  True if we must not lead on
 * it: another process holds the lease with our owner id.  Do not lead (both
 * would use one token), do not release (it is theirs); try again after a
 * ttl: if that process is gone by then, the lease will have expired.  But
 * when the owner id is our own (unique to this elector) and an le_acquire
 * of ours went unanswered (its connection broke or it timed out after the
 * commit), the period is that call's grant and its token was never used:
 * lead on it, rather than leave the lease held by nobody for a ttl.
 */
static bool
owner_conflict(campaign *c, int64_t token, bool lost_answer)
{
	le_elector *e = c->e;
	char		m[320];

	if (e->own_owner_id && lost_answer)
	{
		le_notice(e, "token %" PRId64 " was granted to an earlier le_acquire whose answer was lost; leading with it",
				  token);
		return false;
	}
	snprintf(m, sizeof(m),
			 "another process holds lease \"%.80s\" with owner id \"%.80s\" (token %" PRId64 "); owner ids must be unique",
			 e->lease_key, e->owner_id, token);
	le_record_error(e, LE_ERR_OWNER_CONFLICT, "", m);
	le_notice(e, "%s; not leading", m);
	pthread_mutex_lock(&e->mu);
	e->owner_conflicts++;
	pthread_mutex_unlock(&e->mu);
	c->next_attempt = le_monotonic_ms() + e->cfg.ttl_ms +
		le_jittered(&e->rng, e->cfg.retry_ms, e->cfg.retry_jitter_pct);
	return true;
}

/*
 * After the 1.0 le_acquire was not found (42883) or not the extension's on
 * a connection that found 1.0: did an ALTER EXTENSION UPDATE to 1.1 drop
 * it for the one with a wait?  Asked again, once; then the next attempt,
 * which calls that one (checked like any other call), is due at once.
 * False: the extension is missing.
 */
static bool
updated_to_1_1(campaign *c)
{
	c->server_wait = -1;
	if (!has_server_wait(c))
		return false;
	le_notice(c->e, "le_acquire(text, text, interval) is gone (extension updated to 1.1?); calling the 1.1 le_acquire");
	c->next_attempt = le_monotonic_ms();
	return true;
}

/* One le_acquire call; sets c->next_attempt. */
static void
campaign_once(campaign *c)
{
	le_elector *e = c->e;
	char		wait_text[48];
	const char *values[5] = {e->lease_key, e->owner_id, e->ttl_text, wait_text, e->metadata};
	bool		v11 = has_server_wait(c);
	int64_t		wait_ms = v11 ? server_wait_ms(e) : 0;
	bool		waits = wait_ms > 0;
	char		msg[512] = "";
	int64_t		t_send = le_monotonic_ms();
	PGresult   *r;
	bool		broken,
				timedout;
	int64_t		token;
	int			c_acq,
				c_tok,
				c_holder,
				c_exp,
				c_new;
	bool		new_period = true;
	bool		lost_answer;

	c->last_attempt = t_send;
	c->yielding = false;
	snprintf(wait_text, sizeof(wait_text), "%" PRId64 " milliseconds", wait_ms);
	r = le_exec_gated(c->conn, v11 ? e->sig_acquire_wait : e->sig_acquire,
					  v11 ? e->sql_acquire_wait : e->sql_acquire, v11 ? 5 : 3, values,
					  t_send + wait_ms + e->cfg.statement_timeout_ms,
					  msg, sizeof(msg), &broken, &timedout);
	c_acq = r ? col(r, "acquired") : -1;
	c_tok = r ? col(r, "fencing_token") : -1;
	c_holder = r ? col(r, "holder") : -1;
	c_exp = r ? col(r, "expires_iso") : -1;
	c_new = r ? col(r, "new_period") : -1;
	if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 ||
		c_acq < 0 || c_tok < 0 || c_holder < 0 || c_exp < 0)
	{
		const char *state;
		le_result	rc;
		le_errclass ec = le_failure_of(r, broken, timedout, &state, &rc);

		if (!v11 && rc == LE_ERR_NO_EXTENSION && !broken && !timedout && updated_to_1_1(c))
		{
			PQclear(r);
			return;
		}
		if (broken || timedout)
			c->unsettled = true;
		le_record_error(e, rc, state, msg);
		le_notice(e, "acquire failed%s: %s%s%s", ec == LE_EC_RECONNECT ? ", reconnecting" : "",
				  state, state[0] ? ": " : "", msg);
		PQclear(r);
		if (ec != LE_EC_TRANSIENT)
			c->failures++;
		count_attempt(e);
		if (ec == LE_EC_RECONNECT)
		{
			/*
			 * The pause comes before the new connection, whose first
			 * le_acquire then follows at once; the first time (and not
			 * after a timeout) the connection is replaced at once.
			 */
			drop_conn(c);
			c->reconnect_at = le_monotonic_ms() +
				(!timedout && c->failures < 2 ? 0 : backoff(c, false));
			c->next_attempt = 0;
		}
		else
			c->next_attempt = le_monotonic_ms() + backoff(c, false);
		return;
	}
	c->failures = 0;
	lost_answer = c->unsettled;
	c->unsettled = false;
	if (strcmp(PQgetvalue(r, 0, c_acq), "t") != 0)
	{
		char		holder[LE_MAX_OWNER_LEN + 1];
		char		expires[64];
		bool		changed;

		le_copy_str(holder, sizeof(holder), PQgetvalue(r, 0, c_holder));
		le_copy_str(expires, sizeof(expires), PQgetvalue(r, 0, c_exp));
		PQclear(r);
		le_record_error(e, LE_ERR_HELD, "", holder);
		/* polling fallback for observation: learn the token on a change of holder */
		pthread_mutex_lock(&e->mu);
		changed = !e->have_holder || strcmp(e->holder, holder) != 0;
		pthread_mutex_unlock(&e->mu);
		if (changed)
			observe_lease(c);
		count_attempt(e);
		/* after a wait in the server, the next one follows at once */
		c->next_attempt = le_monotonic_ms() +
			(waits ? 0 : le_jittered(&e->rng, e->cfg.retry_ms, e->cfg.retry_jitter_pct));
		return;
	}

	token = strtoll(PQgetvalue(r, 0, c_tok), NULL, 10);
	if (c_new >= 0)
		new_period = strcmp(PQgetvalue(r, 0, c_new), "t") == 0;
	pthread_mutex_lock(&e->mu);
	if (token <= e->lost_token || le_monotonic_ms() >= t_send + e->cfg.ttl_ms - e->cfg.safety_margin_ms)
	{
		/* a token we lost already, or a grant that arrived too late to use */
		e->pending_release = token;
		if (token > e->lost_token)
			e->lost_token = token;
		pthread_mutex_unlock(&e->mu);
		PQclear(r);
		le_notice(e, "not using token %" PRId64 " (lost before or granted too late); releasing it", token);
		count_attempt(e);
		c->next_attempt = le_monotonic_ms();
		return;
	}
	pthread_mutex_unlock(&e->mu);
	if (!new_period && owner_conflict(c, token, lost_answer))
	{
		PQclear(r);
		count_attempt(e);
		return;
	}
	if (!le_period_begin(e, token, t_send, PQgetvalue(r, 0, c_exp)))
	{
		/* stopping, or callbacks far behind: do not lead on this token */
		pthread_mutex_lock(&e->mu);
		e->pending_release = token;
		if (token > e->lost_token)
			e->lost_token = token;
		pthread_mutex_unlock(&e->mu);
		le_notice(e, "not leading with token %" PRId64 " (stopping, or callbacks are behind); releasing it",
				  token);
		c->next_attempt = le_monotonic_ms() + le_jittered(&e->rng, e->cfg.retry_ms, e->cfg.retry_jitter_pct);
	}
	else
	{
		le_record_error(e, LE_OK, "", "");
		c->next_attempt = le_monotonic_ms() + le_jittered(&e->rng, e->cfg.retry_ms, e->cfg.retry_jitter_pct);
		c->yielding = true;
	}
	PQclear(r);
	count_attempt(e);
}

/*
 * le_watch() the lease, after LISTEN (releases notify only while someone
 * watches; in this order no release between the two goes unheard); tried
 * again before every attempt until it succeeded on a connection that
 * LISTENs.  False if the connection broke.
 */
static bool
watch_lease(campaign *c)
{
	le_elector *e = c->e;
	const char *v1[1] = {e->lease_key};
	char		msg[256] = "";
	bool		broken;
	PGresult   *r;

	r = le_exec_gated(c->conn, e->sig_watch, e->sql_watch, 1, v1,
					  le_monotonic_ms() + e->cfg.statement_timeout_ms, msg, sizeof(msg),
					  &broken, NULL);
	c->watching = r != NULL && PQresultStatus(r) == PGRES_TUPLES_OK;
	if (!c->watching)
		le_notice(e, "le_watch failed, releases may not be announced to us until it succeeds (polling every retry interval): %s",
				  msg);
	PQclear(r);
	if (broken)
		drop_conn(c);
	return !broken;
}

/*
 * On a new connection.  Where le_acquire waits in the server (1.1): nothing,
 * for the server grants the lease to the waiter at a release's commit or at
 * the expiry instant, and a watched lease's release would send a NOTIFY,
 * which makes the server serialize notifying commits.  Else (1.0): LISTEN on
 * the extension's channel, then watch the lease (its releases are announced)
 * and poll every retry interval.  False if the connection broke.
 */
static bool
listen_on(campaign *c)
{
	le_elector *e = c->e;
	char		msg[256] = "";
	bool		broken;
	PGresult   *r;

	if (has_server_wait(c) && server_wait_ms(e) > 0)
		return true;
	if (c->conn == NULL)
		return false;
	c->listening = true;
	r = le_exec_bounded(c->conn, "LISTEN " LE_CHANNEL, 0, NULL,
						le_monotonic_ms() + e->cfg.statement_timeout_ms, msg, sizeof(msg),
						&broken, NULL);
	if (r == NULL || PQresultStatus(r) != PGRES_COMMAND_OK)
		le_notice(e, "LISTEN failed, falling back to polling every retry interval: %s", msg);
	PQclear(r);
	if (broken)
	{
		drop_conn(c);
		return false;
	}
	return watch_lease(c);
}

/*
 * While a follower lets the others go first after its own period, against
 * a server that waits (1.1): does someone else hold the lease now?  Then
 * its release or expiry is what the follower waits for in le_acquire, as a
 * notification of that release would end the pause against 1.0.  The lease
 * is read at most every server wait; when it is free (our own release) the
 * pause goes on.
 */
static bool
other_holds(campaign *c)
{
	le_elector *e = c->e;
	bool		other;

	if (!c->yielding || c->listening || c->server_wait != 1 ||
		le_monotonic_ms() < c->last_observe + server_wait_ms(c->e))
		return false;
	observe_lease(c);
	pthread_mutex_lock(&e->mu);
	other = e->have_holder && strcmp(e->holder, e->owner_id) != 0;
	pthread_mutex_unlock(&e->mu);
	return other && c->conn != NULL;
}

/*
 * Sleep until the next attempt (without a connection: until the next
 * connection is due; while yielding against 1.1, until the next read of the
 * lease), a notification, a wake-up or one slice.
 */
static void
sleep_campaign(campaign *c, bool leading)
{
	le_elector *e = c->e;
	int64_t		now = le_monotonic_ms();
	int64_t		due = c->conn ? c->next_attempt : c->reconnect_at;
	int64_t		timeout = leading ? LE_CAMPAIGN_SLICE_MS : due - now;
	struct pollfd fds[2];
	int			nfds = 1;

	if (c->observe_due && c->last_observe + LE_HINT_GAP_MS - now < timeout)
		timeout = c->last_observe + LE_HINT_GAP_MS - now;
	if (!leading && c->yielding && !c->listening && c->server_wait == 1 &&
		c->last_observe + server_wait_ms(e) - now < timeout)
		timeout = c->last_observe + server_wait_ms(e) - now;
	if (timeout < 0)
		timeout = 0;
	if (timeout > LE_CAMPAIGN_SLICE_MS)
		timeout = LE_CAMPAIGN_SLICE_MS;
	fds[0].fd = e->wake[0];
	fds[0].events = POLLIN;
	if (c->conn)
	{
		fds[1].fd = PQsocket(c->conn);
		fds[1].events = POLLIN;
		nfds = 2;
	}
	if (poll(fds, nfds, (int) timeout) > 0)
	{
		if (fds[0].revents)
		{
			char		buf[64];

			while (read(e->wake[0], buf, sizeof(buf)) == (ssize_t) sizeof(buf))
				;
		}
		if (nfds == 2 && fds[1].revents && !PQconsumeInput(c->conn))
		{
			char		msg[512];

			le_copy_msg(msg, sizeof(msg), PQerrorMessage(c->conn));
			le_notice(e, "campaign connection lost: %s", msg);
			drop_conn(c);
		}
	}
}

/* Campaign, observe and release, on the campaign connection. */
void *
le_campaign_main(void *arg)
{
	campaign	cs = {.e = arg, .server_wait = -1};
	campaign   *c = &cs;
	le_elector *e = c->e;
	char		msg[512];

	le_block_signals();
	pthread_mutex_lock(&e->mu);
	c->conn = e->camp_conn;
	e->camp_conn = NULL;
	pthread_mutex_unlock(&e->mu);
	if (c->conn)
		listen_on(c);

	for (;;)
	{
		bool		quit,
					leading;
		uint64_t	resign_seq;
		bool		resign;
		int64_t		release;
		bool		held;

		pthread_mutex_lock(&e->mu);
		quit = e->quit;
		leading = e->state == LE_LEADING;
		resign_seq = e->resign_requested;
		resign = resign_seq != e->resign_done;
		release = e->release_held ? 0 : e->pending_release;
		held = e->release_held;
		e->connected = c->conn != NULL;
		pthread_mutex_unlock(&e->mu);

		if (c->conn == NULL && !quit && !resign && le_monotonic_ms() < c->reconnect_at)
		{
			/* the pause after an error, before the new connection */
			sleep_campaign(c, false);
			continue;
		}
		if (c->conn == NULL && (!quit || release > 0))
		{
			le_result	rc = le_open_conn(e, "campaign", true,
										  le_monotonic_ms() + e->cfg.connect_timeout_ms,
										  &c->conn, msg, sizeof(msg));

			if (rc == LE_OK && !listen_on(c))
				snprintf(msg, sizeof(msg), "connection lost right after connecting");
			if (c->conn == NULL)
			{
				le_notice(e, "campaign connection: %s", msg);
				if (quit)
					break;		/* cannot release; the lease will expire */
				le_record_error(e, rc == LE_OK ? LE_ERR_CONNECT : rc, "", msg);
				c->failures++;
				pthread_mutex_lock(&e->mu);
				if (!leading)
					e->attempts++;
				if (resign)
					e->resign_done = resign_seq;
				pthread_cond_broadcast(&e->cv);
				pthread_mutex_unlock(&e->mu);
				/* the next connection after a pause, and le_acquire on it at once */
				c->reconnect_at = le_monotonic_ms() + backoff(c, true);
				c->next_attempt = 0;
				continue;
			}
			le_notice(e, "campaign connection established");
		}

		if (release > 0 && c->conn)
			release_token(c, release);
		if (resign)
		{
			/* campaign again only after one retry interval: let the others go first */
			c->next_attempt = le_monotonic_ms() +
				le_jittered(&e->rng, e->cfg.retry_ms, e->cfg.retry_jitter_pct);
			c->yielding = true;
			pthread_mutex_lock(&e->mu);
			e->resign_done = resign_seq;
			pthread_cond_broadcast(&e->cv);
			pthread_mutex_unlock(&e->mu);
		}
		if (quit)
			break;
		if (c->conn == NULL)
			continue;

		/* not while the caller holds back the release of our last period */
		if (!leading && !held && le_monotonic_ms() < c->next_attempt && other_holds(c))
			c->next_attempt = le_monotonic_ms();
		if (!leading && !held && c->conn && le_monotonic_ms() >= c->next_attempt)
		{
			if (c->listening && !c->watching && !watch_lease(c))
				continue;
			campaign_once(c);
			if (c->conn)
				handle_notifies(c);
			continue;
		}
		sleep_campaign(c, leading || held);	/* no busy wait while held */
		if (c->conn)
			handle_notifies(c);
	}
	drop_conn(c);
	pthread_mutex_lock(&e->mu);
	e->connected = false;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	return NULL;
}
