/*-------------------------------------------------------------------------
 *
 * le_period.c
 *		The period state machine of an elector, its deadline timer thread
 *		and its callback dispatcher thread.
 *
 * Locking rules.  Every transition (le_period_begin, le_period_renewed,
 * le_period_end*) runs under e->mu and queues its callback event in the same
 * critical section, so events are queued in exactly the order of the
 * transitions; one dispatcher thread delivers them in queue order, without
 * e->mu held.  State changes take effect before any callback runs: a slow
 * callback delays later callbacks, never a transition.  The event queue
 * and the timer thread: see "src/client" in src/README.md.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "le_internal.h"

/* Slots kept free for an on_stopped while leading. */
#define LE_QUEUE_RESERVE 1

/* Wake the campaign thread out of poll(). */
void
le_wake_campaign(le_elector *e)
{
	char		c = 1;
	ssize_t		rc;

	rc = write(e->wake[1], &c, 1);
	(void) rc;					/* a full pipe already wakes it */
}

/* Wake the timer thread (its deadline changed or it must quit). */
void
le_wake_timer(le_elector *e)
{
	le_timer_wake(e->timer_wake);
}

/* Fill a lease info from the elector; mu must be held. */
void
le_fill_info(le_elector *e, le_lease_info *info)
{
	info->lease_key = e->lease_key;
	info->owner_id = e->owner_id;
	info->fencing_token = e->token;
	le_copy_str(info->expires_at, sizeof(info->expires_at), e->expires_at);
	info->deadline_ms = e->deadline;
	info->period = e->period;
}

/* Is the elector leading now?  mu must be held. */
bool
le_leading_now(le_elector *e)
{
	return e->state == LE_LEADING && le_monotonic_ms() < e->deadline;
}

/* Are n slots free in the queue?  mu must be held. */
bool
le_queue_has_room(le_elector *e, unsigned n)
{
	return e->q_len + n <= LE_QUEUE_LEN;
}

/* The slot at the tail of the queue, claimed; mu must be held and room checked. */
static le_event *
push_slot(le_elector *e)
{
	le_event   *ev = &e->queue[(e->q_head + e->q_len) % LE_QUEUE_LEN];

	e->q_len++;
	memset(ev, 0, sizeof(*ev));
	pthread_cond_broadcast(&e->cv);
	return ev;
}

/*
 * Claim a slot for an event that may be dropped (notice, new leader,
 * renewal); NULL if it would take a slot reserved for an on_stopped.
 */
static le_event *
push_droppable(le_elector *e)
{
	unsigned	reserve = e->state == LE_LEADING ? LE_QUEUE_RESERVE : 0;

	if (!le_queue_has_room(e, 1 + reserve))
	{
		e->dropped++;
		return NULL;
	}
	return push_slot(e);
}

/*
 * Begin a leadership period with token, granted by an le_acquire sent at
 * t_send.  False (nothing changed) if the elector is not following, is
 * stopping, or its callback queue lacks room.
 */
bool
le_period_begin(le_elector *e, int64_t token, int64_t t_send, const char *expires_at)
{
	le_event   *ev;
	int			fd;

	pthread_mutex_lock(&e->mu);
	if (e->state != LE_FOLLOWING || e->quit || !le_queue_has_room(e, 1 + LE_QUEUE_RESERVE))
	{
		pthread_mutex_unlock(&e->mu);
		return false;
	}
	/* a fresh period fd; callers keep their dups of the old one */
	fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (e->period_fd >= 0)
		close(e->period_fd);
	e->period_fd = fd;			/* -1 if out of descriptors: le_elector_period_fd fails */
	e->state = LE_LEADING;
	e->period++;
	e->token = token;
	e->deadline = t_send + e->cfg.ttl_ms - e->cfg.safety_margin_ms;
	e->last_send = t_send;
	e->renew_now = false;
	le_copy_str(e->expires_at, sizeof(e->expires_at), expires_at);
	le_sanitize(e->expires_at);
	e->have_holder = true;
	le_copy_str(e->holder, sizeof(e->holder), e->owner_id);
	e->holder_token = token;
	ev = push_slot(e);
	ev->kind = LE_EV_STARTED;
	le_fill_info(e, &ev->info);
	ev = push_droppable(e);
	if (ev)
	{
		ev->kind = LE_EV_NEW_LEADER;
		ev->has_holder = true;
		le_copy_str(ev->holder, sizeof(ev->holder), e->owner_id);
		le_sanitize(ev->holder);
		ev->token = token;
		le_copy_str(ev->text, sizeof(ev->text), e->expires_at);
	}
	pthread_mutex_unlock(&e->mu);
	le_wake_timer(e);
	return true;
}

