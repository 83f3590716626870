/*-------------------------------------------------------------------------
 *
 * le_conn.c
 *		Connections and statements with client-side deadlines: libpq in
 *		non-blocking mode, every wait a poll() bounded by a deadline on
 *		le_monotonic_ms() (CLOCK_BOOTTIME), re-checked every slice.
 *
 * Locking rules: none; a connection is used by one thread at a time.
 *
 * Deadlines are absolute le_monotonic_ms() times.  A statement that misses
 * its deadline abandons its connection (the caller must PQfinish it and
 * reconnect): statement_timeout on the server cannot end every kind of
 * wait.  Host names are resolved inside libpq without a timeout; the
 * elector's deadline timer does not depend on it (see le_period.c).
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "le_internal.h"

/* Longest single poll(): the BOOTTIME deadline is re-read after each slice. */
#define LE_POLL_SLICE_MS	250

/* Number of connection keywords we may add to the DSN. */
#define LE_MAX_KW	10

/* Wait until fd is ready or the deadline passes: 1 ready, 0 timeout, -1 error. */
int
le_wait_fd(int fd, bool for_write, int64_t deadline)
{
	if (fd < 0)
		return -1;
	for (;;)
	{
		struct pollfd p = {.fd = fd, .events = for_write ? POLLOUT : POLLIN};
		int64_t		left = deadline - le_monotonic_ms();
		int			rc;

		if (left <= 0)
			return 0;
		rc = poll(&p, 1, left > LE_POLL_SLICE_MS ? LE_POLL_SLICE_MS : (int) left);
		if (rc > 0)
			return 1;
		if (rc < 0 && errno != EINTR)
			return -1;
	}
}

/* Is keyword kw given a non-empty value in the parsed DSN? */
static bool
dsn_has(PQconninfoOption *opts, const char *kw)
{
	for (PQconninfoOption *o = opts; o && o->keyword; o++)
		if (strcmp(o->keyword, kw) == 0)
			return o->val != NULL && o->val[0] != '\0';
	return false;
}

/* Value of keyword kw in the parsed DSN, NULL if none. */
static const char *
dsn_get(PQconninfoOption *opts, const char *kw)
{
	for (PQconninfoOption *o = opts; o && o->keyword; o++)
		if (strcmp(o->keyword, kw) == 0)
			return o->val && o->val[0] ? o->val : NULL;
	return NULL;
}

/*
 * Value of key in section [service] of one service file; true if the file
 * has that section (found, even without the key), as libpq stops at the
 * first file that has it.
 */
