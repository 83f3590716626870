/*
 * le_probe.c: a test program for the client library, compiled by the TAP
 * tests test/t/11x_client_*.pl against src/client's header and static
 * library.  Uses only the library's oldest calls in modes
 * "order" and "deadline" (so that it can be run against old builds too).
 *
 *   le_probe order DSN KEY SECONDS
 *		two electors on KEY in this process, fast periods (ttl 400 ms),
 *		resigning at random; callbacks record their entry, sleep a little
 *		and check: one callback at a time per elector, on_started(N) only
 *		after on_stopped(N-1), on_renewed(N)/on_stopped(N) only within
 *		period N.  Prints "problem: ..." lines, then "order ok" or
 *		"order FAILED" and a count of events.
 *
 *   le_probe deadline DSN KEY
 *		lead with ttl 3 s, statement timeout 300 ms; prints "leading
 *		token=N"; then waits for on_stopped and prints "stopped
 *		reason=R late_ms=X" where X is the callback's entry time minus
 *		the period's local deadline.
 *
 *   le_probe survive DSN KEY SECONDS
 *		lead with ttl 3 s and the default statement timeout (5 s, longer
 *		than the ttl); prints "leading token=N", runs SECONDS, then prints
 *		"still leading token=N renewals=K" or the on_stopped line.
 *
 *   le_probe blockcb DSN KEY
 *		ttl 1 s; the first on_renewed callback blocks for 3 s (like a log
 *		write to a full pipe); prints "leading throughout" if the elector
 *		led for all of 3.5 s, else "not leading after X ms".
 *
 *   le_probe attempts DSN KEY SECONDS
 *		campaign SECONDS with a 100 ms retry interval; prints "attempts N".
 *
 * With LE_CLIENT_API_VERSION >= 2 only:
 *
 *   le_probe status DSN KEY
 *		one acquire attempt; prints "status leading=L last_error=NAME
 *		sqlstate=S conflicts=N".
 *
 *   le_probe owner DSN KEY OWNER SECONDS
 *		two electors with the same owner id; prints "leading a=L b=L
 *		conflicts a=N b=N".
 *
 *   le_probe api DSN KEY
 *		the period fd, on_new_leader for ourselves and for a free lease,
 *		control characters in owner ids; prints lines the test checks.
 *
 *   le_probe renewby DSN KEY TTL_MS RENEW_BY_MS
 *		creates (does not start) an elector with that ttl and renew_by_ms
 *		and the default renew interval; prints "created" or "refused: ...".
 */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "le_client.h"

typedef struct probe
{
	const char *name;
	atomic_int	inside;
	uint64_t	open_period;	/* period started and not stopped, 0 none */
	uint64_t	last_started;
	int			events;
	unsigned	seed;
	pthread_mutex_t mu;
} probe;

static atomic_int problems;
static atomic_int stopped_seen;
static le_elector *deadline_elector;	/* for le_elector_status in d_stopped */
static atomic_int renewals;
static char stop_line[256];

/* Sleep ms milliseconds. */
static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Report a broken rule. */
static void
problem(probe *p, const char *what, uint64_t period)
{
	printf("problem: %s: %s (period %llu, open %llu)\n", p->name, what,
		   (unsigned long long) period, (unsigned long long) p->open_period);
	fflush(stdout);
	atomic_fetch_add(&problems, 1);
}

/* Entry of every callback: no other callback of this elector may be running. */
static void
enter(probe *p)
{
	if (atomic_fetch_add(&p->inside, 1) != 0)
		problem(p, "two callbacks ran at the same time", 0);
}

/* Exit of every callback, after a random sleep of up to max_ms inside it. */
static void
leave(probe *p, int max_ms)
{
	int			ms;

	pthread_mutex_lock(&p->mu);
	ms = rand_r(&p->seed) % (max_ms + 1);
	p->events++;
	pthread_mutex_unlock(&p->mu);
	sleep_ms(ms);
	atomic_fetch_sub(&p->inside, 1);
}

/* Mode order: on_started. */
static void
o_started(void *a, const le_lease_info *l)
{
	probe	   *p = a;

	enter(p);
	pthread_mutex_lock(&p->mu);
	if (p->open_period != 0)
		problem(p, "on_started before on_stopped of the previous period", l->period);
	if (l->period <= p->last_started)
		problem(p, "period numbers did not rise", l->period);
	p->open_period = l->period;
	p->last_started = l->period;
	pthread_mutex_unlock(&p->mu);
	leave(p, 5);
}

