/*-------------------------------------------------------------------------
 *
 * pg_leader.c
 *		Command-line client of leader_election: run a command only while
 *		holding a fenced lease, show leases, release a lease.
 *
 * Processes, threads and locking rules.  "pg_leader run" is one process
 * with three threads: the main thread, which alone forks, signals and reaps
 * the child and handles our own signals, and the elector's campaign and
 * renewal threads (le_client.c), which block all signals.  The elector's
 * callbacks only log (under log_mu) and wake the main thread through a
 * self-pipe; the main thread then asks le_elector_is_leader(), which
 * compares the local deadline with the clock itself.  So after a SIGSTOP
 * longer than the ttl, the first thing the resumed main thread does is
 * notice the passed deadline and signal the child, whatever the other
 * threads are doing.
 *
 * The child runs in a process group of its own (so SIGTERM/SIGKILL reach
 * a whole shell pipeline) with PR_SET_PDEATHSIG = SIGKILL, so it cannot
 * outlive a wrapper that is killed.  A watchdog process (forked next to it,
 * in the wrapper's process group) holds a copy of the local deadline, fed
 * through a pipe after every renewal: it stops the child's group at the
 * deadline even while the wrapper's own process is frozen, and kills the
 * whole group (grandchildren too) when the wrapper dies.  Freezing the
 * wrapper's whole process group freezes the watchdog too; then the resumed
 * main thread and watchdog both act on the passed deadline at once.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "le_client.h"

/* Exit statuses (documented in doc/client.md and --help). */
#define EXIT_USAGE			64	/* bad usage, bad duration, bad connection string */
#define EXIT_CONNECT		69	/* server unreachable or refused the connection */
#define EXIT_INTERNAL		70	/* fork, thread or memory failure */
#define EXIT_NOT_ACQUIRED	75	/* --no-wait and the lease is held by someone else */
#define EXIT_NO_EXTENSION	78	/* extension leader_election not installed */
#define EXIT_LOST			79	/* leadership lost while the command ran */
#define EXIT_NOT_RELEASED	1	/* release: the lease was not held by that owner and token */

extern char **environ;

static const char *progname = "pg_leader";

/* Logging state: shared by the main thread and the elector's callbacks. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static bool log_json = false;
static bool verbose = false;
static const char *log_key = "";
static char log_owner[256] = "";

/* Self-pipe: signal handlers and callbacks wake the main loop with it. */
static int wake_pipe[2] = {-1, -1};
static volatile sig_atomic_t got_signal = 0;

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
	exit(EXIT_USAGE);
}

