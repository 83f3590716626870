/*
 * conformance_probe.c: the C client library's probe of the conformance
 * suite (test/conformance/PROTOCOL.md), started by test/conformance/probe-c
 * and driven by test/conformance/run.py.  It leads --key through
 * le_client.h with the library's default renewal schedule (retry interval
 * ttl/2, so that a follower campaigns within a ttl cycle) and, every
 * --interval-ms while le_elector_is_leader() says so, prints an "act"
 * event and runs a fenced INSERT (set_config of
 * leader_election.fencing_token, local to the transaction) on a connection
 * of its own.  Events are JSON lines on stdout.
 *
 * The invariant: an "act" of token T is printed only right after
 * le_elector_is_leader() reported period T, except under LE_PROBE_BREAK,
 * deliberately broken modes the suite checks the harness reports:
 * ignore_deadline (keeps acting on its first token), cache_leader_ms=N
 * (trusts an answer of le_elector_is_leader() for N ms) and
 * crash_on_write_error (abort() at the first failed write).  --ignore-cancel runs the long task under "pg_leader run
 * --loop", the C client's strongest mode: pg_leader kills the task's
 * process group before the local deadline (the task prints its own events).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "le_client.h"

typedef struct opts
{
	const char *dsn;
	const char *key;
	const char *owner;
	const char *table;
	int64_t		ttl_ms;
	int64_t		interval_ms;
	int64_t		duration_ms;	/* -1: until signalled */
	int64_t		stall_ms;		/* 0: none */
	int64_t		stall_commit_ms;	/* 0: none */
	int64_t		cache_ms;		/* LE_PROBE_BREAK=cache_leader_ms=N */
	bool		ignore_deadline;	/* LE_PROBE_BREAK=ignore_deadline */
	bool		crash_on_write_error;	/* LE_PROBE_BREAK=crash_on_write_error */
	bool		ignore_cancel;
	bool		task;			/* internal: the ignore-cancel task itself */
} opts;

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static volatile sig_atomic_t got_term;
static const char *client_name = "c";

/* CLOCK_REALTIME in microseconds. */
static int64_t
wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void
sleep_ms(int64_t ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !got_term)
		;
}

/* Print one event line (already JSON) and flush it at once. */
static void
emit(const char *fmt,...)
{
	va_list		ap;

	pthread_mutex_lock(&out_mu);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
}

/* Owner ids and reasons printed as JSON strings: drop what needs escaping. */
static void
json_safe(char *dst, size_t len, const char *src)
{
	size_t		n = 0;

	for (; src && *src && n + 1 < len; src++)
		if (*src != '"' && *src != '\\' && (unsigned char) *src >= 0x20)
			dst[n++] = *src;
	dst[n] = '\0';
}

static void
on_started(void *arg, const le_lease_info *l)
{
	char		owner[256];

	(void) arg;
	json_safe(owner, sizeof(owner), l->owner_id);
	emit("{\"ev\":\"leader\",\"token\":%" PRId64 ",\"owner\":\"%s\",\"wall_us\":%" PRId64 "}",
		 l->fencing_token, owner, wall_us());
}

static void
on_stopped(void *arg, const le_lease_info *l, le_stop_reason reason, const char *detail)
{
	(void) arg;
	(void) detail;
	emit("{\"ev\":\"lost\",\"token\":%" PRId64 ",\"wall_us\":%" PRId64 ",\"reason\":\"%s\"}",
		 l->fencing_token, wall_us(), le_stop_reason_name(reason));
}

static void
on_term(int sig)
{
	(void) sig;
	got_term = 1;
}

/* Run sql on *conn; false with the SQLSTATE in state when it failed. */
static bool
run_sql(PGconn **conn, const char *sql, int n, const char *const *vals, char *state)
{
	char		err[256];
	PGresult   *r = le_exec(*conn, sql, n, vals, 5000, err, sizeof(err), NULL);
	bool		ok;

	if (r == NULL)
	{
		strcpy(state, "08006");
		PQfinish(*conn);
		*conn = NULL;
		return false;
	}
	ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
	if (!ok)
	{
		const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);

		snprintf(state, 6, "%s", s ? s : "XX000");
	}
	PQclear(r);
	return ok;
}

/*
 * One fenced INSERT with token; prints the "write" event; true if committed.
 * The transaction runs with a statement_timeout of ttl/4, so that a write
 * blocked behind a lock fails instead of hiding what the loop does next;
 * stall_commit sleeps that long between the INSERT and the COMMIT.
 */
