/*-------------------------------------------------------------------------
 *
 * leader_election.h
 *		Declarations shared by the C files of the leader_election extension.
 *
 * lease_rows.c owns the lease row format, token.c the token rule and
 * fence_lock.c the fence lock; every other file goes through the functions
 * declared here instead of touching the tables or the lock tag itself.
 * src/README.md describes the design.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEADER_ELECTION_H
#define LEADER_ELECTION_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "access/htup.h"
#include "access/xlogdefs.h"
#include "storage/buf.h"
#include "storage/itemptr.h"
#include "storage/lockdefs.h"
#include "storage/relfilenode.h"
#include "utils/elog.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"

/*
 * SQLSTATEs of our own, in class "LE" so they never collide with
 * PostgreSQL's.  Documented in doc/reference.md; never renumber one.
 */
#define ERRCODE_LE_STALE_FENCING_TOKEN	MAKE_SQLSTATE('L','E','0','0','1')
#define ERRCODE_LE_LEASE_NOT_HELD		MAKE_SQLSTATE('L','E','0','0','2')
/* Raised by the (PL/pgSQL) job functions: the worker does not hold the claim. */
#define ERRCODE_LE_JOB_NOT_CLAIMED		MAKE_SQLSTATE('L','E','0','0','3')

/* Limits on user input, in bytes; documented in doc/reference.md. */
#define LE_MAX_KEY_LEN			200
#define LE_MAX_OWNER_LEN		200
#define LE_MAX_GROUP_NAME_LEN	63
#define LE_MAX_MEMBER_LEN		120
#define LE_MAX_PARTITIONS		16384
/*
 * Partitions one heartbeat grants, or one le_group_leave releases, at most:
 * each such change holds the partition's fence lock to the commit, and the
 * default lock table holds about 6,400 locks for all sessions.
 */
#define LE_GROUP_MAX_CHANGES	1024

/*
 * Keys of partition groups (group.c): partition p of group g is
 * "le:group:g:p", the membership of member m "le:group:g:member:m".  No
 * new plain lease may take a key with this prefix.
 */
#define LE_GROUP_KEY_PREFIX		"le:group:"

/*
 * Fence lock modes: writers of protected data share the lock; whatever
 * changes the token or frees the lease excludes them.
 */
#define LE_FENCE_WRITER_LOCKMODE	ShareLock
#define LE_FENCE_CHANGE_LOCKMODE	ExclusiveLock

/* NOTIFY channel on which grants and releases are announced. */
#define LE_NOTIFY_CHANNEL		"leader_election"

/*
 * A lease row as lease_rows.c reads and writes it.  A free lease has
 * holder == NULL; fencing_token is the last token issued (0: never).
 */
typedef struct LeaseRow
{
	int64		lease_id;
	char	   *lease_key;
	char	   *holder;			/* NULL when released */
	char	   *holder_role;	/* role that acquired, NULL when released */
	int64		fencing_token;
	int32		token_timeline;
	TimestampTz acquired_at;	/* valid only when holder != NULL */
	TimestampTz renewed_at;
	TimestampTz expires_at;
	int64		transitions;
	int64		token_system_id;	/* cluster that issued fencing_token */
	TimestampTz history_min_ended_at;	/* see le_store_prune_plan; 0: NULL */
	struct varlena *metadata;	/* jsonb published by the holder, NULL: none */
	/* Counters and figures for le_lease_metrics (kept only from 1.1 on). */
	int64		expiries;		/* periods that ended by lapsing */
	int64		force_releases; /* valid periods ended by le_force_release */
	int64		ttl_us;			/* ttl last granted or renewed for; 0: unknown */
	TimestampTz freed_at;		/* last release or force release; 0: NULL */
	int64		renew_margin_us;	/* time left at the last renewal; -1: none */
	int64		renew_margin_min_us;	/* least such in this period; -1: none */
	/* Partition groups (1.1): the row's group and partition. */
	int64		group_id;		/* 0: a plain lease (NULL) */
	int32		group_partition;	/* -1: a membership or plain lease (NULL) */

	/*
	 * A membership's held partitions (bytea, bit p of byte p / 8 for
	 * partition p): a superset of those its member holds validly, written
	 * by the heartbeats that change it; NULL: not known (le_group_heartbeat).
	 */
	struct varlena *group_held;
} LeaseRow;