/* Print an error (not usage) and exit with status. */
static void
fatal(int status, const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "%s: error: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
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

/*
 * One log line per event on stderr: timestamp, event, lease key, owner,
 * token (if > 0), expiry (if known), reason (if any), free text detail.
 */
static void
log_event(const char *event, int64_t token, const char *expires, const char *reason,
		  const char *fmt,...)
{
	char		ts[64];
	char		detail[1200] = "";

	if (fmt)
	{
		va_list		ap;

		va_start(ap, fmt);
		vsnprintf(detail, sizeof(detail), fmt, ap);
		va_end(ap);
	}
	now_iso(ts, sizeof(ts));
	pthread_mutex_lock(&log_mu);
	if (log_json)
	{
		fprintf(stderr, "{\"ts\":\"%s\",\"pid\":%d,\"event\":", ts, (int) getpid());
		json_str(stderr, event);
		fputs(",\"lease_key\":", stderr);
		json_str(stderr, log_key);
		fputs(",\"owner\":", stderr);
		json_str(stderr, log_owner);
		if (token > 0)
			fprintf(stderr, ",\"token\":%" PRId64, token);
		else
			fputs(",\"token\":null", stderr);
		fputs(",\"expires_at\":", stderr);
		if (expires && *expires)
			json_str(stderr, expires);
		else
			fputs("null", stderr);
		fputs(",\"reason\":", stderr);
		if (reason)
			json_str(stderr, reason);
		else
			fputs("null", stderr);
		if (detail[0])
		{
			fputs(",\"detail\":", stderr);
			json_str(stderr, detail);
		}
		fputs("}\n", stderr);
	}
	else
	{
		fprintf(stderr, "%s pg_leader[%d] %s key=%s owner=%s", ts, (int) getpid(), event,
				log_key, log_owner);
		if (token > 0)
			fprintf(stderr, " token=%" PRId64, token);
		if (expires && *expires)
			fprintf(stderr, " expires=%s", expires);
		if (reason)
			fprintf(stderr, " reason=%s", reason);
		if (detail[0])
			fprintf(stderr, ": %s", detail);
		fputc('\n', stderr);
	}
	fflush(stderr);
	pthread_mutex_unlock(&log_mu);
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

/* SIGTERM/SIGINT/SIGHUP: remember, wake.  SIGCHLD: wake. */
static void
on_signal(int sig)
{
	if (sig != SIGCHLD && got_signal == 0)
		got_signal = sig;
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

/* Elector callback: someone else leads. */
static void
cb_new_leader(void *arg, const char *holder, int64_t token, const char *expires_at)
{
	(void) arg;
	log_event("new_leader", token, expires_at, NULL, "holder %s", holder);
}

/* Elector callback: connection trouble and the like. */
static void
cb_notice(void *arg, const char *message)
{
	(void) arg;
	log_event("notice", 0, NULL, NULL, "%s", message);
}

/* The --help text. */
static void
help(void)
{
	printf("%s runs a command only while it holds a fenced lease of extension leader_election.\n\n", progname);
	printf("Usage:\n"
		   "  %1$s run     -d DSN -l KEY [OPTION]... -- COMMAND [ARG]...\n"
		   "  %1$s status  -d DSN [-l KEY] [--json]\n"
		   "  %1$s release -d DSN -l KEY --owner ID --token N\n\n", progname);
	printf("Options:\n"
		   "  -d, --dbname=DSN         libpq connection string or URI (default: PG* environment)\n"
		   "  -l, --lease=KEY          lease key\n"
		   "      --owner=ID           owner id (default: host-pid-random)\n"
		   "      --ttl=DURATION       lease duration (default 15s)\n"
		   "      --renew=DURATION     renewal interval (default about ttl/3; at most (ttl-margin)/2)\n"
		   "      --retry=DURATION     campaign interval while not leading (default 2s, +/- jitter)\n"
		   "      --jitter=PERCENT     random spread of the retry interval (default 20)\n"
		   "      --safety-margin=DURATION  leadership ends this long before ttl runs out\n"
		   "                           (default ttl/10, at least 50ms)\n"
		   "      --grace=DURATION     SIGTERM to SIGKILL delay when leadership is lost (default 5s)\n"
		   "      --connect-timeout=DURATION    (default 5s)\n"
		   "      --statement-timeout=DURATION  (default 5s; renewals also stop at the deadline)\n"
		   "      --no-wait            exit with status 75 if the lease is held by someone else\n"
		   "      --loop               campaign again after the command ends or leadership is lost\n"
		   "      --log-format=FORMAT  text (default) or json; one line per event on stderr\n"
		   "  -v, --verbose            also log every renewal\n"
		   "      --json               status: print JSON instead of a table\n"
		   "      --token=N            release: the fencing token to release\n"
		   "  -h, --help               show this help and exit\n\n"
		   "Durations take a unit: 500ms, 15s, 2m, 1h.\n\n"
		   "The command gets LE_LEASE_KEY, LE_FENCING_TOKEN, LE_OWNER_ID and LE_EXPIRES_AT in its\n"
		   "environment.  It must pass LE_FENCING_TOKEN to every fenced write.\n\n"
		   "Exit status of run: the command's status (128+N if killed by signal N), or\n"
		   "  64 bad usage   69 connection failure   70 internal error\n"
		   "  75 not acquired (--no-wait)   78 extension missing   79 leadership lost\n"
		   "  128+N when pg_leader itself got signal N (the command was stopped, the lease released)\n"
		   "status: 0, or 1 when -l KEY names no lease; release: 0 released, 1 not held.\n");
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

/* Options of all subcommands. */
typedef struct options
{
	const char *dsn;
	const char *lease;
	const char *owner;
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
	char	  **command;
} options;

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
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;
	char	   *end;
	le_config	defaults;

	le_config_init(&defaults);
	memset(o, 0, sizeof(*o));
	o->dsn = "";
	o->ttl = defaults.ttl_ms;
	o->retry = defaults.retry_ms;
	o->jitter = defaults.retry_jitter_pct;
	o->grace = 5000;
	o->connect_timeout = defaults.connect_timeout_ms;
	o->statement_timeout = defaults.statement_timeout_ms;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+d:l:vh", longopts, NULL)) != -1)
	{
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
				break;
			case 7:
				o->connect_timeout = duration_arg("connect-timeout", optarg);
				break;
			case 8:
				o->statement_timeout = duration_arg("statement-timeout", optarg);
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
	o->command = argv + optind;
}

/* Connect for status/release, exiting with the right status on failure. */
static PGconn *
connect_or_exit(const options *o, char *schema_q, size_t len)
{
	char		err[1024];
	char		schema[256];
	PGconn	   *conn;
	char	   *q;
	le_result	rc;

	rc = le_connect(o->dsn, "pg_leader", o->connect_timeout, &conn, schema, sizeof(schema),
					err, sizeof(err));
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

/* Check a DSN's syntax up front: bad DSNs are usage errors. */
static void
check_dsn(const char *dsn)
{
	char	   *err = NULL;
	PQconninfoOption *opts;

	if (dsn[0] == '\0')
		return;
	opts = PQconninfoParse(dsn, &err);
	if (opts == NULL)
	{
		size_t		n = err ? strlen(err) : 0;

		while (n > 0 && err[n - 1] == '\n')
			err[--n] = '\0';
		usage_error("invalid connection string \"%s\": %s", dsn, err ? err : "out of memory");
	}
	PQconninfoFree(opts);
}

/* pg_leader status: one row per lease, as a table or JSON. */
static int
cmd_status(const options *o)
{
	char		schema_q[600];
	char		sql[1200];
	const char *params[1] = {o->lease};
	PGconn	   *conn;
	PGresult   *r;
	int			n;

	check_dsn(o->dsn);
	conn = connect_or_exit(o, schema_q, sizeof(schema_q));
	snprintf(sql, sizeof(sql),
			 "SELECT lease_key, holder, fencing_token, "
			 "pg_catalog.to_char(pg_catalog.timezone('UTC', expires_at), 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), "
			 "is_valid, pg_catalog.round(seconds_remaining::pg_catalog.numeric, 1), transitions "
			 "FROM %s.le_leases WHERE $1::pg_catalog.text IS NULL OR lease_key OPERATOR(pg_catalog.=) $1 "
			 "ORDER BY lease_key", schema_q);
	r = PQexecParams(conn, sql, 1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		fatal(EXIT_CONNECT, "status query failed: %s", PQresultErrorMessage(r));
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
			printf(",\"fencing_token\":%s,\"expires_at\":", PQgetvalue(r, i, 2));
			if (PQgetisnull(r, i, 3))
				printf("null");
			else
				json_str(stdout, PQgetvalue(r, i, 3));
			printf(",\"is_valid\":%s,\"seconds_remaining\":%s,\"transitions\":%s}",
				   strcmp(PQgetvalue(r, i, 4), "t") == 0 ? "true" : "false",
				   PQgetvalue(r, i, 5), PQgetvalue(r, i, 6));
		}
		printf("]\n");
	}
	else
	{
		printf("%-24s %-32s %8s %-24s %-5s %9s %11s\n", "lease_key", "holder", "token",
			   "expires_at", "valid", "remaining", "transitions");
		for (int i = 0; i < n; i++)
			printf("%-24s %-32s %8s %-24s %-5s %9s %11s\n", PQgetvalue(r, i, 0),
				   PQgetisnull(r, i, 1) ? "-" : PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
				   PQgetisnull(r, i, 3) ? "-" : PQgetvalue(r, i, 3),
				   strcmp(PQgetvalue(r, i, 4), "t") == 0 ? "yes" : "no",
				   PQgetvalue(r, i, 5), PQgetvalue(r, i, 6));
	}
	PQclear(r);
	PQfinish(conn);
	if (o->lease && n == 0)
	{
		fprintf(stderr, "%s: no lease named \"%s\"\n", progname, o->lease);
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

	if (o->lease == NULL || o->owner == NULL || o->token <= 0)
		usage_error("release needs -l KEY, --owner ID and --token N");
	check_dsn(o->dsn);
	conn = connect_or_exit(o, schema_q, sizeof(schema_q));
	snprintf(sql, sizeof(sql), "SELECT %s.le_release($1, $2, $3::pg_catalog.int8)", schema_q);
	snprintf(token, sizeof(token), "%" PRId64, o->token);
	params[0] = o->lease;
	params[1] = o->owner;
	params[2] = token;
	r = PQexecParams(conn, sql, 3, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		fatal(EXIT_CONNECT, "release failed: %s", PQresultErrorMessage(r));
	ok = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
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

/* Environment of the child: ours without LE_*, plus the four LE_ variables. */
static char **
child_env(const le_lease_info *l)
{
	size_t		n = 0,
				k = 0;
	char	  **env;

	while (environ[n])
		n++;
	env = calloc(n + 5, sizeof(char *));
	if (env == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LE_LEASE_KEY=", 13) != 0 &&
			strncmp(environ[i], "LE_FENCING_TOKEN=", 17) != 0 &&
			strncmp(environ[i], "LE_OWNER_ID=", 12) != 0 &&
			strncmp(environ[i], "LE_EXPIRES_AT=", 14) != 0)
			env[k++] = environ[i];
	if (asprintf(&env[k++], "LE_LEASE_KEY=%s", l->lease_key) < 0 ||
		asprintf(&env[k++], "LE_FENCING_TOKEN=%" PRId64, l->fencing_token) < 0 ||
		asprintf(&env[k++], "LE_OWNER_ID=%s", l->owner_id) < 0 ||
		asprintf(&env[k++], "LE_EXPIRES_AT=%s", l->expires_at) < 0)
		return NULL;
	env[k] = NULL;
	return env;
}

/* Fork and exec the command in its own process group with a death signal. */
static pid_t
start_child(char **command, const le_lease_info *l)
{
	char	  **env = child_env(l);
	pid_t		parent = getpid();
	pid_t		pid;

	if (env == NULL)
		return -1;
	pid = fork();
	if (pid == 0)
	{
		sigset_t	none;

		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(EXIT_LOST);	/* the wrapper died before the death signal was armed */
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		signal(SIGCHLD, SIG_DFL);
		signal(SIGPIPE, SIG_DFL);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		close(wake_pipe[0]);
		close(wake_pipe[1]);
		environ = env;
		execvp(command[0], command);
		{
			int			save = errno;

			dprintf(2, "%s: could not run \"%s\": %s\n", progname, command[0], strerror(save));
			_exit(save == ENOENT ? 127 : 126);
		}
	}
	if (pid > 0)
		setpgid(pid, pid);		/* also here, so the group exists before we signal it */
	/* the four strings we allocated are the last ones */
	{
		size_t		n = 0;

		while (env[n])
			n++;
		for (size_t i = n - 4; i < n; i++)
			free(env[i]);
		free(env);
	}
	return pid;
}

/* Message to the watchdog: stand down, the command has ended. */
#define WATCHDOG_EXIT	INT64_C(-1)

/*
 * Body of the watchdog process: stop the command's process group at the
 * deadline (SIGTERM, then SIGKILL after grace_ms) unless a later deadline
 * arrives on fd first; SIGKILL it at once if the wrapper dies (EOF).  It
 * runs in a child forked from a threaded process, so it only makes
 * async-signal-safe calls (poll, read, kill, clock_gettime, _exit).
 */
static void
watchdog_main(int fd, pid_t group, int64_t deadline, int64_t grace_ms)
{
	struct sigaction dfl;

	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigaction(SIGTERM, &dfl, NULL);
	sigaction(SIGINT, &dfl, NULL);
	sigaction(SIGHUP, &dfl, NULL);
	sigaction(SIGCHLD, &dfl, NULL);
	for (;;)
	{
		int64_t		now = le_monotonic_ms();
		int64_t		left = deadline - now;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t		msg[64];
		ssize_t		n;

		if (left <= 0)
		{
			kill(-group, SIGTERM);
			kill(-group, SIGCONT);
			poll(NULL, 0, grace_ms > INT32_MAX ? INT32_MAX : (int) grace_ms);
			kill(-group, SIGKILL);
			_exit(0);
		}
		if (poll(&p, 1, left > 60000 ? 60000 : (int) left) <= 0)
			continue;
		n = read(fd, msg, sizeof(msg));
		if (n == 0)
		{
			/* the wrapper is gone: nothing may keep running on its lease */
			kill(-group, SIGKILL);
			_exit(0);
		}
		if (n >= (ssize_t) sizeof(int64_t))
		{
			int64_t		last = msg[n / (ssize_t) sizeof(int64_t) - 1];

			if (last == WATCHDOG_EXIT)
				_exit(0);
			deadline = last;
		}
	}
}

/*
 * Fork the watchdog of the command's process group: a process of its own,
 * so that the command is stopped at the local deadline even while the
 * wrapper itself is frozen (SIGSTOP of the wrapper's pid only).  Returns its
 * pid and the write end of its deadline pipe in *fd, or -1.
 */
static pid_t
start_watchdog(pid_t group, int64_t deadline, int64_t grace_ms, int *fd)
{
	int			p[2];
	pid_t		pid;

	if (pipe2(p, O_CLOEXEC) != 0)
		return -1;
	pid = fork();
	if (pid == 0)
	{
		/* keep no copies of the wrapper's connections and pipes */
		for (int i = 3; i < 1024; i++)
			if (i != p[0])
				close(i);
		watchdog_main(p[0], group, deadline, grace_ms);
	}
	close(p[0]);
	if (pid < 0)
	{
		close(p[1]);
		return -1;
	}
	fcntl(p[1], F_SETFL, O_NONBLOCK);	/* never block the supervisor on it */
	*fd = p[1];
	return pid;
}

/* Send a deadline (or WATCHDOG_EXIT) to the watchdog; atomic 8-byte write. */
static void
tell_watchdog(int fd, int64_t value)
{
	ssize_t		rc;

	if (fd < 0)
		return;
	rc = write(fd, &value, sizeof(value));
	(void) rc;					/* a full pipe means it is frozen; it keeps the older deadline */
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

/* pg_leader run: the supervision loop of the main thread. */
static int
cmd_run(options *o)
{
	le_config	cfg;
	le_elector *e;
	char		err[1024];
	le_result	rc;
	struct sigaction sa;
	pid_t		child = 0;
	uint64_t	child_period = 0;
	int64_t		child_token = 0;
	bool		child_lost = false; /* the child is being stopped because leadership ended */
	bool		killing = false;
	bool		sigkill_sent = false;
	int64_t		kill_at = 0;
	uint64_t	last_period = 0;
	int			exit_status = -1;
	bool		command_done = false;
	pid_t		watchdog = 0;
	int			watchdog_fd = -1;
	int64_t		watchdog_deadline = 0;

	if (o->lease == NULL)
		usage_error("run needs -l KEY");
	if (o->command[0] == NULL)
		usage_error("run needs a command after --");
	check_dsn(o->dsn);

	le_config_init(&cfg);
	cfg.conninfo = o->dsn;
	cfg.lease_key = o->lease;
	cfg.owner_id = o->owner;
	cfg.ttl_ms = o->ttl;
	cfg.renew_ms = o->renew;
	cfg.retry_ms = o->retry;
	cfg.retry_jitter_pct = o->jitter;
	cfg.safety_margin_ms = o->margin;
	cfg.connect_timeout_ms = o->connect_timeout;
	cfg.statement_timeout_ms = o->statement_timeout;
	cfg.on_started = cb_started;
	cfg.on_stopped = cb_stopped;
	cfg.on_renewed = cb_renewed;
	cfg.on_new_leader = cb_new_leader;
	cfg.on_notice = cb_notice;
	e = le_elector_create(&cfg, err, sizeof(err));
	if (e == NULL)
		usage_error("%s", err);
	log_key = o->lease;
	snprintf(log_owner, sizeof(log_owner), "%s", le_elector_owner_id(e));

	if (pipe2(wake_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
		fatal(EXIT_INTERNAL, "pipe: %s", strerror(errno));
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGCHLD, &sa, NULL);

	rc = le_elector_start(e, err, sizeof(err));
	if (rc != LE_OK)
	{
		log_event("error", 0, NULL, NULL, "%s", err);
		fprintf(stderr, "%s: error: %s\n", progname, err);
		return rc == LE_ERR_NO_EXTENSION ? EXIT_NO_EXTENSION :
			rc == LE_ERR_CONNECT ? EXIT_CONNECT : EXIT_INTERNAL;
	}
	log_event("campaigning", 0, NULL, NULL, "ttl %" PRId64 "ms", o->ttl);

	if (o->no_wait)
	{
		le_elector_wait_attempt(e, o->connect_timeout + o->statement_timeout);
		if (!le_elector_is_leader(e, NULL))
		{
			le_status	st;

			le_elector_status(e, &st);
			le_elector_stop(e);
			log_event("not_acquired", 0, NULL, NULL, "held by %s",
					  st.holder[0] ? st.holder : "another owner");
			le_elector_destroy(e);
			return EXIT_NOT_ACQUIRED;
		}
	}

	for (;;)
	{
		le_lease_info info;
		bool		leading = le_elector_is_leader(e, &info);
		int64_t		now = le_monotonic_ms();
		int64_t		timeout = 1000;
		struct pollfd p;

		/* 1. Leadership gone (deadline, loss, new period): stop the child first. */
		if (child > 0 && !killing && (!leading || info.period != child_period))
		{
			log_event("stopping_command", child_token, NULL,
					  info.period == child_period && now >= info.deadline_ms ? "deadline_passed" : "leadership_ended",
					  "SIGTERM to process group %d, SIGKILL in %" PRId64 "ms", (int) child, o->grace);
			kill(-child, SIGTERM);
			kill(-child, SIGCONT);
			killing = true;
			child_lost = true;
			kill_at = now + o->grace;
		}
		/* 2. Our own SIGTERM/SIGINT/SIGHUP: stop the child, then release. */
		if (got_signal && child > 0 && !killing)
		{
			log_event("stopping_command", child_token, NULL, "shutdown",
					  "got signal %d; SIGTERM to process group %d", (int) got_signal, (int) child);
			kill(-child, SIGTERM);
			killing = true;
			kill_at = now + o->grace;
		}
		if (child > 0 && killing && !sigkill_sent && now >= kill_at)
		{
			log_event("killing_command", child_token, NULL, NULL,
					  "grace period over; SIGKILL to process group %d", (int) child);
			kill(-child, SIGKILL);
			sigkill_sent = true;
		}
		/* Pass renewals on to the watchdog; reap it when it has exited. */
		if (child > 0 && leading && info.period == child_period &&
			info.deadline_ms != watchdog_deadline)
		{
			tell_watchdog(watchdog_fd, info.deadline_ms);
			watchdog_deadline = info.deadline_ms;
		}
		if (watchdog > 0 && waitpid(watchdog, NULL, WNOHANG) == watchdog)
			watchdog = 0;
		/* 3. Reap. */
		if (child > 0)
		{
			int			st;
			pid_t		w = waitpid(child, &st, WNOHANG);

			if (w == child)
			{
				int			cs = child_status(st);

				tell_watchdog(watchdog_fd, WATCHDOG_EXIT);
				if (watchdog_fd >= 0)
					close(watchdog_fd);
				watchdog_fd = -1;
				/* make sure nothing of its group survives */
				kill(-child, SIGKILL);
				log_event("command_exited", child_token, NULL, NULL, "status %d", cs);
				child = 0;
				killing = false;
				sigkill_sent = false;
				if (got_signal)
					;			/* handled below */
				else if (child_lost)
				{
					if (!o->loop)
					{
						exit_status = EXIT_LOST;
						break;
					}
				}
				else if (!o->loop)
				{
					exit_status = cs;
					command_done = true;
					break;
				}
				else
					le_elector_resign(e);
				child_lost = false;
				continue;
			}
		}
		if (got_signal && child == 0)
		{
			exit_status = 128 + got_signal;
			break;
		}
		/* 4. Leading with no command running: start it. */
		if (child == 0 && leading && info.period != last_period)
		{
			last_period = info.period;
			child = start_child(o->command, &info);
			if (child < 0)
			{
				log_event("error", info.fencing_token, NULL, NULL, "fork: %s", strerror(errno));
				child = 0;
				exit_status = EXIT_INTERNAL;
				break;
			}
			child_period = info.period;
			child_token = info.fencing_token;
			child_lost = false;
			watchdog = start_watchdog(child, info.deadline_ms, o->grace, &watchdog_fd);
			if (watchdog < 0)
			{
				log_event("notice", info.fencing_token, NULL, NULL,
						  "could not start the watchdog: %s", strerror(errno));
				watchdog = 0;
				watchdog_fd = -1;
			}
			watchdog_deadline = info.deadline_ms;
			log_event("command_started", info.fencing_token, info.expires_at, NULL,
					  "pid %d: %s", (int) child, o->command[0]);
			continue;
		}
		else if (child == 0 && !leading && last_period > 0 && !o->loop)
		{
			/* lost between the command's start and ours noticing, without a child */
			exit_status = EXIT_LOST;
			break;
		}

		/* 5. Sleep until something happens, the deadline or the SIGKILL time. */
		if (leading && child > 0)
			timeout = info.deadline_ms - now + 1;
		if (killing && !sigkill_sent && kill_at - now < timeout)
			timeout = kill_at - now;
		if (child > 0 && timeout > 100)
			timeout = 100;		/* belt and braces for waitpid */
		if (timeout < 0)
			timeout = 0;
		p.fd = wake_pipe[0];
		p.events = POLLIN;
		if (poll(&p, 1, (int) timeout) > 0)
		{
			char		buf[64];

			while (read(wake_pipe[0], buf, sizeof(buf)) > 0)
				;
		}
	}

	if (watchdog > 0)
	{
		/* it was told to exit when the command ended; do not wait for a frozen one */
		for (int i = 0; i < 50 && waitpid(watchdog, NULL, WNOHANG) == 0; i++)
			poll(NULL, 0, 10);
	}
	if (command_done && le_elector_is_leader(e, NULL))
		le_elector_resign(e);
	le_elector_stop(e);
	le_elector_destroy(e);
	log_event("exit", 0, NULL, NULL, "status %d", exit_status);
	return exit_status;
}

/* Entry point: dispatch on the subcommand. */
int
main(int argc, char **argv)
{
	options		o;
	const char *cmd;

	if (argc < 2)
		usage_error("missing command (run, status or release)");
	cmd = argv[1];
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0)
	{
		help();
		return 0;
	}
	parse_options(argc - 1, argv + 1, &o);
	if (strcmp(cmd, "run") == 0)
		return cmd_run(&o);
	if (o.command[0] != NULL)
		usage_error("unexpected argument \"%s\"", o.command[0]);
	if (strcmp(cmd, "status") == 0)
		return cmd_status(&o);
	if (strcmp(cmd, "release") == 0)
		return cmd_release(&o);
	usage_error("unknown command \"%s\" (run, status or release)", cmd);
	return EXIT_USAGE;
}