/*
 * A renewal of period "period" sent at t_send was confirmed.  Ignored when
 * that period is over or its deadline passed (the deadline rules).
 */
void
le_period_renewed(le_elector *e, uint64_t period, int64_t t_send, const char *expires_at)
{
	le_event   *ev = NULL;

	pthread_mutex_lock(&e->mu);
	if (e->state != LE_LEADING || e->period != period || le_monotonic_ms() >= e->deadline)
	{
		pthread_mutex_unlock(&e->mu);
		return;
	}
	e->deadline = t_send + e->cfg.ttl_ms - e->cfg.safety_margin_ms;
	e->last_send = t_send;
	le_copy_str(e->expires_at, sizeof(e->expires_at), expires_at);
	le_sanitize(e->expires_at);
	/* coalesce with a renewal of this period still waiting at the tail */
	if (e->q_len > 0)
	{
		le_event   *tail = &e->queue[(e->q_head + e->q_len - 1) % LE_QUEUE_LEN];

		if (tail->kind == LE_EV_RENEWED && tail->info.period == period)
			ev = tail;
	}
	if (ev == NULL)
		ev = push_droppable(e);
	if (ev)
	{
		ev->kind = LE_EV_RENEWED;
		le_fill_info(e, &ev->info);
	}
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	le_wake_timer(e);
}

/*
 * End period "period" for "reason", once; mu must be held.  If its deadline
 * has passed, the reason is "deadline_passed" whatever was noticed (the
 * period ended then).  Unless the lease is known to be someone else's, its
 * token is queued for a best-effort release (held back until
 * le_elector_release_period with defer_release).  Returns false if that
 * period was already over.
 */
bool
le_period_end_locked(le_elector *e, uint64_t period, le_stop_reason reason, const char *detail)
{
	le_event   *ev;
	uint64_t	one = 1;
	ssize_t		rc;

	if (e->state != LE_LEADING || e->period != period)
		return false;
	e->state = LE_FOLLOWING;
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
	/* the caller may still be stopping its work: it releases (see defer_release) */
	if (e->cfg.defer_release &&
		(reason == LE_STOP_RENEW_FAILED || reason == LE_STOP_DEADLINE_PASSED))
		e->release_held = true;
	e->renew_now = false;
	/* signal first: the period fd, then the threads, then the callback */
	if (e->period_fd >= 0)
	{
		rc = write(e->period_fd, &one, sizeof(one));
		(void) rc;
	}
	ev = push_slot(e);			/* the slot was reserved when the period began */
	ev->kind = LE_EV_STOPPED;
	le_fill_info(e, &ev->info);
	ev->reason = reason;
	le_copy_str(ev->text, sizeof(ev->text), detail ? detail : "");
	le_sanitize(ev->text);
	pthread_cond_broadcast(&e->cv);
	le_wake_campaign(e);
	le_wake_timer(e);
	return true;
}

/* le_period_end_locked, taking mu. */
bool
le_period_end(le_elector *e, uint64_t period, le_stop_reason reason, const char *detail)
{
	bool		done;

	pthread_mutex_lock(&e->mu);
	done = le_period_end_locked(e, period, reason, detail);
	pthread_mutex_unlock(&e->mu);
	return done;
}

/*
 * The server says holder (has_holder false: nobody) holds the lease with
 * token (-1 unknown).  Report a change through on_new_leader, except for
 * our own owner id (reported when our period begins).
 */
void
le_observed(le_elector *e, bool has_holder, const char *holder, int64_t token,
			const char *expires_at)
{
	bool		changed;

	if (!has_holder)
		holder = "";
	pthread_mutex_lock(&e->mu);
	changed = has_holder != e->have_holder || strcmp(e->holder, holder) != 0 ||
		(token > 0 && e->holder_token != token);
	if (changed)
	{
		e->have_holder = has_holder;
		le_copy_str(e->holder, sizeof(e->holder), holder);
		e->holder_token = token;
	}
	if (changed && !(has_holder && strcmp(holder, e->owner_id) == 0))
	{
		le_event   *ev = push_droppable(e);

		if (ev)
		{
			ev->kind = LE_EV_NEW_LEADER;
			ev->has_holder = has_holder;
			le_copy_str(ev->holder, sizeof(ev->holder), holder);
			le_sanitize(ev->holder);
			ev->token = has_holder ? token : 0;
			le_copy_str(ev->text, sizeof(ev->text), expires_at ? expires_at : "");
			le_sanitize(ev->text);
		}
	}
	pthread_mutex_unlock(&e->mu);
}

