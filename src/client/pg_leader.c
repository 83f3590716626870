/*-------------------------------------------------------------------------
 *
 * pg_leader.c
 *		Command-line client of leader_election; it runs a command only while
 *		holding a fenced lease, shows leases, releases a lease.
 *
 * The invariant of "pg_leader run": the command's whole process group is
 * SIGKILLed at the kill deadline (local deadline - KILL_SLACK_MS) at the
 * latest, and the lease is released only after that group was reaped.
 * The main thread alone forks, signals and reaps; the elector's threads
 * block all signals and only wake the main thread.  Processes and threads:
 * see "src/client" in src/README.md.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "le_client.h"
#include "pg_leader_history.h"
#include "supervise.h"

#ifndef PG_LEADER_VERSION
#define PG_LEADER_VERSION "unknown"
#endif

/* Exit statuses (documented in doc/client.md and --help). */
#define EXIT_USAGE			64	/* bad usage, bad duration, bad connection string */
#define EXIT_CONNECT		69	/* server unreachable or refused the connection */
#define EXIT_INTERNAL		70	/* fork, thread or memory failure */
#define EXIT_NOT_ACQUIRED	75	/* --no-wait and the lease is held by someone else */
#define EXIT_NO_EXTENSION	78	/* extension leader_election not installed */
#define EXIT_LOST			79	/* leadership lost while the command ran */
#define EXIT_UNHEALTHY		80	/* liveness check failed, or the command was stopped */
/*
 * Shortest --statement-timeout: below it a round trip to a server that is
 * merely busy times out, and an acquire that timed out after it was sent
 * may still be granted on the server (see doc/client.md).
 */
#define MIN_STATEMENT_TIMEOUT_MS 100
#define EXIT_WAIT_TIMEOUT	81	/* not leading within --wait-timeout; status/release --timeout */
#define EXIT_GUARD_LOST		82	/* the command's supervisor died */
#define EXIT_STANDBY		76	/* --no-wait: the server is a standby (SQLSTATE 25006) */
#define EXIT_NO_PERMISSION	77	/* --no-wait: permission denied (SQLSTATE 42501) */
#define EXIT_NOT_RELEASED	1	/* release: the lease was not held by that owner and token */

/*
 * The command's group gets SIGKILL this long before the library's local
 * deadline, at which the library ends leadership: so the group is
 * normally dead by then.  The release itself does not depend on this
 * slack: the elector runs with defer_release, and we release only after
 * the group was reaped.
 */
#define KILL_SLACK_MS		100

/* --no-wait waits for its attempt in slices this long, checking for signals. */
#define NO_WAIT_SLICE_MS	20

/* A command that ended unreported by its supervisor is killed after this. */
#define UNREPORTED_END_MS	200

extern char **environ;

static const char *progname = "pg_leader";

/*
 * Logging.  The main thread and the elector's callbacks format a line and
 * put it in a bounded queue; a writer thread (all signals blocked) alone
 * writes to stderr, and may block there (a full pipe nobody reads).
 * log_mu guards only the queue and is never held during I/O, so a log line
 * never delays what ends a period: signals, reaping, SIGKILL, the release.
 * A line that finds the queue full is dropped and counted; the writer
 * reports the count when it can write again.  At exit the queue gets
 * LOG_EXIT_FLUSH_MS to drain.
 */
#define LOG_QUEUE_LINES		256
#define LOG_LINE_MAX		8192
#define LOG_EXIT_FLUSH_MS	1000
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t log_cv = PTHREAD_COND_INITIALIZER;
static char *log_q[LOG_QUEUE_LINES];	/* ring of malloc'd lines */
static size_t log_q_len[LOG_QUEUE_LINES];
static int	log_q_head = 0;
static int	log_q_count = 0;
static uint64_t log_dropped = 0;
static bool log_writing = false;	/* the writer holds a line outside the queue */
static bool log_async = false;	/* the writer thread runs */
static bool log_json = false;
static bool verbose = false;
static const char *log_key = "";
static char log_owner[256] = "";

/* Self-pipe: signal handlers and callbacks wake the main loop with it. */
static int wake_pipe[2] = {-1, -1};
static volatile sig_atomic_t got_signal = 0;
static volatile sig_atomic_t signal_count = 0;

/*
 * Signals from one sender within this window count once: timeout(1), for
 * one, signals its child and then its own process group, so pg_leader gets
 * the same signal twice at once; only a later signal is a second one.
 */
#define SIGNAL_BURST_MS		200
static volatile sig_atomic_t burst_sender = 0;
static volatile int64_t burst_start_ms = 0;

/* --status-file: where run writes who gave its exit status (NULL: nowhere). */
static const char *status_file = NULL;

/* Descriptors 3 and up open when pg_leader started (the caller's). */
static int	inherited_fds[SV_MAX_KEEP];
static int	n_inherited = 0;

/* --keep-fds: the command keeps the caller's descriptors. */
static bool keep_fds = false;

/* The exit status of run is the command's own (not one of pg_leader's). */
static bool status_is_command = false;

/* Names of pg_leader's own exit statuses in the status file. */
static const struct
{
	int			status;
	const char *name;
}			status_names[] = {
	{EXIT_USAGE, "usage"},
	{EXIT_CONNECT, "connection_failure"},
	{EXIT_INTERNAL, "internal_error"},
	{EXIT_NOT_ACQUIRED, "not_acquired"},
	{EXIT_STANDBY, "standby"},
	{EXIT_NO_PERMISSION, "permission_denied"},
	{EXIT_NO_EXTENSION, "no_extension"},
	{EXIT_LOST, "leadership_lost"},
	{EXIT_UNHEALTHY, "unhealthy"},
	{EXIT_WAIT_TIMEOUT, "timeout"},
	{EXIT_GUARD_LOST, "supervisor_died"},
	{126, "cannot_run_command"},
	{127, "command_not_found"},
};

/*
 * Write the status file: "command N" when N is the command's own exit
 * status, else "pg_leader N WHAT" (WHAT names pg_leader's reason).
 * Called on every exit path of run once options are parsed.
 */
static void
write_status_file(int status)
{
	char		buf[96];
	char		tmp[4096];
	const char *what;
	int			fd,
				len;
	ssize_t		rc;

	if (status_file == NULL)
		return;
	what = status > 128 ? "signal" : "other";
	for (size_t i = 0; i < sizeof(status_names) / sizeof(status_names[0]); i++)
		if (status_names[i].status == status)
			what = status_names[i].name;
	if (status_is_command)
		len = snprintf(buf, sizeof(buf), "command %d\n", status);
	else
		len = snprintf(buf, sizeof(buf), "pg_leader %d %s\n", status, what);
	/*
	 * Written beside it and renamed over it, so that a reader never sees
	 * the file emptied at exit (empty means "running, or killed").
	 */
	if (snprintf(tmp, sizeof(tmp), "%s.%d.tmp", status_file, (int) getpid()) >= (int) sizeof(tmp))
		tmp[0] = '\0';
	fd = open(tmp[0] ? tmp : status_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0)
		return;
	rc = write(fd, buf, (size_t) len);
	(void) rc;
	close(fd);
	if (tmp[0] && rename(tmp, status_file) != 0)
		(void) unlink(tmp);
}

/* Print a usage error and exit. */
static void
usage_error(const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry \"%s --help\" for more information.\n", progname);
	write_status_file(EXIT_USAGE);
	exit(EXIT_USAGE);
}

static void mask_misread(char *msg, size_t len);

/* Print an error (not usage) and exit with status. */
static void
fatal(int status, const char *fmt,...)
{
	va_list		ap;
	char	   *raw = NULL;
	char	   *msg;
	size_t		len;
	int			n;

	va_start(ap, fmt);
	n = vasprintf(&raw, fmt, ap);
	va_end(ap);
	/* a masked part of one byte becomes four */
	len = n > 0 ? 4 * (size_t) n + 1 : 1;
	if (n < 0 || (msg = malloc(len)) == NULL)
	{
		fprintf(stderr, "%s: error: out of memory\n", progname);
		exit(status);
	}
	memcpy(msg, raw, n + 1);
	mask_misread(msg, len);
	fprintf(stderr, "%s: error: %s\n", progname, msg);
	write_status_file(status);
	exit(status);
}