/* GUC variables (leader_election.c). */
extern int	le_lock_timeout_ms;
extern int	le_max_ttl_s;
extern int	le_history_retention_s;
extern bool le_history_enabled;

/* Values of leader_election.notify: which lease changes send a NOTIFY. */
#define LE_NOTIFY_ALL			0	/* grants, releases, force releases */
#define LE_NOTIFY_RELEASES		1	/* releases and force releases only */
#define LE_NOTIFY_NONE			2	/* none */
extern int	le_notify_events;

/* Argument checks shared by every SQL-callable function (check.c). */
extern char *le_check_key(FunctionCallInfo fcinfo, int argno);
extern char *le_check_owner(FunctionCallInfo fcinfo, int argno);
extern int64 le_check_token(FunctionCallInfo fcinfo, int argno);
extern int64 le_check_ttl(FunctionCallInfo fcinfo, int argno);
extern int64 le_check_wait(FunctionCallInfo fcinfo, int argno);
extern struct varlena *le_check_metadata(FunctionCallInfo fcinfo, int argno);
#define LE_MAX_METADATA_LEN		4000
#define LE_MAX_METADATA_DEPTH	8	/* the client's LE_NOTE_MAX_DEPTH */
extern void le_check_writable(const char *action);
extern char *le_check_group_name(FunctionCallInfo fcinfo, int argno);
extern void le_check_group_name_value(const char *value);
extern char *le_check_member(FunctionCallInfo fcinfo, int argno);

/*
 * The server-side wait of le_acquire (wait.c): a FIFO queue per lease in the
 * lock manager; its head sleeps on its latch and is woken by the commit of
 * a release.
 */
#define LE_MAX_WAIT_US			((int64) USECS_PER_DAY)
#define LE_WAIT_RETRY_US		((int64) 10000)
extern bool le_wait_enter(int64 lease_id, TimestampTz deadline);
extern void le_wait_leave(int64 lease_id);
extern void le_wait_sleep(TimestampTz until);
extern void le_wait_check_client(void);
extern void le_wait_note_wake(int64 lease_id);

/* Error messages quote at most this many characters of an input value. */
#define LE_MAX_SHOWN_CHARS		64
extern char *le_check_show(const char *value);

/*
 * Commit of a lease change: flushed, waited for by synchronous standbys,
 * never prepared (durable.c).
 */
extern void le_durable_commit(void);
extern void le_durable_locks_taken(void);
extern bool le_durable_in_use(void);

/*
 * Access to the lease tables.  le_store_begin() switches to the extension
 * owner and bounds lock waits by leader_election.lock_timeout;
 * le_store_end() undoes both and releases what lease_rows.c kept for the
 * call.  Everything in between may raise ERROR.
 */
typedef struct LeaseStoreState
{
	Oid			save_userid;
	int			save_sec_context;
	bool		lock_bounded;	/* le_store_lock_bound_begin put our lock_timeout in force */
	Oid			caller;
	char	   *caller_name;
	const char *lease_key;		/* for error context */
	MemoryContext caller_cxt;	/* where rows read are allocated */
	Oid			nsp;			/* schema of the extension */
	Oid			lease_relid;	/* its table le_lease */
	Oid			key_indexid;	/* le_lease's unique index on lease_key */
	Relation	lease_rel;		/* le_lease, while this call has it open */
	bool		keep_lease_lock;	/* keep lease_rel's lock to transaction end */
	bool		lease_rowex;	/* this call took RowExclusiveLock on le_lease */
	Snapshot	snap;			/* registered by the last peek or lock of this call */
	HeapTuple	peeked_tuple;	/* copy of the version le_rows_peek read, while usable */
	LeaseRow	peeked_row;		/* ... and what it said */
	ItemPointerData tid;		/* lease row version that le_rows_lock locked */
	HeapTuple	locked_tuple;	/* copy of the version locked, for le_rows_write */
	bool		locked;			/* this call locked the lease row (and maybe its fence) */
	bool		tentative;		/* tid/locked_tuple were read, not locked (see le_rows_lock) */
	bool		must_lock;		/* a tentative write lost a race: lock from now on */
	bool		adopted;		/* peeked_tuple was handed in (le_rows_group_adopt), not read */
	Snapshot	scan_snap;		/* of le_rows_group_scan, registered to the call's end */
	int64		idle_bound_us;	/* the transaction's deadline for the lease, from now; 0: none */
	/* a grant's prune: rows found due before the lease row was written */
	ItemPointerData *prune_tids;	/* le_lease_history rows to delete */
	TimestampTz *prune_ends;	/* ... and their ended_at */
	int			prune_n;
	Snapshot	prune_snap;		/* that found them, registered until they go */
	bool		prune_locked;	/* the find's own locks of the history are held: */
	Oid			prune_relid;	/* ... le_lease_history */
	Oid			prune_indexid;	/* ... and the index it scanned */
	ErrorContextCallback errcallback;
} LeaseStoreState;

