/*-------------------------------------------------------------------------
 *
 * le_renew.c
 *		The renewal thread of an elector: le_renew every renew interval
 *		while leading, on a connection of its own.
 *
 * Locking rules: the thread owns its connection; it reads the period state
 * under e->mu and changes it only through le_period.c.
 *
 * Time budget.  Each attempt (connect or le_renew) gets at most the
 * statement (or connect) timeout and at most half the time left before the
 * point by which a renewal is wanted (the local deadline - renew_by_ms;
 * pg_leader sets renew_by_ms to its SIGTERM point), so that one hung
 * attempt leaves room for another on a new connection before then; but
 * never less than twice the last round trip seen (three times for a
 * connect), since a shorter attempt cannot succeed.  The connection made
 * when a period begins may use all the time before that point.  After an error the next attempt comes after
 * min(renew/4, 200 ms, a quarter of the time left).  The connection is
 * replaced as soon as a period begins: it may have idled (and died
 * unnoticed) through a long time as a follower.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "le_internal.h"

/* The connection of the renewal thread and what it learnt. */
typedef struct renewer
{
	le_elector *e;
	PGconn	   *conn;
	uint64_t	conn_period;	/* period the connection was made for */
	int64_t		not_before;		/* no attempt before this (after an error) */
	uint64_t	refreshed_for;	/* period whose start replaced the connection */
	int64_t		rtt;			/* the last round trip seen (acquire or renewal) */
	char		msg[512];
} renewer;

/*
 * A new period: replace the connection now (it may have idled, and died
 * unnoticed, through a long time as a follower), so that the first renewal
 * need not connect.  Called with e->mu held; releases it meanwhile.
 */
static void
renew_refresh_conn(renewer *rn, uint64_t period, int64_t deadline, int64_t now)
{
	le_elector *e = rn->e;

	rn->refreshed_for = period;
	/* the acquire's round trip, with the time the news took to reach us */
	rn->rtt = now - e->last_send;
	pthread_mutex_unlock(&e->mu);
	if (rn->conn)
		PQfinish(rn->conn);
	rn->conn = NULL;
	/* not an attempt to renew yet: it may use all the time before renew_by */
	now = le_monotonic_ms();
	if (le_open_conn(e, "renew", false,
					 le_attempt_deadline(e->cfg.renew_by_ms, now, deadline,
										 e->cfg.connect_timeout_ms, deadline - e->cfg.renew_by_ms - now),
					 &rn->conn, rn->msg, sizeof(rn->msg)) == LE_OK)
		rn->conn_period = period;
	else
		rn->conn = NULL;		/* the renewal will try again and report */
	pthread_mutex_lock(&e->mu);
}

/*
 * One renewal attempt of period, on the thread's connection (made anew if
 * needed), and what its answer means for the period.  Called without e->mu.
 */