/* Mode order: on_renewed (slow). */
static void
o_renewed(void *a, const le_lease_info *l)
{
	probe	   *p = a;

	enter(p);
	pthread_mutex_lock(&p->mu);
	if (p->open_period != l->period)
		problem(p, "on_renewed outside its period", l->period);
	pthread_mutex_unlock(&p->mu);
	leave(p, 40);				/* a slow renewal callback, e.g. logging to a full pipe */
}

/* Mode order: on_stopped. */
static void
o_stopped(void *a, const le_lease_info *l, le_stop_reason r, const char *d)
{
	probe	   *p = a;

	(void) r;
	(void) d;
	enter(p);
	pthread_mutex_lock(&p->mu);
	if (p->open_period != l->period)
		problem(p, "on_stopped of a period that is not open", l->period);
	p->open_period = 0;
	pthread_mutex_unlock(&p->mu);
	leave(p, 5);
}

/* Mode order: on_new_leader. */
static void
o_new_leader(void *a, const char *h, int64_t t, const char *x)
{
	probe	   *p = a;

	(void) h;
	(void) t;
	(void) x;
	enter(p);
	leave(p, 5);
}

/* Mode "order". */
static int
run_order(const char *dsn, const char *key, int seconds)
{
	probe		pr[2] = {{.name = "A", .seed = 1}, {.name = "B", .seed = 2}};
	le_elector *e[2];
	char		err[512];
	time_t		end = time(NULL) + seconds;
	unsigned	seed = 7;
	int			resigns = 0;

	for (int i = 0; i < 2; i++)
	{
		le_config	c;

		pthread_mutex_init(&pr[i].mu, NULL);
		le_config_init(&c);
		c.conninfo = dsn;
		c.lease_key = key;
		c.ttl_ms = 400;
		c.retry_ms = 30;
		c.on_started = o_started;
		c.on_renewed = o_renewed;
		c.on_stopped = o_stopped;
		c.on_new_leader = o_new_leader;
		c.cb_arg = &pr[i];
		e[i] = le_elector_create(&c, err, sizeof(err));
		if (e[i] == NULL || le_elector_start(e[i], err, sizeof(err)) != LE_OK)
		{
			printf("error: %s\n", err);
			return 2;
		}
	}
	while (time(NULL) < end)
	{
		int			i = rand_r(&seed) % 2;

		sleep_ms(20 + rand_r(&seed) % 150);
		if (le_elector_is_leader(e[i], NULL))
		{
			le_elector_resign(e[i]);
			resigns++;
		}
	}
	for (int i = 0; i < 2; i++)
	{
		le_elector_stop(e[i]);
		if (pr[i].open_period != 0)
			problem(&pr[i], "a period still open after le_elector_stop", pr[i].open_period);
	}
	printf("events %d %d periods %llu %llu resigns %d\n", pr[0].events, pr[1].events,
		   (unsigned long long) pr[0].last_started, (unsigned long long) pr[1].last_started,
		   resigns);
	printf("order %s\n", atomic_load(&problems) == 0 ? "ok" : "FAILED");
	for (int i = 0; i < 2; i++)
		le_elector_destroy(e[i]);
	return atomic_load(&problems) == 0 ? 0 : 1;
}

/* Modes deadline/survive: on_stopped, with its lateness. */
static void
d_stopped(void *a, const le_lease_info *l, le_stop_reason r, const char *d)
{
	int64_t		now = le_monotonic_ms();

	(void) a;
	(void) d;
	snprintf(stop_line, sizeof(stop_line), "stopped reason=%s late_ms=%lld",
			 le_stop_reason_name(r), (long long) (now - l->deadline_ms));
#if defined(LE_CLIENT_API_VERSION) && LE_CLIENT_API_VERSION >= 2
	{
		le_status	st;

		le_elector_status(deadline_elector, &st);
		snprintf(stop_line + strlen(stop_line), sizeof(stop_line) - strlen(stop_line),
				 " last_error=%s", le_result_name(st.last_error));
	}
#endif
	atomic_store(&stopped_seen, 1);
}

