/*-------------------------------------------------------------------------
 *
 * pg_leader_history.h
 *		"pg_leader history" and "pg_leader watch": the ownership periods of
 *		leases as a table, JSON or an SVG timeline, and a stream of their
 *		changes as they happen.
 *
 * Both only read (le_leases, le_lease_history) on a connection that
 * pg_leader.c opened; nothing they print comes from a notification's
 * payload, which anyone allowed to NOTIFY can forge.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PG_LEADER_HISTORY_H
#define PG_LEADER_HISTORY_H

#include <stdbool.h>
#include <stdint.h>

#include "libpq-fe.h"

/* What history and watch need of pg_leader's options. */
typedef struct lh_options
{
	PGconn	   *conn;			/* connected, extension checked */
	const char *schema_q;		/* the extension's schema, quoted */
	const char *lease;			/* -l KEY, or NULL: every lease */
	const char *svg;			/* history --svg FILE, or NULL */
	const char *since;			/* history --since, or NULL */
	bool		json;
	bool		verbose;		/* watch: also renewals */
	int64_t		poll_ms;		/* watch: interval of the lease snapshots */
	int64_t		timeout_ms;		/* longest wait for one statement */
} lh_options;

/* Exit statuses (the same as pg_leader's). */
#define LH_EXIT_USAGE		64
#define LH_EXIT_CONNECT		69
#define LH_EXIT_INTERNAL	70

/* pg_leader history; closes the connection, returns the exit status. */
extern int	lh_history(const lh_options *o);

/* pg_leader watch, until SIGINT or SIGTERM; closes the connection. */
extern int	lh_watch(const lh_options *o);

#endif							/* PG_LEADER_HISTORY_H */
