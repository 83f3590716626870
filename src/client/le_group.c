/*-------------------------------------------------------------------------
 *
 * le_group.c
 *		A member of a partition group: heartbeats le_group_heartbeat on a
 *		thread and connection of its own, keeps a local deadline per
 *		partition, revokes partitions locally, releases them and leaves.
 *
 * The invariant: le_group_member_owns() is true for a partition only before
 * its local deadline, (send time of the last heartbeat that renewed it) +
 * ttl - safety margin, checked against the clock on every call; and the
 * lease of a revoked partition is released only after its on_revoked
 * returned (defer_release: after le_group_member_release) or its deadline
 * passed (not with defer_release).  A token once revoked is never used
 * again.
 *
 * Locking rules: all shared state lives in struct le_group_member under
 * m->mu, except the fields marked immutable; the heartbeat thread alone
 * uses the connection; no lock is held across network I/O or a callback.
 * Threads (heartbeat, timer, dispatcher) and the life of a partition
 * entry: see "The group member" in src/README.md.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "le_internal.h"

#define LE_MAX_GROUP_LEN	63		/* le_group_create's name rule */
#define LE_MAX_MEMBER_LEN	120		/* le_group_heartbeat's member id rule */
#define LE_MAX_PARTITIONS	16384
#define LE_GROUP_NOTICES	32		/* notices waiting for the dispatcher */

typedef struct gpart gpart;

/* A callback of one partition entry, in the dispatcher's queue. */
typedef struct gevent
{
	struct gevent *next;
	gpart	   *part;
	bool		revoked;		/* on_revoked, else on_assigned */
	le_partition_info info;		/* as it was when queued */
	le_stop_reason reason;
	char		detail[160];
} gevent;

/*
 * One partition under one token, from its grant until its lease was
 * released (or found not to be ours) and its on_revoked returned.
 */
struct gpart
{
	gpart	   *prev,
			   *next;			/* m->head .. m->tail, oldest first */
	int			partition;
	char		key[LE_PARTITION_KEY_LEN];
	int64_t		token;
	int64_t		deadline;		/* local deadline (le_monotonic_ms) */
	char		expires_at[64];
	uint64_t	seen;			/* number of the heartbeat that last listed it */
	bool		revoked;		/* no longer to be worked on */
	bool		need_release;	/* its lease is to be released once allowed */
	bool		handed_back;	/* defer_release: le_group_member_release was called */
	bool		released;		/* the release was done (or given up) */
	bool		told;			/* its on_revoked returned (or none was due) */
	gevent		ev_assigned;
	gevent		ev_revoked;
};

struct le_group_member
{
	/* immutable after le_group_member_create / le_group_member_start */
	le_group_config cfg;
	char	   *conninfo;
	char	   *group;
	char	   *member_id;
	bool		own_member_id;	/* made by le_default_id, unique to this member */
	char		ttl_text[48];
	const char **conn_kw;
	const char **conn_val;
	char		ext_schema[256];	/* the extension's schema on the first connection */
	/* each call's signature, for le_exec_gated */
	char	   *sql_heartbeat;
	char	   *sig_heartbeat;
	char	   *sql_release;
	char	   *sig_release;
	char	   *sql_leave;
	char	   *sig_leave;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	int			timer_fd;		/* timerfd on CLOCK_BOOTTIME: the next deadline */
	int			timer_wake;		/* eventfd: wakes the timer thread */

	/* everything below is protected by mu */
	bool		started;
	bool		stopped;
	bool		leaving;		/* stop requested: no more heartbeats, then leave */
	bool		hb_done;		/* the heartbeat thread has ended */
	bool		quit;			/* the timer thread must end */
	bool		dispatch_quit;	/* the dispatcher ends once its queue is empty */
	bool		member;			/* membership valid by the local clock */
	int64_t		member_token;	/* of our membership, 0 before the first join */
	int64_t		deadline;		/* the membership's local deadline */
	int64_t		last_send;		/* send time of the last heartbeat that renewed it */
	char		expires_at[64];
	int			unused;			/* leases of the last heartbeat released unused */
	uint64_t	hb_seq;			/* heartbeats answered */
	uint64_t	heartbeats;		/* heartbeat attempts answered or failed */
	bool		connected;
	int			pending;
	le_errinfo	last;			/* of the last heartbeat */
	bool		last_permanent; /* ... an error that retrying cannot fix */
	uint64_t	owner_conflicts;
	gpart	   *head;
	gpart	   *tail;
	gpart	  **by_part;		/* newest entry of each partition, or NULL */
	int			n_by_part;
	gevent	   *q_head;			/* callbacks to deliver, in order */
	gevent	   *q_tail;
	char		notices[LE_GROUP_NOTICES][LE_DETAIL_LEN];
	unsigned	n_head;
	unsigned	n_len;
	uint64_t	dropped;
	bool		dispatching;
	uint64_t	rng;			/* jitter; heartbeat thread only */

	pthread_t	hb_thread;
	pthread_t	timer_thread;
	pthread_t	dispatch_thread;
	bool		have_hb;
	bool		have_timer;
	bool		have_dispatch;
	PGconn	   *first_conn;		/* handed from start to the heartbeat thread */
};

/* Heartbeat-thread state that no other thread sees. */
typedef struct hbconn
{
	le_group_member *m;
	PGconn	   *conn;
	int64_t		rtt;			/* the last round trip seen */
	int			failures;		/* consecutive failed heartbeats */
	int64_t		next_attempt;	/* no heartbeat before this (after an error) */
	bool		unsettled;		/* a heartbeat sent broke or timed out unanswered */
	char		msg[512];
} hbconn;

/* What a heartbeat's answer was. */
typedef enum hb_outcome
{
	HB_APPLIED,
	HB_CONFLICT,				/* another process uses our member id */
	HB_BAD_ANSWER
} hb_outcome;

/* Defaults: ttl 15 s, retry 2 s +/- 20%, timeouts 5 s; heartbeat from the ttl. */
void
le_group_config_init(le_group_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->conninfo = "";
	cfg->ttl_ms = 15000;
	cfg->retry_ms = 2000;
	cfg->retry_jitter_pct = 20;
	cfg->connect_timeout_ms = 5000;
	cfg->statement_timeout_ms = 5000;
}