/* The frame of a lease call and the plan of a grant's prune (lease_store.c). */
extern void le_store_begin(LeaseStoreState *st, Oid fn_oid, const char *lease_key);
extern void le_store_end(LeaseStoreState *st);
extern void le_store_next_row(LeaseStoreState *st, const char *lease_key);
extern bool le_store_lock_bound_begin(void);
extern void le_store_lock_bound_end(bool began);
extern bool le_store_lease_valid(const LeaseRow *row, TimestampTz now);
extern void le_store_prune_plan(LeaseStoreState *st, int64 lease_id, TimestampTz *min_ended_at,
								TimestampTz now);
extern bool le_store_history_due(TimestampTz ended_at, TimestampTz now);
extern int64 le_store_prune_history(LeaseStoreState *st);

/* The holder deadline (holder.c). */
extern void le_holder_bound_idle(const char *key, int64 bound_us);

/* A partition group as le_group holds it (lease_rows.c). */
typedef struct LeaseGroup
{
	int64		group_id;
	char	   *group_name;
	int32		partitions;
	Oid			owner_role;		/* by OID: renaming the role changes nothing */
	int32		max_moves;
	TimestampTz created_at;
} LeaseGroup;

/*
 * A partition's row as le_rows_group_scan read it, briefly (no key, no
 * metadata; holder and role point into one buffer of the scan), with the
 * place of the version read, for le_rows_group_adopt.
 */
typedef struct LeaseGroupPart
{
	int64		lease_id;		/* 0: no row */
	int64		fencing_token;
	TimestampTz expires_at;		/* 0: NULL */
	const char *holder;			/* NULL when released */
	const char *holder_role;
	ItemPointerData tid;
} LeaseGroupPart;

/* The le_lease rows of one group: its partitions by number, its memberships. */
typedef struct LeaseGroupRows
{
	int32		npartitions;
	LeaseGroupPart *partitions;
	int			nmembers;
	LeaseRow   *members;
} LeaseGroupRows;

/* Rows of le_lease and le_lease_history, by direct access (lease_rows.c). */
extern void le_rows_create(LeaseStoreState *st, const char *key, int64 group_id,
						   int32 group_partition);
extern bool le_rows_has_groups(LeaseStoreState *st);
extern bool le_rows_group_find(LeaseStoreState *st, const char *name, LeaseGroup *group);
extern int64 le_rows_group_insert(LeaseStoreState *st, const char *name, int32 partitions,
								  int32 max_moves);
extern void le_rows_group_partitions_insert(LeaseStoreState *st, const LeaseGroup *group);
extern void le_rows_group_scan(LeaseStoreState *st, const LeaseGroup *group, const bits8 *held,
							   int held_len, LeaseGroupRows *rows);
extern bool le_rows_group_adopt(LeaseStoreState *st, const LeaseGroupPart *part, LeaseRow *row);
extern void le_rows_next(LeaseStoreState *st);
extern bool le_rows_peek(LeaseStoreState *st, const char *key, LeaseRow *row);
typedef bool (*LeaseRowCheck) (const LeaseRow *row, void *arg);
extern bool le_rows_lock(LeaseStoreState *st, const char *key, LeaseRow *row,
						 LeaseRowCheck check, void *arg);