/* Modes deadline/survive: count renewals. */
static void
d_renewed(void *a, const le_lease_info *l)
{
	(void) a;
	(void) l;
	atomic_fetch_add(&renewals, 1);
}

/* Mode "deadline" (survive_s 0) or "survive". */
static int
run_deadline(const char *dsn, const char *key, int survive_s)
{
	le_config	c;
	le_elector *e;
	le_lease_info l;
	char		err[512];

	le_config_init(&c);
	c.conninfo = dsn;
	c.lease_key = key;
	c.ttl_ms = 3000;
	c.safety_margin_ms = 300;
	c.renew_ms = 900;
	if (survive_s == 0)
	{
		c.statement_timeout_ms = 300;
		/*
		 * d_stopped reads last_error: without this the campaign thread may
		 * already have acquired again (LE_OK) before the callback runs.
		 */
#if defined(LE_CLIENT_API_VERSION) && LE_CLIENT_API_VERSION >= 3
		c.defer_release = true;
#endif
	}
	c.on_stopped = d_stopped;
	c.on_renewed = d_renewed;
	e = le_elector_create(&c, err, sizeof(err));
	deadline_elector = e;
	if (e == NULL || le_elector_start(e, err, sizeof(err)) != LE_OK)
	{
		printf("error: %s\n", err);
		return 2;
	}
	if (!le_elector_wait_leader(e, 20000) || !le_elector_is_leader(e, &l))
	{
		printf("error: not leading\n");
		return 2;
	}
	printf("leading token=%lld\n", (long long) l.fencing_token);
	fflush(stdout);
	for (int i = 0; i < (survive_s ? survive_s * 100 : 3000) && !atomic_load(&stopped_seen); i++)
		sleep_ms(10);
	if (atomic_load(&stopped_seen))
		printf("%s\n", stop_line);
	else if (survive_s && le_elector_is_leader(e, &l))
		printf("still leading token=%lld renewals=%d\n", (long long) l.fencing_token,
			   atomic_load(&renewals));
	else
		printf("no on_stopped within 30 s\n");
	fflush(stdout);
	le_elector_stop(e);
	le_elector_destroy(e);
	return 0;
}

static atomic_int block_once;

/* Mode blockcb: the first on_renewed blocks for 3 s. */
static void
b_renewed(void *a, const le_lease_info *l)
{
	(void) a;
	(void) l;
	if (atomic_fetch_add(&block_once, 1) == 0)
		sleep_ms(3000);
}

/* Mode "blockcb". */
static int
run_blockcb(const char *dsn, const char *key)
{
	le_config	c;
	le_elector *e;
	char		err[512];
	int64_t		t0;

	le_config_init(&c);
	c.conninfo = dsn;
	c.lease_key = key;
	c.ttl_ms = 1000;
	c.renew_ms = 300;
	c.on_renewed = b_renewed;
	e = le_elector_create(&c, err, sizeof(err));
	if (e == NULL || le_elector_start(e, err, sizeof(err)) != LE_OK ||
		!le_elector_wait_leader(e, 20000))
	{
		printf("error: %s\n", err);
		return 2;
	}
	t0 = le_monotonic_ms();
	while (le_monotonic_ms() - t0 < 3500)
	{
		if (!le_elector_is_leader(e, NULL))
		{
			printf("not leading after %lld ms\n", (long long) (le_monotonic_ms() - t0));
			break;
		}
		sleep_ms(20);
	}
	if (le_monotonic_ms() - t0 >= 3500)
		printf("leading throughout\n");
	le_elector_stop(e);
	le_elector_destroy(e);
	return 0;
}

#if defined(LE_CLIENT_API_VERSION) && LE_CLIENT_API_VERSION >= 3
/* Mode "renewby": is an elector with this ttl and renew_by_ms and the default renew accepted? */
static int
run_renewby(const char *dsn, const char *key, long long ttl, long long renew_by)
{
	le_config	c;
	le_elector *e;
	char		err[512];

	le_config_init(&c);
	c.conninfo = dsn;
	c.lease_key = key;
	c.ttl_ms = ttl;
	c.renew_by_ms = renew_by;
	e = le_elector_create(&c, err, sizeof(err));
	if (e == NULL)
	{
		printf("refused: %s\n", err);
		return 1;
	}
	printf("created\n");
	le_elector_destroy(e);
	return 0;
}
#endif