/* Wake the timer thread (a deadline changed, or it must quit). */
static void
wake_timer(le_group_member *m)
{
	le_timer_wake(m->timer_wake);
}

/* Queue a notice for on_notice; dropped (and counted) when the ring is full. */
static void
group_notice(le_group_member *m, const char *fmt,...) pg_attribute_printf_le(2, 3);

static void
group_notice(le_group_member *m, const char *fmt,...)
{
	va_list		ap;
	char	   *slot;

	if (m->cfg.on_notice == NULL)
		return;
	pthread_mutex_lock(&m->mu);
	if (m->n_len == LE_GROUP_NOTICES)
	{
		m->dropped++;
		pthread_mutex_unlock(&m->mu);
		return;
	}
	slot = m->notices[(m->n_head + m->n_len) % LE_GROUP_NOTICES];
	m->n_len++;
	va_start(ap, fmt);
	vsnprintf(slot, LE_DETAIL_LEN, fmt, ap);
	va_end(ap);
	le_sanitize(slot);
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
}

/* Remember the outcome of the last heartbeat; mu must be held. */
static void
record_error_locked(le_group_member *m, le_result rc, const char *sqlstate, const char *msg)
{
	le_errinfo_set(&m->last, rc, sqlstate, msg);
	m->last_permanent = false;
}

/* record_error_locked, taking mu, and count the attempt. */
static void
record_heartbeat(le_group_member *m, le_result rc, const char *sqlstate, const char *msg)
{
	pthread_mutex_lock(&m->mu);
	record_error_locked(m, rc, sqlstate, msg);
	m->heartbeats++;
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
}

/* Fill a partition info from entry p; mu must be held. */
static void
fill_info(const gpart *p, le_partition_info *info, int64_t now)
{
	memset(info, 0, sizeof(*info));
	info->partition = p->partition;
	le_copy_str(info->lease_key, sizeof(info->lease_key), p->key);
	info->fencing_token = p->token;
	le_copy_str(info->expires_at, sizeof(info->expires_at), p->expires_at);
	info->deadline_ms = p->deadline;
	info->owned = !p->revoked && now < p->deadline;
}

/* Append a callback event to the dispatcher's queue; mu must be held. */
static void
push_event(le_group_member *m, gevent *ev)
{
	ev->next = NULL;
	if (m->q_tail)
		m->q_tail->next = ev;
	else
		m->q_head = ev;
	m->q_tail = ev;
	pthread_cond_broadcast(&m->cv);
}

/*
 * Free entry p once nothing refers to it any more: its on_revoked has
 * returned, with defer_release the caller handed it back, and its lease
 * was released or need not be.  Until then a heartbeat that lists its
 * token again finds it revoked (a lease of an ended membership that the
 * server renews under the next one is ours: released only once handed
 * back).  mu must be held.
 */
static void
maybe_free(le_group_member *m, gpart *p)
{
	if (!p->revoked || !p->told || (p->need_release && !p->released) ||
		(m->cfg.defer_release && !p->handed_back))
		return;
	if (p->prev)
		p->prev->next = p->next;
	else
		m->head = p->next;
	if (p->next)
		p->next->prev = p->prev;
	else
		m->tail = p->prev;
	if (p->partition < m->n_by_part && m->by_part[p->partition] == p)
		m->by_part[p->partition] = NULL;
	free(p);
}

/*
 * Revoke entry p locally, once: it is no longer worked on, its
 * on_revoked is queued, and (unless the lease is known to be someone
 * else's) its token is to be released once allowed.  If its deadline has
 * passed, the reason is "deadline_passed" whatever was noticed.  mu must
 * be held.
 */
static void
revoke_locked(le_group_member *m, gpart *p, le_stop_reason reason, const char *detail)
{
	int64_t		now = le_monotonic_ms();

	if (p->revoked)
		return;
	p->revoked = true;
	if (now >= p->deadline && reason != LE_STOP_DEADLINE_PASSED)
	{
		reason = LE_STOP_DEADLINE_PASSED;
		detail = "the local deadline passed before this was noticed";
	}
	p->need_release = reason != LE_STOP_LOST;
	fill_info(p, &p->ev_revoked.info, now);
	p->ev_revoked.part = p;
	p->ev_revoked.revoked = true;
	p->ev_revoked.reason = reason;
	le_copy_str(p->ev_revoked.detail, sizeof(p->ev_revoked.detail), detail ? detail : "");
	le_sanitize(p->ev_revoked.detail);
	push_event(m, &p->ev_revoked);
	wake_timer(m);
}

/* Revoke every entry still owned; mu must be held. */
static void
revoke_all_locked(le_group_member *m, le_stop_reason reason, const char *detail)
{
	for (gpart *p = m->head; p != NULL; p = p->next)
		revoke_locked(m, p, reason, detail);
}

/*
 * A new entry for partition under token, newest of its partition (the
 * slot array grows as needed); NULL when out of memory.  silent: a lease
 * to release without ever working on it (no callbacks).  mu must be held.
 */
static gpart *
add_entry(le_group_member *m, int partition, const char *key, int64_t token,
		  int64_t deadline, const char *expires_at, uint64_t seen, bool silent)
{
	gpart	   *p;

	if (partition >= m->n_by_part)
	{
		int			n = partition + 1 > 2 * m->n_by_part ? partition + 1 : 2 * m->n_by_part;
		gpart	  **grown = realloc(m->by_part, n * sizeof(gpart *));

		if (grown == NULL)
			return NULL;
		memset(grown + m->n_by_part, 0, (n - m->n_by_part) * sizeof(gpart *));
		m->by_part = grown;
		m->n_by_part = n;
	}
	if ((p = calloc(1, sizeof(*p))) == NULL)
		return NULL;
	p->partition = partition;
	le_copy_str(p->key, sizeof(p->key), key);
	le_sanitize(p->key);
	p->token = token;
	p->deadline = deadline;
	le_copy_str(p->expires_at, sizeof(p->expires_at), expires_at);
	le_sanitize(p->expires_at);
	p->seen = seen;
	p->prev = m->tail;
	if (m->tail)
		m->tail->next = p;
	else
		m->head = p;
	m->tail = p;
	m->by_part[partition] = p;
	if (silent)
	{
		p->revoked = p->need_release = p->handed_back = p->told = true;
		return p;
	}
	fill_info(p, &p->ev_assigned.info, le_monotonic_ms());
	p->ev_assigned.part = p;
	push_event(m, &p->ev_assigned);
	wake_timer(m);
	return p;
}