/* Append s to f as a JSON string. */
static void
json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++)
	{
		unsigned char c = (unsigned char) *s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/*
 * Append s to f for a text log line: control characters, DEL and backslash
 * escaped (\n, \t, \xNN, \\), so that no value can start a line of its own.
 */
static void
text_str(FILE *f, const char *s)
{
	for (; s && *s; s++)
	{
		unsigned char c = (unsigned char) *s;

		if (c == '\\')
			fputs("\\\\", f);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
}

/* text_str into buf (of size len), for a column that is padded later. */
static void
text_buf(char *buf, size_t len, const char *s)
{
	FILE	   *mf = fmemopen(buf, len, "w");

	if (mf == NULL)
	{
		snprintf(buf, len, "?");
		return;
	}
	text_str(mf, s);
	fclose(mf);
}

/*
 * Is kw (n bytes, compared without regard to case) a libpq option whose
 * value is secret?  libpq marks those with dispchar "*" (password,
 * sslpassword, ...); password and sslpassword are secret whatever this
 * libpq says.
 */
static bool
secret_keyword(const char *kw, size_t n)
{
	static PQconninfoOption *defs = NULL;
	static bool loaded = false;

	if ((n == 8 && strncasecmp(kw, "password", 8) == 0) ||
		(n == 11 && strncasecmp(kw, "sslpassword", 11) == 0))
		return true;
	if (!loaded)
	{
		char	   *err = NULL;

		/* an empty string gives every option with its dispchar, nothing from the environment */
		defs = PQconninfoParse("", &err);
		PQfreemem(err);
		loaded = true;
	}
	for (PQconninfoOption *d = defs; d && d->keyword; d++)
		if (d->dispchar && strchr(d->dispchar, '*') && strlen(d->keyword) == n &&
			strncasecmp(d->keyword, kw, n) == 0)
			return true;
	return false;
}

/*
 * Spans of secret values in a connection string (at most MAX_SECRETS; from
 * "tail" on, when there were more, everything is taken as secret).  Spans
 * may overlap.
 */
#define MAX_SECRETS 32
typedef struct secret_spans
{
	int			n;
	size_t		tail;
	size_t		start[MAX_SECRETS];
	size_t		end[MAX_SECRETS];
} secret_spans;

/* Record the span [a, b) of dsn as secret. */
static void
add_span(secret_spans *sp, const char *dsn, const char *a, const char *b)
{
	if (b <= a)
		return;
	if (sp->n < MAX_SECRETS)
	{
		sp->start[sp->n] = a - dsn;
		sp->end[sp->n] = b - dsn;
		sp->n++;
	}
	else if ((size_t) (a - dsn) < sp->tail)
		sp->tail = a - dsn;
}

/* Is byte i of the string secret_spans were found in secret? */
static bool
in_secret(const secret_spans *sp, size_t i)
{
	if (i >= sp->tail)
		return true;
	for (int s = 0; s < sp->n; s++)
		if (i >= sp->start[s] && i < sp->end[s])
			return true;
	return false;
}

/* Hex digit value, or -1. */
static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * The password of a URI's user info (start: after "://"), as [*from, *to),
 * false if none.  libpq ends the user info at the first "@" before any "/"
 * and reads what follows as host and port, which its messages quote: the
 * password is taken to run to the last "@" before the first "/" (or else to
 * the last "@" of the string, for a password with "/" in it).
 */
static bool
uri_password(const char *start, const char **from, const char **to)
{
	const char *at = NULL;
	const char *colon;

	for (const char *p = start; *p && *p != '/'; p++)
		if (*p == '@')
			at = p;
	if (at == NULL)
		at = strrchr(start, '@');
	if (at == NULL || (colon = memchr(start, ':', at - start)) == NULL)
		return false;
	*from = colon + 1;
	*to = at;
	return true;
}

/*
 * Find the secret values of a connection string the way libpq reads it,
 * also when it is invalid.  Keyword form: key = value pairs separated by
 * white space, values quoted ('...', with \' and \\) or not (a backslash
 * escapes the next character); after a token without "=" the scan goes on
 * with the next token.  URI form: the password of the user info (up to the
 * first "@" before any "/", as libpq reads it, or else up to the last "@"
 * of the string, so that a password with "/" in it is hidden too) and the
 * value of every query parameter whose percent-decoded name is secret.
 */
static void
find_secrets(const char *dsn, secret_spans *sp)
{
	const char *cp = dsn;

	memset(sp, 0, sizeof(*sp));
	sp->tail = strlen(dsn);
	if (strncmp(dsn, "postgres://", 11) == 0 || strncmp(dsn, "postgresql://", 13) == 0)
	{
		const char *start = strstr(dsn, "://") + 3;
		const char *from,
				   *to;
		const char *amp = NULL;

		if (uri_password(start, &from, &to))
			add_span(sp, dsn, from, to);

		/*
		 * Query parameters, after any "?" or "&": a "?" may also sit in the
		 * user info, or in a value, and an "@" in the query.
		 */
		for (const char *p = start; *p; p++)
		{
			const char *param = p + 1;
			const char *pend;
			const char *eq;
			char		key[64];
			size_t		k = 0;

			if (*p != '?' && *p != '&')
				continue;
			if (amp == NULL || amp < param)
				amp = param + strcspn(param, "&");
			pend = amp;
			/* a secret name, even percent-encoded, is far shorter than this */
			eq = memchr(param, '=', pend - param < 256 ? pend - param : 256);
			for (const char *s = param; eq && s < eq && k + 1 < sizeof(key); s++)
			{
				if (*s == '%' && s + 2 < eq && hexval(s[1]) >= 0 && hexval(s[2]) >= 0)
				{
					key[k++] = (char) (hexval(s[1]) * 16 + hexval(s[2]));
					s += 2;
				}
				else
					key[k++] = *s;
			}
			if (eq && secret_keyword(key, k))
				add_span(sp, dsn, eq + 1, pend);
		}
		return;
	}
	while (*cp)
	{
		const char *key,
				   *key_end,
				   *val;

		if (isspace((unsigned char) *cp))
		{
			cp++;
			continue;
		}
		key = cp;
		while (*cp && *cp != '=' && !isspace((unsigned char) *cp))
			cp++;
		key_end = cp;
		while (isspace((unsigned char) *cp))
			cp++;
		if (*cp != '=')
			continue;			/* not a pair: go on with the next token */
		cp++;
		while (isspace((unsigned char) *cp))
			cp++;
		val = cp;
		if (*cp == '\'')
		{
			cp++;
			while (*cp && *cp != '\'')
				cp += (*cp == '\\' && cp[1]) ? 2 : 1;
			if (*cp)
				cp++;
		}
		else
			while (*cp && !isspace((unsigned char) *cp))
				cp += (*cp == '\\' && cp[1]) ? 2 : 1;
		if (secret_keyword(key, key_end - key))
			add_span(sp, dsn, val, cp);
	}
}

/*
 * Copy a connection string with its secrets masked: every secret value
 * (find_secrets) becomes "****".  Used whenever a DSN is printed.
 */
static void
mask_dsn(const char *dsn, char *out, size_t len)
{
	secret_spans sp;
	size_t		o = 0;
	size_t		n = strlen(dsn);

	find_secrets(dsn, &sp);
	for (size_t i = 0; i < n && o + 1 < len;)
	{
		if (in_secret(&sp, i))
		{
			for (const char *m = "****"; *m && o + 1 < len; m++)
				out[o++] = *m;
			while (i < n && in_secret(&sp, i))
				i++;
		}
		else
			out[o++] = dsn[i++];
	}
	out[o] = '\0';
}

/*
 * Rewrite buf (of size len) in place: wherever match(buf, s, arg) gives the
 * length of a match starting at s, those bytes become repl.  The one loop
 * both maskings use, so that neither can write past len.
 */
typedef size_t (*match_fn) (const char *buf, const char *s, const void *arg);

static void
replace_matches(char *buf, size_t len, match_fn match, const void *arg, const char *repl)
{
	char	   *tmp;
	size_t		o = 0;

	if ((tmp = malloc(len)) == NULL)
		return;
	for (const char *s = buf; *s && o + 1 < len;)
	{
		size_t		c = match(buf, s, arg);

		if (c > 0)
		{
			for (const char *m = repl; *m && o + 1 < len; m++)
				tmp[o++] = *m;
			s += c;
		}
		else
			tmp[o++] = *s++;
	}
	tmp[o] = '\0';
	memcpy(buf, tmp, o + 1);
	free(tmp);
}

/* A needle of replace_all: nlen bytes, not necessarily terminated. */
typedef struct needle
{
	const char *s;
	size_t		n;
} needle;

/* match_fn of replace_all: the needle, exactly. */
static size_t
match_needle(const char *buf, const char *s, const void *arg)
{
	const needle *nd = arg;

	(void) buf;
	return strncmp(s, nd->s, nd->n) == 0 ? nd->n : 0;
}

/* Replace every occurrence of needle (nlen bytes) in buf (of size len) with repl. */
static void
replace_all(char *buf, size_t len, const char *s, size_t nlen, const char *repl)
{
	needle		nd = {s, nlen};

	if (nlen > 0)
		replace_matches(buf, len, match_needle, &nd, repl);
}

/*
 * Mask the secrets of dsn in a message (of size len) about it, such as
 * libpq's parse error: the whole string quoted becomes its masked form, and
 * every secret value (as written in dsn) becomes "****" wherever it appears.
 */
static void
mask_message(char *msg, size_t len, const char *dsn, const char *masked)
{
	secret_spans sp;

	size_t		n = strlen(dsn);

	replace_all(msg, len, dsn, n, masked);
	find_secrets(dsn, &sp);
	for (size_t i = 0; i < n;)
	{
		size_t		j = i;
		char	   *val;

		while (j < n && in_secret(&sp, j))
			j++;
		if (j == i)
		{
			i++;
			continue;
		}
		if ((val = strndup(dsn + i, j - i)) != NULL)
			replace_all(msg, len, val, j - i, "****");
		free(val);
		i = j;
	}
}

/*
 * Parts of a URI's password that libpq reads as something else (user
 * "a@b:pw@h" or password "pw@x@h": the rest is host and port; password
 * "p/w": no user info at all, "p" is the port) and may quote in a later
 * message, such as "invalid integer value "pw@h" for connection option
 * "port"" or "could not translate host name "x@h"": masked in every
 * message printed (mask_misread).  A password libpq reads whole is never
 * quoted by it, and is not listed.
 */
static char **misread = NULL;
static int	n_misread = 0;

/* Add s (n bytes) and, if it has percent escapes, its decoded form to misread. */
static void
add_misread(const char *s, size_t n)
{
	char	   *dec;
	size_t		k = 0;
	char	  **grown;

	if (n == 0 || (grown = realloc(misread, (n_misread + 2) * sizeof(char *))) == NULL)
		return;
	misread = grown;
	if ((misread[n_misread] = strndup(s, n)) != NULL)
		n_misread++;
	if (memchr(s, '%', n) == NULL || (dec = malloc(n + 1)) == NULL)
		return;
	for (size_t i = 0; i < n; i++)
	{
		if (s[i] == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0)
		{
			dec[k++] = (char) (hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
			i += 2;
		}
		else
			dec[k++] = s[i];
	}
	dec[k] = '\0';
	if (dec[0] != '\0')		/* "%00" decodes to an empty string */
		misread[n_misread++] = dec;
	else
		free(dec);
}

/*
 * List the parts of a URI's password (find_secrets) that libpq does not
 * read as the password (up to the first "@" before any "/"), split where
 * libpq splits its netloc ("@", ":", "/", ",").
 */
static void
note_misread_secrets(const char *dsn)
{
	const char *start;
	const char *first_at;
	const char *lp_from = NULL,
			   *lp_to = NULL;
	const char *from,
			   *to;

	if (strncmp(dsn, "postgres://", 11) != 0 && strncmp(dsn, "postgresql://", 13) != 0)
		return;
	start = strstr(dsn, "://") + 3;
	first_at = start + strcspn(start, "@/");
	if (*first_at == '@')
	{
		const char *colon = start + strcspn(start, ":@");

		if (*colon == ':')
		{
			lp_from = colon + 1;
			lp_to = first_at;
		}
	}
	if (!uri_password(start, &from, &to) || (from == lp_from && to == lp_to))
		return;
	for (const char *p = from; p < to;)
	{
		size_t		n = strcspn(p, "@:/,");

		if (p + n > to)
			n = to - p;
		add_misread(p, n);
		p += n + 1;
	}
}

/*
 * match_fn of mask_misread: the misread part arg where it stands as libpq
 * quotes it, between quotes or the separators of a URI ("@", ":", "/", ",",
 * ...), so that a short part does not garble words; or a copy of it cut
 * short: at the end of the message, or of 16 bytes or more before a
 * separator (a host name cut to a buffer by whoever quotes it).
 */
static size_t
match_misread(const char *buf, const char *s, const void *arg)
{
	static const char sep[] = "\"'@:/,?&=() ";
	const char *part = arg;
	size_t		n = strlen(part);
	size_t		c = 0;

	if (s == buf || strchr(sep, s[-1]))
		while (c < n && s[c] && s[c] == part[c])
			c++;
	if (c > 0 && (c == n || c >= 16 || s[c] == '\0') && strchr(sep, s[c]))
		return c;
	return 0;
}

/* Mask the misread parts of the DSN's password in msg (of size len). */
static void
mask_misread(char *msg, size_t len)
{
	for (int i = 0; i < n_misread; i++)
		if (misread[i][0] != '\0')
			replace_matches(msg, len, match_misread, misread[i], "****");
}

/*
 * Timestamps in log lines all read YYYY-MM-DDTHH:MM:SS.mmmZ: a UTC server
 * value in another style ("2026-11-29 08:34:37.642+00", "+00:00", or with
 * microseconds) is rewritten; anything else is kept as it is.
 */
static void
iso_utc(const char *in, char *out, size_t len)
{
	size_t		n = strlen(in);
	size_t		i = 19;
	char		frac[4] = "000";
	const char *zone;

	snprintf(out, len, "%s", in);
	if (n < 19 || (in[10] != ' ' && in[10] != 'T') || in[4] != '-' || in[13] != ':' || in[16] != ':')
		return;
	if (in[i] == '.')
	{
		for (int d = 0; in[++i] >= '0' && in[i] <= '9'; d++)
			if (d < 3)
				frac[d] = in[i];
	}
	zone = in + i;
	if (strcmp(zone, "Z") != 0 && strcmp(zone, "+00") != 0 && strcmp(zone, "+00:00") != 0)
		return;
	snprintf(out, len, "%.10sT%.8s.%sZ", in, in + 11, frac);
}

/* Wall-clock time as ISO 8601 UTC with milliseconds. */
static void
now_iso(char *buf, size_t len)
{
	struct timespec ts;
	struct tm	tm;
	char		base[24];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, len, "%s.%03dZ", base, (int) (ts.tv_nsec / 1000000) % 1000);
}

/* Write all of buf to fd, waiting while it is full; false on an error. */
static bool
write_all(int fd, const char *buf, size_t len)
{
	while (len > 0)
	{
		ssize_t		n = write(fd, buf, len);

		if (n > 0)
		{
			buf += n;
			len -= (size_t) n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
		{
			struct pollfd p = {fd, POLLOUT, 0};

			(void) poll(&p, 1, -1);
			continue;
		}
		return false;
	}
	return true;
}

/*
 * Queue one formatted line for the writer (never blocks on I/O; drops and
 * counts it when the queue is full).  Before the writer runs (status,
 * release, usage errors) it is written at once.
 */
static void
log_submit(const char *line, size_t len)
{
	char	   *copy;

	if (!log_async)
	{
		(void) write_all(STDERR_FILENO, line, len);
		return;
	}
	copy = malloc(len);
	pthread_mutex_lock(&log_mu);
	if (copy == NULL || log_q_count == LOG_QUEUE_LINES)
	{
		log_dropped++;
		pthread_mutex_unlock(&log_mu);
		free(copy);
		return;
	}
	memcpy(copy, line, len);
	log_q[(log_q_head + log_q_count) % LOG_QUEUE_LINES] = copy;
	log_q_len[(log_q_head + log_q_count) % LOG_QUEUE_LINES] = len;
	log_q_count++;
	pthread_cond_broadcast(&log_cv);
	pthread_mutex_unlock(&log_mu);
}

/*
 * Close out, a stream writing one log line into line (of size size), and
 * queue what it wrote; a line cut to the buffer still ends with a newline.
 */
static void
log_submit_stream(FILE *out, char *line, size_t size)
{
	long		len;

	fflush(out);
	len = ftell(out);
	fclose(out);
	if (len <= 0)
		return;
	if (len >= (long) size)
		len = (long) size - 1;
	line[len - 1] = '\n';
	log_submit(line, (size_t) len);
}

static void log_event(const char *event, int64_t token, const char *expires, const char *reason,
					  const char *fmt,...) __attribute__((format(printf, 5, 6)));
static void log_key_event(const char *key, const char *event, int64_t token, const char *expires,
						  const char *reason, const char *fmt,...)
			__attribute__((format(printf, 6, 7)));

/* The writer thread: the only one that writes log lines to stderr. */
static void *
log_writer(void *arg)
{
	(void) arg;
	for (;;)
	{
		char	   *line;
		size_t		len;
		uint64_t	dropped;

		pthread_mutex_lock(&log_mu);
		while (log_q_count == 0)
			pthread_cond_wait(&log_cv, &log_mu);
		line = log_q[log_q_head];
		len = log_q_len[log_q_head];
		log_q_head = (log_q_head + 1) % LOG_QUEUE_LINES;
		log_q_count--;
		log_writing = true;
		pthread_mutex_unlock(&log_mu);

		(void) write_all(STDERR_FILENO, line, len);
		free(line);

		pthread_mutex_lock(&log_mu);
		dropped = log_dropped;
		log_dropped = 0;
		log_writing = false;
		pthread_cond_broadcast(&log_cv);
		pthread_mutex_unlock(&log_mu);
		if (dropped > 0)
			log_event("notice", 0, NULL, NULL,
					  "%" PRIu64 " log lines dropped: stderr was not writable", dropped);
	}
	return NULL;
}

/* Start the writer thread, with every signal blocked in it. */
static void
log_start(void)
{
	pthread_t	t;
	sigset_t	all,
				old;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&t, NULL, log_writer, NULL) == 0)
	{
		pthread_detach(t);
		log_async = true;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Give the queue up to timeout_ms to drain (stderr may be stuck for good). */
static void
log_flush(int64_t timeout_ms)
{
	int64_t		end = le_monotonic_ms() + timeout_ms;

	pthread_mutex_lock(&log_mu);
	while (log_async && (log_q_count > 0 || log_writing) && le_monotonic_ms() < end)
	{
		pthread_mutex_unlock(&log_mu);
		poll(NULL, 0, 5);
		pthread_mutex_lock(&log_mu);
	}
	pthread_mutex_unlock(&log_mu);
}

/*
 * "pg_leader: error: MESSAGE" for people, through the queue like every log
 * line: stderr may be a full pipe, and an exit must not wait for it.
 */
static void
log_plain_error(const char *msg)
{
	char		line[LOG_LINE_MAX];
	char		masked[LOG_LINE_MAX];
	FILE	   *out = fmemopen(line, sizeof(line), "w");

	if (out == NULL)
		return;
	snprintf(masked, sizeof(masked), "%s", msg);
	mask_misread(masked, sizeof(masked));
	fprintf(out, "%s: error: ", progname);
	text_str(out, masked);
	fputc('\n', out);
	log_submit_stream(out, line, sizeof(line));
}

/*
 * One log line per event on stderr: timestamp, event, lease key (key, or
 * log_key when NULL), owner, token (if > 0), expiry (if known), reason (if
 * any), free text detail.  JSON lines of new_leader events also have a
 * "holder" field (has_holder: the holder's name, or null for a free lease).
 */
static void
log_line(const char *key, const char *event, int64_t token, const char *expires, const char *reason,
		 bool has_holder, const char *holder, const char *detail)
{
	char		ts[64];
	char		exp_iso[80] = "";
	char		line[LOG_LINE_MAX];
	FILE	   *out;

	now_iso(ts, sizeof(ts));
	if (expires && *expires)
	{
		iso_utc(expires, exp_iso, sizeof(exp_iso));
		expires = exp_iso;
	}
	out = fmemopen(line, sizeof(line), "w");
	if (out == NULL)
	{
		pthread_mutex_lock(&log_mu);
		log_dropped++;
		pthread_mutex_unlock(&log_mu);
		return;
	}
	if (log_json)
	{
		fprintf(out, "{\"ts\":\"%s\",\"pid\":%d,\"event\":", ts, (int) getpid());
		json_str(out, event);
		fputs(",\"lease_key\":", out);
		json_str(out, key ? key : log_key);
		fputs(",\"owner\":", out);
		json_str(out, log_owner);
		if (token > 0)
			fprintf(out, ",\"token\":%" PRId64, token);
		else
			fputs(",\"token\":null", out);
		fputs(",\"expires_at\":", out);
		if (expires && *expires)
			json_str(out, expires);
		else
			fputs("null", out);
		fputs(",\"reason\":", out);
		if (reason)
			json_str(out, reason);
		else
			fputs("null", out);
		if (has_holder)
		{
			fputs(",\"holder\":", out);
			if (holder)
				json_str(out, holder);
			else
				fputs("null", out);
		}
		if (detail[0])
		{
			fputs(",\"detail\":", out);
			json_str(out, detail);
		}
		fputs("}\n", out);
	}
	else
	{
		fprintf(out, "%s pg_leader[%d] %s key=", ts, (int) getpid(), event);
		text_str(out, key ? key : log_key);
		fputs(" owner=", out);
		text_str(out, log_owner);
		if (token > 0)
			fprintf(out, " token=%" PRId64, token);
		if (expires && *expires)
		{
			fputs(" expires=", out);
			text_str(out, expires);
		}
		if (reason)
		{
			fputs(" reason=", out);
			text_str(out, reason);
		}
		if (detail[0])
		{
			fputs(": ", out);
			text_str(out, detail);
		}
		fputc('\n', out);
	}
	log_submit_stream(out, line, sizeof(line));
}

/* log_line of lease key (NULL: log_key) with a printf-style detail and no holder field. */
static void
log_event_v(const char *key, const char *event, int64_t token, const char *expires,
			const char *reason, const char *fmt, va_list ap)
{
	char		detail[1200] = "";

	if (fmt)
	{
		vsnprintf(detail, sizeof(detail), fmt, ap);
		mask_misread(detail, sizeof(detail));
	}
	log_line(key, event, token, expires, reason, false, NULL, detail);
}

/* log_event_v about log_key. */
static void
log_event(const char *event, int64_t token, const char *expires, const char *reason,
		  const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	log_event_v(NULL, event, token, expires, reason, fmt, ap);
	va_end(ap);
}

/* log_event_v about lease key: a partition's, for instance. */
static void
log_key_event(const char *key, const char *event, int64_t token, const char *expires,
			  const char *reason, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	log_event_v(key, event, token, expires, reason, fmt, ap);
	va_end(ap);
}

/* Wake the main loop (async-signal-safe). */
static void
wake_main(void)
{
	int			save = errno;
	char		c = 1;
	ssize_t		rc = write(wake_pipe[1], &c, 1);

	(void) rc;
	errno = save;
}

/*
 * SIGTERM/SIGINT/SIGHUP: remember, count (once per sender burst, see
 * SIGNAL_BURST_MS), wake.  SIGCHLD: wake.
 */
static void
on_signal(int sig, siginfo_t *si, void *ctx)
{
	(void) ctx;
	if (sig != SIGCHLD)
	{
		int64_t		now = le_monotonic_ms();
		pid_t		sender = si ? si->si_pid : 0;

		if (got_signal == 0)
			got_signal = sig;
		if (signal_count == 0 || sender != (pid_t) burst_sender ||
			now - burst_start_ms >= SIGNAL_BURST_MS)
		{
			signal_count++;
			burst_sender = sender;
			burst_start_ms = now;
		}
	}
	wake_main();
}

/* Elector callback: leadership started. */
static void
cb_started(void *arg, const le_lease_info *l)
{
	(void) arg;
	log_event("acquired", l->fencing_token, l->expires_at, NULL, NULL);
	wake_main();
}

/* Elector callback: leadership ended. */
static void
cb_stopped(void *arg, const le_lease_info *l, le_stop_reason reason, const char *detail)
{
	(void) arg;
	log_event("stopped_leading", l->fencing_token, l->expires_at, le_stop_reason_name(reason),
			  detail ? "%s" : NULL, detail);
	wake_main();
}

/* Elector callback: renewal confirmed (logged with -v). */
static void
cb_renewed(void *arg, const le_lease_info *l)
{
	(void) arg;
	if (verbose)
		log_event("renewed", l->fencing_token, l->expires_at, NULL, NULL);
	wake_main();				/* the watchdog needs the new deadline */
}

/*
 * Elector callback: a new holder was seen (another owner, ourselves when a
 * period begins), or holder NULL: the lease is free.
 */
static void
cb_new_leader(void *arg, const char *holder, int64_t token, const char *expires_at)
{
	char		detail[400];

	(void) arg;
	if (holder == NULL)
		snprintf(detail, sizeof(detail), "holder none (the lease is free)");
	else
		snprintf(detail, sizeof(detail), "holder %s%s", holder,
				 strcmp(holder, log_owner) == 0 ? " (ourselves)" : "");
	log_line(NULL, "new_leader", token, expires_at, NULL, true, holder, detail);
}

/* Elector callback: connection trouble and the like. */
static void
cb_notice(void *arg, const char *message)
{
	(void) arg;
	log_event("notice", 0, NULL, NULL, "%s", message);
	wake_main();				/* a failed attempt may end a wait (permanent_status) */
}

/* The --help text. */
static void
help(void)
{
	printf("%s runs a command only while it holds a fenced lease of extension leader_election;\n"
		   "with group run, one instance of it per partition of a group it owns.\n\n", progname);
	printf("Usage:\n"
		   "  %1$s run     -d DSN -l KEY [OPTION]... -- COMMAND [ARG]...\n"
		   "  %1$s group run -d DSN --group G [--member ID] [OPTION]... -- COMMAND [ARG]...\n"
		   "  %1$s status  -d DSN [-l KEY | --group G] [--json] [--timeout D]\n"
		   "  %1$s release -d DSN -l KEY --owner ID --token N [--timeout D]\n"
		   "  %1$s history -d DSN [-l KEY] [--since WHEN] [--svg FILE | --json]\n"
		   "  %1$s watch   -d DSN [-l KEY] [--json] [--poll D] [-v]\n"
		   "  %1$s --version\n\n", progname);
	printf("Options:\n"
		   "  -d, --dbname=DSN         libpq connection string or URI (default: PG* environment)\n"
		   "  -l, --lease=KEY          lease key\n"
		   "      --owner=ID           owner id (default: host-pid-random)\n"
		   "      --group=G            group run, status: the partition group (le_group_create)\n"
		   "      --member=ID          group run: member id, 1-120 bytes (default: host-pid-random)\n"
		   "      --ttl=DURATION       lease duration (default 15s)\n"
		   "      --metadata=JSON      published with the lease while leading (le_leases.metadata;\n"
		   "                           the server checks it; needs extension 1.1)\n"
		   "      --renew=DURATION     renewal interval (default (ttl-margin-100ms-grace)/3;\n"
		   "                           at most (ttl-margin-100ms-grace)/2)\n"
		   "      --retry=DURATION     campaign interval while not leading (default 2s, +/- jitter)\n"
		   "      --jitter=PERCENT     random spread of the retry interval (default 20)\n"
		   "      --safety-margin=DURATION  leadership ends this long before ttl runs out\n"
		   "                           (default ttl/10, at least 50ms)\n"
		   "      --grace=DURATION     SIGTERM this long before the SIGKILL deadline\n"
		   "                           (default 5s or (ttl-margin-100ms)/3; at most (ttl-margin-100ms)/2)\n"
		   "      --connect-timeout=DURATION    (default 5s)\n"
		   "      --statement-timeout=DURATION  (default 5s; renewals also stop at the deadline)\n"
		   "      --no-wait            try once; exit 75 if the lease is held by someone else\n"
		   "      --wait-timeout=DURATION  exit 81 when not leading after this long\n"
		   "      --max-runtime=DURATION   stop the command (exit 80) after it ran this long\n"
		   "      --heartbeat-file=FILE    with --heartbeat-timeout: the command must touch FILE\n"
		   "      --heartbeat-timeout=DURATION  stop the command (exit 80) when FILE is older\n"
		   "      --timeout=DURATION   status, release: give up after this long (default 10s);\n"
		   "                           history, watch: the longest wait for one query\n"
		   "      --status-file=FILE   run: write \"command N\" or \"pg_leader N WHY\" there at exit\n"
		   "      --keep-fds           run: the command keeps the descriptors 3 and up that pg_leader\n"
		   "                           got (LISTEN_FDS for LISTEN_PID=pg_leader's pid: always)\n"
		   "      --loop               campaign again after the command ends or leadership is lost\n"
		   "      --log-format=FORMAT  text (default) or json; one line per event on stderr\n"
		   "  -v, --verbose            also log every renewal (watch: print renewals)\n"
		   "      --json               status, history: print JSON instead of a table;\n"
		   "                           watch: one JSON object a line\n"
		   "      --svg=FILE           history: draw the ownership timeline as SVG into FILE\n"
		   "      --since=WHEN         history: periods that ended since WHEN, a duration ago\n"
		   "                           (10m, 2h) or a timestamp (default: all recorded)\n"
		   "      --poll=DURATION      watch: look for expiries this often (default 1s)\n"
		   "      --token=N            release: the fencing token to release\n"
		   "  -V, --version            show the version and exit\n"
		   "  -h, --help               show this help and exit\n\n"
		   "Durations take a unit: 500ms, 15s, 2m, 1h.\n\n"
		   "The command gets LE_LEASE_KEY, LE_FENCING_TOKEN, LE_OWNER_ID, LE_EXPIRES_AT and LE_DSN\n"
		   "(the -d value as given) in its environment.  It must pass LE_FENCING_TOKEN to every\n"
		   "fenced write.  Its process group gets SIGKILL at the latest 100ms before the local\n"
		   "deadline (last confirmed renewal sent + ttl - margin), and SIGTERM --grace before\n"
		   "that; the lease is released only after the whole group is gone.\n\n"
		   "group run heartbeats le_group_heartbeat every --renew (the same default and limits)\n"
		   "and runs one instance of COMMAND per partition it owns, with LE_PARTITION, LE_GROUP\n"
		   "and that partition's LE_LEASE_KEY and LE_FENCING_TOKEN (LE_OWNER_ID: the member id),\n"
		   "each under the same deadline rules; an instance is stopped when its partition is\n"
		   "revoked, its partition released only after its group is gone, and one that exits\n"
		   "on its own while the partition is ours starts again after --retry, doubled per\n"
		   "exit in a row (at most 30s).  SIGTERM/SIGINT/SIGHUP: stop every instance, leave\n"
		   "the group (le_group_leave), exit 128+N.\n\n"
		   "Exit status of run: the command's status (128+N if killed by signal N), or\n"
		   "  64 bad usage   69 connection failure (--no-wait: or another server error)\n"
		   "  70 internal error\n"
		   "  75 not acquired: held by another owner (--no-wait)   76 server is a standby (--no-wait)\n"
		   "  77 permission denied (--no-wait)   78 extension missing   79 leadership lost\n"
		   "  80 liveness check failed or the command was stopped   81 timed out (--wait-timeout,\n"
		   "  --no-wait without an answer)   82 the command's supervisor died\n"
		   "  128+N when pg_leader itself got signal N (the command was stopped, the lease released)\n"
		   "  A command may exit with any of these itself: --status-file tells which it was.\n"
		   "Exit status of group run: 128+N after signal N; 64, 69, 70, 76, 77, 78 as run (69 also:\n"
		   "the server refused the heartbeat, e.g. an unknown group or a member id of another role).\n"
		   "status: 0, or 1 when -l KEY names no lease or --group G no group; release: 0 released,\n"
		   "1 not held; both 81 on --timeout.  history: 0.  watch: runs until SIGINT or SIGTERM, then 0;\n"
		   "69 when the connection is lost.\n");
}

/* Parse a duration option or exit with a usage error. */
static int64_t
duration_arg(const char *opt, const char *val)
{
	int64_t		ms;

	if (!le_parse_duration_ms(val, &ms))
		usage_error("invalid duration for --%s: \"%s\" (use e.g. 500ms, 15s, 2m, 1h)", opt, val);
	return ms;
}

/*
 * Check a --heartbeat-file path or exit with a usage error: not empty, not
 * longer than PATH_MAX, not a directory, in a directory that exists (the
 * command creates the file; its absence counts as a missed heartbeat).
 */
static void
check_heartbeat_file(const char *path)
{
	struct stat sb;
	char		dir[PATH_MAX];
	const char *slash;

	if (path[0] == '\0')
		usage_error("--heartbeat-file must not be empty");
	if (strlen(path) >= PATH_MAX)
		usage_error("--heartbeat-file is longer than %d bytes", PATH_MAX - 1);
	if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
		usage_error("--heartbeat-file \"%s\" is a directory", path);
	slash = strrchr(path, '/');
	if (slash == NULL)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int) (slash - path), path);
	if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
		usage_error("--heartbeat-file \"%s\": directory \"%s\" does not exist", path, dir);
}

/* Options of all subcommands. */
typedef struct options
{
	const char *dsn;
	const char *lease;
	const char *owner;
	const char *group;			/* --group: group run, status */
	const char *member;			/* --member: group run */
	int64_t		ttl,
				renew,
				retry,
				margin,
				grace,
				connect_timeout,
				statement_timeout;
	int			jitter;
	bool		no_wait;
	bool		loop;
	bool		json;
	int64_t		token;
	int64_t		wait_timeout;
	int64_t		max_runtime;
	const char *heartbeat_file;
	const char *metadata;		/* --metadata JSON, NULL: none */
	int64_t		heartbeat_timeout;
	int64_t		timeout;
	bool		grace_set;
	const char *svg;			/* history --svg FILE */
	const char *since;			/* history --since */
	int64_t		poll;			/* watch --poll */
	char	  **command;
} options;

/* Set the option c of getopt_long, with its argument optarg. */
static void
set_option(options *o, int c)
{
	char	   *end;

	switch (c)
	{
		case 'd':
			o->dsn = optarg;
			break;
		case 'l':
			o->lease = optarg;
			break;
		case 'o':
			o->owner = optarg;
			break;
		case 1:
			o->ttl = duration_arg("ttl", optarg);
			break;
		case 2:
			o->renew = duration_arg("renew", optarg);
			break;
		case 3:
			o->retry = duration_arg("retry", optarg);
			break;
		case 4:
			errno = 0;
			o->jitter = (int) strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || o->jitter < 0 || o->jitter > 100)
				usage_error("invalid --jitter \"%s\" (a percentage from 0 to 100)", optarg);
			break;
		case 5:
			o->margin = duration_arg("safety-margin", optarg);
			break;
		case 6:
			o->grace = duration_arg("grace", optarg);
			o->grace_set = true;
			break;
		case 7:
			o->connect_timeout = duration_arg("connect-timeout", optarg);
			break;
		case 8:
			o->statement_timeout = duration_arg("statement-timeout", optarg);
			if (o->statement_timeout < MIN_STATEMENT_TIMEOUT_MS)
				usage_error("--statement-timeout %s is too short: at least %dms "
							"(an acquire that times out after it was sent may still be granted)",
							optarg, MIN_STATEMENT_TIMEOUT_MS);
			break;
		case 9:
			o->no_wait = true;
			break;
		case 10:
			o->loop = true;
			break;
		case 11:
			if (strcmp(optarg, "json") == 0)
				log_json = true;
			else if (strcmp(optarg, "text") != 0)
				usage_error("invalid --log-format \"%s\" (text or json)", optarg);
			break;
		case 12:
			o->json = true;
			break;
		case 13:
			errno = 0;
			o->token = strtoll(optarg, &end, 10);
			if (errno || *end || end == optarg || o->token <= 0)
				usage_error("invalid --token \"%s\" (a positive integer)", optarg);
			break;
		case 14:
			o->wait_timeout = duration_arg("wait-timeout", optarg);
			break;
		case 15:
			o->max_runtime = duration_arg("max-runtime", optarg);
			break;
		case 16:
			o->heartbeat_file = optarg;
			break;
		case 17:
			o->heartbeat_timeout = duration_arg("heartbeat-timeout", optarg);
			break;
		case 18:
			o->timeout = duration_arg("timeout", optarg);
			break;
		case 20:
			keep_fds = true;
			break;
		case 21:
			if (optarg[0] == '\0')
				usage_error("--svg needs a file name");
			o->svg = optarg;
			break;
		case 22:
			o->since = optarg;
			break;
		case 23:
			o->poll = duration_arg("poll", optarg);
			break;
		case 25:
			o->group = optarg;
			break;
		case 26:
			o->member = optarg;
			break;
		case 24:
			if (strlen(optarg) > 4000)
				usage_error("--metadata is longer than 4000 bytes");
			o->metadata = optarg;
			break;
		case 19:
			{
				/* created empty now: a reader sees "" until pg_leader exits */
				int			fd = open(optarg, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);

				if (fd < 0)
					usage_error("cannot write --status-file \"%s\": %s", optarg, strerror(errno));
				close(fd);
				status_file = optarg;
			}
			break;
		case 'V':
			printf("%s (leader_election) %s\n", progname, PG_LEADER_VERSION);
			exit(0);
		case 'v':
			verbose = true;
			break;
		case 'h':
			help();
			exit(0);
		default:
			usage_error("invalid option");
	}
}