extern bool le_rows_write(LeaseStoreState *st, const LeaseRow *row);
extern void le_rows_history_open(LeaseStoreState *st, const LeaseRow *row);
extern bool le_rows_period_recorded(LeaseStoreState *st, const LeaseRow *row);
extern void le_rows_history_close(LeaseStoreState *st, int64 lease_id, int64 token,
								  TimestampTz ended_at, const char *reason);
extern TimestampTz le_rows_find_due_history(LeaseStoreState *st, int64 lease_id,
											TimestampTz cutoff, TimestampTz now);
extern TimestampTz le_rows_delete_due_history(LeaseStoreState *st);
extern void le_rows_forget_due_history(LeaseStoreState *st);
extern int64 le_rows_prune_all_history(LeaseStoreState *st, TimestampTz cutoff);
extern void le_rows_end(LeaseStoreState *st);
extern void le_rows_let_go(LeaseStoreState *st);

/*
 * One lease row's acquire (lease.c), for le_acquire and the partition
 * groups (group.c), inside a frame the caller began.
 */
typedef enum LeaseAcquireResult
{
	LE_ACQUIRE_REFUSED,			/* validly held by another owner or role */
	LE_ACQUIRE_EXTENDED,		/* the valid holder again: same token */
	LE_ACQUIRE_GRANTED,			/* a new ownership period, a new token */
	LE_ACQUIRE_BUSY				/* fence_try: its fence lock is taken */
} LeaseAcquireResult;

typedef struct LeaseAcquireRequest
{
	const char *key;
	char	   *owner;
	int64		ttl;			/* the lease lasts ttl from the decision ... */
	TimestampTz expires_at;		/* ... or to this instant when not 0 */
	struct varlena *metadata;
	bool		fence_try;		/* never wait for the fence lock */
	bool		plain_only;		/* refuse group rows and new reserved keys */
	bool		count_renewal;	/* an extension records its renewal margin */
	int64		group_id;		/* the row must be of this group (0: any) */
	int32		group_partition;	/* ... a row created gets these */
} LeaseAcquireRequest;

extern LeaseAcquireResult le_lease_acquire_row(LeaseStoreState *st, const LeaseAcquireRequest *req,
											   LeaseRow *out);
extern bool le_lease_note_held_row(LeaseStoreState *st, const char *key, const char *owner,
								   int64 token, struct varlena *held);
extern bool le_lease_cap_row(LeaseStoreState *st, const char *key, const char *owner,
							 int64 token, TimestampTz expires_at, LeaseRow *out);
extern bool le_lease_free_row(LeaseStoreState *st, const char *key, const char *owner,
							  int64 token, const char *reason);

/* The assignment of a group's partitions to its members (group_assign.c). */
#define LE_ASSIGN_FREE_HOLDER		(-1)	/* not validly held */
#define LE_ASSIGN_OTHER_HOLDER		(-2)	/* validly held by a non-member */
typedef enum LeaseAssignState
{
	LE_ASSIGN_UNASSIGNED,		/* no live member */
	LE_ASSIGN_OWNED,			/* held by its target, which keeps it */
	LE_ASSIGN_REVOKE,			/* held by a member that gives it up (to target, if any) */
	LE_ASSIGN_FREE,				/* not validly held: its target claims it */
	LE_ASSIGN_BLOCKED			/* held validly by a non-member until it expires */
} LeaseAssignState;

typedef struct LeaseAssignment
{
	int32		npartitions;
	int32		nmembers;
	int32	   *target;			/* per partition: member index, -1: none */
	LeaseAssignState *state;	/* per partition */
} LeaseAssignment;

extern void le_group_assign_compute(int32 npartitions, int32 max_moves, int32 nmembers,
									const int32 *holder, LeaseAssignment *out);
extern int	le_group_held_len(int32 npartitions);
extern bool le_group_held_test(const bits8 *held, int len, int32 p);
extern void le_group_held_set(bits8 *held, int32 p);
extern bool le_group_assign_settled(int32 npartitions, int32 nmembers, const bits8 *const *held);

/* The token of a new ownership period (token.c). */
extern int64 le_token_next(LeaseStoreState *st, const LeaseRow *row, int32 *timeline,
						   int64 *system_id);