/* Column numbers of a heartbeat's answer. */
typedef struct hb_cols
{
	int			partition,
				key,
				token,
				expires,
				state,
				new_period;
} hb_cols;

/*
 * One partition row of a heartbeat sent at t_send (mu held): renew or
 * revoke what we hold with its token; a token we do not hold is a new
 * grant to work on (owned, new period, in time), or else a lease of ours
 * by member id and role to release without working on it (a grant that
 * came too late, or one of an earlier incarnation of this member id).
 */
static void
apply_row(le_group_member *m, PGresult *r, int i, const hb_cols *c, int64_t deadline, bool late)
{
	const char *state = PQgetvalue(r, i, c->state);
	int			partition = atoi(PQgetvalue(r, i, c->partition));
	int64_t		token = strtoll(PQgetvalue(r, i, c->token), NULL, 10);
	bool		owned = strcmp(state, "owned") == 0;
	bool		fresh = strcmp(PQgetvalue(r, i, c->new_period), "t") == 0;
	gpart	   *cur;

	if (strcmp(state, "pending") == 0)
	{
		m->pending++;
		return;
	}
	if ((!owned && strcmp(state, "revoke") != 0) || PQgetisnull(r, i, c->partition) ||
		partition < 0 || partition >= LE_MAX_PARTITIONS || token <= 0)
		return;					/* nothing of ours */
	cur = partition < m->n_by_part ? m->by_part[partition] : NULL;
	if (cur && cur->token == token)
	{
		cur->seen = m->hb_seq;
		if (cur->revoked)
			return;				/* released once allowed; never used again */
		if (!owned)
			revoke_locked(m, cur, LE_STOP_REVOKED,
						  "the server moves the partition to another member");
		else if (!late)
		{
			cur->deadline = deadline;
			le_copy_str(cur->expires_at, sizeof(cur->expires_at), PQgetvalue(r, i, c->expires));
			le_sanitize(cur->expires_at);
		}
		return;
	}
	if (cur && !cur->revoked)
		revoke_locked(m, cur, LE_STOP_LOST, "the partition was granted again with another token");
	if (add_entry(m, partition, PQgetvalue(r, i, c->key), token, deadline,
				  PQgetvalue(r, i, c->expires), m->hb_seq, !(owned && fresh && !late)) == NULL)
		record_error_locked(m, LE_ERR_SYSTEM, "", "out of memory for a partition");
	else if (!(owned && fresh && !late))
		m->unused++;
}

/*
 * Apply the answer of a heartbeat sent at t_send; mu must be held.  The
 * membership row comes first: a membership that is not new and not the
 * one we hold is another process's (HB_CONFLICT), unless lost_answer (an
 * earlier heartbeat of ours went unanswered, under a member id unique to
 * us) and its token is later than any we had: then that heartbeat began
 * it.  A new one after ours means ours ended (its partitions with it).
 * Partitions a heartbeat no longer lists are no longer ours.
 */
static hb_outcome
apply_heartbeat(le_group_member *m, PGresult *r, int64_t t_send, bool lost_answer)
{
	hb_cols		c;
	int			n = PQntuples(r);
	int			mrow = -1;
	int64_t		now = le_monotonic_ms();
	int64_t		deadline = t_send + m->cfg.ttl_ms - m->cfg.safety_margin_ms;
	bool		late = now >= deadline;
	int64_t		mtoken;
	bool		mnew;

	c.partition = PQfnumber(r, "partition");
	c.key = PQfnumber(r, "lease_key");
	c.token = PQfnumber(r, "fencing_token");
	c.expires = PQfnumber(r, "expires_iso");
	c.state = PQfnumber(r, "state");
	c.new_period = PQfnumber(r, "new_period");
	if (c.partition < 0 || c.key < 0 || c.token < 0 || c.expires < 0 || c.state < 0 || c.new_period < 0)
		return HB_BAD_ANSWER;
	for (int i = 0; i < n && mrow < 0; i++)
		if (strcmp(PQgetvalue(r, i, c.state), "member") == 0)
			mrow = i;
	if (mrow < 0)
		return HB_BAD_ANSWER;
	mtoken = strtoll(PQgetvalue(r, mrow, c.token), NULL, 10);
	mnew = strcmp(PQgetvalue(r, mrow, c.new_period), "t") == 0;
	if (!mnew && mtoken != m->member_token)
	{
		if (!lost_answer || mtoken < m->member_token)
		{
			revoke_all_locked(m, LE_STOP_LOST, "another process holds our membership");
			m->owner_conflicts++;
			return HB_CONFLICT;
		}
		mnew = true;			/* begun by the heartbeat whose answer was lost */
	}
	if (mnew && m->member_token != 0)
		revoke_all_locked(m, LE_STOP_LOST, "our membership had ended: joined the group again");
	m->member_token = mtoken;
	m->hb_seq++;
	if (!late)
	{
		m->member = true;
		m->deadline = deadline;
		m->last_send = t_send;
		le_copy_str(m->expires_at, sizeof(m->expires_at), PQgetvalue(r, mrow, c.expires));
	}
	m->pending = 0;
	m->unused = 0;
	for (int i = 0; i < n; i++)
		if (i != mrow)
			apply_row(m, r, i, &c, deadline, late);
	for (gpart *p = m->head; p != NULL; p = p->next)
		if (!p->revoked && p->seen != m->hb_seq)
			revoke_locked(m, p, LE_STOP_LOST, "the heartbeat no longer lists it as ours");
	pthread_cond_broadcast(&m->cv);
	wake_timer(m);
	return HB_APPLIED;
}

/* Drop the heartbeat connection. */
static void
drop_conn(hbconn *hc)
{
	if (hc->conn)
		PQfinish(hc->conn);
	hc->conn = NULL;
}

/*
 * Deadline of one attempt (connect, heartbeat, release): while we are a
 * member, sized like a renewal to the membership's deadline (see
 * le_attempt_deadline); otherwise the plain bound.  floor: the least time
 * it can succeed in.
 */
