/*
 * le_group_probe.c: a test program for the group member of the client
 * library (le_group_member_*), compiled by test/t/146_client_group_api.pl
 * against src/client's header and static library.
 *
 *   le_group_probe DSN GROUP MEMBER SECONDS REVOKE_MS [defer]
 *		joins GROUP as MEMBER (ttl 2 s) for SECONDS, then stops (leaves).
 *		Prints "first heartbeat member=M token=T" once the first heartbeat
 *		was answered (le_group_member_wait_heartbeat, le_group_member_status),
 *		then, with the wall-clock time (epoch seconds):
 *		  "assigned P T TIME"         on_assigned of partition P, token T
 *		  "revoked P T REASON TIME"   entry of on_revoked
 *		  "returned P T TIME"         on_revoked returns, REVOKE_MS later
 *		With "defer" (defer_release): on_revoked returns at once and the
 *		main thread hands the partition back REVOKE_MS later:
 *		  "handed P T TIME"           le_group_member_release, called at
 *		                              TIME, returned true
 *		Checks per partition: on_assigned(T) first, on_revoked(T) once and
 *		after it, on_assigned of a later token only after on_revoked(T);
 *		never two callbacks at once; le_group_member_owns() false from
 *		on_revoked on.  Prints "problem: ..." lines, then "stopped", then
 *		"order ok" or "order FAILED".
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "le_client.h"

#define MAX_PARTS 64
#define MAX_PENDING 256

/* What the probe saw of one partition. */
typedef struct part_seen
{
	int64_t		token;			/* of the last on_assigned, 0: none */
	bool		revoked;		/* on_revoked of that token came */
} part_seen;

static le_group_member *member;
static part_seen seen[MAX_PARTS];
static atomic_int in_callback;
static atomic_int problems;
static int	revoke_ms;
static bool defer;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* Partitions to hand back (defer), with when. */
static struct
{
	int			partition;
	int64_t		token;
	int64_t		at;
}			pending[MAX_PENDING];
static int	n_pending;

/* Wall-clock time in epoch seconds, for comparison with the server's. */
static double
wall(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Sleep ms milliseconds. */
static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Report a broken rule. */
static void
problem(const char *what, int partition, int64_t token)
{
	printf("problem: %s (partition %d, token %lld)\n", what, partition, (long long) token);
	atomic_fetch_add(&problems, 1);
}

/* on_assigned: the previous token of the partition must have been revoked. */
static void
on_assigned(void *arg, const le_partition_info *p)
{
	(void) arg;
	if (atomic_fetch_add(&in_callback, 1) != 0)
		problem("two callbacks at once", p->partition, p->fencing_token);
	if (p->partition < 0 || p->partition >= MAX_PARTS)
		problem("partition out of range", p->partition, p->fencing_token);
	else
	{
		part_seen  *s = &seen[p->partition];

		if (s->token != 0 && !s->revoked)
			problem("assigned before the previous token was revoked", p->partition, p->fencing_token);
		if (p->fencing_token <= s->token)
			problem("token did not rise", p->partition, p->fencing_token);
		s->token = p->fencing_token;
		s->revoked = false;
	}
	printf("assigned %d %lld %.6f\n", p->partition, (long long) p->fencing_token, wall());
	atomic_fetch_sub(&in_callback, 1);
}

/* on_revoked: once per token, after its on_assigned; then (maybe) slow. */
static void
on_revoked(void *arg, const le_partition_info *p, le_stop_reason reason, const char *detail)
{
	(void) arg;
	(void) detail;
	if (atomic_fetch_add(&in_callback, 1) != 0)
		problem("two callbacks at once", p->partition, p->fencing_token);
	if (p->partition >= 0 && p->partition < MAX_PARTS)
	{
		part_seen  *s = &seen[p->partition];

		if (s->token != p->fencing_token || s->revoked)
			problem("revoked without its on_assigned, or twice", p->partition, p->fencing_token);
		s->revoked = true;
	}
	if (p->owned || le_group_member_owns(member, p->partition, NULL))
		problem("still owned in on_revoked", p->partition, p->fencing_token);
	printf("revoked %d %lld %s %.6f\n", p->partition, (long long) p->fencing_token,
		   le_stop_reason_name(reason), wall());
	if (defer)
	{
		pthread_mutex_lock(&mu);
		if (n_pending < MAX_PENDING)
		{
			pending[n_pending].partition = p->partition;
			pending[n_pending].token = p->fencing_token;
			pending[n_pending].at = le_monotonic_ms() + revoke_ms;
			n_pending++;
		}
		pthread_mutex_unlock(&mu);
	}
	else
	{
		sleep_ms(revoke_ms);
		printf("returned %d %lld %.6f\n", p->partition, (long long) p->fencing_token, wall());
	}
	atomic_fetch_sub(&in_callback, 1);
}

/* Hand back the partitions whose time has come (defer). */
static void
hand_back(void)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < n_pending; i++)
	{
		double		at;

		if (le_monotonic_ms() < pending[i].at)
			continue;
		at = wall();			/* before the call: the release may run at once */
		if (le_group_member_release(member, pending[i].partition, pending[i].token))
			printf("handed %d %lld %.6f\n", pending[i].partition, (long long) pending[i].token, at);
		pending[i--] = pending[--n_pending];
	}
	pthread_mutex_unlock(&mu);
}

/* See the file header. */
int
main(int argc, char **argv)
{
	le_group_config cfg;
	char		err[512];
	int64_t		end;

	if (argc < 6)
	{
		fprintf(stderr, "usage: le_group_probe DSN GROUP MEMBER SECONDS REVOKE_MS [defer]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	revoke_ms = atoi(argv[5]);
	defer = argc > 6 && strcmp(argv[6], "defer") == 0;
	le_group_config_init(&cfg);
	cfg.conninfo = argv[1];
	cfg.group_name = argv[2];
	cfg.member_id = argv[3];
	cfg.ttl_ms = 2000;
	cfg.defer_release = defer;
	cfg.on_assigned = on_assigned;
	cfg.on_revoked = on_revoked;
	member = le_group_member_create(&cfg, err, sizeof(err));
	if (member == NULL)
	{
		printf("create failed: %s\n", err);
		return 1;
	}
	if (le_group_member_start(member, err, sizeof(err)) != LE_OK)
	{
		printf("start failed: %s\n", err);
		return 1;
	}
	end = le_monotonic_ms() + 1000LL * atoi(argv[4]);
	if (le_group_member_wait_heartbeat(member, 10000))
	{
		le_group_status st;

		le_group_member_status(member, &st);
		printf("first heartbeat member=%d token=%lld last_error=%s id=%s\n", st.member,
			   (long long) st.member_token, le_result_name(st.last_error), le_group_member_id(member));
	}
	else
		problem("no heartbeat answered within 10 s", -1, 0);
	while (le_monotonic_ms() < end)
	{
		hand_back();
		sleep_ms(20);
	}
	le_group_member_stop(member);
	printf("stopped\n");
	for (int p = 0; p < MAX_PARTS; p++)
		if (seen[p].token != 0 && !seen[p].revoked)
			problem("assigned and never revoked (stop revokes everything)", p, seen[p].token);
	le_group_member_destroy(member);
	printf("order %s\n", atomic_load(&problems) == 0 ? "ok" : "FAILED");
	return 0;
}