static void
renew_once(renewer *rn, uint64_t period, int64_t deadline, const char *token_text)
{
	le_elector *e = rn->e;
	const char *values[4];
	int64_t		t_send;
	PGresult   *r;
	bool		broken,
				timedout;
	le_errclass ec;
	const char *state;
	le_result	rc;

	if (rn->conn != NULL && rn->conn_period != period)
	{
		/* a new period: do not trust a connection that idled as a follower */
		PQfinish(rn->conn);
		rn->conn = NULL;
	}
	if (rn->conn == NULL)
	{
		/*
		 * A connect takes a round trip at least (startup), often more (TLS,
		 * authentication); no extension lookup, the gate of le_exec_gated
		 * checks instead.
		 */
		rc = le_open_conn(e, "renew", false,
						  le_attempt_deadline(e->cfg.renew_by_ms, le_monotonic_ms(), deadline,
											  e->cfg.connect_timeout_ms, 3 * rn->rtt),
						  &rn->conn, rn->msg, sizeof(rn->msg));
		if (rc != LE_OK)
		{
			le_notice(e, "renewal connection: %s", rn->msg);
			le_record_error(e, rc, "", rn->msg);
			rn->conn = NULL;
			rn->not_before = le_monotonic_ms() + le_retry_pause(e->cfg.renew_ms, deadline);
			return;
		}
		rn->conn_period = period;
	}

	values[0] = e->lease_key;
	values[1] = e->owner_id;
	values[2] = token_text;
	values[3] = e->ttl_text;
	t_send = le_monotonic_ms();
	rn->msg[0] = '\0';
	r = le_exec_gated(rn->conn, e->sig_renew, e->sql_renew, 4, values,
					  le_attempt_deadline(e->cfg.renew_by_ms, t_send, deadline,
										  e->cfg.statement_timeout_ms, 2 * rn->rtt),
					  rn->msg, sizeof(rn->msg), &broken, &timedout);

	if (r != NULL && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
	{
		rn->rtt = le_monotonic_ms() - t_send;
		if (!PQgetisnull(r, 0, 0))
		{
			le_period_renewed(e, period, t_send, PQgetvalue(r, 0, 0));
			le_record_error(e, LE_OK, "", "");
		}
		else
			le_period_end(e, period, LE_STOP_LOST,
						  "le_renew returned NULL: the lease is no longer held with this token");
		PQclear(r);
		rn->not_before = 0;
		return;
	}

	ec = le_failure_of(r, broken, timedout, &state, &rc);
	le_record_error(e, rc, state, rn->msg);
	if (ec == LE_EC_PERMANENT)
	{
		char		detail[LE_DETAIL_LEN];

		snprintf(detail, sizeof(detail), "SQLSTATE %s: %s", state, rn->msg);
		PQclear(r);
		le_period_end(e, period, LE_STOP_RENEW_FAILED, detail);
		return;
	}
	PQclear(r);
	if (ec == LE_EC_RECONNECT)
	{
		le_notice(e, "renewal failed, reconnecting: %s%s%s", state,
				  state[0] ? ": " : "", rn->msg);
		PQfinish(rn->conn);
		rn->conn = NULL;
	}
	else
		le_notice(e, "renewal failed, retrying: %s: %s", state, rn->msg);
	/* try again soon, well before the deadline (at once on a new connection) */
	rn->not_before = broken ? 0 : le_monotonic_ms() + le_retry_pause(e->cfg.renew_ms, deadline);
}

/* Renew the lease every renew interval while leading, on its own connection. */
void *
le_renew_main(void *arg)
{
	le_elector *e = arg;
	renewer		rn;

	memset(&rn, 0, sizeof(rn));
	rn.e = e;
	le_block_signals();
	pthread_mutex_lock(&e->mu);
	for (;;)
	{
		uint64_t	period;
		int64_t		now,
					next,
					deadline;
		char		token_text[32];

		if (e->quit)
			break;
		if (e->state != LE_LEADING)
		{
			le_cv_wait_until(&e->cv, &e->mu, -1);
			continue;
		}
		period = e->period;
		deadline = e->deadline;
		now = le_monotonic_ms();
		if (now >= deadline)
		{
			/* normally the timer thread was first */
			le_period_end_locked(e, period, LE_STOP_DEADLINE_PASSED,
								 "no renewal was confirmed before the local deadline");
			continue;
		}
		if (rn.refreshed_for != period)
		{
			renew_refresh_conn(&rn, period, deadline, now);
			continue;
		}
		/* a hint renews early, but not more often than every LE_HINT_GAP_MS */
		next = e->last_send + (e->renew_now && LE_HINT_GAP_MS < e->cfg.renew_ms ?
							   LE_HINT_GAP_MS : e->cfg.renew_ms);
		if (next < rn.not_before)
			next = rn.not_before;
		if (now < next)
		{
			le_cv_wait_until(&e->cv, &e->mu, next < deadline ? next : deadline);
			continue;
		}
		e->renew_now = false;
		snprintf(token_text, sizeof(token_text), "%" PRId64, e->token);
		pthread_mutex_unlock(&e->mu);
		renew_once(&rn, period, deadline, token_text);
		pthread_mutex_lock(&e->mu);
	}
	pthread_mutex_unlock(&e->mu);
	if (rn.conn)
		PQfinish(rn.conn);
	return NULL;
}