static int64_t
attempt_deadline(hbconn *hc, int64_t cap, int64_t floor)
{
	le_group_member *m = hc->m;
	int64_t		now = le_monotonic_ms();
	int64_t		deadline;
	bool		member;

	pthread_mutex_lock(&m->mu);
	member = m->member && now < m->deadline;
	deadline = m->deadline;
	pthread_mutex_unlock(&m->mu);
	return member ? le_attempt_deadline(m->cfg.renew_by_ms, now, deadline, cap, floor) : now + cap;
}

/* Make the connection if there is none; false (with a notice) when that failed. */
static bool
ensure_conn(hbconn *hc)
{
	le_group_member *m = hc->m;
	le_result	rc;

	if (hc->conn)
		return true;
	/* a connect takes two round trips at least (startup, extension check) */
	rc = le_open_conn_kw(m->conn_kw, m->conn_val, "group",
						 attempt_deadline(hc, m->cfg.connect_timeout_ms, 3 * hc->rtt),
						 m->ext_schema, &hc->conn, NULL, 0, hc->msg, sizeof(hc->msg));
	if (rc == LE_OK)
	{
		group_notice(m, "group connection established");
		return true;
	}
	group_notice(m, "group connection: %s", hc->msg);
	record_heartbeat(m, rc, "", hc->msg);
	return false;
}

/*
 * The pause before the next heartbeat after a failure: while a member,
 * short (a retry must fit before the deadline, le_retry_pause); otherwise
 * the back-off of the campaign (le_backoff_ms).
 */
static int64_t
failure_pause(hbconn *hc, bool connect_failed)
{
	le_group_member *m = hc->m;
	int64_t		deadline;
	bool		member;

	pthread_mutex_lock(&m->mu);
	member = m->member && le_monotonic_ms() < m->deadline;
	deadline = m->deadline;
	pthread_mutex_unlock(&m->mu);
	if (member)
		return le_retry_pause(m->cfg.heartbeat_ms, deadline);
	return le_backoff_ms(&m->rng, m->cfg.retry_ms, m->cfg.retry_jitter_pct, hc->failures,
						 connect_failed);
}

/* A heartbeat that could not be used: record and report it, and pause. */
static void
heartbeat_failed(hbconn *hc, PGresult *r, bool broken, bool timedout)
{
	le_group_member *m = hc->m;
	const char *state;
	le_result	rc;
	le_errclass ec = le_failure_of(r, broken, timedout, &state, &rc);

	hc->failures++;
	if (broken || timedout)
		hc->unsettled = true;
	if (ec == LE_EC_PERMANENT)
	{
		char		detail[LE_DETAIL_LEN];

		snprintf(detail, sizeof(detail), "SQLSTATE %s: %s", state, hc->msg);
		pthread_mutex_lock(&m->mu);
		record_error_locked(m, rc, state, hc->msg);
		m->last_permanent = true;
		m->heartbeats++;
		revoke_all_locked(m, LE_STOP_RENEW_FAILED, detail);
		pthread_mutex_unlock(&m->mu);
		group_notice(m, "heartbeat failed: %s", detail);
		hc->next_attempt = le_monotonic_ms() + le_backoff_ms(&m->rng, m->cfg.retry_ms,
															 m->cfg.retry_jitter_pct,
															 hc->failures, false);
		return;
	}
	record_heartbeat(m, rc, state, hc->msg);
	group_notice(m, "heartbeat failed, %s: %s%s%s", ec == LE_EC_RECONNECT ? "reconnecting" : "retrying",
				 state, state[0] ? ": " : "", hc->msg);
	if (ec == LE_EC_RECONNECT)
		drop_conn(hc);
	/* a broken connection of a member is replaced at once */
	hc->next_attempt = le_monotonic_ms() + (broken && !timedout && hc->failures < 2 ? 0 :
											failure_pause(hc, false));
}

/* One heartbeat (connecting first if needed) and what its answer means. */
static void
heartbeat_once(hbconn *hc)
{
	le_group_member *m = hc->m;
	const char *values[3] = {m->group, m->member_id, m->ttl_text};
	int64_t		t_send;
	PGresult   *r;
	bool		broken,
				timedout;
	hb_outcome	out;
	int			unused;
	bool		lost_answer;

	if (!ensure_conn(hc))
	{
		hc->failures++;
		hc->next_attempt = le_monotonic_ms() + failure_pause(hc, true);
		return;
	}
	t_send = le_monotonic_ms();
	hc->msg[0] = '\0';
	r = le_exec_gated(hc->conn, m->sig_heartbeat, m->sql_heartbeat, 3, values,
					  attempt_deadline(hc, m->cfg.statement_timeout_ms, 2 * hc->rtt),
					  hc->msg, sizeof(hc->msg), &broken, &timedout);
	if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK)
	{
		heartbeat_failed(hc, r, broken, timedout);
		PQclear(r);
		return;
	}
	hc->rtt = le_monotonic_ms() - t_send;
	lost_answer = hc->unsettled && m->own_member_id;
	hc->unsettled = false;
	pthread_mutex_lock(&m->mu);
	out = apply_heartbeat(m, r, t_send, lost_answer);
	unused = m->unused;
	pthread_mutex_unlock(&m->mu);
	PQclear(r);
	if (out == HB_APPLIED)
	{
		hc->failures = 0;
		hc->next_attempt = 0;
		record_heartbeat(m, LE_OK, "", "");
		if (unused > 0)
			group_notice(m, "releasing %d partition lease(s) held under our member id without using them "
						 "(granted too late to use, or not granted to this process)", unused);
		return;
	}
	if (out == HB_BAD_ANSWER)
	{
		snprintf(hc->msg, sizeof(hc->msg), "le_group_heartbeat gave an answer without its membership row");
		record_heartbeat(m, LE_ERR_SQL, "", hc->msg);
		group_notice(m, "%s", hc->msg);
		hc->failures++;
		hc->next_attempt = le_monotonic_ms() + failure_pause(hc, false);
		return;
	}

	/*
	 * Another process holds the membership of our member id (and role):
	 * work on nothing, release nothing (it is theirs), and try again after
	 * a ttl: if that process is gone by then, the membership has expired.
	 */
	snprintf(hc->msg, sizeof(hc->msg),
			 "another process is member \"%.120s\" of group \"%.63s\"; member ids must be unique",
			 m->member_id, m->group);
	record_heartbeat(m, LE_ERR_OWNER_CONFLICT, "", hc->msg);
	group_notice(m, "%s; not working on any partition", hc->msg);
	hc->next_attempt = le_monotonic_ms() + m->cfg.ttl_ms +
		le_jittered(&m->rng, m->cfg.retry_ms, m->cfg.retry_jitter_pct);
}