/* Parse argv after the subcommand name. */
static void
parse_options(int argc, char **argv, options *o)
{
	static const struct option longopts[] = {
		{"dbname", required_argument, NULL, 'd'},
		{"lease", required_argument, NULL, 'l'},
		{"owner", required_argument, NULL, 'o'},
		{"ttl", required_argument, NULL, 1},
		{"renew", required_argument, NULL, 2},
		{"retry", required_argument, NULL, 3},
		{"jitter", required_argument, NULL, 4},
		{"safety-margin", required_argument, NULL, 5},
		{"grace", required_argument, NULL, 6},
		{"connect-timeout", required_argument, NULL, 7},
		{"statement-timeout", required_argument, NULL, 8},
		{"no-wait", no_argument, NULL, 9},
		{"loop", no_argument, NULL, 10},
		{"log-format", required_argument, NULL, 11},
		{"json", no_argument, NULL, 12},
		{"token", required_argument, NULL, 13},
		{"wait-timeout", required_argument, NULL, 14},
		{"max-runtime", required_argument, NULL, 15},
		{"heartbeat-file", required_argument, NULL, 16},
		{"heartbeat-timeout", required_argument, NULL, 17},
		{"timeout", required_argument, NULL, 18},
		{"status-file", required_argument, NULL, 19},
		{"keep-fds", no_argument, NULL, 20},
		{"svg", required_argument, NULL, 21},
		{"since", required_argument, NULL, 22},
		{"poll", required_argument, NULL, 23},
		{"metadata", required_argument, NULL, 24},
		{"group", required_argument, NULL, 25},
		{"member", required_argument, NULL, 26},
		{"version", no_argument, NULL, 'V'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;
	le_config	defaults;

	le_config_init(&defaults);
	memset(o, 0, sizeof(*o));
	o->dsn = "";
	o->ttl = defaults.ttl_ms;
	o->retry = defaults.retry_ms;
	o->jitter = defaults.retry_jitter_pct;
	o->grace = 5000;
	o->timeout = 10000;
	o->poll = 1000;
	o->connect_timeout = defaults.connect_timeout_ms;
	o->statement_timeout = defaults.statement_timeout_ms;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+d:l:vVh", longopts, NULL)) != -1)
		set_option(o, c);
	o->command = argv + optind;
	if ((o->heartbeat_file == NULL) != (o->heartbeat_timeout == 0))
		usage_error("--heartbeat-file and --heartbeat-timeout go together");
	if (o->heartbeat_file != NULL)
		check_heartbeat_file(o->heartbeat_file);
	if (o->timeout <= 0)
		usage_error("--timeout must be positive");
	/* the server rejects these with 22021: a usage error for every subcommand */
	if (o->lease != NULL && !le_valid_utf8(o->lease))
		usage_error("lease key is not valid UTF-8");
	if (o->owner != NULL && !le_valid_utf8(o->owner))
		usage_error("owner id is not valid UTF-8");
	if (o->member != NULL && !le_valid_utf8(o->member))
		usage_error("member id is not valid UTF-8");
}

/*
 * Fit the grace period and the renewal interval into a period.  From the
 * send of the last confirmed renewal, the command has window = ttl - margin
 * - KILL_SLACK_MS until its SIGKILL, and gets SIGTERM grace before that; a
 * failed renewal must be retryable before the SIGTERM: renew <= (window -
 * grace) / 2.  Without --grace, grace is min(5s, window/3), shrunk to fit
 * an explicit --renew; an explicit --grace above window/2 is a usage error.  Without --renew, renew = (window - grace) / 3.
 */
static void
check_timing(options *o)
{
	int64_t		margin = o->margin;
	int64_t		window;

	if (o->ttl < 100)
		return;					/* the library explains the ttl rule */
	if (margin == 0)
	{
		margin = o->ttl / 10 > 50 ? o->ttl / 10 : 50;
		if (margin > o->ttl / 4)
			margin = o->ttl / 4;
	}
	if (margin * 2 >= o->ttl)
		return;					/* the library explains the margin rule */
	window = o->ttl - margin - KILL_SLACK_MS;
	if (window < 50)
		usage_error("ttl %" PRId64 "ms minus safety margin %" PRId64 "ms leaves no time for the command "
					"(pg_leader kills it %dms before that)", o->ttl, margin, KILL_SLACK_MS);
	if (!o->grace_set)
	{
		o->grace = window / 3 < 5000 ? window / 3 : 5000;
		if (o->renew > 0 && o->grace > window - 2 * o->renew)
			o->grace = window - 2 * o->renew;
		if (o->grace < 0)
			usage_error("renew interval (%" PRId64 " ms) must be at most half of ttl minus safety margin minus %dms (%" PRId64 " ms), "
						"so that a failed renewal can be retried before the command is stopped",
						o->renew, KILL_SLACK_MS, window / 2);
	}
	else if (o->grace * 2 > window)
		usage_error("--grace %" PRId64 "ms does not fit in the period: the command is SIGKILLed "
					"ttl - safety margin - %dms = %" PRId64 "ms after the last renewal was sent, "
					"and --grace may be at most half of that (%" PRId64 "ms)",
					o->grace, KILL_SLACK_MS, window, window / 2);
	if (o->renew == 0)
		o->renew = (window - o->grace) / 3;
	else if (o->renew * 2 > window - o->grace)
		usage_error("renew interval (%" PRId64 " ms) must be at most half of ttl minus safety margin minus %dms minus grace (%" PRId64 " ms), "
					"so that a failed renewal can be retried before the command is stopped",
					o->renew, KILL_SLACK_MS, (window - o->grace) / 2);
	if (o->renew < 1)
		o->renew = 1;
}

/*
 * Exit status and explanation of a --no-wait that did not lead, from the
 * outcome of the elector's last attempt (le_status.last_error): held by
 * another owner (75), standby (76), permission denied (77), extension
 * missing (78), no answer in time (81), connection failure or another
 * error from the server (69).
 */
static int
no_wait_status(bool answered, const le_status *st, char *why, size_t len)
{
	/* lock_timeout on the lease row: a transaction holds it (busy), as good as held */
	if (strcmp(st->last_sqlstate, "55P03") == 0)
	{
		snprintf(why, len, "busy: the lease row is locked by another transaction: %s",
				 st->last_message);
		return EXIT_NOT_ACQUIRED;
	}
	switch (st->last_error)
	{
		case LE_ERR_HELD:
		case LE_ERR_OWNER_CONFLICT:
			snprintf(why, len, "held by %s", st->holder[0] ? st->holder : "another owner");
			return EXIT_NOT_ACQUIRED;
		case LE_ERR_PERMISSION:
			snprintf(why, len, "permission denied: %s", st->last_message);
			return EXIT_NO_PERMISSION;
		case LE_ERR_READ_ONLY:
			snprintf(why, len, "the server is a standby: %s", st->last_message);
			return EXIT_STANDBY;
		case LE_ERR_NO_EXTENSION:
			snprintf(why, len, "%s", st->last_message);
			return EXIT_NO_EXTENSION;
		case LE_ERR_CONNECT:
			snprintf(why, len, "could not reach the server: %s", st->last_message);
			return EXIT_CONNECT;
		case LE_ERR_SQL:
		case LE_ERR_CONFIG:
		case LE_ERR_SYSTEM:
			snprintf(why, len, "le_acquire failed%s%s%s: %s",
					 st->last_sqlstate[0] ? " (SQLSTATE " : "", st->last_sqlstate,
					 st->last_sqlstate[0] ? ")" : "", st->last_message);
			return EXIT_CONNECT;
		case LE_ERR_TIMEOUT:
		case LE_OK:
			break;
	}
	snprintf(why, len, "no answer in time%s%s", answered && st->last_message[0] ? ": " : "",
			 answered ? st->last_message : "");
	return EXIT_WAIT_TIMEOUT;
}

/* Connect for status/release within the --timeout, exiting with the right status on failure. */
static PGconn *
connect_or_exit(const options *o, char *schema_q, size_t len)
{
	char		err[1024];
	char		schema[256];
	PGconn	   *conn;
	char	   *q;
	le_result	rc;
	int64_t		t = o->connect_timeout < o->timeout ? o->connect_timeout : o->timeout;

	rc = le_connect(o->dsn, "pg_leader", t, &conn, schema, sizeof(schema), err, sizeof(err));
	if (rc == LE_ERR_NO_EXTENSION)
		fatal(EXIT_NO_EXTENSION, "%s", err);
	if (rc != LE_OK)
		fatal(EXIT_CONNECT, "%s", err);
	q = PQescapeIdentifier(conn, schema, strlen(schema));
	if (q == NULL)
		fatal(EXIT_INTERNAL, "out of memory");
	snprintf(schema_q, len, "%s", q);
	PQfreemem(q);
	return conn;
}

/*
 * Run one parameterised statement that must return rows, bounded by
 * deadline (le_exec).  On failure closes the connection and exits 69, or 81
 * when the deadline passed.
 */
static PGresult *
exec_or_exit(PGconn *conn, const char *what, const char *sql, int n, const char *const *params,
			 int64_t deadline, int64_t timeout_ms)
{
	char		msg[1024] = "";
	bool		timedout = false;
	int64_t		left = deadline - le_monotonic_ms();
	PGresult   *r = left > 0 ? le_exec(conn, sql, n, params, left, msg, sizeof(msg), &timedout) : NULL;

	if (r != NULL && PQresultStatus(r) == PGRES_TUPLES_OK)
		return r;
	PQclear(r);
	PQfinish(conn);
	if (left <= 0 || timedout)
		fatal(EXIT_WAIT_TIMEOUT, "%s: no answer within --timeout %" PRId64 "ms", what, timeout_ms);
	fatal(EXIT_CONNECT, "%s failed: %s", what, msg[0] ? msg : "no result");
	return NULL;
}

/*
 * Settle an acquire whose outcome is unknown before exiting without
 * leadership.  An le_acquire that timed out on our side after it was sent
 * may still commit on the server and leave the lease held under our owner
 * id until its ttl ends (and later attempts of ours are then refused as an
 * owner-id conflict).  So, when the owner id is pg_leader's own (unique to
 * this process; an id given with --owner may be shared, and the lease then
 * someone else's), acquire once more on a new connection (this waits for
 * the row lock of a grant still in progress) and release whatever we get.
 * Best effort, bounded by --connect-timeout plus the ttl for each of the two
 * statements (a grant we cannot see within the ttl has expired anyway).
 */
static void
settle_unknown_acquire(const options *o, const char *owner_id)
{
	char		err[1024];
	char		schema[256];
	char		sql[800];
	char		ttl[64];
	char		token[32];
	const char *params[3];
	PGconn	   *conn;
	PGresult   *r;
	char	   *q;
	bool		timedout;
	bool		released = false;

	if (o->owner != NULL)
		return;
	if (le_connect(o->dsn, "pg_leader", o->connect_timeout, &conn, schema, sizeof(schema),
				   err, sizeof(err)) != LE_OK)
	{
		log_event("warning", 0, NULL, NULL, "could not check for a grant of the timed-out acquire: %s", err);
		return;
	}
	q = PQescapeIdentifier(conn, schema, strlen(schema));
	if (q == NULL)
	{
		PQfinish(conn);
		return;
	}
	snprintf(sql, sizeof(sql), "SELECT acquired, fencing_token FROM %s.le_acquire($1, $2, $3::pg_catalog.interval)", q);
	PQfreemem(q);
	snprintf(ttl, sizeof(ttl), "%" PRId64 " milliseconds", o->ttl);
	params[0] = o->lease;
	params[1] = owner_id;
	params[2] = ttl;
	r = le_exec(conn, sql, 3, params, o->ttl, err, sizeof(err), &timedout);
	if (r != NULL && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
		strcmp(PQgetvalue(r, 0, 0), "t") == 0)
	{
		snprintf(token, sizeof(token), "%s", PQgetvalue(r, 0, 1));
		PQclear(r);
		q = PQescapeIdentifier(conn, schema, strlen(schema));
		if (q == NULL)
		{
			PQfinish(conn);
			return;
		}
		snprintf(sql, sizeof(sql), "SELECT %s.le_release($1, $2, $3::pg_catalog.int8)", q);
		PQfreemem(q);
		params[2] = token;
		r = le_exec(conn, sql, 3, params, o->ttl, err, sizeof(err), &timedout);
		released = r != NULL && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
			strcmp(PQgetvalue(r, 0, 0), "t") == 0;
		log_event(released ? "released" : "warning", 0, NULL, NULL,
				  "%s token %s, held under our owner id after an acquire timed out%s%s",
				  released ? "released" : "could not release", token,
				  released ? "" : ": ", released ? "" : err);
	}
	else if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK)
		log_event("warning", 0, NULL, NULL, "could not check for a grant of the timed-out acquire: %s", err);
	PQclear(r);
	PQfinish(conn);
}

/* Check a DSN's syntax up front: bad DSNs are usage errors (shown with passwords masked). */
static void
check_dsn(const char *dsn)
{
	char	   *err = NULL;
	PQconninfoOption *opts;

	if (dsn[0] == '\0')
		return;
	note_misread_secrets(dsn);
	opts = PQconninfoParse(dsn, &err);
	if (opts == NULL)
	{
		size_t		n = err ? strlen(err) : 0;
		char		masked[1024];

		/* a secret of one byte becomes four: room for the whole message masked */
		size_t		elen = 4 * n + sizeof(masked) + 16;
		char	   *emasked = malloc(elen);

		while (n > 0 && err[n - 1] == '\n')
			err[--n] = '\0';
		mask_dsn(dsn, masked, sizeof(masked));
		if (emasked == NULL)
			usage_error("invalid connection string \"%s\"", masked);
		/* libpq quotes a bad URI whole, or a part of it, in its message */
		snprintf(emasked, elen, "%s", err ? err : "out of memory");
		mask_message(emasked, elen, dsn, masked);
		mask_misread(emasked, elen);
		usage_error("invalid connection string \"%s\": %s", masked, emasked);
	}
	PQconninfoFree(opts);
}

/* Expression turning a timestamptz into ISO 8601 UTC text, as log lines have it. */
#define LE_ISO_UTC(x) "pg_catalog.to_char(pg_catalog.timezone('UTC', " x "), " \
	"'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

/* Width of column c of a status table: its header or its widest value. */
static int
col_width(PGresult *r, int c, const char *header)
{
	int			w = (int) strlen(header);

	for (int i = 0; i < PQntuples(r); i++)
		if (PQgetlength(r, i, c) > w)
			w = PQgetlength(r, i, c);
	return w;
}

/* A text value of row i, column c for a table: escaped, "-" when NULL. */
static const char *
cell(PGresult *r, int i, int c, char *buf, size_t len)
{
	text_buf(buf, len, PQgetisnull(r, i, c) ? "-" : PQgetvalue(r, i, c));
	return buf;
}

/* A value of row i, column c as JSON: a string, or null. */
static void
json_cell(PGresult *r, int i, int c)
{
	if (PQgetisnull(r, i, c))
		fputs("null", stdout);
	else
		json_str(stdout, PQgetvalue(r, i, c));
}

/* A JSON number of row i, column c, or null. */
static void
json_num(PGresult *r, int i, int c)
{
	fputs(PQgetisnull(r, i, c) ? "null" : PQgetvalue(r, i, c), stdout);
}

/*
 * pg_leader status --group G: the group, its members (id, role, membership
 * token, heartbeat age, expiry, partitions held and pending) from
 * le_group_members, and its partitions as the server assigns them now
 * (le_group_assignment: state, holder, target, token, expiry).
 */
static int
cmd_group_status(const options *o)
{
	char		schema_q[600];
	char		sql[2400];
	const char *params[1] = {o->group};
	PGconn	   *conn;
	PGresult   *g,
			   *mr,
			   *pr;
	int64_t		deadline = le_monotonic_ms() + o->timeout;
	char		b[6][1024];
	char		view[700];
	const char *vparams[1] = {view};

	check_dsn(o->dsn);
	conn = connect_or_exit(o, schema_q, sizeof(schema_q));
	snprintf(view, sizeof(view), "%s.le_groups", schema_q);
	g = exec_or_exit(conn, "group query", "SELECT pg_catalog.to_regclass($1) IS NOT NULL", 1, vparams,
					 deadline, o->timeout);
	if (strcmp(PQgetvalue(g, 0, 0), "t") != 0)
	{
		PQclear(g);
		PQfinish(conn);
		fatal(EXIT_NO_EXTENSION, "the server's leader_election has no partition groups (they came with "
			  "extension 1.1: ALTER EXTENSION leader_election UPDATE)");
	}
	PQclear(g);
	snprintf(sql, sizeof(sql),
			 "SELECT partitions, max_moves, owner_role FROM %s.le_groups"
			 " WHERE group_name OPERATOR(pg_catalog.=) $1", schema_q);
	g = exec_or_exit(conn, "group query", sql, 1, params, deadline, o->timeout);
	if (PQntuples(g) != 1)
	{
		PQclear(g);
		PQfinish(conn);
		fprintf(stderr, "%s: no group named \"", progname);
		text_str(stderr, o->group);
		fputs("\"\n", stderr);
		return 1;
	}
	snprintf(sql, sizeof(sql),
			 "WITH a AS (SELECT * FROM %1$s.le_group_assignment($1))"
			 " SELECT m.member_id, m.member_role, m.fencing_token,"
			 /* a member that only just joined may have no heartbeat_at yet: its join */
			 " pg_catalog.round(COALESCE(m.heartbeat_age_seconds, pg_catalog.date_part('epoch',"
			 "  pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) m.joined_at))::pg_catalog.numeric, 1), "
			 LE_ISO_UTC("m.expires_at") ", m.is_valid, m.partitions_held,"
			 " (SELECT pg_catalog.string_agg(a.partition::pg_catalog.text, ',' ORDER BY a.partition)"
			 "  FROM a WHERE a.holder OPERATOR(pg_catalog.=) m.member_id AND a.state OPERATOR(pg_catalog.<>) 'free'),"
			 " (SELECT pg_catalog.count(*) FROM a WHERE a.target OPERATOR(pg_catalog.=) m.member_id"
			 "  AND a.holder IS DISTINCT FROM m.member_id)"
			 " FROM %1$s.le_group_members m WHERE m.group_name OPERATOR(pg_catalog.=) $1"
			 " ORDER BY m.member_id", schema_q);
	mr = exec_or_exit(conn, "members query", sql, 1, params, deadline, o->timeout);
	snprintf(sql, sizeof(sql),
			 "SELECT partition, state, holder, target, fencing_token, " LE_ISO_UTC("expires_at")
			 " FROM %s.le_group_assignment($1) ORDER BY partition", schema_q);
	pr = exec_or_exit(conn, "assignment query", sql, 1, params, deadline, o->timeout);
	if (o->json)
	{
		printf("{\"group\":");
		json_str(stdout, o->group);
		printf(",\"partitions\":%s,\"max_moves\":%s,\"owner_role\":", PQgetvalue(g, 0, 0),
			   PQgetvalue(g, 0, 1));
		json_str(stdout, PQgetvalue(g, 0, 2));
		printf(",\"members\":[");
		for (int i = 0; i < PQntuples(mr); i++)
		{
			printf("%s{\"member_id\":", i ? "," : "");
			json_cell(mr, i, 0);
			printf(",\"member_role\":");
			json_cell(mr, i, 1);
			printf(",\"fencing_token\":");
			json_num(mr, i, 2);
			printf(",\"heartbeat_age_seconds\":");
			json_num(mr, i, 3);
			printf(",\"expires_at\":");
			json_cell(mr, i, 4);
			printf(",\"is_valid\":%s,\"partitions_held\":", strcmp(PQgetvalue(mr, i, 5), "t") == 0 ? "true" : "false");
			json_num(mr, i, 6);
			printf(",\"held\":[%s],\"pending\":%s}", PQgetisnull(mr, i, 7) ? "" : PQgetvalue(mr, i, 7),
				   PQgetvalue(mr, i, 8));
		}
		printf("],\"assignment\":[");
		for (int i = 0; i < PQntuples(pr); i++)
		{
			printf("%s{\"partition\":%s,\"state\":", i ? "," : "", PQgetvalue(pr, i, 0));
			json_cell(pr, i, 1);
			printf(",\"holder\":");
			json_cell(pr, i, 2);
			printf(",\"target\":");
			json_cell(pr, i, 3);
			printf(",\"fencing_token\":");
			json_num(pr, i, 4);
			printf(",\"expires_at\":");
			json_cell(pr, i, 5);
			printf("}");
		}
		printf("]}\n");
	}
	else
	{
		int			wm = col_width(mr, 0, "member"),
					wr = col_width(mr, 1, "role"),
					wt = col_width(mr, 2, "token"),
					wh = col_width(pr, 2, "holder"),
					wg = col_width(pr, 3, "target"),
					wp = col_width(pr, 4, "token");

		printf("group %s: %s partitions, max_moves %s, owner role %s\n\n", o->group,
			   PQgetvalue(g, 0, 0), PQgetvalue(g, 0, 1), PQgetvalue(g, 0, 2));
		printf("%-*s %-*s %*s %13s %-24s %-5s %4s %7s %s\n", wm, "member", wr, "role", wt, "token",
			   "heartbeat_age", "expires_at", "valid", "held", "pending", "partitions");
		for (int i = 0; i < PQntuples(mr); i++)
			printf("%-*s %-*s %*s %12ss %-24s %-5s %4s %7s %s\n", wm, cell(mr, i, 0, b[0], sizeof(b[0])),
				   wr, cell(mr, i, 1, b[1], sizeof(b[1])), wt, PQgetvalue(mr, i, 2),
				   cell(mr, i, 3, b[2], sizeof(b[2])), cell(mr, i, 4, b[3], sizeof(b[3])),
				   strcmp(PQgetvalue(mr, i, 5), "t") == 0 ? "yes" : "no", PQgetvalue(mr, i, 6),
				   PQgetvalue(mr, i, 8), cell(mr, i, 7, b[4], sizeof(b[4])));
		printf("\n%9s %-10s %-*s %-*s %*s %s\n", "partition", "state", wh, "holder", wg, "target",
			   wp, "token", "expires_at");
		for (int i = 0; i < PQntuples(pr); i++)
			printf("%9s %-10s %-*s %-*s %*s %s\n", PQgetvalue(pr, i, 0), PQgetvalue(pr, i, 1),
				   wh, cell(pr, i, 2, b[0], sizeof(b[0])), wg, cell(pr, i, 3, b[1], sizeof(b[1])),
				   wp, cell(pr, i, 4, b[2], sizeof(b[2])), cell(pr, i, 5, b[3], sizeof(b[3])));
	}
	PQclear(g);
	PQclear(mr);
	PQclear(pr);
	PQfinish(conn);
	return 0;
}

/* pg_leader status: one row per lease, as a table or JSON. */
static int
cmd_status(const options *o)
{
	char		schema_q[600];
	char		sql[1600];
	const char *params[1] = {o->lease};
	PGconn	   *conn;
	PGresult   *r;
	int			n;
	int64_t		deadline = le_monotonic_ms() + o->timeout;

	if (o->group != NULL && o->lease != NULL)
		usage_error("status takes -l KEY or --group G, not both");
	if (o->group != NULL)
		return cmd_group_status(o);
	check_dsn(o->dsn);
	conn = connect_or_exit(o, schema_q, sizeof(schema_q));
	snprintf(sql, sizeof(sql),
			 "SELECT lease_key, holder, fencing_token, " LE_ISO_UTC("expires_at") ", "
			 "is_valid, pg_catalog.round(seconds_remaining::pg_catalog.numeric, 1), transitions, "
			 "holder_role, " LE_ISO_UTC("acquired_at") ", "
			 /* the metadata column of 1.1, NULL under 1.0 */
			 "CASE WHEN (pg_catalog.to_jsonb(l) OPERATOR(pg_catalog.->>) 'metadata') IS NOT NULL "
			 "THEN (pg_catalog.to_jsonb(l) OPERATOR(pg_catalog.->) 'metadata')::pg_catalog.text END "
			 "FROM %s.le_leases l WHERE $1::pg_catalog.text IS NULL OR lease_key OPERATOR(pg_catalog.=) $1 "
			 "ORDER BY lease_key", schema_q);
	r = exec_or_exit(conn, "status query", sql, 1, params, deadline, o->timeout);
	n = PQntuples(r);
	if (o->json)
	{
		printf("[");
		for (int i = 0; i < n; i++)
		{
			printf("%s{\"lease_key\":", i ? "," : "");
			json_str(stdout, PQgetvalue(r, i, 0));
			printf(",\"holder\":");
			if (PQgetisnull(r, i, 1))
				printf("null");
			else
				json_str(stdout, PQgetvalue(r, i, 1));
			printf(",\"holder_role\":");
			if (PQgetisnull(r, i, 7))
				printf("null");
			else
				json_str(stdout, PQgetvalue(r, i, 7));
			printf(",\"fencing_token\":%s,\"acquired_at\":", PQgetvalue(r, i, 2));
			if (PQgetisnull(r, i, 8))
				printf("null");
			else
				json_str(stdout, PQgetvalue(r, i, 8));
			printf(",\"expires_at\":");
			if (PQgetisnull(r, i, 3))
				printf("null");
			else
				json_str(stdout, PQgetvalue(r, i, 3));
			printf(",\"is_valid\":%s,\"seconds_remaining\":%s,\"transitions\":%s,\"metadata\":%s}",
				   strcmp(PQgetvalue(r, i, 4), "t") == 0 ? "true" : "false",
				   PQgetvalue(r, i, 5), PQgetvalue(r, i, 6),
				   PQgetisnull(r, i, 9) ? "null" : PQgetvalue(r, i, 9));
		}
		printf("]\n");
	}
	else
	{
		/* columns as wide as their widest value; keys, holders and roles escaped */
		int			wk = col_width(r, 0, "lease_key"),
					wh = col_width(r, 1, "holder"),
					wo = col_width(r, 7, "role"),
					wt = col_width(r, 2, "token"),
					wa = col_width(r, 8, "acquired_at"),
					we = col_width(r, 3, "expires_at"),
					wr = col_width(r, 5, "remaining"),
					wn = col_width(r, 6, "transitions");

		printf("%-*s %-*s %-*s %*s %-*s %-*s %-5s %*s %*s %s\n", wk, "lease_key", wh, "holder", wo, "role",
			   wt, "token", wa, "acquired_at", we, "expires_at", "valid", wr, "remaining", wn, "transitions",
			   "metadata");
		for (int i = 0; i < n; i++)
		{
			char		key[1024],
						holder[1024],
						role[1024],
						meta[4200];

			/* escape control characters so that a value cannot forge a row */
			text_buf(key, sizeof(key), PQgetvalue(r, i, 0));
			text_buf(holder, sizeof(holder), PQgetisnull(r, i, 1) ? "-" : PQgetvalue(r, i, 1));
			text_buf(role, sizeof(role), PQgetisnull(r, i, 7) ? "-" : PQgetvalue(r, i, 7));
			text_buf(meta, sizeof(meta), PQgetisnull(r, i, 9) ? "-" : PQgetvalue(r, i, 9));
			printf("%-*s %-*s %-*s %*s %-*s %-*s %-5s %*s %*s %s\n", wk, key, wh, holder, wo, role,
				   wt, PQgetvalue(r, i, 2),
				   wa, PQgetisnull(r, i, 8) ? "-" : PQgetvalue(r, i, 8),
				   we, PQgetisnull(r, i, 3) ? "-" : PQgetvalue(r, i, 3),
				   strcmp(PQgetvalue(r, i, 4), "t") == 0 ? "yes" : "no",
				   wr, PQgetvalue(r, i, 5), wn, PQgetvalue(r, i, 6), meta);
		}
	}
	PQclear(r);
	PQfinish(conn);
	if (o->lease && n == 0)
	{
		fprintf(stderr, "%s: no lease named \"", progname);
		text_str(stderr, o->lease);
		fputs("\"\n", stderr);
		return 1;
	}
	return 0;
}

/* pg_leader release: compare-and-release one lease. */
static int
cmd_release(const options *o)
{
	char		schema_q[600];
	char		sql[800];
	char		token[32];
	const char *params[3];
	PGconn	   *conn;
	PGresult   *r;
	bool		ok;
	int64_t		deadline = le_monotonic_ms() + o->timeout;

	if (o->lease == NULL || o->owner == NULL || o->token <= 0)
		usage_error("release needs -l KEY, --owner ID and --token N");
	check_dsn(o->dsn);
	conn = connect_or_exit(o, schema_q, sizeof(schema_q));
	snprintf(sql, sizeof(sql), "SELECT %s.le_release($1, $2, $3::pg_catalog.int8)", schema_q);
	snprintf(token, sizeof(token), "%" PRId64, o->token);
	params[0] = o->lease;
	params[1] = o->owner;
	params[2] = token;
	r = exec_or_exit(conn, "release", sql, 3, params, deadline, o->timeout);
	ok = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	PQfinish(conn);
	if (ok)
	{
		printf("released lease \"%s\" (owner %s, token %" PRId64 ")\n", o->lease, o->owner, o->token);
		return 0;
	}
	fprintf(stderr, "%s: lease \"%s\" is not held by owner %s with token %" PRId64 " (nothing released)\n",
			progname, o->lease, o->owner, o->token);
	return EXIT_NOT_RELEASED;
}

/*
 * pg_leader history and pg_leader watch (src/client/pg_leader_history.c),
 * on a connection made as for status.
 */
static int
cmd_history_watch(const options *o, bool watch)
{
	char		schema_q[600];
	lh_options	h;

	if (watch && (o->svg || o->since))
		usage_error("--svg and --since are for history");
	if (!watch && o->svg && o->json)
		usage_error("--svg and --json do not go together");
	check_dsn(o->dsn);
	memset(&h, 0, sizeof(h));
	h.conn = connect_or_exit(o, schema_q, sizeof(schema_q));
	h.schema_q = schema_q;
	h.lease = o->lease;
	h.svg = o->svg;
	h.since = o->since;
	h.json = o->json;
	h.verbose = verbose;
	h.poll_ms = o->poll;
	h.timeout_ms = o->timeout;
	return watch ? lh_watch(&h) : lh_history(&h);
}

/*
 * Environment variables we set for the command (replacing inherited ones);
 * the last two only for group run.
 */
static const char *const child_vars[] = {
	"LE_LEASE_KEY=", "LE_FENCING_TOKEN=", "LE_OWNER_ID=", "LE_EXPIRES_AT=", "LE_DSN=",
	"LE_PARTITION=", "LE_GROUP="
};
#define N_CHILD_VARS (sizeof(child_vars) / sizeof(child_vars[0]))

/* What the command's LE_ variables say. */
typedef struct cmd_vars
{
	const char *key;			/* LE_LEASE_KEY */
	int64_t		token;			/* LE_FENCING_TOKEN */
	const char *owner;			/* LE_OWNER_ID: owner or member id */
	const char *expires;		/* LE_EXPIRES_AT */
	int			partition;		/* LE_PARTITION, -1: none (run) */
	const char *group;			/* LE_GROUP, with partition */
} cmd_vars;

/* How many of child_vars a command with v gets. */
static size_t
n_own_vars(const cmd_vars *v)
{
	return v->partition >= 0 ? N_CHILD_VARS : N_CHILD_VARS - 2;
}

/* Free an environment built by child_env (its own strings are the last ones). */
static void
free_child_env(char **env, const cmd_vars *v)
{
	size_t		n = 0;
	size_t		own = n_own_vars(v);

	if (env == NULL)
		return;
	while (env[n])
		n++;
	for (size_t i = n >= own ? n - own : 0; i < n; i++)
		free(env[i]);
	free(env);
}

/*
 * Environment of the command: ours without any of child_vars, plus
 * LE_LEASE_KEY, LE_FENCING_TOKEN, LE_OWNER_ID, LE_EXPIRES_AT and LE_DSN
 * (and LE_PARTITION and LE_GROUP for a partition).  Built before fork
 * (nothing is allocated after it).  NULL when out of memory.
 */
static char **
child_env(const cmd_vars *v, const char *dsn)
{
	size_t		n = 0,
				k = 0;
	size_t		own = n_own_vars(v);
	char	  **env;
	char	   *mine[N_CHILD_VARS] = {NULL};

	while (environ[n])
		n++;
	env = calloc(n + N_CHILD_VARS + 1, sizeof(char *));
	if (env == NULL)
		return NULL;
	if (asprintf(&mine[0], "LE_LEASE_KEY=%s", v->key) < 0)
		mine[0] = NULL;
	if (asprintf(&mine[1], "LE_FENCING_TOKEN=%" PRId64, v->token) < 0)
		mine[1] = NULL;
	if (asprintf(&mine[2], "LE_OWNER_ID=%s", v->owner) < 0)
		mine[2] = NULL;
	if (asprintf(&mine[3], "LE_EXPIRES_AT=%s", v->expires) < 0)
		mine[3] = NULL;
	if (asprintf(&mine[4], "LE_DSN=%s", dsn) < 0)
		mine[4] = NULL;
	if (own == N_CHILD_VARS && asprintf(&mine[5], "LE_PARTITION=%d", v->partition) < 0)
		mine[5] = NULL;
	if (own == N_CHILD_VARS && asprintf(&mine[6], "LE_GROUP=%s", v->group) < 0)
		mine[6] = NULL;
	for (size_t j = 0; j < own; j++)
	{
		if (mine[j] == NULL)
		{
			for (size_t i = 0; i < own; i++)
				free(mine[i]);
			free(env);
			return NULL;
		}
	}
	for (size_t i = 0; i < n; i++)
	{
		bool		ours = false;

		for (size_t j = 0; j < N_CHILD_VARS; j++)
			if (strncmp(environ[i], child_vars[j], strlen(child_vars[j])) == 0)
				ours = true;
		if (!ours)
			env[k++] = environ[i];
	}
	for (size_t j = 0; j < own; j++)
		env[k++] = mine[j];
	env[k] = NULL;
	return env;
}

/*
 * The command's executable as execvp would find it (a name without a slash
 * is looked up in PATH); resolved before fork.  NULL with errno set when
 * there is none (ENOENT) or none we may run (EACCES).  Free the result.
 */
static char *
resolve_command(const char *name)
{
	const char *path = getenv("PATH");
	const char *p;
	int			err = ENOENT;

	if (strchr(name, '/') != NULL)
		return strdup(name);
	if (path == NULL || *path == '\0')
		path = "/usr/local/bin:/usr/bin:/bin";
	for (p = path;; p = strchr(p, ':') + 1)
	{
		size_t		len = strcspn(p, ":");
		char	   *cand;

		if (asprintf(&cand, "%.*s%s%s", (int) len, p, len ? "/" : "", name) < 0)
			return NULL;
		if (access(cand, X_OK) == 0)
		{
			struct stat sb;

			if (stat(cand, &sb) == 0 && S_ISREG(sb.st_mode))
				return cand;
		}
		else if (errno == EACCES)
			err = EACCES;
		free(cand);
		if (p[len] == '\0')
			break;
	}
	errno = err;
	return NULL;
}

/*
 * The descriptors the command keeps: with --keep-fds every one pg_leader
 * got; with LISTEN_PID naming pg_leader and LISTEN_FDS=N (socket
 * activation) also 3 .. 3+N-1, and the command's LISTEN_PID becomes its
 * own pid.  Every other descriptor is closed before the command starts.
 */
static void
set_kept_fds(void)
{
	int			fds[SV_MAX_KEEP];
	int			n = 0;
	const char *lp = getenv("LISTEN_PID");
	const char *lf = getenv("LISTEN_FDS");
	bool		listen = false;

	if (keep_fds)
		for (int i = 0; i < n_inherited; i++)
			fds[n++] = inherited_fds[i];
	if (lp != NULL && lf != NULL && strtol(lp, NULL, 10) == (long) getpid())
	{
		long		nl = strtol(lf, NULL, 10);

		for (int i = 0; i < n_inherited; i++)
		{
			bool		dup = false;

			if (inherited_fds[i] >= 3 + nl)
				continue;
			for (int j = 0; j < n; j++)
				dup = dup || fds[j] == inherited_fds[i];
			if (!dup && n < SV_MAX_KEEP)
				fds[n++] = inherited_fds[i];
		}
		listen = nl > 0;
	}
	sv_keep_fds(fds, n, listen);
}

/* Exit status for a child's wait status: its code, or 128 + signal. */
static int
child_status(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return EXIT_INTERNAL;
}

/* The controlling terminal if we are in its foreground process group, else -1. */
static int
foreground_tty(void)
{
	int			fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	if (tcgetpgrp(fd) != getpgrp())
	{
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * The heartbeat file as last seen: a beat is any change of it (mtime,
 * ctime, size, inode, existence), timed on the monotonic clock when seen.
 * Its timestamps are compared with each other, never with the wall clock,
 * so a clock step or a touch -d far away neither stops a healthy command
 * nor excuses a hung one.
 */
typedef struct heartbeat
{
	bool		exists;
	struct timespec mtime;
	struct timespec ctime;
	off_t		size;
	ino_t		ino;
	int64_t		last_beat;		/* le_monotonic_ms() when a change was seen */
} heartbeat;

/* Read the heartbeat file; true if it differs from *hb (which is updated). */
static bool
heartbeat_changed(const options *o, heartbeat *hb)
{
	struct stat sb;
	heartbeat	now;

	memset(&now, 0, sizeof(now));
	if (stat(o->heartbeat_file, &sb) == 0)
	{
		now.exists = true;
		now.mtime = sb.st_mtim;
		now.ctime = sb.st_ctim;
		now.size = sb.st_size;
		now.ino = sb.st_ino;
	}
	if (now.exists == hb->exists &&
		(!now.exists ||
		 (now.mtime.tv_sec == hb->mtime.tv_sec && now.mtime.tv_nsec == hb->mtime.tv_nsec &&
		  now.ctime.tv_sec == hb->ctime.tv_sec && now.ctime.tv_nsec == hb->ctime.tv_nsec &&
		  now.size == hb->size && now.ino == hb->ino)))
		return false;
	now.last_beat = hb->last_beat;
	*hb = now;
	return true;
}

/* Has the command missed its heartbeat?  (No change seen for the timeout.) */
static bool
heartbeat_missed(const options *o, heartbeat *hb, int64_t now)
{
	if (o->heartbeat_file == NULL)
		return false;
	if (heartbeat_changed(o, hb))
		hb->last_beat = now;
	return now - hb->last_beat > o->heartbeat_timeout;
}

/*
 * Does the connection string (or PGHOST, when it names no host) list
 * several hosts?  Then a standby is only one of them, and the library
 * looks for the primary (target_session_attrs=read-write).
 */
static bool
dsn_multi_host(const char *dsn)
{
	PQconninfoOption *opts = NULL;
	const char *hosts = NULL;
	bool		has_hostaddr = false;
	bool		multi;

	if (dsn[0])
		opts = PQconninfoParse(dsn, NULL);
	for (PQconninfoOption *op = opts; op && op->keyword; op++)
	{
		if (op->val == NULL || op->val[0] == '\0')
			continue;
		if (strcmp(op->keyword, "host") == 0)
			hosts = op->val;
		else if (strcmp(op->keyword, "hostaddr") == 0)
			has_hostaddr = true;
	}
	for (PQconninfoOption *op = opts; hosts == NULL && op && op->keyword; op++)
		if (strcmp(op->keyword, "hostaddr") == 0 && op->val && op->val[0])
			hosts = op->val;
	if (hosts == NULL && !has_hostaddr)
		hosts = getenv("PGHOST");
	multi = hosts != NULL && strchr(hosts, ',') != NULL;
	PQconninfoFree(opts);
	return multi;
}

/*
 * Exit status of an error that waiting cannot fix, from the outcome of
 * the elector's last attempt, or 0: permission denied (77), the extension
 * missing (78), a standby when the connection string names one host (76).
 */
static int
permanent_status(le_result last_error, const char *last_message, bool multi_host, char *why,
				 size_t len)
{
	switch (last_error)
	{
		case LE_ERR_PERMISSION:
			snprintf(why, len, "permission denied: %s", last_message);
			return EXIT_NO_PERMISSION;
		case LE_ERR_NO_EXTENSION:
			snprintf(why, len, "%s", last_message);
			return EXIT_NO_EXTENSION;
		case LE_ERR_READ_ONLY:
			if (multi_host)
				return 0;
			snprintf(why, len, "the server is a standby and the connection string names no other host: %s",
					 last_message);
			return EXIT_STANDBY;
		default:
			return 0;
	}
}

/* Why a running command is being stopped. */
typedef enum stop_kind
{
	STOP_NONE = 0,
	STOP_LOST,					/* leadership ended, or the deadline is near */
	STOP_SHUTDOWN,				/* our own SIGTERM/SIGINT/SIGHUP */
	STOP_UNHEALTHY,				/* liveness check failed or the command was stopped */
	STOP_GUARD					/* the supervisor died */
} stop_kind;

/*
 * One supervised command and where its supervision stands: run has one,
 * group run one per partition.  Only the main thread touches it.
 */
typedef struct command
{
	char		key[256];		/* its lease key, for log lines */
	sv_run		run;			/* the supervisor of the command */
	heartbeat	hb;
	bool		running;
	int64_t		token;
	int64_t		kill_deadline;	/* SIGKILL of the group at the latest */
	int64_t		started_at;
	stop_kind	stopping;
	bool		sigkill_sent;
	bool		we_killed;
	int64_t		kill_at;
} command;

/*
 * Decide whether the running command must be stopped, most urgent reason
 * first; none once it has exited on its own (before any deadline signal),
 * unless the supervisor died without reporting that end: then nobody else
 * stops what is left of the group (its death killed the command, whose
 * zombie may be reaped in the same poll).  ours: the lease (or partition)
 * is still held with the command's token; deadline: its local deadline
 * (INT64_MAX: unknown, a new period began); ended: the stop reason when it
 * is no longer ours.  A new stop sends SIGTERM (and SIGCONT) to the group
 * and sets the time of its SIGKILL; renewals move the kill deadline on
 * first.
 */
static void
cmd_check_stop(command *c, const options *o, bool ours, int64_t deadline, const char *ended,
			   int64_t now)
{
	sv_run	   *run = &c->run;
	const char *reason = NULL;
	stop_kind	kind = STOP_NONE;

	/* Renewals move the kill deadline on, here and in the supervisor. */
	if (ours && c->stopping == STOP_NONE && deadline - KILL_SLACK_MS > c->kill_deadline)
	{
		c->kill_deadline = deadline - KILL_SLACK_MS;
		sv_set_deadline(run, c->kill_deadline);
	}
	if (c->stopping == STOP_NONE && run->command_exited && !c->we_killed &&
		!run->deadline_term && !run->deadline_kill &&
		!(run->sup_exited && !run->sup_reported_end))
		;
	else if (!ours)
	{
		kind = STOP_LOST;
		reason = deadline != INT64_MAX && now >= deadline ? "deadline_passed" : ended;
	}
	else if (now >= c->kill_deadline - o->grace || run->deadline_term || run->deadline_kill)
	{
		kind = STOP_LOST;
		reason = "deadline_near";
	}
	else if (got_signal)
	{
		kind = STOP_SHUTDOWN;
		reason = "shutdown";
	}
	else if (run->sup_exited && !run->sup_reported_end && !c->we_killed)
	{
		kind = STOP_GUARD;
		reason = "guard_lost";
	}
	else if (run->stopped_sig)
	{
		kind = STOP_UNHEALTHY;
		reason = "command_stopped";
	}
	else if (sv_sup_frozen(run, now) && sv_command_stopped(run))
	{
		/* supervisor and command stopped (kill -STOP -- -PGID): nothing works */
		kind = STOP_UNHEALTHY;
		reason = "group_stopped";
	}
	else if (o->max_runtime > 0 && now - c->started_at >= o->max_runtime)
	{
		kind = STOP_UNHEALTHY;
		reason = "max_runtime";
	}
	else if (heartbeat_missed(o, &c->hb, now))
	{
		kind = STOP_UNHEALTHY;
		reason = "heartbeat_timeout";
	}
	if (kind == STOP_NONE || c->stopping != STOP_NONE)
		return;

	c->stopping = kind;
	c->kill_at = now + o->grace;
	if (c->kill_at > c->kill_deadline)
		c->kill_at = c->kill_deadline;
	if (kind == STOP_GUARD || strcmp(reason, "group_stopped") == 0)
		c->kill_at = now;
	if (run->group_gone)
		log_key_event(c->key, "stopping_command", c->token, NULL, reason,
					  "the supervisor had already stopped the command at its deadline");
	else if (strcmp(reason, "group_stopped") == 0 && run->command <= 0)
		log_key_event(c->key, "stopping_command", c->token, NULL, reason,
					  "the supervisor stopped before it started the command; SIGKILL to process group %d",
					  (int) run->group);
	else if (strcmp(reason, "group_stopped") == 0)
		log_key_event(c->key, "stopping_command", c->token, NULL, reason,
					  "the command (pid %d) and its supervisor are stopped; SIGKILL to process group %d",
					  (int) run->command, (int) run->group);
	else if (kind == STOP_UNHEALTHY && run->stopped_sig)
		log_key_event(c->key, "stopping_command", c->token, NULL, reason,
					  "the command was stopped by signal %d; SIGTERM to process group %d, SIGKILL in %" PRId64 "ms",
					  run->stopped_sig, (int) run->group, c->kill_at - now);
	else
		log_key_event(c->key, "stopping_command", c->token, NULL, reason,
					  "SIGTERM to process group %d, SIGKILL in %" PRId64 "ms",
					  (int) run->group, c->kill_at - now);
	/* a stopped group is not resumed: it gets its SIGKILL below */
	if (strcmp(reason, "group_stopped") != 0)
	{
		sv_signal(run, SIGTERM);
		sv_signal(run, SIGCONT);
	}
}

/* SIGKILL the group when it is due. */
static void
cmd_check_kill(command *c, int64_t now)
{
	sv_run	   *run = &c->run;

	/*
	 * The command ended but its supervisor did not report it (it is
	 * stopped, so the command is its unreaped zombie; or it is silent for
	 * UNREPORTED_END_MS): do its job, kill the rest of the group, and reap
	 * the command ourselves.
	 */
	if (!c->sigkill_sent && !run->group_gone && run->cmd_dead && !run->command_exited &&
		!run->sup_reported_end &&
		(run->sup_stopped || now - run->cmd_dead_at >= UNREPORTED_END_MS))
	{
		log_key_event(c->key, "killing_command", c->token, NULL, NULL,
					  "the command (pid %d) ended and its supervisor %s; SIGKILL to process group %d",
					  (int) run->command,
					  run->sup_stopped ? "is stopped" : "did not report it", (int) run->group);
		sv_signal(run, SIGKILL);
		c->sigkill_sent = true;
		c->we_killed = true;
		sv_poll(run);
	}
	/* Grace over, kill deadline reached, or a second signal. */
	if (!c->sigkill_sent && !run->group_gone &&
		((c->stopping != STOP_NONE && now >= c->kill_at) || now >= c->kill_deadline ||
		 signal_count >= 2))
	{
		log_key_event(c->key, "killing_command", c->token, NULL, NULL, "%s; SIGKILL to process group %d",
					  signal_count >= 2 ? "second signal" :
					  now >= c->kill_deadline ? "kill deadline reached" : "grace period over",
					  (int) run->group);
		sv_signal(run, SIGKILL);
		c->sigkill_sent = true;
		c->we_killed = true;
		if (c->stopping == STOP_NONE)
			c->stopping = STOP_LOST;
		sv_poll(run);
	}
}

/* Poll the supervisor, decide about a stop and a SIGKILL (see cmd_check_stop). */
static void
cmd_supervise(command *c, const options *o, bool ours, int64_t deadline, const char *ended,
			  int64_t now)
{
	sv_poll(&c->run);
	cmd_check_stop(c, o, ours, deadline, ended, now);
	cmd_check_kill(c, now);
}

/*
 * The whole group of the command is gone: close its supervision, give the
 * terminal back (tty_fd >= 0), log its end.  Returns its exit status (126
 * or 127 when it could not be run, 137 when only SIGKILL was seen).  Only
 * now may its lease be released.
 */
static int
cmd_reaped(command *c, const options *o, int tty_fd, const pid_t *live_groups, int n_live)
{
	sv_run	   *run = &c->run;
	int			cs;

	if (run->exec_failed)
	{
		log_key_event(c->key, "error", c->token, NULL, NULL, "could not run \"%s\": %s",
					  o->command[0], strerror(run->exec_errno));
		cs = run->exec_errno == ENOENT ? 127 : 126;
	}
	else if (run->command_exited)
		cs = child_status(run->command_wstatus);
	else
		cs = 128 + SIGKILL;
	if (tty_fd >= 0)
		tcsetpgrp(tty_fd, getpgrp());
	sv_finish(run);
	sv_reap_strays(live_groups, n_live);
	c->running = false;
	log_key_event(c->key, "command_exited", c->token, NULL, NULL, "status %d", cs);
	return cs;
}

/*
 * Start the command under its supervisor, with the environment of v and
 * the kill deadline of local deadline deadline_ms.  0 when it runs, else
 * the exit status why not (127, 126, 70), logged.
 */
static int
cmd_start(command *c, const options *o, const cmd_vars *v, int64_t deadline_ms, int tty_fd)
{
	char	   *path;
	char	  **env;

	snprintf(c->key, sizeof(c->key), "%s", v->key);
	path = resolve_command(o->command[0]);
	if (path == NULL)
	{
		int			save = errno;

		log_key_event(c->key, "error", v->token, NULL, NULL, "could not run \"%s\": %s",
					  o->command[0], save == ENOENT ? "command not found" : strerror(save));
		return save == ENOENT ? 127 : 126;
	}
	env = child_env(v, o->dsn);
	if (env == NULL)
	{
		free(path);
		log_key_event(c->key, "error", v->token, NULL, NULL, "out of memory");
		return EXIT_INTERNAL;
	}
	c->kill_deadline = deadline_ms - KILL_SLACK_MS;
	if (!sv_start(&c->run, path, o->command, env, c->kill_deadline, o->grace, tty_fd))
	{
		int			save = errno;

		free(path);
		free_child_env(env, v);
		log_key_event(c->key, "error", v->token, NULL, NULL,
					  "could not start the supervisor of the command (%s); not running the command without it",
					  strerror(save));
		return EXIT_INTERNAL;
	}
	free(path);
	free_child_env(env, v);
	c->running = true;
	c->token = v->token;
	c->stopping = STOP_NONE;
	c->sigkill_sent = false;
	c->we_killed = false;
	c->started_at = le_monotonic_ms();
	/* the file as it is now is the baseline: beats are changes of it */
	memset(&c->hb, 0, sizeof(c->hb));
	if (o->heartbeat_file)
		(void) heartbeat_changed(o, &c->hb);
	c->hb.last_beat = c->started_at;
	if (c->run.command > 0)
		log_key_event(c->key, "command_started", v->token, v->expires, NULL,
					  "pid %d, process group %d: %s", (int) c->run.command, (int) c->run.group,
					  o->command[0]);
	else
		log_key_event(c->key, "command_started", v->token, v->expires, NULL,
					  "pid not reported yet, process group %d: %s", (int) c->run.group,
					  o->command[0]);
	return 0;
}

/*
 * How long the main loop may sleep for this running command (at most
 * 100 ms: liveness checks and belt and braces for reaping), and the
 * descriptors that wake it (added to p, their number returned in *np).
 */
static int64_t
cmd_wait(command *c, const options *o, int64_t now, struct pollfd *p, int *np)
{
	sv_run	   *run = &c->run;
	int64_t		due = c->stopping == STOP_NONE ? c->kill_deadline - o->grace :
		c->sigkill_sent ? now + 100 : c->kill_at;
	int64_t		timeout;

	if (due > c->kill_deadline)
		due = c->kill_deadline;
	timeout = due - now;
	if (timeout > 100)
		timeout = 100;
	/* after the supervisor's exit its pipe only says EOF: do not spin on it */
	if (run->from_sup >= 0 && !run->sup_exited)
	{
		p[*np].fd = run->from_sup;
		p[*np].events = POLLIN;
		(*np)++;
	}
	/* the command's end, even when its supervisor cannot report it */
	if (run->cmd_pidfd >= 0 && !run->cmd_dead)
	{
		p[*np].fd = run->cmd_pidfd;
		p[*np].events = POLLIN;
		(*np)++;
	}
	return timeout;
}

/* Sleep on the wake pipe and fds (np of them, wake pipe first) for timeout ms. */
static void
main_sleep(struct pollfd *p, int np, int64_t timeout)
{
	if (timeout < 0)
		timeout = 0;
	p[0].fd = wake_pipe[0];
	p[0].events = POLLIN;
	if (poll(p, np, (int) timeout) > 0 && (p[0].revents & POLLIN))
	{
		char		buf[64];

		while (read(wake_pipe[0], buf, sizeof(buf)) > 0)
			;
	}
}

/* SIGKILL a command still running and wait (at most 5 s) until its group is gone. */
static void
cmd_kill_now(command *c)
{
	if (!c->running)
		return;
	sv_signal(&c->run, SIGKILL);
	for (int i = 0; i < 500 && !c->run.group_gone; i++)
	{
		sv_poll(&c->run);
		if (!c->run.group_gone)
			poll(NULL, 0, 10);
	}
}

/* The state of pg_leader run, shared by its steps. */
typedef struct run_state
{
	options    *o;
	le_elector *e;
	bool		multi_host;
	int			tty_fd;
	command		cmd;			/* the command and its supervision */
	uint64_t	child_period;	/* the leadership period it runs in */
	uint64_t	last_period;
	int			exit_status;
	bool		command_done;
	int64_t		wait_since;
	uint64_t	attempts_mark;	/* acquire attempts answered when the last command ended */
} run_state;

/*
 * The timing of run and group run as the library takes it (le_config,
 * le_group_config): a renewal (heartbeat) is of use only before the
 * SIGTERM point, so attempts are sized to it (renew_by).
 */
static void
library_timing(const options *o, int64_t *ttl, int64_t *renew, int64_t *renew_by, int64_t *retry,
			   int *jitter, int64_t *margin, int64_t *connect, int64_t *statement)
{
	*ttl = o->ttl;
	*renew = o->renew;
	*renew_by = KILL_SLACK_MS + o->grace;
	*retry = o->retry;
	*jitter = o->jitter;
	*margin = o->margin;
	*connect = o->connect_timeout;
	*statement = o->statement_timeout;
}

/*
 * The elector or group member could not start (rc, message err): log it,
 * and return the exit status (78 no extension, 69 connection, 64 options
 * the server refused, 70 else).
 */
static int
start_failed(le_result rc, const char *err)
{
	log_event("error", 0, NULL, NULL, "%s", err);
	log_plain_error(err);
	log_flush(LOG_EXIT_FLUSH_MS);
	return rc == LE_ERR_NO_EXTENSION ? EXIT_NO_EXTENSION :
		rc == LE_ERR_CONNECT ? EXIT_CONNECT :
		rc == LE_ERR_CONFIG ? EXIT_USAGE : EXIT_INTERNAL;
}

/* Check the options of run and create its elector; a bad one exits with 2. */
static void
run_create_elector(run_state *rs)
{
	options    *o = rs->o;
	le_config	cfg;
	char		err[1024];

	if (o->lease == NULL)
		usage_error("run needs -l KEY");
	if (o->command[0] == NULL)
		usage_error("run needs a command after --");
	check_dsn(o->dsn);
	check_timing(o);
	rs->multi_host = dsn_multi_host(o->dsn);

	le_config_init(&cfg);
	cfg.conninfo = o->dsn;
	cfg.lease_key = o->lease;
	cfg.owner_id = o->owner;
	cfg.metadata = o->metadata;
	cfg.single_try = o->no_wait;	/* --no-wait: one attempt's answer, no server wait */
	library_timing(o, &cfg.ttl_ms, &cfg.renew_ms, &cfg.renew_by_ms, &cfg.retry_ms,
				   &cfg.retry_jitter_pct, &cfg.safety_margin_ms, &cfg.connect_timeout_ms,
				   &cfg.statement_timeout_ms);
	/* a period that ends by itself is released by us, once the group is gone */
	cfg.defer_release = true;
	cfg.on_started = cb_started;
	cfg.on_stopped = cb_stopped;
	cfg.on_renewed = cb_renewed;
	cfg.on_new_leader = cb_new_leader;
	cfg.on_notice = cb_notice;
	rs->e = le_elector_create(&cfg, err, sizeof(err));
	if (rs->e == NULL)
		usage_error("%s", err);
	log_key = o->lease;
	snprintf(log_owner, sizeof(log_owner), "%s", le_elector_owner_id(rs->e));
}

/*
 * Install the handlers of run: our signals wake the main loop through
 * wake_pipe, and we become the subreaper of the command's group.
 */
static void
run_setup_signals(void)
{
	struct sigaction sa;

	if (pipe2(wake_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
		fatal(EXIT_INTERNAL, "pipe: %s", strerror(errno));
	log_start();
	memset(&sa, 0, sizeof(sa));
	/* no SA_RESTART: nothing may sit out a signal; SIGCHLD also for stops */
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO;
	sigfillset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	/* SIGINT and SIGHUP ignored at start stay ignored (nohup, background jobs) */
	for (int i = 0; i < 2; i++)
	{
		int			sig = i == 0 ? SIGINT : SIGHUP;
		struct sigaction old;

		if (sigaction(sig, NULL, &old) != 0 || old.sa_handler != SIG_IGN)
			sigaction(sig, &sa, NULL);
		else
			sv_keep_ignored(sig);	/* and for the command: it is nohup's too */
	}
	sigaction(SIGCHLD, &sa, NULL);
	/* we hand the terminal to the command's group and take it back */
	sa.sa_handler = SIG_IGN;
	sa.sa_flags = 0;
	sigaction(SIGTTOU, &sa, NULL);
	sigaction(SIGTTIN, &sa, NULL);
	sv_become_subreaper();
}

/* Start campaigning; -1 when it started, else the exit status. */
static int
run_start_elector(run_state *rs)
{
	options    *o = rs->o;
	char		err[1024];
	le_result	rc;

	rc = le_elector_start(rs->e, err, sizeof(err));
	if (rc != LE_OK)
	{
		/* LE_ERR_CONFIG: what the server refused of the options (--metadata) */
		le_elector_destroy(rs->e);
		return start_failed(rc, err);
	}
	log_event("campaigning", 0, NULL, NULL, "ttl %" PRId64 "ms, grace %" PRId64 "ms, renew %" PRId64 "ms",
			  o->ttl, o->grace, o->renew);
	return -1;
}

/*
 * --no-wait: one acquire attempt.  -1 when it made us leader, else the
 * exit status; our own signal during the attempt exits at once.
 */
static int
run_wait_first_attempt(run_state *rs)
{
	options    *o = rs->o;
	int64_t		wait_end = le_monotonic_ms() + o->connect_timeout + o->statement_timeout;
	bool		answered;

	/* in slices, so that our own signal ends the wait at once */
	while (!(answered = le_elector_wait_attempt(rs->e, NO_WAIT_SLICE_MS)) &&
		   !got_signal && le_monotonic_ms() < wait_end)
		;
	if (!answered && got_signal)
	{
		/*
		 * The attempt is still in flight and may take its whole statement
		 * timeout: do not wait for it.  Should the server grant it after
		 * all, no command runs and the lease expires after its ttl.
		 */
		log_event("not_acquired", 0, NULL, NULL, "signal %d during the attempt", (int) got_signal);
		log_event("exit", 0, NULL, NULL, "status %d", 128 + (int) got_signal);
		log_flush(LOG_EXIT_FLUSH_MS);
		write_status_file(128 + got_signal);
		_exit(128 + got_signal);
	}
	if (!le_elector_is_leader(rs->e, NULL))
	{
		le_status	st;
		int			status;
		char		why[1024];

		le_elector_status(rs->e, &st);
		le_elector_stop(rs->e);
		status = no_wait_status(answered, &st, why, sizeof(why));
		log_event("not_acquired", 0, NULL, NULL, "%s", why);
		/* no answer in time: the attempt may have been granted after all */
		if (!got_signal &&
			(!answered || st.last_error == LE_ERR_TIMEOUT || st.owner_conflicts > 0))
			settle_unknown_acquire(o, log_owner);
		le_elector_destroy(rs->e);
		if (got_signal)
			status = 128 + got_signal;
		log_event("exit", 0, NULL, NULL, "status %d", status);
		log_flush(LOG_EXIT_FLUSH_MS);
		return status;
	}
	return -1;
}

/*
 * The whole group of the command is gone: only now may the lease be
 * released.  True when run ends (exit_status set), false to go on
 * campaigning (--loop).
 */
static bool
run_command_ended(run_state *rs)
{
	options    *o = rs->o;
	le_lease_info info;
	le_status	st;
	int			cs = cmd_reaped(&rs->cmd, o, rs->tty_fd, NULL, 0);

	le_elector_status(rs->e, &st);
	rs->attempts_mark = st.attempts;
	if (rs->cmd.run.exec_failed && rs->cmd.stopping == STOP_NONE)
	{
		rs->exit_status = cs;
		return true;
	}
	if (got_signal)
		;						/* handled by the loop */
	else if (rs->cmd.stopping == STOP_GUARD)
	{
		log_event("error", rs->cmd.token, NULL, NULL,
				  "the supervisor of the command died; refusing to run without it");
		rs->exit_status = EXIT_GUARD_LOST;
		return true;
	}
	else if (rs->cmd.stopping == STOP_LOST || rs->cmd.stopping == STOP_UNHEALTHY)
	{
		if (!o->loop)
		{
			rs->exit_status = rs->cmd.stopping == STOP_LOST ? EXIT_LOST : EXIT_UNHEALTHY;
			return true;
		}
		if (le_elector_is_leader(rs->e, &info) && info.period == rs->child_period)
			le_elector_resign(rs->e);
	}
	else if (!o->loop)
	{
		rs->exit_status = cs;
		status_is_command = true;
		rs->command_done = true;
		return true;
	}
	else
		le_elector_resign(rs->e);
	rs->cmd.stopping = STOP_NONE;
	rs->wait_since = le_monotonic_ms();
	return false;
}

/*
 * Not leading and no command running: an error of an acquire that waiting
 * cannot fix ends run at once, whatever the wait mode.  True when it did.
 */
static bool
run_permanent_error(run_state *rs)
{
	le_status	st;
	char		why[1024];
	int			ps;

	le_elector_status(rs->e, &st);
	/* only an acquire's error: a renewal's was acted on by its period's end */
	ps = st.attempts > rs->attempts_mark ?
		permanent_status(st.last_error, st.last_message, rs->multi_host, why, sizeof(why)) : 0;
	if (ps == 0)
		return false;
	log_event("not_acquired", 0, NULL, NULL, "%s", why);
	rs->exit_status = ps;
	return true;
}

/*
 * Leading with no command running: start it under its supervisor.  False
 * when it could not be started (exit_status set).
 */
static bool
run_start_command(run_state *rs, const le_lease_info *info)
{
	cmd_vars	v = {info->lease_key, info->fencing_token, info->owner_id, info->expires_at, -1, NULL};
	int			st;

	rs->last_period = info->period;
	st = cmd_start(&rs->cmd, rs->o, &v, info->deadline_ms, rs->tty_fd);
	if (st != 0)
	{
		rs->exit_status = st;
		rs->command_done = st == 126 || st == 127;
		return false;
	}
	rs->child_period = info->period;
	return true;
}

/* Sleep until something happens or the next thing is due. */
static void
run_sleep(run_state *rs, int64_t now)
{
	options    *o = rs->o;
	int64_t		timeout = 1000;
	struct pollfd p[3];
	int			np = 1;

	if (rs->cmd.running)
		timeout = cmd_wait(&rs->cmd, o, now, p, &np);
	else if (o->wait_timeout > 0 && rs->wait_since + o->wait_timeout - now < timeout)
		timeout = rs->wait_since + o->wait_timeout - now;
	main_sleep(p, np, timeout);
}

/*
 * The supervision loop of the main thread, until run ends with its
 * exit_status: stop the command, then SIGKILL it, then release the lease
 * once its whole group is gone; start it when leading again.
 */
static void
run_supervise_loop(run_state *rs)
{
	options    *o = rs->o;

	for (;;)
	{
		le_lease_info info;
		bool		leading = le_elector_is_leader(rs->e, &info);
		int64_t		now = le_monotonic_ms();

		/*
		 * No command runs: the lease of a period that ended by itself
		 * (renew_failed, deadline_passed) may be released now, and the
		 * elector may campaign again.
		 */
		if (!rs->cmd.running)
			le_elector_release_period(rs->e);
		if (rs->cmd.running)
		{
			bool		same = info.period == rs->child_period;

			cmd_supervise(&rs->cmd, o, leading && same, same ? info.deadline_ms : INT64_MAX,
						  "leadership_ended", now);
			if (rs->cmd.run.group_gone)
			{
				if (run_command_ended(rs))
					break;
				continue;
			}
		}
		if (!rs->cmd.running && got_signal)
		{
			rs->exit_status = 128 + got_signal;
			break;
		}
		if (!rs->cmd.running && !leading && run_permanent_error(rs))
			break;
		if (!rs->cmd.running && leading && info.period != rs->last_period)
		{
			if (!run_start_command(rs, &info))
				break;
			continue;
		}
		if (!rs->cmd.running && !leading && o->wait_timeout > 0 &&
			now - rs->wait_since >= o->wait_timeout)
		{
			log_event("not_acquired", 0, NULL, NULL, "no leadership within --wait-timeout %" PRId64 "ms",
					  o->wait_timeout);
			rs->exit_status = EXIT_WAIT_TIMEOUT;
			break;
		}
		run_sleep(rs, now);
	}
}

/*
 * Leave run: kill a command still running, give the terminal back, resign
 * when the command ended by itself, and settle an acquire whose answer was
 * lost.  Returns the exit status.
 */
static int
run_finish(run_state *rs)
{
	le_status	st;

	/* leaving with a command (out of memory and the like): kill it first */
	cmd_kill_now(&rs->cmd);
	if (rs->tty_fd >= 0)
		close(rs->tty_fd);
	if (rs->command_done && le_elector_is_leader(rs->e, NULL))
		le_elector_resign(rs->e);
	le_elector_stop(rs->e);
	le_elector_status(rs->e, &st);
	if (!st.leading && st.period == 0 &&
		(st.last_error == LE_ERR_TIMEOUT || st.owner_conflicts > 0))
		settle_unknown_acquire(rs->o, log_owner);
	le_elector_destroy(rs->e);
	log_event("exit", 0, NULL, NULL, "status %d", rs->exit_status);
	log_flush(LOG_EXIT_FLUSH_MS);
	return rs->exit_status;
}

/*
 * pg_leader run: campaign for the lease and run the command while we lead,
 * under a supervisor that kills its group before the lease can expire.
 */
static int
cmd_run(options *o)
{
	run_state	rs;
	int			status;

	memset(&rs, 0, sizeof(rs));
	rs.o = o;
	rs.exit_status = -1;
	run_create_elector(&rs);
	run_setup_signals();
	rs.tty_fd = foreground_tty();
	status = run_start_elector(&rs);
	if (status >= 0)
		return status;
	if (o->no_wait)
	{
		status = run_wait_first_attempt(&rs);
		if (status >= 0)
			return status;
	}
	set_kept_fds();
	rs.cmd.run.to_sup = rs.cmd.run.from_sup = rs.cmd.run.cmd_pidfd = -1;
	rs.wait_since = le_monotonic_ms();
	run_supervise_loop(&rs);
	return run_finish(&rs);
}

/*
 * pg_leader group run: one command per partition the member owns.  Each
 * instance is a command of its own (struct command, supervised as run's
 * one); the member (le_group.c) runs with defer_release, so a revoked
 * partition is handed back only once its instance's whole group is gone.
 */

/* Longest pause before an instance that exited on its own is started again. */
#define RESTART_CAP_MS		30000

/* An instance that ran this long starts its next restart from the shortest pause. */
#define RESTART_RESET_MS	30000

/* The instance of one partition. */
typedef struct instance
{
	command		cmd;
	int64_t		token;			/* the token it runs (or last ran) with; 0: none */
	int64_t		deadline;		/* that token's local deadline, as last seen */
	int			restarts;		/* ends on its own in a row under that token */
	int64_t		restart_at;		/* not started again before this */
} instance;

/* The state of pg_leader group run, shared by its steps. */
typedef struct group_state
{
	options    *o;
	le_group_member *m;
	bool		multi_host;
	char		member_key[LE_PARTITION_KEY_LEN + 128];	/* log_key of the member's own lines */
	instance   *inst;			/* indexed by partition */
	int			n_inst;
	le_partition_info *snap;	/* le_group_member_partitions */
	int			n_snap;
	int			snap_cap;
	struct pollfd *pfd;
	int			pfd_cap;
	int			exit_status;
	uint64_t	heartbeats_mark;	/* heartbeats answered when we last looked at errors */
} group_state;

/* Member callback: a partition was assigned to us. */
static void
cb_assigned(void *arg, const le_partition_info *p)
{
	(void) arg;
	log_key_event(p->lease_key, "assigned", p->fencing_token, p->expires_at, NULL,
				  "partition %d", p->partition);
	wake_main();
}

/* Member callback: a partition was revoked (the instance is being stopped). */
static void
cb_revoked(void *arg, const le_partition_info *p, le_stop_reason reason, const char *detail)
{
	(void) arg;
	log_key_event(p->lease_key, "revoked", p->fencing_token, p->expires_at,
				  le_stop_reason_name(reason), "partition %d%s%s", p->partition,
				  detail ? ": " : "", detail ? detail : "");
	wake_main();
}

/* Check the options of group run and create its member; bad usage exits 64. */
static void
group_create_member(group_state *gs)
{
	options    *o = gs->o;
	le_group_config cfg;
	char		err[1024];

	if (o->group == NULL)
		usage_error("group run needs --group G");
	if (o->lease != NULL || o->owner != NULL)
		usage_error("group run takes --group and --member, not -l or --owner");
	if (o->no_wait || o->loop || o->wait_timeout > 0 || o->metadata != NULL || o->heartbeat_file != NULL)
		usage_error("--no-wait, --loop, --wait-timeout, --metadata and --heartbeat-file are for run");
	if (o->command[0] == NULL)
		usage_error("group run needs a command after --");
	check_dsn(o->dsn);
	check_timing(o);
	gs->multi_host = dsn_multi_host(o->dsn);

	le_group_config_init(&cfg);
	cfg.conninfo = o->dsn;
	cfg.group_name = o->group;
	cfg.member_id = o->member;
	library_timing(o, &cfg.ttl_ms, &cfg.heartbeat_ms, &cfg.renew_by_ms, &cfg.retry_ms,
				   &cfg.retry_jitter_pct, &cfg.safety_margin_ms, &cfg.connect_timeout_ms,
				   &cfg.statement_timeout_ms);
	/* a revoked partition is handed back by us, once its instance's group is gone */
	cfg.defer_release = true;
	cfg.on_assigned = cb_assigned;
	cfg.on_revoked = cb_revoked;
	cfg.on_notice = cb_notice;
	gs->m = le_group_member_create(&cfg, err, sizeof(err));
	if (gs->m == NULL)
		usage_error("%s", err);
	snprintf(gs->member_key, sizeof(gs->member_key), "le:group:%s:member:%s", o->group,
			 le_group_member_id(gs->m));
	log_key = gs->member_key;
	snprintf(log_owner, sizeof(log_owner), "%s", le_group_member_id(gs->m));
}

/* The instance of partition, the array grown as needed; NULL when out of memory. */
static instance *
group_instance(group_state *gs, int partition)
{
	if (partition >= gs->n_inst)
	{
		int			n = partition + 1 > 2 * gs->n_inst ? partition + 1 : 2 * gs->n_inst;
		instance   *grown = realloc(gs->inst, n * sizeof(instance));

		if (grown == NULL)
			return NULL;
		memset(grown + gs->n_inst, 0, (n - gs->n_inst) * sizeof(instance));
		for (int i = gs->n_inst; i < n; i++)
			grown[i].cmd.run.to_sup = grown[i].cmd.run.from_sup = grown[i].cmd.run.cmd_pidfd = -1;
		gs->inst = grown;
		gs->n_inst = n;
	}
	return &gs->inst[partition];
}

/*
 * Read the member's partitions into gs->snap; false when out of memory
 * (logged, exit_status set).
 */
static bool
group_snapshot(group_state *gs)
{
	for (;;)
	{
		int			n = le_group_member_partitions(gs->m, gs->snap, gs->snap_cap);
		le_partition_info *grown;

		if (n <= gs->snap_cap)
		{
			gs->n_snap = n;
			return true;
		}
		grown = realloc(gs->snap, n * sizeof(le_partition_info));
		if (grown == NULL)
		{
			log_event("error", 0, NULL, NULL, "out of memory");
			gs->exit_status = EXIT_INTERNAL;
			return false;
		}
		gs->snap = grown;
		gs->snap_cap = n;
	}
}

/* The snapshot's entry of partition under token, or NULL. */
static const le_partition_info *
group_find(const group_state *gs, int partition, int64_t token)
{
	for (int i = 0; i < gs->n_snap; i++)
		if (gs->snap[i].partition == partition && gs->snap[i].fencing_token == token)
			return &gs->snap[i];
	return NULL;
}

/*
 * Start the instance of an owned partition when none runs, unless we are
 * shutting down, a restart is not due yet, or the time left before its
 * SIGTERM point is gone already.  False when it cannot be started at all
 * (command not found or not runnable, out of memory: exit_status set).
 */
static bool
group_start_instance(group_state *gs, const le_partition_info *p, int64_t now)
{
	options    *o = gs->o;
	instance   *in = group_instance(gs, p->partition);
	cmd_vars	v = {p->lease_key, p->fencing_token, le_group_member_id(gs->m), p->expires_at,
	p->partition, o->group};
	int			st;

	if (in == NULL)
	{
		log_event("error", 0, NULL, NULL, "out of memory");
		gs->exit_status = EXIT_INTERNAL;
		return false;
	}
	if (in->cmd.running)
		return true;			/* an instance of an older token is still being stopped */
	if (in->token != p->fencing_token)
	{
		in->token = p->fencing_token;
		in->restarts = 0;
		in->restart_at = 0;
	}
	in->deadline = p->deadline_ms;
	if (got_signal || now < in->restart_at || now >= p->deadline_ms - KILL_SLACK_MS - o->grace)
		return true;
	st = cmd_start(&in->cmd, o, &v, p->deadline_ms, -1);
	if (st != 0)
	{
		gs->exit_status = st;
		return false;
	}
	return true;
}

/* Process groups of the running instances other than skip, into live; their number. */
static int
group_live(group_state *gs, const instance *skip, pid_t *live)
{
	int			n = 0;

	for (int i = 0; i < gs->n_inst; i++)
		if (gs->inst[i].cmd.running && &gs->inst[i] != skip)
			live[n++] = gs->inst[i].cmd.run.group;
	return n;
}

/*
 * The whole group of an instance is gone.  Still owned under its token
 * and not stopped for the partition's end: it exited on its own (or
 * failed a check), and starts again after a pause that doubles with every
 * such end in a row (from --retry up to RESTART_CAP_MS).  Otherwise its
 * partition is handed back for release.
 */
static void
group_instance_ended(group_state *gs, instance *in, int partition, bool owned, int64_t now)
{
	options    *o = gs->o;
	pid_t	   *live = malloc((gs->n_inst > 0 ? gs->n_inst : 1) * sizeof(pid_t));
	int			n_live = live ? group_live(gs, in, live) : 0;
	stop_kind	why = in->cmd.stopping;

	/* without the list (out of memory), reap no strays: a live group's member could be one */
	(void) cmd_reaped(&in->cmd, o, -1, live, live ? n_live : -1);
	free(live);
	if (owned && !got_signal && why != STOP_LOST && why != STOP_SHUTDOWN)
	{
		int64_t		pause = o->retry;

		if (now - in->cmd.started_at >= RESTART_RESET_MS)
			in->restarts = 0;
		for (int i = 0; i < in->restarts && pause < RESTART_CAP_MS; i++)
			pause *= 2;
		if (pause > RESTART_CAP_MS)
			pause = RESTART_CAP_MS;
		in->restarts++;
		in->restart_at = now + pause;
		log_key_event(in->cmd.key, "restarting", in->cmd.token, NULL, NULL,
					  "partition %d is still ours: the command starts again in %" PRId64 "ms",
					  partition, pause);
		return;
	}
	if (le_group_member_release(gs->m, partition, in->cmd.token))
		log_key_event(in->cmd.key, "releasing", in->cmd.token, NULL, NULL,
					  "partition %d: its command is gone", partition);
}

/* Supervise every running instance (stop, SIGKILL, reap); see cmd_check_stop. */
static void
group_supervise_instances(group_state *gs, int64_t now)
{
	for (int i = 0; i < gs->n_inst; i++)
	{
		instance   *in = &gs->inst[i];
		const le_partition_info *p;
		bool		owned;

		if (!in->cmd.running)
			continue;
		p = group_find(gs, i, in->cmd.token);
		owned = p != NULL && p->owned;
		if (p != NULL)
			in->deadline = p->deadline_ms;
		cmd_supervise(&in->cmd, gs->o, owned, in->deadline, "revoked", now);
		if (in->cmd.run.group_gone)
			group_instance_ended(gs, in, i, owned, now);
	}
}

/* Revoked partitions without a running instance: hand them back for release. */
static void
group_hand_back(group_state *gs)
{
	for (int i = 0; i < gs->n_snap; i++)
	{
		const le_partition_info *p = &gs->snap[i];
		instance   *in = p->partition < gs->n_inst ? &gs->inst[p->partition] : NULL;

		if (p->owned || (in != NULL && in->cmd.running && in->cmd.token == p->fencing_token))
			continue;
		if (le_group_member_release(gs->m, p->partition, p->fencing_token))
			log_key_event(p->lease_key, "releasing", p->fencing_token, NULL, NULL,
						  "partition %d: no command runs for it", p->partition);
	}
}

/*
 * No instance running and the last heartbeat failed with an error that
 * waiting cannot fix (permission denied, no extension or no groups in it,
 * a standby, an unknown group, a member id held by another role): true
 * with exit_status set.
 */
static bool
group_permanent_error(group_state *gs)
{
	le_group_status st;
	char		why[1024];
	int			ps;

	le_group_member_status(gs->m, &st);
	if (st.heartbeats == gs->heartbeats_mark || st.owned > 0)
		return false;
	gs->heartbeats_mark = st.heartbeats;
	ps = permanent_status(st.last_error, st.last_message, gs->multi_host, why, sizeof(why));
	if (ps == EXIT_NO_EXTENSION && strcmp(st.last_sqlstate, "42883") == 0)
		snprintf(why, sizeof(why), "the server's leader_election has no partition groups "
				 "(le_group_heartbeat is missing: they came with extension 1.1, ALTER EXTENSION leader_election UPDATE)");
	if (ps == 0 && st.last_permanent)
	{
		ps = EXIT_CONNECT;
		snprintf(why, sizeof(why), "le_group_heartbeat failed (SQLSTATE %s): %s", st.last_sqlstate,
				 st.last_message);
	}
	if (ps == 0)
		return false;
	log_event("not_joined", 0, NULL, NULL, "%s", why);
	gs->exit_status = ps;
	return true;
}

/* Sleep until something happens: a signal, a callback, a supervisor's news, a restart due. */
static void
group_sleep(group_state *gs, int64_t now)
{
	int			np = 1;
	int64_t		timeout = 1000;
	int			need = 1;

	for (int i = 0; i < gs->n_inst; i++)
		need += gs->inst[i].cmd.running ? 2 : 0;
	if (need > gs->pfd_cap)
	{
		struct pollfd *grown = realloc(gs->pfd, need * sizeof(struct pollfd));

		if (grown == NULL)
			need = 1;			/* sleep on the wake pipe only, and briefly */
		else
		{
			gs->pfd = grown;
			gs->pfd_cap = need;
		}
	}
	for (int i = 0; i < gs->n_inst; i++)
	{
		instance   *in = &gs->inst[i];
		int64_t		t = timeout;

		if (in->cmd.running)
			t = need > 1 ? cmd_wait(&in->cmd, gs->o, now, gs->pfd, &np) : 20;
		else if (in->restart_at > now)
			t = in->restart_at - now;
		if (t < timeout)
			timeout = t;
	}
	if (gs->pfd == NULL)
	{
		struct pollfd one[1];

		main_sleep(one, 1, timeout);
		return;
	}
	main_sleep(gs->pfd, np, timeout);
}

/* Is any instance running? */
static bool
group_any_running(const group_state *gs)
{
	for (int i = 0; i < gs->n_inst; i++)
		if (gs->inst[i].cmd.running)
			return true;
	return false;
}

/*
 * The main loop of group run: start an instance for every owned
 * partition, stop those whose partition is revoked, hand those back once
 * their group is gone; after SIGTERM/SIGINT/SIGHUP, stop every instance
 * and end.
 */
static void
group_supervise_loop(group_state *gs)
{
	for (;;)
	{
		int64_t		now = le_monotonic_ms();

		if (!group_snapshot(gs))
			return;
		group_supervise_instances(gs, now);

		/*
		 * Supervising can take a while (reaping a group) and hands back
		 * the partitions of instances that ended: read again, so that
		 * no instance starts under a token handed back meanwhile (the
		 * reading before may predate its revocation).
		 */
		if (!group_snapshot(gs))
			return;
		for (int i = 0; i < gs->n_snap; i++)
			if (gs->snap[i].owned && !group_start_instance(gs, &gs->snap[i], now))
				return;
		group_hand_back(gs);
		if (!group_any_running(gs))
		{
			if (got_signal)
			{
				gs->exit_status = 128 + got_signal;
				return;
			}
			if (group_permanent_error(gs))
				return;
		}
		group_sleep(gs, le_monotonic_ms());
	}
}

/*
 * pg_leader group run: join group G as a member and run one command per
 * partition it owns, each under a supervisor that kills its group before
 * the partition's lease can expire; leave the group at the end.
 */
static int
cmd_group_run(options *o)
{
	group_state gs;
	char		err[1024];
	le_result	rc;

	memset(&gs, 0, sizeof(gs));
	gs.o = o;
	gs.exit_status = -1;
	group_create_member(&gs);
	run_setup_signals();
	rc = le_group_member_start(gs.m, err, sizeof(err));
	if (rc != LE_OK)
	{
		le_group_member_destroy(gs.m);
		return start_failed(rc, err);
	}
	log_event("joining", 0, NULL, NULL, "group %s, ttl %" PRId64 "ms, grace %" PRId64 "ms, heartbeat %" PRId64 "ms",
			  o->group, o->ttl, o->grace, o->renew);
	set_kept_fds();
	group_supervise_loop(&gs);
	for (int i = 0; i < gs.n_inst; i++)
		cmd_kill_now(&gs.inst[i].cmd);
	/* every command is gone: leave, which releases every partition at once */
	le_group_member_stop(gs.m);
	le_group_member_destroy(gs.m);
	free(gs.inst);
	free(gs.snap);
	free(gs.pfd);
	log_event("exit", 0, NULL, NULL, "status %d", gs.exit_status);
	log_flush(LOG_EXIT_FLUSH_MS);
	return gs.exit_status;
}

/*
 * Note the descriptors from 3 up that we were started with, the lowest
 * SV_MAX_KEEP of them however high their numbers: from /proc/self/fd,
 * else by probing the first 1024.
 */
static void
find_inherited_fds(void)
{
	DIR		   *d = opendir("/proc/self/fd");
	struct dirent *de;

	if (d == NULL)
	{
		for (int fd = 3; fd < 1024 && n_inherited < SV_MAX_KEEP; fd++)
			if (fcntl(fd, F_GETFD) >= 0)
				inherited_fds[n_inherited++] = fd;
		return;
	}
	while ((de = readdir(d)) != NULL)
	{
		char	   *end;
		long		fd = strtol(de->d_name, &end, 10);
		int			at;

		if (*end != '\0' || end == de->d_name || fd < 3 || fd > INT_MAX || fd == dirfd(d))
			continue;
		/* insert in order, dropping the highest beyond SV_MAX_KEEP */
		for (at = n_inherited; at > 0 && inherited_fds[at - 1] > fd; at--)
			if (at < SV_MAX_KEEP)
				inherited_fds[at] = inherited_fds[at - 1];
		if (at < SV_MAX_KEEP)
		{
			inherited_fds[at] = (int) fd;
			if (n_inherited < SV_MAX_KEEP)
				n_inherited++;
		}
	}
	closedir(d);
}

/* Entry point: dispatch on the subcommand. */
int
main(int argc, char **argv)
{
	options		o;
	const char *cmd;

	/* the caller's descriptors, before we open any */
	find_inherited_fds();

	/* a closed pipe must be an EPIPE error, never our death */
	signal(SIGPIPE, SIG_IGN);

	/*
	 * A closed standard descriptor would be reused by the next open (an
	 * internal pipe, a timerfd, a server connection), and log lines would
	 * land there: give it /dev/null first.
	 */
	for (int fd = 0; fd <= 2; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF &&
			open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) < 0)
			return EXIT_INTERNAL;
	if (argc < 2)
		usage_error("missing command (run, group run, status, release, history or watch)");
	cmd = argv[1];
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0)
	{
		help();
		return 0;
	}
	if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0)
	{
		printf("%s (leader_election) %s\n", progname, PG_LEADER_VERSION);
		return 0;
	}
	if (strcmp(cmd, "group") == 0)
	{
		int			rc;

		if (argc < 3 || strcmp(argv[2], "run") != 0)
			usage_error("group needs a subcommand: group run --group G [OPTION]... -- COMMAND [ARG]...");
		parse_options(argc - 2, argv + 2, &o);
		rc = cmd_group_run(&o);
		write_status_file(rc);
		return rc;
	}
	parse_options(argc - 1, argv + 1, &o);
	if (strcmp(cmd, "run") == 0)
	{
		int			rc = cmd_run(&o);

		write_status_file(rc);
		return rc;
	}
	if (o.command[0] != NULL)
		usage_error("unexpected argument \"%s\"", o.command[0]);
	/* only run writes it at exit: an empty file would say "killed" */
	if (status_file != NULL)
		usage_error("--status-file is only for run");
	if (strcmp(cmd, "status") == 0)
		return cmd_status(&o);
	if (strcmp(cmd, "release") == 0)
		return cmd_release(&o);
	if (strcmp(cmd, "history") == 0 || strcmp(cmd, "watch") == 0)
		return cmd_history_watch(&o, strcmp(cmd, "watch") == 0);
	usage_error("unknown command \"%s\" (run, group run, status, release, history or watch)", cmd);
	return EXIT_USAGE;
}