/* Queue something worth a log line for on_notice (dropped if the queue is full). */
void
le_notice(le_elector *e, const char *fmt,...)
{
	va_list		ap;
	le_event   *ev;

	if (e->cfg.on_notice == NULL)
		return;
	pthread_mutex_lock(&e->mu);
	ev = push_droppable(e);
	if (ev)
	{
		ev->kind = LE_EV_NOTICE;
		va_start(ap, fmt);
		vsnprintf(ev->text, sizeof(ev->text), fmt, ap);
		va_end(ap);
		le_sanitize(ev->text);
	}
	pthread_mutex_unlock(&e->mu);
}

/* Remember the outcome of the last acquire/renew attempt for le_elector_status. */
void
le_record_error(le_elector *e, le_result rc, const char *sqlstate, const char *msg)
{
	pthread_mutex_lock(&e->mu);
	le_errinfo_set(&e->last, rc, sqlstate, msg);
	pthread_mutex_unlock(&e->mu);
}

/* The timer thread: ends a period at its local deadline, nothing else. */
void *
le_timer_main(void *arg)
{
	le_elector *e = arg;

	le_block_signals();
	for (;;)
	{
		int64_t		at;

		pthread_mutex_lock(&e->mu);
		if (e->quit && e->state != LE_LEADING)
		{
			pthread_mutex_unlock(&e->mu);
			break;
		}
		if (e->state == LE_LEADING && le_monotonic_ms() >= e->deadline)
			le_period_end_locked(e, e->period, LE_STOP_DEADLINE_PASSED,
								 "no renewal was confirmed before the local deadline");
		at = e->state == LE_LEADING ? e->deadline : 0;
		pthread_mutex_unlock(&e->mu);
		le_timer_sleep(e->timer_fd, e->timer_wake, at);
	}
	return NULL;
}

/* Deliver one event to its callback; mu must NOT be held. */
static void
deliver(le_elector *e, const le_event *ev)
{
	const le_config *c = &e->cfg;

	switch (ev->kind)
	{
		case LE_EV_STARTED:
			if (c->on_started)
				c->on_started(c->cb_arg, &ev->info);
			break;
		case LE_EV_RENEWED:
			if (c->on_renewed)
				c->on_renewed(c->cb_arg, &ev->info);
			break;
		case LE_EV_STOPPED:
			if (c->on_stopped)
				c->on_stopped(c->cb_arg, &ev->info, ev->reason,
							  ev->text[0] ? ev->text : NULL);
			break;
		case LE_EV_NEW_LEADER:
			if (c->on_new_leader)
				c->on_new_leader(c->cb_arg, ev->has_holder ? ev->holder : NULL,
								 ev->has_holder ? ev->token : 0, ev->text);
			break;
		case LE_EV_NOTICE:
			if (c->on_notice)
				c->on_notice(c->cb_arg, ev->text);
			break;
	}
}

/* The dispatcher thread: delivers queued callbacks in order, until told to quit. */
void *
le_dispatch_main(void *arg)
{
	le_elector *e = arg;
	le_event	ev;

	le_block_signals();
	pthread_mutex_lock(&e->mu);
	for (;;)
	{
		uint64_t	dropped;

		if (e->q_len == 0)
		{
			if (e->dispatch_quit)
				break;
			le_cv_wait_until(&e->cv, &e->mu, -1);
			continue;
		}
		ev = e->queue[e->q_head];
		e->q_head = (e->q_head + 1) % LE_QUEUE_LEN;
		e->q_len--;
		dropped = e->dropped;
		e->dropped = 0;
		e->dispatching = true;
		pthread_cond_broadcast(&e->cv);
		pthread_mutex_unlock(&e->mu);

		deliver(e, &ev);
		if (dropped > 0 && e->cfg.on_notice)
		{
			char		msg[128];

			snprintf(msg, sizeof(msg),
					 "%" PRIu64 " notices or reports were dropped while callbacks were behind",
					 dropped);
			e->cfg.on_notice(e->cfg.cb_arg, msg);
		}

		pthread_mutex_lock(&e->mu);
		e->dispatching = false;
		pthread_cond_broadcast(&e->cv);
	}
	pthread_mutex_unlock(&e->mu);
	return NULL;
}