/*
 * Run one statement about a lease (a release, the leave), connecting first
 * if needed, once more on a new connection if the first broke.  Returns
 * its result (or NULL); *broken tells whether the connection broke.
 */
static PGresult *
lease_call(hbconn *hc, const char *sig, const char *sql, int n, const char *const *values,
		   bool *gone)
{
	le_group_member *m = hc->m;
	PGresult   *r = NULL;
	bool		broken = true,
				timedout;

	for (int try = 0; try < 2 && broken; try++)
	{
		if (!ensure_conn(hc))
			break;
		r = le_exec_gated(hc->conn, sig, sql, n, values,
						  attempt_deadline(hc, m->cfg.statement_timeout_ms, 2 * hc->rtt),
						  hc->msg, sizeof(hc->msg), &broken, &timedout);
		if (broken)
		{
			PQclear(r);
			r = NULL;
			drop_conn(hc);
			if (timedout)
				break;
		}
	}
	*gone = hc->conn == NULL;
	return r;
}

/*
 * Release one revoked partition's lease.  True when that is settled
 * (released, not ours any more, or refused by an error retrying cannot
 * fix); false to try again.
 */
static bool
release_once(hbconn *hc, const char *key, int64_t token)
{
	le_group_member *m = hc->m;
	char		token_text[32];
	const char *values[3] = {key, m->member_id, token_text};
	bool		gone;
	PGresult   *r;
	bool		settled;

	snprintf(token_text, sizeof(token_text), "%" PRId64, token);
	r = lease_call(hc, m->sig_release, m->sql_release, 3, values, &gone);
	settled = r != NULL && (PQresultStatus(r) == PGRES_TUPLES_OK ||
							le_classify(le_sqlstate_of(r)) == LE_EC_PERMANENT);
	if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK)
		group_notice(m, "release of partition %s token %" PRId64 " failed%s: %s", key, token,
					 settled ? "" : ", retrying", hc->msg);
	PQclear(r);
	return settled;
}

/*
 * le_group_leave: release the membership and every partition.  The server
 * releases at most 1,024 partitions per call (each holds a fence lock to the
 * commit): call again until a call released none.
 */
static void
leave_once(hbconn *hc)
{
	le_group_member *m = hc->m;
	const char *values[2] = {m->group, m->member_id};
	long		total = 0;
	int			calls;

	for (calls = 0; calls < LE_MAX_PARTITIONS / 1024 + 1; calls++)
	{
		bool		gone;
		PGresult   *r = lease_call(hc, m->sig_leave, m->sql_leave, 2, values, &gone);
		long		n;

		if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
		{
			group_notice(m, "le_group_leave failed (the partitions expire with the membership): %s",
						 hc->msg);
			PQclear(r);
			return;
		}
		n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
		PQclear(r);
		total += n;
		if (n == 0)
			break;
	}
	group_notice(m, "left group \"%s\": %ld partitions released", m->group, total);
}

/*
 * The first revoked entry whose lease may be released now: its
 * on_revoked returned (defer_release: the caller handed it back) or its
 * deadline passed (not with defer_release).  mu must be held.
 */
static gpart *
release_due(le_group_member *m, int64_t now)
{
	for (gpart *p = m->head; p != NULL; p = p->next)
	{
		if (!p->revoked || !p->need_release || p->released)
			continue;
		if (m->cfg.defer_release ? p->handed_back : (p->told || now >= p->deadline))
			return p;
	}
	return NULL;
}

/*
 * May we leave now: every on_revoked returned or its partition's deadline
 * passed?  Else *next is when to look again.  mu must be held.
 */
static bool
leave_due(le_group_member *m, int64_t now, int64_t *next)
{
	bool		due = true;

	for (gpart *p = m->head; p != NULL; p = p->next)
		if (!p->told && now < p->deadline)
		{
			due = false;
			if (p->deadline < *next)
				*next = p->deadline;
		}
	return due;
}

/* After the leave: nothing is ours any more; entries go once told. */
static void
forget_all_locked(le_group_member *m)
{
	gpart	   *next;

	m->member = false;
	revoke_all_locked(m, LE_STOP_SHUTDOWN, NULL);
	for (gpart *p = m->head; p != NULL; p = next)
	{
		next = p->next;
		p->revoked = true;
		p->need_release = false;
		maybe_free(m, p);
	}
}

/*
 * The time between two heartbeats; a quarter of it (at least
 * LE_HINT_GAP_MS) while partitions are pending for us: their holder
 * releases them once its work on them stopped, and the sooner we ask
 * after that, the sooner the move completes.  mu must be held.
 */
static int64_t
heartbeat_gap(le_group_member *m)
{
	int64_t		gap = m->cfg.heartbeat_ms;

	if (m->pending > 0 && gap / 4 > LE_HINT_GAP_MS)
		gap /= 4;
	else if (m->pending > 0 && gap > LE_HINT_GAP_MS)
		gap = LE_HINT_GAP_MS;
	return gap;
}