/* The fence lock (fence_lock.c). */
extern void le_fence_lock(LeaseStoreState *st, int64 lease_id, LOCKMODE mode);
extern bool le_fence_lock_try(int64 lease_id, LOCKMODE mode);
extern bool le_fence_lock_try_briefly(int64 lease_id, LOCKMODE mode);
extern void le_fence_lock_release(int64 lease_id, LOCKMODE mode);
extern void le_fence_lock_writer(int64 lease_id, const char *key);
struct LOCKTAG;
extern void le_fence_lock_tag(struct LOCKTAG *tag, int64 lease_id);

/* Watches and their NOTIFY (watch.c). */
extern void le_watch_notify(const LeaseStoreState *st, const char *event, const LeaseRow *row);
extern bool le_watch_start(int64 lease_id);
extern bool le_watch_stop(int64 lease_id);

/*
 * The extension's relations (lease_rows.c), by their place in
 * le_rows_lookup_relid's table, and the direct reads of the fence.
 */
typedef enum LeaseRel
{
	LE_REL_LEASE,
	LE_REL_LEASE_KEY,
	LE_REL_HISTORY,
	LE_REL_HISTORY_PKEY,
	LE_REL_HISTORY_SEQ,
	LE_REL_LEASE_SEQ,
	LE_REL_TOKEN_SEQ,
	LE_REL_GROUP,
	LE_REL_GROUP_NAME,
	LE_REL_GROUP_SEQ,
	LE_REL_LEASE_GROUP,
	LE_NRELS
} LeaseRel;

extern Oid	le_rows_lookup_relid(Oid nsp, LeaseRel which);
extern Oid	le_rows_owner(Oid nsp);
extern void le_rows_relids(Oid nsp, Oid *lease_relid, Oid *key_indexid);

/*
 * Where le_rows_read_latest found the version it returned: le_lease's file,
 * the page, the shared buffer that held it and the page's LSN at the time of
 * the read.  buffer is invalid when the version was not read in place (by
 * the hint); lsn is invalid when the read cannot vouch for the version (see
 * le_rows_read_in_place).
 */
typedef struct LeaseRowStamp
{
	RelFileNode node;
	BlockNumber blkno;
	Buffer		buffer;
	XLogRecPtr	lsn;
} LeaseRowStamp;

extern bool le_rows_read_latest(Oid lease_relid, Oid key_indexid, const char *key,
								 ItemPointer hint, LeaseRow *row, bool *written_by_us,
								 LeaseRowStamp *stamp);
extern bool le_rows_read_unlocked(Oid lease_relid, const char *key, ItemPointer hint,
								   Buffer recent, LeaseRow *row, LeaseRowStamp *stamp);
extern bool le_rows_page_unchanged(Oid lease_relid, const LeaseRowStamp *stamp, bool *unchanged);
extern void le_rows_hold_lease_table(Oid lease_relid);
extern bool le_rows_row_unchanged(Oid lease_relid, const LeaseRowStamp *stamp);

/* The fence (fence.c). */
extern int64 le_fencing_token_setting;	/* leader_election.fencing_token, 0 when unset */
extern void le_fence_check_lease(Oid nsp, const char *key, int64 token, bool strict);
extern void le_fence_register_callbacks(void);
extern void le_fence_note_release(int64 lease_id, int64 token, bool was_valid,
								  TimestampTz expires_at);
struct TriggerData;
extern void le_fence_advance_guard(struct TriggerData *trigdata);

/*
 * A partition group as the fence reads it from le_group (fence_group.c):
 * its id and number of partitions, and where the version read lies, so that
 * a later write can tell cheaply that it is still the latest, unchanged
 * (le_fence_group_unchanged).
 */
typedef struct LeGroup
{
	int64		group_id;
	int32		partitions;
	RelFileNode node;			/* le_group's file at the read */
	BlockNumber blkno;
	Buffer		buffer;			/* shared buffer that held the page */
	XLogRecPtr	lsn;			/* the page's LSN then; invalid: cannot vouch */
	uint64		inval_count;	/* le_group invalidations seen by then */
} LeGroup;

extern bool le_fence_group_read(Oid nsp, const char *name, LeGroup *group);
extern bool le_fence_group_unchanged(const LeGroup *group);

/* Counters of refused writes, with shared_preload_libraries (metrics.c). */
extern void le_metrics_init(void);
extern void le_metrics_count_refusal(Oid relid);

#endif							/* LEADER_ELECTION_H */
