/*
 * le_probe.c: a test program for the client library, compiled by the TAP
 * tests test/t/11x_client_*.pl against src/client's header and static
 * library.  Uses only the API that existed before issue 8 in modes
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
 */
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

static void
d_stopped(void *a, const le_lease_info *l, le_stop_reason r, const char *d)
{
	int64_t		now = le_monotonic_ms();

	(void) a;
	(void) d;
	snprintf(stop_line, sizeof(stop_line), "stopped reason=%s late_ms=%lld",
			 le_stop_reason_name(r), (long long) (now - l->deadline_ms));
	atomic_store(&stopped_seen, 1);
}

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
		c.statement_timeout_ms = 300;
	c.on_stopped = d_stopped;
	c.on_renewed = d_renewed;
	e = le_elector_create(&c, err, sizeof(err));
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
	fprintf(stderr, "usage: le_probe order DSN KEY SECONDS | deadline DSN KEY | survive DSN KEY SECONDS\n");
	return 2;
}