static bool
service_file_get(const char *file, const char *service, const char *key, char *out, size_t len,
				 bool *got)
{
	FILE	   *f = fopen(file, "re");
	char		line[1024];
	bool		in = false,
				found = false;

	*got = false;
	if (f == NULL)
		return false;
	while (fgets(line, sizeof(line), f) != NULL)
	{
		char	   *p = line,
				   *e,
				   *eq;

		while (*p == ' ' || *p == '\t')
			p++;
		e = p + strlen(p);
		while (e > p && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
			*--e = '\0';
		if (*p == '\0' || *p == '#')
			continue;
		if (*p == '[')
		{
			if (in)
				break;
			in = e - p >= 2 && e[-1] == ']' && (size_t) (e - p - 2) == strlen(service) &&
				strncmp(p + 1, service, strlen(service)) == 0;
			found = found || in;
			continue;
		}
		if (!in || (eq = strchr(p, '=')) == NULL)
			continue;
		*eq = '\0';
		if (strcmp(p, key) == 0)
		{
			le_copy_str(out, len, eq + 1);
			*got = true;
		}
	}
	fclose(f);
	return found;
}

/*
 * Value of key for service "service" as libpq finds it (PGSERVICEFILE or
 * ~/.pg_service.conf, else PGSYSCONFDIR/pg_service.conf), or NULL.
 */
static const char *
service_get(const char *service, const char *key, char *out, size_t len)
{
	char		path[1024];
	const char *f = getenv("PGSERVICEFILE");
	const char *home = getenv("HOME");
	const char *sys = getenv("PGSYSCONFDIR");
	bool		got;

	if (service == NULL || service[0] == '\0')
		return NULL;
	if (f == NULL && home != NULL)
	{
		snprintf(path, sizeof(path), "%s/.pg_service.conf", home);
		f = path;
	}
	if (f != NULL && service_file_get(f, service, key, out, len, &got))
		return got && out[0] ? out : NULL;
	if (sys != NULL)
	{
		snprintf(path, sizeof(path), "%s/pg_service.conf", sys);
		if (service_file_get(path, service, key, out, len, &got))
			return got && out[0] ? out : NULL;
	}
	return NULL;
}

/* Free arrays made by le_build_conn_params. */
void
le_free_conn_params(const char **kw, const char **val)
{
	if (val)
		for (int i = 0; i < LE_MAX_KW; i++)
			free((char *) val[i]);
	free(kw);
	free(val);
}

/*
 * Build the keyword arrays of the elector's connections: the DSN (expanded
 * from "dbname"), a slot for fallback_application_name (index 1, filled at
 * connect time), and defaults the DSN does not set itself:
 * target_session_attrs=read-write when several hosts are listed, TCP
 * keepalives and tcp_user_timeout so that a dead peer is noticed within
 * about half the ttl.
 */
le_result
le_build_conn_params(const char *conninfo, int64_t ttl_ms, int64_t stmt_ms,
					 const char ***kwp, const char ***valp, char *err, size_t errlen)
{
	PQconninfoOption *opts = NULL;
	const char **kw = calloc(LE_MAX_KW + 1, sizeof(char *));
	const char **val = calloc(LE_MAX_KW + 1, sizeof(char *));
	const char *hosts;
	int			n = 0;
	char		buf[32];
	char		s_host[1024];
	int64_t		user_timeout;
	bool		ok = true;

	*kwp = NULL;
	*valp = NULL;
	if (kw == NULL || val == NULL)
		goto nomem;
	if (conninfo[0])
	{
		char	   *perr = NULL;

		opts = PQconninfoParse(conninfo, &perr);
		if (opts == NULL)
		{
			char		m[400];

			le_copy_msg(m, sizeof(m), perr ? perr : "out of memory");
			le_set_err(err, errlen, "invalid connection string: %s", m);
			PQfreemem(perr);
			le_free_conn_params(kw, val);
			return perr ? LE_ERR_CONFIG : LE_ERR_SYSTEM;
		}
	}
#define ADD(k, v) do { kw[n] = (k); val[n] = strdup(v); ok = ok && val[n] != NULL; n++; } while (0)
	ADD("dbname", conninfo);
	ADD("fallback_application_name", "pg_leader");
	hosts = dsn_get(opts, "host");
	if (hosts == NULL)
		hosts = dsn_get(opts, "hostaddr");
	if (hosts == NULL && !dsn_has(opts, "hostaddr"))
	{
		const char *service = dsn_get(opts, "service");

		if (service == NULL)
			service = getenv("PGSERVICE");
		hosts = service_get(service, "host", s_host, sizeof(s_host));
		if (hosts == NULL)
			hosts = service_get(service, "hostaddr", s_host, sizeof(s_host));
	}
	if (hosts == NULL && !dsn_has(opts, "hostaddr"))
		hosts = getenv("PGHOST");
	if (hosts && strchr(hosts, ',') && !dsn_has(opts, "target_session_attrs") &&
		getenv("PGTARGETSESSIONATTRS") == NULL)
		ADD("target_session_attrs", "read-write");
	user_timeout = ttl_ms / 2;
	if (user_timeout > stmt_ms)
		user_timeout = stmt_ms;
	if (user_timeout < 1000)
		user_timeout = 1000;
	if (!dsn_has(opts, "keepalives_idle"))
	{
		snprintf(buf, sizeof(buf), "%" PRId64, user_timeout / 2000 > 0 ? user_timeout / 2000 : 1);
		ADD("keepalives_idle", buf);
	}
	if (!dsn_has(opts, "keepalives_interval"))
		ADD("keepalives_interval", "1");
	if (!dsn_has(opts, "keepalives_count"))
		ADD("keepalives_count", "3");
	if (!dsn_has(opts, "tcp_user_timeout"))
	{
		snprintf(buf, sizeof(buf), "%" PRId64, user_timeout);
		ADD("tcp_user_timeout", buf);
	}
#undef ADD
	PQconninfoFree(opts);
	if (!ok)
		goto nomem;
	*kwp = kw;
	*valp = val;
	return LE_OK;

nomem:
	le_set_err(err, errlen, "out of memory");
	le_free_conn_params(kw, val);
	return LE_ERR_SYSTEM;
}

/*
 * Open a connection to what kw/val name, before deadline, in non-blocking
 * mode.  NULL with a message on failure; *timedout tells whether the
 * deadline passed.
 */
static PGconn *
connect_until(const char *const *kw, const char *const *val, int64_t deadline,
			  char *err, size_t errlen, bool *timedout)
{
	PostgresPollingStatusType st = PGRES_POLLING_WRITING;
	PGconn	   *c;

	*timedout = false;
	c = PQconnectStartParams(kw, val, 1);
	if (c == NULL)
	{
		le_set_err(err, errlen, "out of memory");
		return NULL;
	}
	if (PQstatus(c) == CONNECTION_BAD)
	{
		le_copy_msg(err, errlen, PQerrorMessage(c));
		PQfinish(c);
		return NULL;
	}
	while (st != PGRES_POLLING_OK)
	{
		int			rc;

		if (st == PGRES_POLLING_FAILED)
		{
			le_copy_msg(err, errlen, PQerrorMessage(c));
			PQfinish(c);
			return NULL;
		}
		rc = le_wait_fd(PQsocket(c), st == PGRES_POLLING_WRITING, deadline);
		if (rc == 0)
		{
			*timedout = true;
			le_set_err(err, errlen, "connection timed out");
			PQfinish(c);
			return NULL;
		}
		if (rc < 0)
		{
			le_set_err(err, errlen, "poll failed on the connection's socket");
			PQfinish(c);
			return NULL;
		}
		st = PQconnectPoll(c);
	}
	if (PQsetnonblocking(c, 1) != 0)
	{
		le_copy_msg(err, errlen, PQerrorMessage(c));
		PQfinish(c);
		return NULL;
	}
	return c;
}

/*
 * Bounded host name resolution.  getaddrinfo cannot be interrupted and a
 * resolver that gets no answer blocks for its own timeouts and retries
 * (20 s and more), so each lookup runs in a detached thread; the caller
 * waits for it until its deadline and then abandons it (the thread frees
 * the shared state when it ends).
 */
typedef struct le_lookup
{
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int			refs;			/* the thread and the waiter */
	bool		done;
	int			rc;				/* getaddrinfo's result */
	char		addrs[2048];	/* numeric addresses, comma-separated */
	int			naddrs;
	char		name[256];
} le_lookup;

#define LE_MAX_ADDRS 8

static void
lookup_unref(le_lookup *l)
{
	bool		last;

	pthread_mutex_lock(&l->mu);
	last = --l->refs == 0;
	pthread_mutex_unlock(&l->mu);
	if (last)
	{
		pthread_mutex_destroy(&l->mu);
		pthread_cond_destroy(&l->cv);
		free(l);
	}
}

static void *
lookup_main(void *arg)
{
	le_lookup  *l = arg;
	struct addrinfo hints,
			   *res = NULL;
	char		buf[2048] = "";
	int			n = 0;
	int			rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	rc = getaddrinfo(l->name, NULL, &hints, &res);
	for (struct addrinfo *a = res; rc == 0 && a != NULL && n < LE_MAX_ADDRS; a = a->ai_next)
	{
		char		ip[NI_MAXHOST];
		bool		seen = false;

		if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
			continue;
		/* numeric, with an IPv6 zone ("%eth0") that a link-local one needs */
		if (getnameinfo(a->ai_addr, a->ai_addrlen, ip, sizeof(ip), NULL, 0,
						NI_NUMERICHOST) != 0)
			continue;
		/* the same address once (one per socket type is asked, but be sure) */
		for (const char *p = buf; *p && !seen; p += strcspn(p, ","), p += *p == ',')
			seen = strncmp(p, ip, strlen(ip)) == 0 && (p[strlen(ip)] == ',' || p[strlen(ip)] == '\0');
		if (seen)
			continue;
		snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%s%s", n ? "," : "", ip);
		n++;
	}
	if (res)
		freeaddrinfo(res);
	pthread_mutex_lock(&l->mu);
	l->rc = rc != 0 ? rc : n == 0 ? EAI_NONAME : 0;
	memcpy(l->addrs, buf, sizeof(buf));
	l->naddrs = n;
	l->done = true;
	pthread_cond_broadcast(&l->cv);
	pthread_mutex_unlock(&l->mu);
	lookup_unref(l);
	return NULL;
}

/* Does this host entry need a DNS lookup (a name, not a path or an IP)? */
static bool
host_is_name(const char *h)
{
	unsigned char b[sizeof(struct in6_addr)];

	if (h == NULL || h[0] == '\0' || h[0] == '/' || h[0] == '@')
		return false;
	return inet_pton(AF_INET, h, b) != 1 && inet_pton(AF_INET6, h, b) != 1;
}

/*
 * Resolve host name "name" before deadline.  On success fills hosts with
 * the name repeated once per address and addrs with the addresses (both
 * comma-separated, for libpq's host= and hostaddr=: libpq then tries them
 * in order and still sees the name for TLS checks and .pgpass) and returns
 * true.  Else false with a message, *timedout set when the deadline passed.
 */
static bool
resolve_bounded(const char *name, int64_t deadline, char *hosts, size_t hlen,
				char *addrs, size_t alen, char *err, size_t errlen, bool *timedout)
{
	le_lookup  *l = calloc(1, sizeof(le_lookup));
	pthread_attr_t attr;
	pthread_condattr_t ca;
	pthread_t	th;
	sigset_t	all,
				old;
	bool		started;
	bool		ok = false;

	*timedout = false;
	if (l == NULL)
	{
		le_set_err(err, errlen, "out of memory");
		return false;
	}
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, &ca);
	pthread_condattr_destroy(&ca);
	le_copy_str(l->name, sizeof(l->name), name);
	l->refs = 2;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	/* a library thread: every signal blocked in it from its start */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	started = pthread_create(&th, &attr, lookup_main, l) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!started)
	{
		pthread_attr_destroy(&attr);
		l->refs = 1;
		lookup_unref(l);
		le_set_err(err, errlen, "could not start a thread to resolve host name \"%s\"", name);
		return false;
	}
	pthread_attr_destroy(&attr);
	pthread_mutex_lock(&l->mu);
	while (!l->done)
	{
		int64_t		left = deadline - le_monotonic_ms();
		struct timespec ts;

		if (left <= 0)
			break;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += left / 1000;
		ts.tv_nsec += (left % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000)
		{
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		(void) pthread_cond_timedwait(&l->cv, &l->mu, &ts);
	}
	if (!l->done)
	{
		*timedout = true;
		le_set_err(err, errlen, "timeout expired while resolving host name \"%s\"", name);
	}
	else if (l->rc != 0)
		le_set_err(err, errlen, "could not translate host name \"%s\" to address: %s",
				   name, gai_strerror(l->rc));
	else
	{
		hosts[0] = '\0';
		for (int i = 0; i < l->naddrs; i++)
			snprintf(hosts + strlen(hosts), hlen - strlen(hosts), "%s%s", i ? "," : "", name);
		le_copy_str(addrs, alen, l->addrs);
		ok = true;
	}
	pthread_mutex_unlock(&l->mu);
	lookup_unref(l);
	return ok;
}