/* Mode "attempts". */
static int
run_attempts(const char *dsn, const char *key, int seconds)
{
	le_config	c;
	le_elector *e;
	le_status	st;
	char		err[512];

	le_config_init(&c);
	c.conninfo = dsn;
	c.lease_key = key;
	c.retry_ms = 100;
	e = le_elector_create(&c, err, sizeof(err));
	if (e == NULL || le_elector_start(e, err, sizeof(err)) != LE_OK)
	{
		printf("error: %s\n", err);
		return 2;
	}
	sleep_ms(seconds * 1000);
	le_elector_status(e, &st);
	printf("attempts %llu\n", (unsigned long long) st.attempts);
	le_elector_stop(e);
	le_elector_destroy(e);
	return 0;
}

#if defined(LE_CLIENT_API_VERSION) && LE_CLIENT_API_VERSION >= 2

/* Mode "status". */
static int
run_status(const char *dsn, const char *key)
{
	le_config	c;
	le_elector *e;
	le_status	st;
	char		err[512];

	le_config_init(&c);
	c.conninfo = dsn;
	c.lease_key = key;
	c.retry_ms = 100;
	c.statement_timeout_ms = 2000;
	e = le_elector_create(&c, err, sizeof(err));
	if (e == NULL || le_elector_start(e, err, sizeof(err)) != LE_OK)
	{
		printf("error: %s\n", err);
		return 2;
	}
	le_elector_wait_attempt(e, 10000);
	le_elector_status(e, &st);
	printf("status leading=%d last_error=%s sqlstate=%s conflicts=%llu\n", st.leading,
		   le_result_name(st.last_error), st.last_sqlstate[0] ? st.last_sqlstate : "-",
		   (unsigned long long) st.owner_conflicts);
	printf("message %s\n", st.last_message);
	le_elector_stop(e);
	le_elector_destroy(e);
	return 0;
}

/* Mode "owner". */
static int
run_owner(const char *dsn, const char *key, const char *owner, int seconds)
{
	le_elector *e[2];
	le_status	st[2];
	char		err[512];
	int			both = 0;

	for (int i = 0; i < 2; i++)
	{
		le_config	c;

		le_config_init(&c);
		c.conninfo = dsn;
		c.lease_key = key;
		c.owner_id = owner;
		c.ttl_ms = 2000;
		c.retry_ms = 100;
		e[i] = le_elector_create(&c, err, sizeof(err));
		if (e[i] == NULL || le_elector_start(e[i], err, sizeof(err)) != LE_OK)
		{
			printf("error: %s\n", err);
			return 2;
		}
		if (i == 0 && !le_elector_wait_leader(e[0], 20000))
		{
			printf("error: a does not lead\n");
			return 2;
		}
	}
	for (int t = 0; t < seconds * 50; t++)
	{
		if (le_elector_is_leader(e[0], NULL) && le_elector_is_leader(e[1], NULL))
			both++;
		sleep_ms(20);
	}
	for (int i = 0; i < 2; i++)
		le_elector_status(e[i], &st[i]);
	printf("leading a=%d b=%d both=%d conflicts a=%llu b=%llu last_error b=%s\n",
		   st[0].leading, st[1].leading, both,
		   (unsigned long long) st[0].owner_conflicts, (unsigned long long) st[1].owner_conflicts,
		   le_result_name(st[1].last_error));
	for (int i = 0; i < 2; i++)
	{
		le_elector_stop(e[i]);
		le_elector_destroy(e[i]);
	}
	return 0;
}

static pthread_mutex_t nl_mu = PTHREAD_MUTEX_INITIALIZER;
static char nl_log[4096];

/* Mode api: log on_new_leader calls. */
static void
a_new_leader(void *a, const char *holder, int64_t token, const char *x)
{
	char		line[512];

	(void) x;
	snprintf(line, sizeof(line), "%s:new_leader=%s:%lld|", (const char *) a,
			 holder ? holder : "(free)", (long long) token);
	pthread_mutex_lock(&nl_mu);
	if (strlen(nl_log) + strlen(line) < sizeof(nl_log))
		strcat(nl_log, line);
	pthread_mutex_unlock(&nl_mu);
}