/* The heartbeat thread: heartbeats, releases and, at the end, the leave. */
static void *
group_heartbeat_main(void *arg)
{
	hbconn		hcs = {.m = arg};
	hbconn	   *hc = &hcs;
	le_group_member *m = hc->m;

	le_block_signals();
	pthread_mutex_lock(&m->mu);
	hc->conn = m->first_conn;
	m->first_conn = NULL;
	for (;;)
	{
		int64_t		now = le_monotonic_ms();
		int64_t		next;
		gpart	   *p;

		m->connected = hc->conn != NULL;
		if ((p = release_due(m, now)) != NULL && now >= hc->next_attempt)
		{
			char		key[LE_PARTITION_KEY_LEN];
			int64_t		token = p->token;
			bool		settled;

			/* p stays: it is freed only once released */
			le_copy_str(key, sizeof(key), p->key);
			pthread_mutex_unlock(&m->mu);
			settled = release_once(hc, key, token);
			pthread_mutex_lock(&m->mu);
			if (settled)
			{
				p->released = true;
				maybe_free(m, p);
			}
			else
				hc->next_attempt = le_monotonic_ms() + LE_WAIT_SLICE_MS;
			continue;
		}
		if (m->leaving)
		{
			next = INT64_MAX;
			if (!leave_due(m, now, &next))
			{
				le_cv_wait_until(&m->cv, &m->mu, next);
				continue;
			}
			if (m->member_token != 0)
			{
				pthread_mutex_unlock(&m->mu);
				leave_once(hc);
				pthread_mutex_lock(&m->mu);
			}
			forget_all_locked(m);
			break;
		}
		next = m->hb_seq > 0 ? m->last_send + heartbeat_gap(m) : 0;
		if (next < hc->next_attempt)
			next = hc->next_attempt;
		if (now < next)
		{
			/* also wake at the deadline of a revoked entry: its release may be due */
			for (p = m->head; p != NULL; p = p->next)
				if (p->revoked && p->need_release && !p->released && p->deadline > now &&
					p->deadline < next)
					next = p->deadline;
			le_cv_wait_until(&m->cv, &m->mu, next);
			continue;
		}
		pthread_mutex_unlock(&m->mu);
		heartbeat_once(hc);
		pthread_mutex_lock(&m->mu);
	}
	m->hb_done = true;
	m->connected = false;
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	drop_conn(hc);
	return NULL;
}

/*
 * The timer thread: revokes a partition renew_by_ms before its deadline
 * when no heartbeat renewed it, ends the membership at its deadline, and
 * wakes the heartbeat thread when a release falls due at a deadline.
 */