/* Item i of a comma-separated libpq list (its only item if it has one), or NULL. */
static const char *
list_item(const char *list, int i, char *buf, size_t len)
{
	const char *p = list;
	size_t		n;

	if (list == NULL || list[0] == '\0')
		return NULL;
	if (strchr(list, ',') != NULL)
		for (; i > 0 && p != NULL; i--)
		{
			p = strchr(p, ',');
			if (p != NULL)
				p++;
		}
	if (p == NULL)
		return NULL;
	n = strcspn(p, ",");
	if (n >= len)
		n = len - 1;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return buf;
}

/* Number of items of a comma-separated list (0 for NULL or ""). */
static int
list_len(const char *list)
{
	int			n = 1;

	if (list == NULL || list[0] == '\0')
		return 0;
	for (const char *p = list; (p = strchr(p, ',')) != NULL; p++)
		n++;
	return n;
}

/*
 * Open a connection before deadline with the given keyword arrays (the
 * DSN expanded from the first "dbname" entry), in non-blocking mode.  NULL
 * with a message on failure; *timedout (if not NULL) tells whether the
 * deadline passed.
 *
 * libpq ignores connect_timeout in non-blocking connects (PQconnectPoll),
 * so with several hosts (host=a,b target_session_attrs=read-write) a first
 * host that accepts TCP connections but never answers, such as a frozen
 * primary, would use up the whole time and the next hosts would never be
 * tried.  So the hosts are tried one at a time: host, hostaddr and port
 * entries naming one item of each list are appended after the expanded
 * DSN (later entries override earlier ones), each try bounded by the DSN's
 * connect_timeout when set (at least 2 s, as libpq does) or else by an
 * equal share of the time left, and all of them by deadline.
 */