static bool
fenced_write(const opts *o, PGconn **conn, const char *owner_id, int64_t token,
			 int64_t stall_commit)
{
	char		state[6] = "";
	char		tok[32];
	char		stmo[32];
	const char *stv[] = {stmo};
	char		sql[512];
	char		schema[128];
	char		err[256];
	const char *setv[] = {tok};
	const char *insv[] = {client_name, o->key, owner_id, tok};
	bool		ok;

	snprintf(tok, sizeof(tok), "%" PRId64, token);
	snprintf(stmo, sizeof(stmo), "%" PRId64, o->ttl_ms / 4 > 0 ? o->ttl_ms / 4 : 1);
	if (*conn == NULL &&
		le_connect(o->dsn, "conformance probe writer", 5000, conn, schema, sizeof(schema),
				   err, sizeof(err)) != LE_OK)
	{
		*conn = NULL;
		emit("{\"ev\":\"write\",\"token\":%s,\"ok\":false,\"sqlstate\":\"08001\"}", tok);
		return false;
	}
	snprintf(sql, sizeof(sql),
			 "INSERT INTO %s (client, lease_key, owner_id, fencing_token) VALUES ($1, $2, $3, $4)",
			 o->table);
	ok = run_sql(conn, "BEGIN", 0, NULL, state) &&
		run_sql(conn, "SELECT pg_catalog.set_config('statement_timeout', $1, true)",
				1, stv, state) &&
		run_sql(conn, "SELECT pg_catalog.set_config('leader_election.fencing_token', $1, true)",
				1, setv, state) &&
		run_sql(conn, sql, 4, insv, state);
	if (ok && stall_commit > 0)
		sleep_ms(stall_commit);
	ok = ok && run_sql(conn, "COMMIT", 0, NULL, state);
	if (!ok && *conn)
	{
		char		ignored[6];

		run_sql(conn, "ROLLBACK", 0, NULL, ignored);
	}
	if (ok)
		emit("{\"ev\":\"write\",\"token\":%s,\"ok\":true}", tok);
	else
		emit("{\"ev\":\"write\",\"token\":%s,\"ok\":false,\"sqlstate\":\"%s\"}", tok, state);
	if (!ok && o->crash_on_write_error)
		abort();
	return ok;
}

/* The ignore-cancel task under pg_leader run: 2 x ttl of steps, SIGTERM ignored. */
static int
run_task(const opts *o)
{
	const char *tok = getenv("LE_FENCING_TOKEN");
	char		owner[256];
	int64_t		end = le_monotonic_ms() + 2 * o->ttl_ms;

	signal(SIGTERM, SIG_IGN);
	json_safe(owner, sizeof(owner), getenv("LE_OWNER_ID"));
	if (tok == NULL)
		return 70;
	emit("{\"ev\":\"leader\",\"token\":%s,\"owner\":\"%s\",\"wall_us\":%" PRId64 "}",
		 tok, owner, wall_us());
	while (le_monotonic_ms() < end)
	{
		emit("{\"ev\":\"act\",\"token\":%s,\"wall_us\":%" PRId64 "}", tok, wall_us());
		sleep_ms(o->interval_ms);
	}
	return 0;
}

/* --ignore-cancel: become "pg_leader run --loop -- SELF --task ...". */
static int
exec_pg_leader(const opts *o, const char *self)
{
	const char *pgl = getenv("LE_PG_LEADER");
	char		ttl[32],
				retry[32],
				ttlarg[32],
				iv[32];

	snprintf(ttl, sizeof(ttl), "%" PRId64 "ms", o->ttl_ms);
	snprintf(retry, sizeof(retry), "%" PRId64 "ms", o->ttl_ms / 2);
	snprintf(ttlarg, sizeof(ttlarg), "%" PRId64, o->ttl_ms);
	snprintf(iv, sizeof(iv), "%" PRId64, o->interval_ms);
	if (pgl == NULL)
		pgl = "pg_leader";
	execlp(pgl, pgl, "run", "-d", o->dsn, "-l", o->key, "--owner", o->owner,
		   "--ttl", ttl, "--retry", retry, "--loop", "--",
		   self, "--task", "--ttl-ms", ttlarg, "--interval-ms", iv, (char *) NULL);
	fprintf(stderr, "conformance_probe: cannot run %s: %s\n", pgl, strerror(errno));
	return 70;
}