static void *
group_timer_main(void *arg)
{
	le_group_member *m = arg;

	le_block_signals();
	pthread_mutex_lock(&m->mu);
	while (!m->quit)
	{
		int64_t		now = le_monotonic_ms();
		int64_t		next = INT64_MAX;

		for (gpart *p = m->head; p != NULL; p = p->next)
		{
			if (!p->revoked && now < p->deadline - m->cfg.renew_by_ms)
			{
				if (p->deadline - m->cfg.renew_by_ms < next)
					next = p->deadline - m->cfg.renew_by_ms;
				continue;
			}
			if (!p->revoked)
				revoke_locked(m, p, LE_STOP_DEADLINE_PASSED,
							  "no heartbeat renewed the partition in time before its local deadline");
			/* at its deadline a release (not with defer_release) or the leave may be due */
			if (p->told && (!p->need_release || p->released))
				continue;
			if (now < p->deadline && p->deadline < next)
				next = p->deadline;
			else if (now >= p->deadline)
				pthread_cond_broadcast(&m->cv);
		}
		if (m->member && now >= m->deadline)
		{
			m->member = false;
			pthread_cond_broadcast(&m->cv);
		}
		else if (m->member && m->deadline < next)
			next = m->deadline;
		pthread_mutex_unlock(&m->mu);
		le_timer_sleep(m->timer_fd, m->timer_wake, next == INT64_MAX ? 0 : next);
		pthread_mutex_lock(&m->mu);
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

/* Deliver the notice at the head of the ring; mu held on entry and exit. */
static void
deliver_notice(le_group_member *m)
{
	char		text[LE_DETAIL_LEN];
	uint64_t	dropped = m->dropped;

	le_copy_str(text, sizeof(text), m->notices[m->n_head]);
	m->n_head = (m->n_head + 1) % LE_GROUP_NOTICES;
	m->n_len--;
	m->dropped = 0;
	pthread_mutex_unlock(&m->mu);
	m->cfg.on_notice(m->cfg.cb_arg, text);
	if (dropped > 0)
	{
		snprintf(text, sizeof(text), "%" PRIu64 " notices were dropped while callbacks were behind",
				 dropped);
		m->cfg.on_notice(m->cfg.cb_arg, text);
	}
	pthread_mutex_lock(&m->mu);
}

/*
 * The dispatcher thread: delivers queued callbacks in order, until told to
 * quit.  An on_revoked that returned makes its partition's release due.
 */
static void *
group_dispatch_main(void *arg)
{
	le_group_member *m = arg;

	le_block_signals();
	pthread_mutex_lock(&m->mu);
	for (;;)
	{
		gevent	   *ev;
		gevent		copy;

		if (m->q_head == NULL && m->n_len == 0)
		{
			if (m->dispatch_quit)
				break;
			le_cv_wait_until(&m->cv, &m->mu, -1);
			continue;
		}
		if (m->q_head == NULL)
		{
			deliver_notice(m);
			continue;
		}
		ev = m->q_head;
		m->q_head = ev->next;
		if (m->q_head == NULL)
			m->q_tail = NULL;
		copy = *ev;
		m->dispatching = true;
		pthread_mutex_unlock(&m->mu);
		if (copy.revoked && m->cfg.on_revoked)
			m->cfg.on_revoked(m->cfg.cb_arg, &copy.info, copy.reason,
							  copy.detail[0] ? copy.detail : NULL);
		else if (!copy.revoked && m->cfg.on_assigned)
			m->cfg.on_assigned(m->cfg.cb_arg, &copy.info);
		pthread_mutex_lock(&m->mu);
		m->dispatching = false;
		if (copy.revoked)
		{
			/* the entry waits for this (told false): it is still there */
			copy.part->told = true;
			maybe_free(m, copy.part);
		}
		pthread_cond_broadcast(&m->cv);
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

/* Is name a group name le_group_create accepts (^[A-Za-z0-9_.-]{1,63}$)? */
static bool
valid_group_name(const char *name)
{
	size_t		n = strlen(name);

	if (n < 1 || n > LE_MAX_GROUP_LEN)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((name[i] >= 'A' && name[i] <= 'Z') || (name[i] >= 'a' && name[i] <= 'z') ||
			  (name[i] >= '0' && name[i] <= '9') || name[i] == '_' || name[i] == '.' ||
			  name[i] == '-'))
			return false;
	return true;
}

/* Free the SQL texts (build_sql). */
static void
free_sql(le_group_member *m)
{
	char	  **texts[] = {
		&m->sql_heartbeat, &m->sig_heartbeat, &m->sql_release, &m->sig_release,
		&m->sql_leave, &m->sig_leave
	};

	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
	{
		free(*texts[i]);
		*texts[i] = NULL;
	}
}

/* Free what create allocated (m may be half built). */
static void
free_member(le_group_member *m)
{
	if (m->timer_fd >= 0)
		close(m->timer_fd);
	if (m->timer_wake >= 0)
		close(m->timer_wake);
	le_free_conn_params(m->conn_kw, m->conn_val);
	free(m->conninfo);
	free(m->group);
	free(m->member_id);
	free_sql(m);
	free(m->by_part);
	free(m);
}

/* Validate the configuration and build a member. */
le_group_member *
le_group_member_create(const le_group_config *cfg, char *err, size_t errlen)
{
	le_group_member *m;
	le_group_config c = *cfg;
	char		id[LE_MAX_MEMBER_LEN + 1];
	bool		own_id;

	if (c.group_name == NULL || !valid_group_name(c.group_name))
	{
		le_set_err(err, errlen, "a group name of 1 to %d letters, digits, \"_\", \".\" or \"-\" is required",
				   LE_MAX_GROUP_LEN);
		return NULL;
	}
	if (c.member_id != NULL && (c.member_id[0] == '\0' || strlen(c.member_id) > LE_MAX_MEMBER_LEN))
	{
		le_set_err(err, errlen, "member id must be 1 to %d bytes", LE_MAX_MEMBER_LEN);
		return NULL;
	}
	if (c.member_id != NULL && !le_valid_utf8(c.member_id))
	{
		le_set_err(err, errlen, "member id is not valid UTF-8");
		return NULL;
	}
	if (!le_check_timing(c.ttl_ms, &c.safety_margin_ms, &c.heartbeat_ms, c.renew_by_ms, c.retry_ms,
						 c.retry_jitter_pct, c.connect_timeout_ms, c.statement_timeout_ms,
						 "heartbeat interval", err, errlen))
		return NULL;
	if (c.conninfo == NULL)
		c.conninfo = "";
	own_id = c.member_id == NULL;
	if (own_id)
	{
		le_default_id(id, sizeof(id));
		c.member_id = id;
	}
	if ((m = calloc(1, sizeof(*m))) == NULL)
	{
		le_set_err(err, errlen, "out of memory");
		return NULL;
	}
	m->timer_fd = m->timer_wake = -1;
	m->cfg = c;
	if (le_build_conn_params(c.conninfo, c.ttl_ms, c.statement_timeout_ms,
							 &m->conn_kw, &m->conn_val, err, errlen) != LE_OK)
	{
		free(m);
		return NULL;
	}
	m->conninfo = strdup(c.conninfo);
	m->group = strdup(c.group_name);
	m->member_id = strdup(c.member_id);
	m->own_member_id = own_id;
	m->cfg.conninfo = m->conninfo;
	m->cfg.group_name = m->group;
	m->cfg.member_id = m->member_id;
	snprintf(m->ttl_text, sizeof(m->ttl_text), "%" PRId64 " milliseconds", c.ttl_ms);
	m->rng = le_random_u64() | 1;
	if (m->conninfo == NULL || m->group == NULL || m->member_id == NULL ||
		!le_timer_open(&m->timer_fd, &m->timer_wake))
	{
		le_set_err(err, errlen, "out of memory or file descriptors");
		free_member(m);
		return NULL;
	}
	le_sync_init(&m->mu, &m->cv);
	return m;
}

/*
 * Build the SQL texts for the extension in schema q (quoted), anew: a
 * start after a failed one may have found another schema.  Each call goes
 * through le_exec_gated with its function's signature (as an elector's,
 * build_sql in le_client.c): extension 1.0 has no le_group_heartbeat, and
 * any role with CREATE on the schema could make one beside it.  False if
 * out of memory.
 */
static bool
build_sql(le_group_member *m, const char *q)
{
	bool		ok;

	free_sql(m);
	ok = le_sql_text(true, &m->sql_heartbeat,
					 "SELECT h.partition, h.lease_key, h.fencing_token, "
					 LE_ISO("h.expires_at") " AS expires_iso, h.state, h.new_period"
					 " FROM %1$s.le_group_heartbeat($1::pg_catalog.text, $2::pg_catalog.text,"
					 " $3::pg_catalog.interval) h", q);
	ok = le_sql_text(ok, &m->sig_heartbeat,
					 "%1$s.le_group_heartbeat(pg_catalog.text,pg_catalog.text,pg_catalog.interval)", q);
	ok = le_sql_release(ok, &m->sql_release, &m->sig_release, q);
	ok = le_sql_text(ok, &m->sql_leave,
					 "SELECT %1$s.le_group_leave($1::pg_catalog.text, $2::pg_catalog.text)", q);
	ok = le_sql_text(ok, &m->sig_leave, "%1$s.le_group_leave(pg_catalog.text,pg_catalog.text)", q);
	return ok;
}

/* Tell the timer and dispatcher threads to end, and join every thread started. */
static void
join_threads(le_group_member *m)
{
	if (m->have_hb)
		pthread_join(m->hb_thread, NULL);
	m->have_hb = false;
	pthread_mutex_lock(&m->mu);
	m->quit = true;
	m->dispatch_quit = true;
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
	wake_timer(m);
	if (m->have_timer)
		pthread_join(m->timer_thread, NULL);
	if (m->have_dispatch)
		pthread_join(m->dispatch_thread, NULL);
	m->have_timer = m->have_dispatch = false;
}

/* First connection, extension check, then the threads. */
le_result
le_group_member_start(le_group_member *m, char *err, size_t errlen)
{
	PGconn	   *conn = NULL;
	char		q[600];
	le_result	rc;

	if (m->started)
	{
		le_set_err(err, errlen, "group member already started");
		return LE_ERR_CONFIG;
	}
	rc = le_first_conn(m->conn_kw, m->conn_val, "group", m->cfg.connect_timeout_ms, &conn,
					   m->ext_schema, sizeof(m->ext_schema), q, sizeof(q), err, errlen);
	if (rc != LE_OK)
		return rc;
	if (!build_sql(m, q))
	{
		le_set_err(err, errlen, "out of memory");
		PQfinish(conn);
		return LE_ERR_SYSTEM;
	}
	m->first_conn = conn;
	m->started = true;
	if (pthread_create(&m->dispatch_thread, NULL, group_dispatch_main, m) == 0)
		m->have_dispatch = true;
	if (m->have_dispatch && pthread_create(&m->timer_thread, NULL, group_timer_main, m) == 0)
		m->have_timer = true;
	if (m->have_timer && pthread_create(&m->hb_thread, NULL, group_heartbeat_main, m) == 0)
		m->have_hb = true;
	if (m->have_hb)
		return LE_OK;
	join_threads(m);
	le_set_err(err, errlen, "could not start the group member's threads");
	if (m->first_conn)
		PQfinish(m->first_conn);
	m->first_conn = NULL;
	m->started = false;
	m->quit = m->dispatch_quit = false;
	return LE_ERR_SYSTEM;
}

/* Wait until at least one heartbeat was answered or failed. */
bool
le_group_member_wait_heartbeat(le_group_member *m, int64_t timeout_ms)
{
	int64_t		until = le_monotonic_ms() + timeout_ms;
	bool		yes;

	pthread_mutex_lock(&m->mu);
	for (;;)
	{
		yes = m->heartbeats > 0;
		if (yes || m->hb_done || (timeout_ms >= 0 && le_monotonic_ms() >= until))
			break;
		le_cv_wait_until(&m->cv, &m->mu, timeout_ms < 0 ? -1 : until);
	}
	pthread_mutex_unlock(&m->mu);
	return yes;
}

/* True while we own partition; the deadline test needs no thread. */
bool
le_group_member_owns(le_group_member *m, int partition, le_partition_info *info)
{
	bool		yes = false;
	gpart	   *p;

	pthread_mutex_lock(&m->mu);
	p = partition >= 0 && partition < m->n_by_part ? m->by_part[partition] : NULL;
	if (p != NULL && p->ev_assigned.part != NULL)
	{
		le_partition_info i;

		fill_info(p, &i, le_monotonic_ms());
		yes = i.owned;
		if (info)
			*info = i;
	}
	pthread_mutex_unlock(&m->mu);
	return yes;
}

/* Order of le_group_member_partitions: by partition, then token. */
static int
cmp_info(const void *a, const void *b)
{
	const le_partition_info *x = a,
			   *y = b;

	if (x->partition != y->partition)
		return x->partition < y->partition ? -1 : 1;
	return x->fencing_token < y->fencing_token ? -1 : x->fencing_token > y->fencing_token;
}

/* The partitions we hold (owned, or revoked and not yet settled), ascending. */
int
le_group_member_partitions(le_group_member *m, le_partition_info *out, int max)
{
	int			n = 0;
	int64_t		now = le_monotonic_ms();

	pthread_mutex_lock(&m->mu);
	for (gpart *p = m->head; p != NULL; p = p->next)
	{
		/* a lease released unused was never ours to work on; a released one is settled */
		if (p->ev_assigned.part == NULL || (p->revoked && p->released))
			continue;
		if (n < max)
			fill_info(p, &out[n], now);
		n++;
	}
	pthread_mutex_unlock(&m->mu);
	qsort(out, n < max ? n : max, sizeof(*out), cmp_info);
	return n;
}

/* Copy the member's state. */
void
le_group_member_status(le_group_member *m, le_group_status *st)
{
	int64_t		now = le_monotonic_ms();

	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&m->mu);
	st->member = m->member && now < m->deadline;
	st->member_token = m->member_token;
	st->deadline_ms = m->deadline;
	st->heartbeats = m->heartbeats;
	st->connected = m->connected;
	st->pending = m->pending;
	for (gpart *p = m->head; p != NULL; p = p->next)
	{
		if (!p->revoked && now < p->deadline)
			st->owned++;
		else if (p->ev_assigned.part != NULL && !(p->released || !p->need_release))
			st->revoking++;
	}
	le_errinfo_get(&m->last, &st->last_error, st->last_sqlstate, st->last_message);
	st->last_permanent = m->last_permanent;
	st->owner_conflicts = m->owner_conflicts;
	pthread_mutex_unlock(&m->mu);
}

/* The member id in use. */
const char *
le_group_member_id(le_group_member *m)
{
	return m->member_id;
}

/* defer_release: the caller's work on a revoked partition has stopped. */
bool
le_group_member_release(le_group_member *m, int partition, int64_t token)
{
	bool		found = false;

	pthread_mutex_lock(&m->mu);
	for (gpart *p = m->head; p != NULL; p = p->next)
		if (p->partition == partition && p->token == token && p->revoked && !p->handed_back)
		{
			p->handed_back = true;
			found = p->need_release && !p->released;
			pthread_cond_broadcast(&m->cv);
			maybe_free(m, p);
			break;
		}
	pthread_mutex_unlock(&m->mu);
	return found;
}

/* Revoke everything and leave, without waiting. */
void
le_group_member_request_stop(le_group_member *m)
{
	pthread_mutex_lock(&m->mu);
	if (m->started && !m->leaving)
	{
		m->leaving = true;
		revoke_all_locked(m, LE_STOP_SHUTDOWN, NULL);
		pthread_cond_broadcast(&m->cv);
	}
	pthread_mutex_unlock(&m->mu);
	wake_timer(m);
}

/* Leave and wait: join the threads, deliver the callbacks still queued. */
void
le_group_member_stop(le_group_member *m)
{
	bool		join;

	le_group_member_request_stop(m);
	pthread_mutex_lock(&m->mu);
	join = le_stop_claim(m->started, &m->stopped, m->have_dispatch, m->dispatch_thread);
	pthread_mutex_unlock(&m->mu);
	if (join)
		join_threads(m);		/* else not started, stopped already, or from a callback */
}

/* Stop if needed and free everything. */
void
le_group_member_destroy(le_group_member *m)
{
	gpart	   *next;

	if (m == NULL)
		return;
	le_group_member_stop(m);
	if (m->first_conn)
		PQfinish(m->first_conn);
	for (gpart *p = m->head; p != NULL; p = next)
	{
		next = p->next;
		free(p);
	}
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->cv);
	free_member(m);
}