PGconn *
le_connect_params(const char *const *kw, const char *const *val, int64_t deadline,
				  char *err, size_t errlen, bool *timedout)
{
	PQconninfoOption *opts = NULL;
	const char *hosts = NULL,
			   *addrs = NULL,
			   *ports = NULL,
			   *ct = NULL;
	const char *kw2[LE_MAX_KW + 4];
	const char *val2[LE_MAX_KW + 4];
	char		host[256],
				addr[256],
				port[64],
				rhosts[2304],
				raddrs[2048],
				s_host[1024],
				s_addr[1024],
				s_port[256],
				s_ct[32];
	const char *service;
	int			nkw = 0,
				nhosts;
	int64_t		per_host = 0;
	bool		dummy;
	PGconn	   *c = NULL;

	if (timedout == NULL)
		timedout = &dummy;
	while (kw[nkw] != NULL && nkw < LE_MAX_KW)
		nkw++;
	if (nkw > 0 && strcmp(kw[0], "dbname") == 0 && val[0] != NULL && val[0][0] != '\0')
		opts = PQconninfoParse(val[0], NULL);
	/* a DSN without them takes them from the environment, as libpq does */
	hosts = opts ? dsn_get(opts, "host") : NULL;
	addrs = opts ? dsn_get(opts, "hostaddr") : NULL;
	ports = opts ? dsn_get(opts, "port") : NULL;
	ct = opts ? dsn_get(opts, "connect_timeout") : NULL;
	/* then the service file's, as libpq takes them */
	service = opts ? dsn_get(opts, "service") : NULL;
	if (service == NULL)
		service = getenv("PGSERVICE");
	if (service != NULL && hosts == NULL && addrs == NULL)
	{
		hosts = service_get(service, "host", s_host, sizeof(s_host));
		addrs = service_get(service, "hostaddr", s_addr, sizeof(s_addr));
	}
	if (service != NULL && ports == NULL)
		ports = service_get(service, "port", s_port, sizeof(s_port));
	if (service != NULL && ct == NULL)
		ct = service_get(service, "connect_timeout", s_ct, sizeof(s_ct));
	/* each on its own, as libpq's defaults: PGHOSTADDR with a DSN's host too */
	if (hosts == NULL)
		hosts = getenv("PGHOST");
	if (addrs == NULL)
		addrs = getenv("PGHOSTADDR");
	if (ports == NULL)
		ports = getenv("PGPORT");
	if (ct == NULL)
		ct = getenv("PGCONNECT_TIMEOUT");
	nhosts = list_len(hosts) > list_len(addrs) ? list_len(hosts) : list_len(addrs);
	/* as many ports as hosts, or one: else libpq's own error, before any lookup */
	if ((nhosts < 2 && !(list_len(addrs) == 0 && list_len(hosts) == 1 && host_is_name(hosts))) ||
		(list_len(ports) > 1 && list_len(ports) != nhosts))
	{
		PQconninfoFree(opts);
		return connect_until(kw, val, deadline, err, errlen, timedout);
	}
	if (ct != NULL && atoi(ct) > 0)
		per_host = (int64_t) (atoi(ct) < 2 ? 2 : atoi(ct)) * 1000;
	memcpy(kw2, kw, nkw * sizeof(char *));
	memcpy(val2, val, nkw * sizeof(char *));
	for (int i = 0; i < nhosts && c == NULL; i++)
	{
		int			k = nkw;
		int64_t		now = le_monotonic_ms();
		int64_t		share = per_host > 0 ? per_host : (deadline - now) / (nhosts - i);
		int64_t		until = now + share < deadline ? now + share : deadline;
		char		msg[400] = "";
		bool		have_addr;

		if (now >= deadline)
		{
			*timedout = true;
			break;
		}
		have_addr = list_item(addrs, i, addr, sizeof(addr)) != NULL && addr[0] != '\0';
		if (list_item(hosts, i, host, sizeof(host)))
		{
			kw2[k] = "host";
			val2[k++] = host;
			/* a name: resolved here within this host's share of the time */
			if (!have_addr && host_is_name(host))
			{
				if (!resolve_bounded(host, until, rhosts, sizeof(rhosts), raddrs, sizeof(raddrs),
									 msg, sizeof(msg), timedout))
				{
					if (nhosts > 1)
						le_set_err(err, errlen, "host %d of %d (%s): %s", i + 1, nhosts, host, msg);
					else
						le_set_err(err, errlen, "%s", msg);
					continue;
				}
				val2[k - 1] = rhosts;
				kw2[k] = "hostaddr";
				val2[k++] = raddrs;
			}
		}
		if (have_addr)
		{
			kw2[k] = "hostaddr";
			val2[k++] = addr;
		}
		if (list_item(ports, i, port, sizeof(port)))
		{
			kw2[k] = "port";
			val2[k++] = port;
		}
		kw2[k] = NULL;
		val2[k] = NULL;
		c = connect_until(kw2, val2, until, msg, sizeof(msg), timedout);
		if (c == NULL)
		{
			if (*timedout && nhosts > 1)
				le_set_err(msg, sizeof(msg), "timeout expired after %" PRId64 " ms", share);
			if (nhosts < 2)
				le_set_err(err, errlen, "%s", msg);
			else
				le_set_err(err, errlen, "host %d of %d (%s%s%s): %s", i + 1, nhosts,
					   list_item(hosts, i, host, sizeof(host)) ? host : addr,
					   ports ? ":" : "", ports ? port : "", msg);
		}
	}
	*timedout = c == NULL && le_monotonic_ms() >= deadline;
	PQconninfoFree(opts);
	return c;
}