/* Parse the command line; exits 64 on bad usage. */
static void
parse_args(int argc, char **argv, opts *o)
{
	o->table = "conformance_writes";
	o->interval_ms = 20;
	o->duration_ms = -1;
	for (int i = 1; i < argc; i++)
	{
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--ignore-cancel") == 0)
			o->ignore_cancel = true;
		else if (strcmp(a, "--task") == 0)
			o->task = true;
		else if (v == NULL)
			goto bad;
		else if (strcmp(a, "--dsn") == 0)
			o->dsn = v, i++;
		else if (strcmp(a, "--key") == 0)
			o->key = v, i++;
		else if (strcmp(a, "--owner") == 0)
			o->owner = v, i++;
		else if (strcmp(a, "--table") == 0)
			o->table = v, i++;
		else if (strcmp(a, "--ttl-ms") == 0)
			o->ttl_ms = atoll(v), i++;
		else if (strcmp(a, "--interval-ms") == 0)
			o->interval_ms = atoll(v), i++;
		else if (strcmp(a, "--duration-ms") == 0)
			o->duration_ms = atoll(v), i++;
		else if (strcmp(a, "--stall-once-ms") == 0)
			o->stall_ms = atoll(v), i++;
		else if (strcmp(a, "--stall-commit-once-ms") == 0)
			o->stall_commit_ms = atoll(v), i++;
		else
			goto bad;
	}
	if (o->task && o->ttl_ms > 0 && o->interval_ms > 0)
		return;
	if (o->dsn && o->key && o->owner && o->ttl_ms > 0 && o->interval_ms > 0 &&
		strspn(o->table, "abcdefghijklmnopqrstuvwxyz0123456789_.") == strlen(o->table))
		return;
bad:
	fprintf(stderr, "usage: %s --dsn DSN --key KEY --owner NAME --ttl-ms MS [--interval-ms MS]\n"
			"       [--duration-ms MS] [--table NAME] [--stall-once-ms MS]\n"
			"       [--stall-commit-once-ms MS] [--ignore-cancel]\n",
			argv[0]);
	exit(64);
}

/* The work loop: act and write while the library says we lead. */
static void
work(const opts *o, le_elector *e)
{
	PGconn	   *conn = NULL;
	int64_t		end = o->duration_ms < 0 ? INT64_MAX : le_monotonic_ms() + o->duration_ms;
	int64_t		broken_token = 0,
				cached_token = 0,
				cached_until = 0;
	bool		wrote = false,
				stalled = false,
				commit_stalled = false;

	while (!got_term && le_monotonic_ms() < end)
	{
		le_lease_info li;
		int64_t		token;
		int64_t		stall_commit = 0;

		if (cached_token != 0 && le_monotonic_ms() < cached_until)
			token = cached_token;	/* the broken cache_leader_ms mode */
		else if (le_elector_is_leader(e, &li))
		{
			token = li.fencing_token;
			if (o->cache_ms > 0)
				cached_token = token, cached_until = le_monotonic_ms() + o->cache_ms;
		}
		else if (o->ignore_deadline && broken_token != 0)
			token = broken_token;	/* the broken mode: acts on its own */
		else
		{
			cached_token = 0;
			sleep_ms(o->interval_ms);
			continue;
		}
		if (broken_token == 0)
			broken_token = token;
		emit("{\"ev\":\"act\",\"token\":%" PRId64 ",\"wall_us\":%" PRId64 "}", token, wall_us());
		if (wrote && !stalled && o->stall_ms > 0)
		{
			stalled = true;
			sleep_ms(o->stall_ms);
		}
		if (wrote && !commit_stalled && o->stall_commit_ms > 0)
		{
			commit_stalled = true;
			stall_commit = o->stall_commit_ms;
		}
		if (fenced_write(o, &conn, le_elector_owner_id(e), token, stall_commit))
			wrote = true;
		sleep_ms(o->interval_ms);
	}
	if (conn)
		PQfinish(conn);
}

int
main(int argc, char **argv)
{
	opts		o = {0};
	le_config	cfg;
	le_elector *e;
	char		err[512];
	const char *brk = getenv("LE_PROBE_BREAK");
	struct sigaction sa = {0};

	parse_args(argc, argv, &o);
	if (brk && strcmp(brk, "ignore_deadline") == 0)
		o.ignore_deadline = true;
	else if (brk && strncmp(brk, "cache_leader_ms=", 16) == 0)
		o.cache_ms = atoll(brk + 16);
	else if (brk && strcmp(brk, "crash_on_write_error") == 0)
		o.crash_on_write_error = true;
	if (getenv("LE_CONFORMANCE_CLIENT"))
		client_name = getenv("LE_CONFORMANCE_CLIENT");
	if (o.task)
		return run_task(&o);
	if (o.ignore_cancel)
		return exec_pg_leader(&o, argv[0]);

	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	le_config_init(&cfg);
	cfg.conninfo = o.dsn;
	cfg.lease_key = o.key;
	cfg.owner_id = o.owner;
	cfg.ttl_ms = o.ttl_ms;
	cfg.retry_ms = o.ttl_ms / 2;
	cfg.on_started = on_started;
	cfg.on_stopped = on_stopped;
	e = le_elector_create(&cfg, err, sizeof(err));
	if (e == NULL || le_elector_start(e, err, sizeof(err)) != LE_OK)
	{
		fprintf(stderr, "conformance_probe: %s\n", err);
		emit("{\"ev\":\"exit\",\"code\":69}");
		return 69;
	}
	work(&o, e);
	le_elector_stop(e);
	le_elector_destroy(e);
	emit("{\"ev\":\"exit\",\"code\":0}");
	return 0;
}
