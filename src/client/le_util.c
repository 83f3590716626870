/*-------------------------------------------------------------------------
 *
 * le_util.c
 *		Small helpers of the client library: clocks, strings, random
 *		numbers, durations, waits, and the timing rules that the elector
 *		and the group member share (attempt budgets, back-off, checks of
 *		ttl, margin and renewal interval).
 *
 * Locking rules: none of these functions touch shared state; the random
 * state passed to le_next_rand belongs to the calling thread.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "le_internal.h"

/* Milliseconds on CLOCK_BOOTTIME: monotonic and counting during suspend. */
int64_t
le_monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* snprintf into an error buffer that may be NULL. */
void
le_set_err(char *err, size_t errlen, const char *fmt,...)
{
	va_list		ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* Record an outcome (sqlstate and msg may be NULL). */
void
le_errinfo_set(le_errinfo *ei, le_result rc, const char *sqlstate, const char *msg)
{
	ei->rc = rc;
	le_copy_str(ei->sqlstate, sizeof(ei->sqlstate), sqlstate ? sqlstate : "");
	le_copy_msg(ei->message, sizeof(ei->message), msg ? msg : "");
}

/* Copy an outcome into the fields of a status snapshot. */
void
le_errinfo_get(const le_errinfo *ei, le_result *rc, char sqlstate[6], char message[256])
{
	*rc = ei->rc;
	le_copy_str(sqlstate, 6, ei->sqlstate);
	le_copy_str(message, 256, ei->message);
}

/* Copy a string, truncating it to fit. */
void
le_copy_str(char *dst, size_t len, const char *src)
{
	size_t		n;

	if (dst == NULL || len == 0)
		return;
	n = strnlen(src ? src : "", len - 1);
	memcpy(dst, src ? src : "", n);
	dst[n] = '\0';
}

/* Replace control characters (newlines included) by spaces, in place. */
void
le_sanitize(char *s)
{
	for (; *s; s++)
		if ((unsigned char) *s < 0x20 || (unsigned char) *s == 0x7f)
			*s = ' ';
}

/* Copy a libpq message: no trailing newline, no control characters. */
void
le_copy_msg(char *dst, size_t len, const char *msg)
{
	size_t		n;

	if (dst == NULL || len == 0)
		return;
	le_copy_str(dst, len, msg ? msg : "");
	n = strlen(dst);
	while (n > 0 && (dst[n - 1] == '\n' || dst[n - 1] == ' '))
		dst[--n] = '\0';
	le_sanitize(dst);
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
		case LE_STOP_REVOKED:
			return "revoked";
	}
	return "unknown";
}

/* Name of a result code. */
const char *
le_result_name(le_result rc)
{
	switch (rc)
	{
		case LE_OK:
			return "ok";
		case LE_ERR_CONFIG:
			return "config";
		case LE_ERR_CONNECT:
			return "connect";
		case LE_ERR_NO_EXTENSION:
			return "no_extension";
		case LE_ERR_SQL:
			return "sql";
		case LE_ERR_SYSTEM:
			return "system";
		case LE_ERR_PERMISSION:
			return "permission_denied";
		case LE_ERR_READ_ONLY:
			return "read_only";
		case LE_ERR_TIMEOUT:
			return "timeout";
		case LE_ERR_OWNER_CONFLICT:
			return "owner_conflict";
		case LE_ERR_HELD:
			return "held";
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

/* Strong random bytes for owner ids and jitter seeds. */
uint64_t
le_random_u64(void)
{
	uint64_t	v = 0;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint64_t) le_monotonic_ms() ^ ((uint64_t) getpid() << 32);
	return v;
}

/* xorshift64*: cheap jitter that differs between processes. */
uint64_t
le_next_rand(uint64_t *state)
{
	*state ^= *state >> 12;
	*state ^= *state << 25;
	*state ^= *state >> 27;
	return *state * 2685821657736338717ULL;
}

/* ms with +/- pct percent of random spread, at least 1. */
int64_t
le_jittered(uint64_t *rng, int64_t ms, int pct)
{
	int64_t		spread = ms * pct / 100;
	int64_t		v = ms;

	if (spread > 0)
		v += (int64_t) (le_next_rand(rng) % (uint64_t) (2 * spread + 1)) - spread;
	return v > 1 ? v : 1;
}

/*
 * Wait on cv (a CLOCK_MONOTONIC condvar) until woken, until the
 * le_monotonic_ms() time "until" or for one slice, whichever comes first;
 * until -1: until woken (every state change broadcasts cv).  Callers
 * re-check their condition and the clock: timed waits are sliced so that
 * time spent in suspend (counted by CLOCK_BOOTTIME, not by CLOCK_MONOTONIC)
 * delays them by at most one slice.  mu must be held.
 */
void
le_cv_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until)
{
	struct timespec ts;
	int64_t		ms = LE_WAIT_SLICE_MS;
	int64_t		left;

	if (until < 0)
	{
		pthread_cond_wait(cv, mu);
		return;
	}
	left = until - le_monotonic_ms();
	if (left <= 0)
		return;
	if (left < ms)
		ms = left;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000)
	{
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(cv, mu, &ts);
}