/*
 * Send what is queued on c before deadline: 0 when sent, 1 when the
 * deadline passed, -1 when the connection broke.
 */
static int
flush_until(PGconn *c, int64_t deadline)
{
	int			rc;

	while ((rc = PQflush(c)) == 1)
	{
		int			w = le_wait_fd(PQsocket(c), true, deadline);

		if (w == 0)
			return 1;
		if (w < 0)
			return -1;
		/* the server may be sending (e.g. notices) while we write */
		if (!PQconsumeInput(c))
			return -1;
	}
	return rc < 0 ? -1 : 0;
}

/* Wait before deadline until PQgetResult would not block; as flush_until. */
static int
await_result(PGconn *c, int64_t deadline)
{
	while (PQisBusy(c))
	{
		int			w = le_wait_fd(PQsocket(c), false, deadline);

		if (w == 0)
			return 1;
		if (w < 0 || !PQconsumeInput(c))
			return -1;
	}
	return 0;
}

/*
 * The end of le_exec_bounded or le_exec_gated when the deadline passed
 * (timedout) or the connection broke: the message in err, keep cleared,
 * both marked broken (the caller replaces the connection).  NULL.
 */
static PGresult *
exec_failed(PGconn *c, bool timedout_now, PGresult *keep, char *err, size_t errlen,
			bool *broken, bool *timedout)
{
	if (timedout_now)
		le_set_err(err, errlen, "statement timed out");
	else
	{
		le_copy_msg(err, errlen, PQerrorMessage(c));
		if (err && errlen && err[0] == '\0')
			le_set_err(err, errlen, "connection lost");
	}
	*broken = true;
	*timedout = timedout_now;
	PQclear(keep);
	return NULL;
}

/*
 * Run one parameterised statement, waiting at most until deadline.  Returns
 * the result (check PQresultStatus) or NULL when the connection broke or
 * the deadline passed; then *broken is set (and *timedout for the
 * deadline) and the connection must go.
 */