/* Mode "api". */
static int
run_api(const char *dsn, const char *key)
{
	le_elector *a,
			   *b;
	le_config	c;
	char		err[512];
	int			fd;
	struct pollfd p;
	le_lease_info l;

	le_config_init(&c);
	c.conninfo = dsn;
	c.lease_key = key;
	c.ttl_ms = 3000;
	c.retry_ms = 100;
	c.owner_id = "evil\nowner";
	c.on_new_leader = a_new_leader;
	c.cb_arg = "a";
	a = le_elector_create(&c, err, sizeof(err));
	if (a == NULL || le_elector_start(a, err, sizeof(err)) != LE_OK || !le_elector_wait_leader(a, 20000))
	{
		printf("error: %s\n", err);
		return 2;
	}
	fd = le_elector_period_fd(a, &l);
	printf("period fd valid %d period %llu\n", fd >= 0, (unsigned long long) l.period);
	p.fd = fd;
	p.events = POLLIN;
	printf("readable while leading %d\n", poll(&p, 1, 200));

	c.owner_id = "observer";
	c.retry_ms = 60000;			/* only notifications make it campaign */
	c.cb_arg = "b";
	b = le_elector_create(&c, err, sizeof(err));
	if (b == NULL || le_elector_start(b, err, sizeof(err)) != LE_OK)
	{
		printf("error: %s\n", err);
		return 2;
	}
	le_elector_wait_attempt(b, 10000);
	sleep_ms(300);
	le_elector_request_stop(a);
	printf("readable after request_stop %d leading %d\n", poll(&p, 1, 1000),
		   le_elector_is_leader(a, NULL));
	close(fd);
	printf("fd after the period: %d\n", le_elector_period_fd(a, NULL));
	le_elector_stop(a);
	printf("b leads %d\n", le_elector_wait_leader(b, 10000));
	sleep_ms(300);
	le_elector_stop(b);
	pthread_mutex_lock(&nl_mu);
	printf("log %s\n", nl_log);
	pthread_mutex_unlock(&nl_mu);
	le_elector_destroy(a);
	le_elector_destroy(b);
	{
		PGconn	   *conn;
		PGresult   *r;
		bool		timedout = false;
		int64_t		t0;

		if (le_connect(dsn, "probe", 5000, &conn, NULL, 0, err, sizeof(err)) != LE_OK)
		{
			printf("error: %s\n", err);
			return 2;
		}
		t0 = le_monotonic_ms();
		r = le_exec(conn, "SELECT pg_catalog.pg_sleep(5)", 0, NULL, 300, err, sizeof(err), &timedout);
		printf("le_exec of a 5 s sleep with a 300 ms timeout: result %d timedout %d within %d\n",
			   r != NULL, timedout, le_monotonic_ms() - t0 < 1500);
		PQclear(r);
		PQfinish(conn);
	}
	return 0;
}
#endif

/* Entry point. */
int
main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 5 && strcmp(argv[1], "order") == 0)
		return run_order(argv[2], argv[3], atoi(argv[4]));
	if (argc >= 4 && strcmp(argv[1], "deadline") == 0)
		return run_deadline(argv[2], argv[3], 0);
	if (argc >= 5 && strcmp(argv[1], "survive") == 0)
		return run_deadline(argv[2], argv[3], atoi(argv[4]));
	if (argc >= 4 && strcmp(argv[1], "blockcb") == 0)
		return run_blockcb(argv[2], argv[3]);
	if (argc >= 5 && strcmp(argv[1], "attempts") == 0)
		return run_attempts(argv[2], argv[3], atoi(argv[4]));
#if defined(LE_CLIENT_API_VERSION) && LE_CLIENT_API_VERSION >= 3
	if (argc >= 6 && strcmp(argv[1], "renewby") == 0)
		return run_renewby(argv[2], argv[3], atoll(argv[4]), atoll(argv[5]));
#endif
#if defined(LE_CLIENT_API_VERSION) && LE_CLIENT_API_VERSION >= 2
	if (argc >= 4 && strcmp(argv[1], "status") == 0)
		return run_status(argv[2], argv[3]);
	if (argc >= 6 && strcmp(argv[1], "owner") == 0)
		return run_owner(argv[2], argv[3], argv[4], atoi(argv[5]));
	if (argc >= 4 && strcmp(argv[1], "api") == 0)
		return run_api(argv[2], argv[3]);
#endif
	fprintf(stderr, "usage: le_probe MODE DSN KEY ... (see the file header)\n");
	return 2;
}
