/*-------------------------------------------------------------------------
 *
 * le_util.c
 *		Small helpers of the client library: clocks, strings, random
 *		numbers, durations, waits.
 *
 * Locking rules: none of these functions touch shared state; the random
 * state passed to le_next_rand belongs to the calling thread.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
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