PGresult *
le_exec_bounded(PGconn *c, const char *sql, int nparams, const char *const *values,
				int64_t deadline, char *err, size_t errlen, bool *broken, bool *timedout)
{
	PGresult   *keep = NULL;
	PGresult   *r;
	int			rc;
	bool		dummy;

	if (timedout == NULL)
		timedout = &dummy;
	*broken = false;
	*timedout = false;
	if (!PQsendQueryParams(c, sql, nparams, NULL, values, NULL, NULL, 0))
		goto broken;
	if ((rc = flush_until(c, deadline)) != 0)
		goto failed;
	for (;;)
	{
		if ((rc = await_result(c, deadline)) != 0)
			goto failed;
		r = PQgetResult(c);
		if (r == NULL)
			break;
		/* keep the first error, else the last result */
		if (keep == NULL || PQresultStatus(keep) != PGRES_FATAL_ERROR)
		{
			PQclear(keep);
			keep = r;
		}
		else
			PQclear(r);
	}
	if (PQstatus(c) == CONNECTION_BAD)
		goto broken;
	if (keep && PQresultStatus(keep) == PGRES_FATAL_ERROR)
		le_copy_msg(err, errlen, PQresultErrorMessage(keep));
	return keep;

failed:
	return exec_failed(c, rc > 0, keep, err, errlen, broken, timedout);
broken:
	return exec_failed(c, false, keep, err, errlen, broken, timedout);
}

/*
 * The statement le_exec_gated sends first: an error unless the function of
 * signature $1 is a member of extension leader_election, 42883 (or 3F000
 * for a schema that is gone) as for a missing function.  The ELSE branch,
 * a cast of text made from $1 (thus not folded while the statement is
 * parsed) to a function in pg_catalog that does not exist, is evaluated
 * only when the condition is false.
 */
#define GATE_SQL "SELECT CASE WHEN " LE_MEMBER("$1::pg_catalog.text::pg_catalog.regprocedure") \
	" THEN NULL ELSE ('pg_catalog.le_not_of_extension_leader_election'" \
	" OPERATOR(pg_catalog.||) pg_catalog.left($1::pg_catalog.text, 0)" \
	" OPERATOR(pg_catalog.||) '()')::pg_catalog.regprocedure END"

/*
 * As le_exec_bounded, but sql (calling the function of signature sig, a
 * regprocedure text) only if that function is a member of the extension
 * now: in one pipeline, one round trip, GATE_SQL comes first, and when it
 * fails the server skips sql without even parsing it, so that nothing of a
 * function of that name that is not the extension's runs, not even while
 * planning (a function in SQL is inlined then, and the constant parts of
 * its body evaluated).  Then the gate's error is the result (42883 or
 * 3F000, LE_ERR_NO_EXTENSION), with a message that says so.
 */
PGresult *
le_exec_gated(PGconn *c, const char *sig, const char *sql, int nparams,
			  const char *const *values, int64_t deadline, char *err, size_t errlen,
			  bool *broken, bool *timedout)
{
	const char *gv[1] = {sig};
	PGresult   *keep = NULL;
	PGresult   *r;
	bool		gate_failed = false;
	int			query = 0;		/* 0: the gate's results, 1: sql's, 2: the sync */
	int			rc;
	bool		dummy;

	if (timedout == NULL)
		timedout = &dummy;
	*broken = false;
	*timedout = false;
	if (!PQenterPipelineMode(c) ||
		!PQsendQueryParams(c, GATE_SQL, 1, NULL, gv, NULL, NULL, 0) ||
		!PQsendQueryParams(c, sql, nparams, NULL, values, NULL, NULL, 0) ||
		!PQpipelineSync(c))
		goto broken;
	if ((rc = flush_until(c, deadline)) != 0)
		goto failed;
	for (;;)
	{
		ExecStatusType st;

		if ((rc = await_result(c, deadline)) != 0)
			goto failed;
		if (PQstatus(c) == CONNECTION_BAD)
			goto broken;
		r = PQgetResult(c);
		if (r == NULL)
		{
			/* the end of one query's results; no more than two */
			if (++query > 2)
				goto broken;
			continue;
		}
		st = PQresultStatus(r);
		if (st == PGRES_PIPELINE_SYNC)
		{
			PQclear(r);
			break;
		}
		if (query == 0 && st == PGRES_FATAL_ERROR && keep == NULL)
		{
			gate_failed = true;
			keep = r;
		}
		else if (query == 1 && !gate_failed && st != PGRES_PIPELINE_ABORTED &&
				 (keep == NULL || PQresultStatus(keep) != PGRES_FATAL_ERROR))
		{
			/* sql's first error, else its last result */
			PQclear(keep);
			keep = r;
		}
		else
			PQclear(r);
	}
	if (!PQexitPipelineMode(c))
		goto broken;
	if (keep && PQresultStatus(keep) == PGRES_FATAL_ERROR)
	{
		const char *state = le_sqlstate_of(keep);

		if (gate_failed && (strcmp(state, "42883") == 0 || strcmp(state, "3F000") == 0))
			le_set_err(err, errlen,
					   "function %s is not part of extension \"leader_election\" (was the extension dropped?)",
					   sig);
		else
			le_copy_msg(err, errlen, PQresultErrorMessage(keep));
	}
	return keep;

failed:
	return exec_failed(c, rc > 0, keep, err, errlen, broken, timedout);
broken:
	return exec_failed(c, false, keep, err, errlen, broken, timedout);
}

/* Public wrapper of le_exec_bounded with a relative timeout (see le_client.h). */
PGresult *
le_exec(PGconn *conn, const char *sql, int nparams, const char *const *values,
		int64_t timeout_ms, char *err, size_t errlen, bool *timedout)
{
	bool		broken;

	if (err && errlen)
		err[0] = '\0';
	return le_exec_bounded(conn, sql, nparams, values, le_monotonic_ms() + timeout_ms,
						   err, errlen, &broken, timedout);
}

