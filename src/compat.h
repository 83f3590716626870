/*-------------------------------------------------------------------------
 *
 * compat.h
 *		Every PostgreSQL-version-specific definition of leader_election.
 *
 * The extension targets PostgreSQL 15 first; code elsewhere must not test
 * PG_VERSION_NUM itself but use the wrappers below, so that supporting
 * 13 to 18 stays a change to this one file.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LE_COMPAT_H
#define LE_COMPAT_H

#include "postgres.h"

#include "access/xlog.h"
#include "catalog/namespace.h"
#include "storage/sinvaladt.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#if PG_VERSION_NUM < 150000
#error "leader_election requires PostgreSQL 15 or later"
#endif

/* Timeline new WAL is written on; only meaningful outside recovery. */
#define le_current_timeline()	GetWALInsertionTimeLine()

/* Reserve the GUC prefix so typos in leader_election.* settings are caught. */
#define le_reserve_guc_prefix(prefix)	MarkGUCPrefixReserved(prefix)

/* True when an interval is +/-infinity (such intervals exist from 17 on). */
#if PG_VERSION_NUM >= 170000
#define le_interval_is_finite(iv)	(!INTERVAL_NOT_FINITE(iv))
#else
#define le_interval_is_finite(iv)	true
#endif

/*
 * Run code with a search path given by schema OIDs, which no rename can
 * redirect (src/sql_support.c).  PostgreSQL 17 removed the override search
 * path; a port must find another way to pin names by OID, not fall back to
 * the search_path setting, which holds names.
 */
#if PG_VERSION_NUM >= 170000
#error "leader_election pins the search path of its SQL bodies with PushOverrideSearchPath, removed in PostgreSQL 17"
#endif
#define le_push_search_path(path)	PushOverrideSearchPath(path)
#define le_pop_search_path()		PopOverrideSearchPath()

/* The PGPROC of a virtual transaction id's backend, NULL if none. */
#define le_vxid_proc(vxid)	BackendIdGetProc((vxid).backendId)

#endif							/* LE_COMPAT_H */