/* Library threads leave every signal to the application's threads. */
void
le_block_signals(void)
{
	sigset_t	all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
}

/*
 * Is s well-formed UTF-8 (no overlong forms, surrogates or code points
 * above U+10FFFF, no NUL)?  The server rejects anything else with 22021,
 * so keys and owner ids are checked before they are sent.
 */
bool
le_valid_utf8(const char *s)
{
	const unsigned char *p = (const unsigned char *) s;

	while (*p)
	{
		unsigned char c = *p;
		int			n;
		uint32_t	cp;

		if (c < 0x80)
		{
			p++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
		{
			n = 1;
			cp = c & 0x1f;
		}
		else if (c >= 0xe0 && c <= 0xef)
		{
			n = 2;
			cp = c & 0x0f;
		}
		else if (c >= 0xf0 && c <= 0xf4)
		{
			n = 3;
			cp = c & 0x07;
		}
		else
			return false;
		for (int i = 1; i <= n; i++)
		{
			if ((p[i] & 0xc0) != 0x80)
				return false;	/* also stops at the terminating NUL */
			cp = (cp << 6) | (p[i] & 0x3f);
		}
		if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
			(cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
			return false;
		p += n + 1;
	}
	return true;
}

/* Upper bound of the pause between renewal attempts after an error. */
#define LE_RENEW_RETRY_MS	200

/* Below this, an attempt gets all the time left rather than half of it. */
#define LE_MIN_ATTEMPT_MS	50

/*
 * Deadline of one renewal attempt (le_renew, a group heartbeat): at most
 * cap, and about half the time left before the point by which a renewal is
 * wanted (deadline - renew_by_ms), so that a hung attempt leaves room for a
 * retry on a new connection before then.  Once that point is near or past,
 * about half the time left before the deadline itself.  But never less
 * than floor (while the deadline allows): an attempt cut below the time a
 * round trip takes fails for sure, and its retry has even less time.
 */
int64_t
le_attempt_deadline(int64_t renew_by_ms, int64_t now, int64_t deadline, int64_t cap, int64_t floor)
{
	int64_t		left = deadline - renew_by_ms - now;
	int64_t		budget;

	if (left < 2 * LE_MIN_ATTEMPT_MS)
		left = deadline - now;
	budget = left / 2;
	if (budget < LE_MIN_ATTEMPT_MS)
		budget = left;
	if (budget < floor)
		budget = floor < deadline - now ? floor : deadline - now;
	if (budget > cap)
		budget = cap;
	return now + (budget > 1 ? budget : 1);
}

/* Pause after a failed renewal attempt, in ms, capped by the time left. */
int64_t
le_retry_pause(int64_t renew_ms, int64_t deadline)
{
	int64_t		pause = renew_ms / 4;
	int64_t		quarter = (deadline - le_monotonic_ms()) / 4;

	if (pause > LE_RENEW_RETRY_MS)
		pause = LE_RENEW_RETRY_MS;
	if (pause > quarter)
		pause = quarter;
	return pause > 0 ? pause : 0;
}

/*
 * The retry interval with jitter, doubled per consecutive failure, capped
 * at LE_BACKOFF_CAP_MS, or, for a failed connection (connect_failed), at
 * twice the retry interval: a server that is down costs nothing to ask
 * again, and a longer pause would add itself to the takeover time after
 * the server is back (two restarts in a row left a lease without holder
 * for 3.7 s in a chaos run with a 0.5 s retry interval).
 */
int64_t
le_backoff_ms(uint64_t *rng, int64_t retry_ms, int jitter_pct, int failures, bool connect_failed)
{
	int64_t		ms = retry_ms;
	int64_t		cap = retry_ms > LE_BACKOFF_CAP_MS ? retry_ms : LE_BACKOFF_CAP_MS;

	if (connect_failed)
		cap = 2 * retry_ms;

	for (int i = 1; i < failures && ms < cap; i++)
		ms *= 2;
	if (ms > cap)
		ms = cap;
	return le_jittered(rng, ms, jitter_pct);
}

/* Arm timerfd fd at the le_monotonic_ms() time "at" (0: disarm). */
void
le_arm_timer(int fd, int64_t at)
{
	struct itimerspec its;

	memset(&its, 0, sizeof(its));
	if (at > 0)
	{
		its.it_value.tv_sec = at / 1000;
		its.it_value.tv_nsec = (at % 1000) * 1000000;
		if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
			its.it_value.tv_nsec = 1;
	}
	timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL);
}

/*
 * Check and complete the timing of an elector or a group member: ttl
 * 100 ms to 30 days; safety margin (default max(ttl/10, 50 ms), at most
 * ttl/4) below ttl/2; the renewal interval *renew_ms (default a third of
 * ttl - margin - renew_by) at most half of ttl - margin - renew_by, so
 * that a failed renewal can be retried in time; retry interval, jitter and
 * timeouts in range.  what names the renewal ("renew interval",
 * "heartbeat interval").  False with a message in err.
 */
bool
le_check_timing(int64_t ttl_ms, int64_t *margin_ms, int64_t *renew_ms, int64_t renew_by_ms,
				int64_t retry_ms, int jitter_pct, int64_t connect_ms, int64_t statement_ms,
				const char *what, char *err, size_t errlen)
{
	if (ttl_ms < 100 || ttl_ms > (int64_t) 30 * 24 * 3600 * 1000)
	{
		le_set_err(err, errlen, "ttl must be between 100ms and 30 days, got %" PRId64 " ms", ttl_ms);
		return false;
	}
	if (*margin_ms == 0)
	{
		*margin_ms = ttl_ms / 10 > 50 ? ttl_ms / 10 : 50;
		if (*margin_ms > ttl_ms / 4)
			*margin_ms = ttl_ms / 4;
	}
	if (*margin_ms < 0 || *margin_ms * 2 >= ttl_ms)
	{
		le_set_err(err, errlen, "safety margin (%" PRId64 " ms) must be below half the ttl (%" PRId64 " ms)",
				   *margin_ms, ttl_ms);
		return false;
	}
	if (*renew_ms == 0)
	{
		/* the default leaves room for renew_by too (when that can be had) */
		int64_t		room = ttl_ms - *margin_ms - (renew_by_ms > 0 ? renew_by_ms : 0);

		*renew_ms = (room / 3 > 0 ? room : ttl_ms - *margin_ms) / 3;
	}
	if (*renew_ms < 1 || *renew_ms * 2 > ttl_ms - *margin_ms)
	{
		le_set_err(err, errlen,
				   "%s (%" PRId64 " ms) must be at most half of ttl minus safety margin (%" PRId64 " ms), so that a failed renewal can be retried before the lease runs out",
				   what, *renew_ms, (ttl_ms - *margin_ms) / 2);
		return false;
	}
	if (renew_by_ms < 0 || *renew_ms * 2 > ttl_ms - *margin_ms - renew_by_ms)
	{
		le_set_err(err, errlen,
				   "%s (%" PRId64 " ms) must be at most half of ttl minus safety margin minus renew_by (%" PRId64 " ms), so that a hung renewal can be retried in time",
				   what, *renew_ms, (ttl_ms - *margin_ms - renew_by_ms) / 2);
		return false;
	}
	if (retry_ms < 1 || retry_ms > (int64_t) 24 * 3600 * 1000)
	{
		le_set_err(err, errlen, "retry interval must be between 1ms and 24h");
		return false;
	}
	if (jitter_pct < 0 || jitter_pct > 100)
	{
		le_set_err(err, errlen, "retry jitter must be 0 to 100 percent");
		return false;
	}
	if (connect_ms < 1 || statement_ms < 1)
	{
		le_set_err(err, errlen, "connect and statement timeouts must be positive");
		return false;
	}
	return true;
}

/* A default owner or member id: "<host>-<pid>-<48 random bits>", unique by construction. */
void
le_default_id(char *buf, size_t len)
{
	char		host[64] = "host";

	gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = '\0';
	snprintf(buf, len, "%s-%d-%012" PRIx64, host, (int) getpid(),
			 le_random_u64() & UINT64_C(0xFFFFFFFFFFFF));
}

/* A mutex and a condition variable on CLOCK_MONOTONIC (see le_cv_wait_until). */
void
le_sync_init(pthread_mutex_t *mu, pthread_cond_t *cv)
{
	pthread_condattr_t ca;

	pthread_mutex_init(mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}

/*
 * The descriptors of a deadline timer thread: a timerfd on CLOCK_BOOTTIME
 * and an eventfd that wakes it.  False (both -1) when out of descriptors.
 */
bool
le_timer_open(int *timer_fd, int *wake_fd)
{
	*timer_fd = timerfd_create(CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC);
	*wake_fd = *timer_fd >= 0 ? eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC) : -1;
	if (*wake_fd >= 0)
		return true;
	if (*timer_fd >= 0)
		close(*timer_fd);
	*timer_fd = -1;
	return false;
}

/* Wake a timer thread waiting in le_timer_sleep (its deadline changed, or it must quit). */
void
le_timer_wake(int wake_fd)
{
	uint64_t	one = 1;
	ssize_t		rc;

	if (wake_fd < 0)
		return;
	rc = write(wake_fd, &one, sizeof(one));
	(void) rc;					/* a saturated counter still wakes it */
}

/*
 * Sleep until the timerfd, armed at "at" (le_arm_timer; 0: disarmed),
 * fires or le_timer_wake is called; the timerfd is exact, the one-second
 * timeout only guards against surprises.
 */
void
le_timer_sleep(int timer_fd, int wake_fd, int64_t at)
{
	struct pollfd p[2];
	uint64_t	buf;
	ssize_t		rc;

	le_arm_timer(timer_fd, at);
	p[0].fd = timer_fd;
	p[0].events = POLLIN;
	p[1].fd = wake_fd;
	p[1].events = POLLIN;
	if (poll(p, 2, 1000) > 0)
	{
		if (p[0].revents)
			rc = read(timer_fd, &buf, sizeof(buf));
		if (p[1].revents)
			rc = read(wake_fd, &buf, sizeof(buf));
		(void) rc;
	}
}

/*
 * The release call of the extension in schema q (quoted), le_release($1
 * key, $2 owner id, $3 token), and its signature for le_exec_gated: the
 * elector's and the group member's alike.  False if out of memory.
 */
bool
le_sql_release(bool ok, char **sql, char **sig, const char *q)
{
	ok = le_sql_text(ok, sql, "SELECT %1$s.le_release($1, $2, $3::pg_catalog.int8)", q);
	return le_sql_text(ok, sig, "%1$s.le_release(pg_catalog.text,pg_catalog.text,pg_catalog.int8)", q);
}

/*
 * *dst = the SQL text fmt with every "%1$s" the quoted schema q; true, or
 * false (and *dst NULL) when out of memory.  ok false: do nothing.
 */
bool
le_sql_text(bool ok, char **dst, const char *fmt, const char *q)
{
	*dst = NULL;
	if (!ok || asprintf(dst, fmt, q) < 0)
	{
		*dst = NULL;
		return false;
	}
	return true;
}

/*
 * May this call of a stop join the threads (and mark the object stopped)?
 * Not before a start, not twice, and not from the dispatcher thread (a
 * callback): then the stop was only requested.  The object's mutex must be
 * held.
 */
bool
le_stop_claim(bool started, bool *stopped, bool have_dispatch, pthread_t dispatcher)
{
	if (!started || *stopped || (have_dispatch && pthread_equal(pthread_self(), dispatcher)))
		return false;
	*stopped = true;
	return true;
}