/* SQLSTATE of an error result, "" if none. */
const char *
le_sqlstate_of(const PGresult *r)
{
	const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;

	return s ? s : "";
}

/*
 * What a failed statement (r, possibly NULL; broken and timedout as
 * le_exec_bounded set them) means: the class of its error, with its
 * SQLSTATE ("" if none) in *state and its result code in *rc.
 */
le_errclass
le_failure_of(const PGresult *r, bool broken, bool timedout, const char **state, le_result *rc)
{
	*state = le_sqlstate_of(r);
	*rc = timedout ? LE_ERR_TIMEOUT : broken ? LE_ERR_CONNECT : le_result_of_sqlstate(*state);
	return broken ? LE_EC_RECONNECT : le_classify(*state);
}

/* What to do about an error with this SQLSTATE ("" = no result at all). */
le_errclass
le_classify(const char *s)
{
	if (s[0] == '\0' ||
		strncmp(s, "08", 2) == 0 ||		/* connection exception */
		strcmp(s, "25006") == 0 ||	/* read-only: a standby, look for the primary */
		strcmp(s, "57P01") == 0 ||	/* admin shutdown */
		strcmp(s, "57P02") == 0 ||	/* crash shutdown */
		strcmp(s, "57P03") == 0)	/* cannot connect now */
		return LE_EC_RECONNECT;
	if (strncmp(s, "53", 2) == 0 ||	/* insufficient resources */
		strcmp(s, "57014") == 0 ||	/* canceled */
		strcmp(s, "55P03") == 0 ||	/* lock wait timed out */
		strcmp(s, "40001") == 0 || strcmp(s, "40P01") == 0)
		return LE_EC_TRANSIENT;
	return LE_EC_PERMANENT;
}

/* Result code for an error with this SQLSTATE. */
le_result
le_result_of_sqlstate(const char *s)
{
	if (strcmp(s, "42501") == 0)
		return LE_ERR_PERMISSION;
	if (strcmp(s, "25006") == 0)
		return LE_ERR_READ_ONLY;
	if (strcmp(s, "57014") == 0)
		return LE_ERR_TIMEOUT;
	if (s[0] == '\0' || strncmp(s, "08", 2) == 0 || strncmp(s, "57P", 3) == 0)
		return LE_ERR_CONNECT;
	if (strcmp(s, "42883") == 0 || strcmp(s, "3F000") == 0)
		return LE_ERR_NO_EXTENSION;
	return LE_ERR_SQL;
}

/*
 * Find the schema of extension leader_election on connection c before
 * deadline; with expect, it must be that schema (the one a client found on
 * its first connection and wrote its SQL texts for: functions of that name
 * in another schema are not the extension's).  The schema goes to schema
 * when that is not NULL.  LE_ERR_CONNECT, LE_ERR_TIMEOUT or
 * LE_ERR_NO_EXTENSION with a message on failure.
 */
le_result
le_check_extension(PGconn *c, int64_t deadline, const char *expect, char *schema,
				   size_t schemalen, char *err, size_t errlen)
{
	char		msg[512] = "";
	bool		broken,
				timedout;
	PGresult   *r;

	r = le_exec_bounded(c, "SELECT n.nspname FROM pg_catalog.pg_extension x"
						" JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) x.extnamespace"
						" WHERE x.extname OPERATOR(pg_catalog.=) 'leader_election'",
						0, NULL, deadline, msg, sizeof(msg), &broken, &timedout);
	if (r == NULL || PQresultStatus(r) != PGRES_TUPLES_OK)
	{
		le_set_err(err, errlen, "could not check for extension leader_election: %s", msg);
		PQclear(r);
		return timedout ? LE_ERR_TIMEOUT : LE_ERR_CONNECT;
	}
	if (PQntuples(r) != 1)
	{
		char		db[128];

		le_copy_msg(db, sizeof(db), PQdb(c));
		le_set_err(err, errlen,
				   "extension \"leader_election\" is not installed in database \"%s\" (run CREATE EXTENSION leader_election)",
				   db);
		PQclear(r);
		return LE_ERR_NO_EXTENSION;
	}
	if (expect != NULL && strcmp(PQgetvalue(r, 0, 0), expect) != 0)
	{
		char		now_in[256];

		le_copy_msg(now_in, sizeof(now_in), PQgetvalue(r, 0, 0));
		le_set_err(err, errlen,
				   "extension \"leader_election\" is now in schema \"%s\", not in \"%s\" as when this client started (restart the client)",
				   now_in, expect);
		PQclear(r);
		return LE_ERR_NO_EXTENSION;
	}
	if (schema)
		le_copy_str(schema, schemalen, PQgetvalue(r, 0, 0));
	PQclear(r);
	return LE_OK;
}

/* Connect within timeout_ms and find the schema of the extension (see le_client.h). */
le_result
le_connect(const char *conninfo, const char *appname, int64_t timeout_ms,
		   PGconn **conn, char *schema, size_t schemalen, char *err, size_t errlen)
{
	char		msg[512] = "";
	const char **kw;
	const char **val;
	PGconn	   *c;
	le_result	rc;
	int64_t		deadline = le_monotonic_ms() + timeout_ms;

	*conn = NULL;
	rc = le_build_conn_params(conninfo ? conninfo : "", timeout_ms * 2, timeout_ms,
							  &kw, &val, err, errlen);
	if (rc != LE_OK)
		return rc;
	if (appname)
	{
		char	   *a = strdup(appname);

		if (a == NULL)
		{
			le_free_conn_params(kw, val);
			le_set_err(err, errlen, "out of memory");
			return LE_ERR_SYSTEM;
		}
		free((char *) val[1]);
		val[1] = a;
	}
	c = le_connect_params(kw, val, deadline, msg, sizeof(msg), NULL);
	le_free_conn_params(kw, val);
	if (c == NULL)
	{
		le_set_err(err, errlen, "could not connect to the server: %s", msg);
		return LE_ERR_CONNECT;
	}
	rc = le_check_extension(c, deadline, NULL, schema, schemalen, err, errlen);
	if (rc != LE_OK)
	{
		PQfinish(c);
		return rc;
	}
	*conn = c;
	return LE_OK;
}

/*
 * Open a connection of an elector or group member before deadline (the
 * keyword arrays of le_build_conn_params; application name "pg_leader
 * <role>" unless the DSN names one), in non-blocking mode, and look the
 * extension up on it:
 *   - schema not NULL (a first connection): its schema goes there;
 *   - expect not NULL (a later one): it must still be in that schema, the
 *     first connection's, which the client's SQL texts name.  After a DROP
 *     EXTENSION, or on another server of a multi-host DSN, functions of the
 *     same names made there by any role with CREATE on the schema would
 *     otherwise run, as the client's role, and be believed;
 *   - both NULL: no lookup.  Only for the renewal connection, made when a
 *     period begins: a lookup would be a round trip out of the time before
 *     the first renewal, and le_exec_gated checks before each renewal that
 *     le_renew is the extension's, as before every other call.
 * LE_ERR_TIMEOUT when the deadline passed, else as le_connect.
 */
le_result
le_open_conn_kw(const char *const *kw, const char *const *conn_val, const char *role,
				int64_t deadline, const char *expect, PGconn **out, char *schema,
				size_t schemalen, char *err, size_t errlen)
{
	char		appname[64];
	char		msg[512] = "";
	const char *val[16];
	PGconn	   *c;
	le_result	rc;
	int			i;
	bool		timedout;

	*out = NULL;
	snprintf(appname, sizeof(appname), "pg_leader %s", role);
	for (i = 0; kw[i] && i < 15; i++)
		val[i] = conn_val[i];
	val[i] = NULL;
	val[1] = appname;			/* fallback_application_name */
	c = le_connect_params(kw, val, deadline, msg, sizeof(msg), &timedout);
	if (c == NULL)
	{
		le_set_err(err, errlen, "could not connect to the server: %s", msg);
		return timedout ? LE_ERR_TIMEOUT : LE_ERR_CONNECT;
	}
	if (schema != NULL || expect != NULL)
	{
		rc = le_check_extension(c, deadline, expect, schema, schemalen, err, errlen);
		if (rc != LE_OK)
		{
			PQfinish(c);
			return rc;
		}
	}
	*out = c;
	return LE_OK;
}

/*
 * The first connection of an elector or group member, within timeout_ms:
 * the schema of its extension into schema (of schemalen; what later
 * connections expect) and quoted for SQL texts into q (of qlen).
 * LE_ERR_CONNECT (a timeout too), LE_ERR_NO_EXTENSION or LE_ERR_SYSTEM
 * with a message in err.
 */
le_result
le_first_conn(const char *const *kw, const char *const *conn_val, const char *role,
			  int64_t timeout_ms, PGconn **out, char *schema, size_t schemalen,
			  char *q, size_t qlen, char *err, size_t errlen)
{
	char	   *quoted;
	le_result	rc = le_open_conn_kw(kw, conn_val, role, le_monotonic_ms() + timeout_ms, NULL,
									 out, schema, schemalen, err, errlen);

	if (rc != LE_OK)
		return rc == LE_ERR_TIMEOUT ? LE_ERR_CONNECT : rc;
	quoted = PQescapeIdentifier(*out, schema, strlen(schema));
	if (quoted == NULL || strlen(quoted) >= qlen)
	{
		le_set_err(err, errlen, "out of memory");
		PQfreemem(quoted);
		PQfinish(*out);
		*out = NULL;
		return LE_ERR_SYSTEM;
	}
	le_copy_str(q, qlen, quoted);
	PQfreemem(quoted);
	return LE_OK;
}

/*
 * Open one of the elector's later connections (le_open_conn_kw), looking
 * the extension up unless check is false (the renewal connection only).
 */
le_result
le_open_conn(le_elector *e, const char *role, bool check, int64_t deadline, PGconn **out,
			 char *err, size_t errlen)
{
	return le_open_conn_kw(e->conn_kw, e->conn_val, role, deadline,
						   check ? e->ext_schema : NULL, out, NULL, 0, err, errlen);
}
