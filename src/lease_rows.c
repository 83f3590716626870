/*-------------------------------------------------------------------------
 *
 * lease_rows.c
 *		Direct access to the rows of le_lease and le_lease_history: find,
 *		lock and update a lease row, open, close and prune its periods.
 *
 * Every grant, renewal and release goes through here, so these paths use
 * the table and index access methods directly instead of SQL through SPI,
 * and check le_lease's CHECK constraints in C (le_rows_check).  A write is
 * first tried as a compare-and-set on the version the caller decided on
 * (the tentative write), and only when that loses a race is the row locked
 * as SELECT ... FOR UPDATE would; src/README.md ("Visibility and the
 * tentative write") gives the rules.
 *
 * Invariant: a lease row is written only in the version the caller read
 * and decided on, by a transaction that holds it (locked or updated) from
 * then on; history rows are written only by the holder of their lease row.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/relscan.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "storage/bufmgr.h"
#include "storage/smgr.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "leader_election.h"

/*
 * Column numbers of le_lease and le_lease_history (in the order of CREATE
 * TABLE in src/sql/10_lease.sql; columns are only ever appended).
 */
#define Anum_le_lease_lease_id			1
#define Anum_le_lease_lease_key			2
#define Anum_le_lease_holder			3
#define Anum_le_lease_holder_role		4
#define Anum_le_lease_fencing_token		5
#define Anum_le_lease_token_timeline	6
#define Anum_le_lease_acquired_at		7
#define Anum_le_lease_renewed_at		8
#define Anum_le_lease_expires_at		9
#define Anum_le_lease_transitions		10
#define Anum_le_lease_created_at		11
#define Anum_le_lease_token_system_id	12
#define Anum_le_lease_history_min_ended_at	13
#define Natts_le_lease					13

/*
 * Columns appended by version 1.1 of the SQL script: found by name, after
 * the first Natts_le_lease, so that the module works with the table of
 * every installed version (le_rows_later_columns); at most
 * LE_LEASE_MAX_NATTS columns in all.  The metric columns come first, then
 * the holder's metadata, then the row's partition group and, in a
 * membership row, the partitions its member holds (LeaseRow.group_held).
 */
#define LE_LEASE_MAX_NATTS				32
typedef enum LeLaterColumn
{
	LE_COL_EXPIRIES,
	LE_COL_FORCE_RELEASES,
	LE_COL_TTL_US,
	LE_COL_FREED_AT,
	LE_COL_RENEW_MARGIN_US,
	LE_COL_RENEW_MARGIN_MIN_US,
	LE_COL_METADATA,
	LE_COL_GROUP_ID,
	LE_COL_GROUP_PARTITION,
	LE_COL_GROUP_HELD,
	LE_NLATER_COLS
} LeLaterColumn;
#define LE_NMETRIC_COLS		LE_COL_METADATA
static const char *const le_later_names[LE_NLATER_COLS] = {
	"expiries", "force_releases", "ttl_us", "freed_at", "renew_margin_us", "renew_margin_min_us",
	"metadata", "group_id", "group_partition", "group_held"
};
static const Oid le_later_types[LE_NLATER_COLS] = {
	INT8OID, INT8OID, INT8OID, TIMESTAMPTZOID, INT8OID, INT8OID, JSONBOID, INT8OID, INT4OID,
	BYTEAOID
};

/* Columns of le_group (src/sql/1.1/40_groups.sql). */
#define Anum_le_group_group_id			1
#define Anum_le_group_group_name		2
#define Anum_le_group_partitions		3
#define Anum_le_group_owner_role		4
#define Anum_le_group_max_moves			5
#define Anum_le_group_created_at		6
#define Natts_le_group					6

#define Anum_le_history_history_id		1
#define Anum_le_history_lease_id		2
#define Anum_le_history_lease_key		3
#define Anum_le_history_holder			4
#define Anum_le_history_holder_role		5
#define Anum_le_history_fencing_token	6
#define Anum_le_history_acquired_at		7
#define Anum_le_history_ended_at		8
#define Anum_le_history_end_reason		9
#define Natts_le_history				9

static void le_rows_release_due_history(LeaseStoreState *st);

/* Expected type of each column, to refuse a table that is not ours. */
static const Oid le_lease_types[Natts_le_lease] = {
	INT8OID, TEXTOID, TEXTOID, NAMEOID, INT8OID, INT4OID,
	TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID, INT8OID,
	TIMESTAMPTZOID
};
static const Oid le_history_types[Natts_le_history] = {
	INT8OID, INT8OID, TEXTOID, TEXTOID, NAMEOID, INT8OID,
	TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID
};
static const Oid le_group_types[Natts_le_group] = {
	INT8OID, TEXTOID, INT4OID, REGROLEOID, INT4OID, TIMESTAMPTZOID
};

/* The error for a relation of ours that is missing (dropped). */
static void
le_rows_missing(const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("%s of extension leader_election is missing", what),
			 errdetail("The extension was dropped, or is being dropped by another session."),
			 errhint("Reinstall the extension with DROP EXTENSION and CREATE EXTENSION.")));
}

/*
 * The oids of the extension's relations in the schema used last, and the
 * owner of its le_lease, kept per backend: each lease call would otherwise
 * look up about ten names in the syscache (3 % of a cycle).  Looked up by
 * name in the extension schema only (never through search_path), once;
 * forgotten all together whenever any pg_class row changes (a syscache
 * callback on RELNAMENSP: DROP, CREATE, rename, ALTER ... SET SCHEMA and
 * OWNER TO, also harmless ones such as VACUUM's statistics).  Such changes
 * reach us when we lock anything and at the start of every transaction,
 * the same moments at which a fresh lookup would see them; a relation
 * dropped after that is found missing when it is opened (le_rows_open).
 */
static const char *const le_rel_names[LE_NRELS] = {
	"le_lease", "le_lease_key_unique", "le_lease_history", "le_lease_history_pkey",
	"le_lease_history_id_seq", "le_lease_id_seq", "le_token_seq",
	"le_group", "le_group_name_unique", "le_group_id_seq", "le_lease_group"
};
static Oid	le_rows_rels_nsp = InvalidOid;	/* schema of le_rows_rels; invalid: none kept */
static Oid	le_rows_rels[LE_NRELS];
static Oid	le_rows_rels_owner;		/* owner of le_rows_rels[LE_REL_LEASE], when valid */

static void
le_rows_rels_forget(Datum arg, int cacheid, uint32 hashvalue)
{
	le_rows_rels_nsp = InvalidOid;
}

/*
 * le_lease's current file as this backend last saw it, with the shared
 * invalidations read up to then: the only file le_rows_page_unchanged
 * trusts a page of.  Forgotten at any relcache invalidation of that table
 * (a rewrite or truncation gives it a new file and sends one before it
 * releases its lock; one made by this transaction is read at its next
 * command) or of all tables.
 */
static Oid	le_rows_file_relid = InvalidOid;
static RelFileNode le_rows_file_node;

static void
le_rows_file_forget(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == le_rows_file_relid)
		le_rows_file_relid = InvalidOid;
}

/* rel, open and up to date with the invalidations read, is le_lease: remember its file. */
static void
le_rows_file_seen(Relation rel)
{
	static bool registered = false;

	if (!registered)
	{
		CacheRegisterRelcacheCallback(le_rows_file_forget, (Datum) 0);
		registered = true;
	}
	le_rows_file_relid = RelationGetRelid(rel);
	le_rows_file_node = rel->rd_node;
}

/* Keep relids for schema nsp from now on (forgetting those of another). */
static void
le_rows_rels_for(Oid nsp)
{
	static bool registered = false;

	if (!registered)
	{
		CacheRegisterSyscacheCallback(RELNAMENSP, le_rows_rels_forget, (Datum) 0);
		registered = true;
	}
	if (le_rows_rels_nsp != nsp)
	{
		memset(le_rows_rels, 0, sizeof(le_rows_rels));
		le_rows_rels_owner = InvalidOid;
		le_rows_rels_nsp = nsp;
	}
}

/* The oid of one of our relations in schema nsp; InvalidOid when missing. */
Oid
le_rows_lookup_relid(Oid nsp, LeaseRel which)
{
	le_rows_rels_for(nsp);
	if (!OidIsValid(le_rows_rels[which]))
		le_rows_rels[which] = get_relname_relid(le_rel_names[which], nsp);
	return le_rows_rels[which];
}

static Oid le_rows_relid(Oid nsp, LeaseRel which);

/* The owner of le_lease in schema nsp (the extension owner). */
Oid
le_rows_owner(Oid nsp)
{
	Oid			relid = le_rows_relid(nsp, LE_REL_LEASE);

	if (!OidIsValid(le_rows_rels_owner))
	{
		HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));

		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for relation %u", relid);
		le_rows_rels_owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
		ReleaseSysCache(tup);
	}
	return le_rows_rels_owner;
}

/* The oid of one of our relations in schema nsp, or an error naming it. */
static Oid
le_rows_relid(Oid nsp, LeaseRel which)
{
	Oid			relid = le_rows_lookup_relid(nsp, which);

	if (!OidIsValid(relid))
		le_rows_missing(le_rel_names[which]);
	return relid;
}

/*
 * Open an index of ours; a clean error if it was dropped meanwhile (by a
 * DROP EXTENSION that committed while we waited for the lock).
 */
static Relation
le_rows_open_index(Oid indexid, LOCKMODE mode)
{
	Relation	idx = try_index_open(indexid, mode);

	if (idx == NULL)
		le_rows_missing("an index");
	return idx;
}

/*
 * The oids of le_lease and of its unique index on lease_key in the
 * extension schema nsp; raises an error when the extension is broken.
 */
void
le_rows_relids(Oid nsp, Oid *lease_relid, Oid *key_indexid)
{
	*lease_relid = le_rows_relid(nsp, LE_REL_LEASE);
	*key_indexid = le_rows_relid(nsp, LE_REL_LEASE_KEY);
}

/*
 * The attribute numbers of the 1.1 columns of the le_lease last
 * checked (0: the column is absent, as in the 1.0 table), looked up again
 * when its oid or number of columns changes or a relcache invalidation of
 * it arrives (rename, ALTER COLUMN ... TYPE, DROP COLUMN keep the number
 * of columns); le_rows_later_columns also checks the type of the columns
 * kept, at every open, against the descriptor it is given.
 */
static struct
{
	Oid			relid;
	int			natts;
	AttrNumber	att[LE_NLATER_COLS];
}			le_rows_later_cols;

static void
le_rows_later_cols_forget(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == le_rows_later_cols.relid)
		le_rows_later_cols.relid = InvalidOid;
}

/* Are the kept attribute numbers still those of the 1.1 columns of desc? */
static bool
le_rows_later_cols_current(Relation rel, TupleDesc desc)
{
	int			m;

	if (le_rows_later_cols.relid != RelationGetRelid(rel) ||
		le_rows_later_cols.natts != desc->natts)
		return false;
	for (m = 0; m < LE_NLATER_COLS; m++)
	{
		AttrNumber	a = le_rows_later_cols.att[m];

		if (a != 0 && (TupleDescAttr(desc, a - 1)->attisdropped ||
					   TupleDescAttr(desc, a - 1)->atttypid != le_later_types[m]))
			return false;
	}
	return true;
}

/*
 * Find the 1.1 columns (metrics, metadata, group) among those of le_lease after
 * the first Natts_le_lease.  The columns there that are not dropped must be
 * none (the 1.0 table) or exactly the 1.1 columns, each with its type: a
 * column of another name or type is refused (false), since a new row is
 * written without its NOT NULL or DEFAULT.
 */
static bool
le_rows_later_columns(Relation rel)
{
	static bool registered = false;
	TupleDesc	desc = RelationGetDescr(rel);
	int			found = 0;
	int			i;
	int			m;

	if (le_rows_later_cols_current(rel, desc))
		return true;
	if (!registered)
	{
		CacheRegisterRelcacheCallback(le_rows_later_cols_forget, (Datum) 0);
		registered = true;
	}
	le_rows_later_cols.relid = InvalidOid;
	memset(le_rows_later_cols.att, 0, sizeof(le_rows_later_cols.att));
	for (i = Natts_le_lease; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped)
			continue;
		for (m = 0; m < LE_NLATER_COLS; m++)
			if (strcmp(NameStr(att->attname), le_later_names[m]) == 0)
				break;
		if (m == LE_NLATER_COLS || att->atttypid != le_later_types[m] ||
			le_rows_later_cols.att[m] != 0)
			return false;
		le_rows_later_cols.att[m] = att->attnum;
		found++;
	}
	if (found != 0 && found != LE_NLATER_COLS)
	{
		memset(le_rows_later_cols.att, 0, sizeof(le_rows_later_cols.att));
		return false;
	}
	le_rows_later_cols.relid = RelationGetRelid(rel);
	le_rows_later_cols.natts = desc->natts;
	return true;
}

/*
 * Are the columns of rel the ones we read and write?  le_lease may have
 * the 1.1 columns too (le_rows_later_columns; at most
 * LE_LEASE_MAX_NATTS columns in all), the history table not.
 */
static bool
le_rows_layout_ok(Relation rel, const Oid *types, int natts)
{
	TupleDesc	desc = RelationGetDescr(rel);
	int			i;

	if (desc->natts != natts &&
		(types != le_lease_types || desc->natts < natts || desc->natts > LE_LEASE_MAX_NATTS))
		return false;
	for (i = 0; i < natts; i++)
		if (TupleDescAttr(desc, i)->attisdropped ||
			TupleDescAttr(desc, i)->atttypid != types[i])
			return false;
	return types != le_lease_types || le_rows_later_columns(rel);
}

/* A metric column's value in a deformed row, dflt when absent or NULL. */
static int64
le_rows_metric(const Datum *values, const bool *isnull, LeLaterColumn m, int64 dflt)
{
	AttrNumber	att = le_rows_later_cols.att[m];

	if (att == 0 || isnull[att - 1])
		return dflt;
	return DatumGetInt64(values[att - 1]);
}

/* An integer column of the 1.1 columns of a deformed row, dflt when absent or NULL. */
static int32
le_rows_later_int4(const Datum *values, const bool *isnull, LeLaterColumn m, int32 dflt)
{
	AttrNumber	att = le_rows_later_cols.att[m];

	if (att == 0 || isnull[att - 1])
		return dflt;
	return DatumGetInt32(values[att - 1]);
}

/* A varlena column of the 1.1 columns of a deformed row, copied; NULL when absent (1.0) or NULL. */
static struct varlena *
le_rows_later_varlena(const Datum *values, const bool *isnull, LeLaterColumn m)
{
	AttrNumber	att = le_rows_later_cols.att[m];

	if (att == 0 || isnull[att - 1])
		return NULL;
	return pg_detoast_datum_copy((struct varlena *) DatumGetPointer(values[att - 1]));
}

/* Open a table of ours and check that its columns are the ones we write. */
static Relation
le_rows_open(Oid relid, LOCKMODE mode, const Oid *types, int natts)
{
	Relation	rel = try_table_open(relid, mode);

	/* Dropped by a DROP EXTENSION that committed while we waited for the lock. */
	if (rel == NULL)
		le_rows_missing("a table");
	if (!le_rows_layout_ok(rel, types, natts))
		elog(ERROR, "leader_election: unexpected layout of table %s", RelationGetRelationName(rel));
	return rel;
}

/* A text column of a deformed row as a C string, NULL when NULL. */
static char *
le_rows_text(const Datum *values, const bool *isnull, int attnum)
{
	if (isnull[attnum - 1])
		return NULL;
	return TextDatumGetCString(values[attnum - 1]);
}

/* A timestamptz column of a deformed row, 0 when NULL. */
static TimestampTz
le_rows_time(const Datum *values, const bool *isnull, int attnum)
{
	if (isnull[attnum - 1])
		return 0;
	return DatumGetTimestampTz(values[attnum - 1]);
}

/*
 * What le_rows_read_unlocked gives the fence: the lease id, token, expiry
 * and holder role, without copying the key and holder (text, so detoasting
 * and a copy each; the fence knows the key and only asks whether there is a
 * holder): lease_key is NULL, holder is le_rows_held (not a name) when the
 * lease is held.
 */
static char le_rows_held[] = "(held)";

static void
le_rows_values_brief(const Datum *values, const bool *isnull, LeaseRow *row)
{
	memset(row, 0, sizeof(*row));
	row->lease_id = DatumGetInt64(values[Anum_le_lease_lease_id - 1]);
	row->holder = isnull[Anum_le_lease_holder - 1] ? NULL : le_rows_held;
	row->holder_role = isnull[Anum_le_lease_holder_role - 1] ? NULL :
		pstrdup(NameStr(*DatumGetName(values[Anum_le_lease_holder_role - 1])));
	row->fencing_token = DatumGetInt64(values[Anum_le_lease_fencing_token - 1]);
	row->expires_at = le_rows_time(values, isnull, Anum_le_lease_expires_at);
	row->group_partition = -1;	/* the group is not read here */
}

/*
 * Copy a deformed le_lease tuple into *row (strings and metadata in the
 * current context; the column types are those le_rows_open checked).
 */
static void
le_rows_values_row(const Datum *values, const bool *isnull, LeaseRow *row)
{
	le_rows_values_brief(values, isnull, row);
	row->lease_key = le_rows_text(values, isnull, Anum_le_lease_lease_key);
	row->holder = le_rows_text(values, isnull, Anum_le_lease_holder);
	row->token_timeline = DatumGetInt32(values[Anum_le_lease_token_timeline - 1]);
	row->acquired_at = le_rows_time(values, isnull, Anum_le_lease_acquired_at);
	row->renewed_at = le_rows_time(values, isnull, Anum_le_lease_renewed_at);
	row->transitions = DatumGetInt64(values[Anum_le_lease_transitions - 1]);
	row->token_system_id = DatumGetInt64(values[Anum_le_lease_token_system_id - 1]);
	row->history_min_ended_at = le_rows_time(values, isnull, Anum_le_lease_history_min_ended_at);
	row->metadata = le_rows_later_varlena(values, isnull, LE_COL_METADATA);
	row->expiries = le_rows_metric(values, isnull, LE_COL_EXPIRIES, 0);
	row->force_releases = le_rows_metric(values, isnull, LE_COL_FORCE_RELEASES, 0);
	row->ttl_us = le_rows_metric(values, isnull, LE_COL_TTL_US, 0);
	row->freed_at = le_rows_metric(values, isnull, LE_COL_FREED_AT, 0);
	row->renew_margin_us = le_rows_metric(values, isnull, LE_COL_RENEW_MARGIN_US, -1);
	row->renew_margin_min_us = le_rows_metric(values, isnull, LE_COL_RENEW_MARGIN_MIN_US, -1);
	row->group_id = le_rows_metric(values, isnull, LE_COL_GROUP_ID, 0);
	row->group_partition = le_rows_later_int4(values, isnull, LE_COL_GROUP_PARTITION, -1);
	row->group_held = le_rows_later_varlena(values, isnull, LE_COL_GROUP_HELD);
}

/* Copy the le_lease tuple in slot into *row (strings in the current context). */
static void
le_rows_slot_row(TupleTableSlot *slot, LeaseRow *row)
{
	slot_getallattrs(slot);
	le_rows_values_row(slot->tts_values, slot->tts_isnull, row);
}

/* Does the text datum d equal the C string key?  (No copy: runs per fenced write.) */
static bool
le_rows_text_equals(Datum d, const char *key)
{
	text	   *t = DatumGetTextPP(d);
	size_t		len = VARSIZE_ANY_EXHDR(t);
	bool		equal;

	equal = (len == strlen(key) && memcmp(VARDATA_ANY(t), key, len) == 0);
	if ((Pointer) t != DatumGetPointer(d))
		pfree(t);
	return equal;
}

/*
 * Can block blkno of rel be read?  For the fence's TID hint, which may point
 * past the end of le_lease after another backend's VACUUM truncated it.
 * smgrnblocks() is an lseek() outside recovery, and perf showed it on every
 * fenced write, so the size this backend last saw is used when the block
 * lies below it.  That size only errs low while our smgr handle lives: the
 * table grows only (a block below it still exists), and whatever shrinks
 * it (smgrtruncate, under AccessExclusiveLock) sends a shared invalidation
 * that closes every backend's handle, size included, which we have
 * processed once our lock on rel was granted (the caller holds it).  A
 * block at or past it asks the file again, which also refreshes the size.
 */
static bool
le_rows_block_exists(Relation rel, BlockNumber blkno)
{
	SMgrRelation smgr = RelationGetSmgr(rel);
	BlockNumber known = smgr->smgr_cached_nblocks[MAIN_FORKNUM];

	if (known != InvalidBlockNumber && blkno < known)
		return true;
	return blkno < smgrnblocks(smgr, MAIN_FORKNUM);
}

/*
 * Is *hint (when hint is not NULL) a TID whose block can be read?  A hint
 * past the end of the table (VACUUM can truncate trailing pages; the
 * caller's lock on rel excludes truncation while it reads) is dropped.
 */
static bool
le_rows_hint_usable(Relation rel, ItemPointer hint)
{
	if (hint == NULL || !ItemPointerIsValid(hint))
		return false;
	if (!le_rows_block_exists(rel, ItemPointerGetBlockNumber(hint)))
	{
		ItemPointerSetInvalid(hint);
		return false;
	}
	return true;
}

/*
 * Fetch into slot the version that snap sees on the HOT chain whose root is
 * *hint (when hint is not NULL and valid); false when there is none.  A
 * hint past the end of the table (VACUUM can truncate trailing pages; the
 * caller's lock on rel excludes truncation while we read) is dropped.  The
 * caller checks that what it found is the row it wanted.
 */
static bool
le_rows_fetch_hinted(Relation rel, ItemPointer hint, Snapshot snap, TupleTableSlot *slot)
{
	IndexFetchTableData *fetch;
	ItemPointerData tid;
	bool		call_again = false;
	bool		all_dead = false;
	bool		found;

	if (!le_rows_hint_usable(rel, hint))
		return false;
	fetch = table_index_fetch_begin(rel);
	tid = *hint;
	found = table_index_fetch_tuple(fetch, &tid, snap, slot, &call_again, &all_dead);
	table_index_fetch_end(fetch);
	return found;
}

/*
 * The fence's fast path: the version of key's le_lease row that
 * SnapshotSelf sees on the HOT chain whose root is *hint, read on the page
 * under a share lock of its buffer and copied into *row, without a slot or
 * an index fetch (callgrind: about 1,500 instructions less per read than
 * le_rows_find).  false when the hint is unset, points past the end of
 * the table, or leads to nothing visible or to a row of another key: the
 * caller then looks by le_rows_find, which corrects the hint.  Like
 * le_rows_find it is not used at SERIALIZABLE (no hint there).
 */
static bool
le_rows_read_in_place(Relation rel, const char *key, ItemPointer hint, Buffer recent,
					  LeaseRow *row, bool *written_by_us, LeaseRowStamp *stamp)
{
	Buffer		buf;
	HeapTupleData tup;
	ItemPointerData tid;
	bool		all_dead;
	bool		found;

	if (BufferIsValid(recent))
	{
		/* without a lock on rel: only a block still in that buffer (see le_rows_read_unlocked) */
		if (hint == NULL || !ItemPointerIsValid(hint) ||
			!ReadRecentBuffer(rel->rd_node, MAIN_FORKNUM, ItemPointerGetBlockNumber(hint), recent))
			return false;
		buf = recent;
	}
	else
	{
		if (!le_rows_hint_usable(rel, hint))
			return false;
		buf = ReadBuffer(rel, ItemPointerGetBlockNumber(hint));
	}
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	tid = *hint;
	found = heap_hot_search_buffer(&tid, rel, buf, SnapshotSelf, &tup, &all_dead, true);
	if (found)
	{
		Datum		values[LE_LEASE_MAX_NATTS];
		bool		isnull[LE_LEASE_MAX_NATTS];

		heap_deform_tuple(&tup, RelationGetDescr(rel), values, isnull);
		found = !isnull[Anum_le_lease_lease_key - 1] &&
			le_rows_text_equals(values[Anum_le_lease_lease_key - 1], key);
		if (found)
		{
			bool		ours;

			if (BufferIsValid(recent))
				le_rows_values_brief(values, isnull, row);
			else
				le_rows_values_row(values, isnull, row);
			ours = TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetRawXmin(tup.t_data));
			if (written_by_us != NULL)
				*written_by_us = ours;
			stamp->buffer = buf;

			/*
			 * The page's LSN vouches for this version only if the version
			 * is final as far as anyone can see: committed by another
			 * transaction (a version of ours could still be rolled back
			 * with a subtransaction, without any change of the page), with
			 * nobody deleting, updating or locking it (an updater that had
			 * already written here would commit without touching the page
			 * again); and only if every later change of this file's pages
			 * is WAL-logged.  At wal_level = minimal it is not: a file
			 * created in a transaction (ALTER TABLE le_lease SET
			 * TABLESPACE copies every page, LSN included, into a new one)
			 * is then written without WAL until that transaction ends, a
			 * takeover in it included (test/t/034_fence_wal_minimal.pl).
			 * The file is recorded too, so that the commit compares pages
			 * of the same file.
			 */
			if (!ours && XLogIsNeeded() && RelationNeedsWAL(rel) &&
				((tup.t_data->t_infomask & HEAP_XMAX_INVALID) ||
				 !TransactionIdIsValid(HeapTupleHeaderGetRawXmax(tup.t_data))))
			{
				stamp->node = rel->rd_node;
				stamp->blkno = ItemPointerGetBlockNumber(&tid);
				stamp->lsn = BufferGetLSNAtomic(buf);
			}
		}
	}
	LockBuffer(buf, BUFFER_LOCK_UNLOCK);
	ReleaseBuffer(buf);
	return found;
}

/*
 * Find the version of key's le_lease row that snap sees and store it in
 * slot; false when there is none.
 *
 * *hint, when not NULL and valid, is the heap TID the unique index on
 * lease_key gave for this key last time (the root of the row's HOT chain):
 * renewals and grants change no indexed column, so their versions stay on
 * that chain and a HOT-chain fetch from it finds the visible version
 * without an index scan.  A hint past the end of the table (VACUUM can
 * truncate trailing pages; the caller's lock on rel excludes truncation
 * while we read) is dropped; a chain that yields nothing visible, or a row
 * of another key (the line pointer was pruned and reused), falls back to
 * the index, which then updates *hint.
 */
static bool
le_rows_find(Relation rel, Oid key_indexid, const char *key, Snapshot snap,
			 TupleTableSlot *slot, ItemPointer hint)
{
	bool		found = false;

	if (le_rows_fetch_hinted(rel, hint, snap, slot))
	{
		bool		isnull;
		Datum		d = slot_getattr(slot, Anum_le_lease_lease_key, &isnull);

		found = !isnull && le_rows_text_equals(d, key);
	}

	if (!found)
	{
		Relation	idx = le_rows_open_index(key_indexid, AccessShareLock);
		IndexScanDesc scan;
		ScanKeyData skey;
		ItemPointer tid;

		ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber, InvalidOid,
							   idx->rd_indcollation[0], F_TEXTEQ,
							   CStringGetTextDatum(key));
		scan = index_beginscan(rel, idx, snap, 1, 0);
		index_rescan(scan, &skey, 1, NULL, 0);
		while ((tid = index_getnext_tid(scan, ForwardScanDirection)) != NULL)
		{
			ItemPointerData root = *tid;

			if (index_fetch_heap(scan, slot))
			{
				found = true;
				if (hint != NULL)
					*hint = root;
				break;
			}
		}
		index_endscan(scan);
		index_close(idx, AccessShareLock);
	}
	return found;
}

/*
 * Where this backend last found the row of each lease key: the root TID of
 * its HOT chain, a hint for le_rows_find, so that most lookups of a lease
 * row in le_acquire, le_renew and le_release fetch that chain directly
 * instead of descending the unique index (callgrind: about 12,000
 * instructions less per lookup, and a cycle makes four).  Entries are keyed
 * by table and a hash of the key, not the key: a hint is only ever a place
 * to look, and le_rows_find accepts what it finds there only when it is a
 * version of this very key that the snapshot sees (at most one version of a
 * key is visible to a snapshot: the unique index); anything else, a
 * collision of two keys' hashes, a line pointer reused after pruning, a
 * table rewritten by VACUUM FULL, falls back to the index, which then
 * corrects the hint.  Not used at SERIALIZABLE: there the index scan also
 * takes the predicate locks that a lookup is expected to leave.  Bounded:
 * the table starts afresh when it reaches LE_ROW_HINTS_MAX entries.
 */
#define LE_ROW_HINTS_MAX	16384

typedef struct LeaseRowHintKey
{
	Oid			relid;			/* le_lease or le_lease_history */
	uint32		hash;			/* of the row's identity (le_rows_key_hint) */
} LeaseRowHintKey;

typedef struct LeaseRowHint
{
	LeaseRowHintKey hkey;
	ItemPointerData root;		/* invalid until the index gave one */
} LeaseRowHint;

static HTAB *le_row_hints = NULL;

/* The hint slot of a row of table relid whose identity hashes to hash. */
static ItemPointer
le_rows_hint(Oid relid, uint32 hash)
{
	LeaseRowHintKey hkey;
	LeaseRowHint *hint;
	bool		found;

	if (le_row_hints != NULL && hash_get_num_entries(le_row_hints) >= LE_ROW_HINTS_MAX)
	{
		hash_destroy(le_row_hints);
		le_row_hints = NULL;
	}
	if (le_row_hints == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(LeaseRowHintKey);
		ctl.entrysize = sizeof(LeaseRowHint);
		ctl.hcxt = TopMemoryContext;
		le_row_hints = hash_create("leader_election row hints", 1024, &ctl,
								   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	memset(&hkey, 0, sizeof(hkey));
	hkey.relid = relid;
	hkey.hash = hash;
	hint = (LeaseRowHint *) hash_search(le_row_hints, &hkey, HASH_ENTER, &found);
	if (!found)
		ItemPointerSetInvalid(&hint->root);
	return &hint->root;
}

/* The hint slot of the le_lease row of key (NULL: look it up by index only). */
static ItemPointer
le_rows_key_hint(Oid relid, const char *key)
{
	if (IsolationIsSerializable())
		return NULL;
	return le_rows_hint(relid, hash_bytes((const unsigned char *) key, strlen(key)));
}

/*
 * Read the latest committed version of the lease row of key into *row
 * (strings in the current memory context); false when the key has no row.
 * *written_by_us, when not NULL, tells whether the version read was written
 * by the current transaction (which then holds the row's lock to its end).
 *
 * For the fence, which runs for every protected row written: no SPI, no
 * user switch and no privilege check (the caller never sees more than the
 * row's token, holder role and expiry, which le_leases shows to everyone
 * anyway).  Visibility is judged here, at the time of the read
 * (SnapshotSelf, see below), so a caller that holds the fence lock sees
 * every token change committed before the lock was granted, whatever its
 * own transaction snapshot or isolation level.  hint: see le_rows_find.
 */
bool
le_rows_read_latest(Oid lease_relid, Oid key_indexid, const char *key,
					 ItemPointer hint, LeaseRow *row, bool *written_by_us,
					 LeaseRowStamp *stamp)
{
	Relation	rel;
	Snapshot	snap;
	TupleTableSlot *slot;
	bool		found;

	rel = le_rows_open(lease_relid, AccessShareLock, le_lease_types, Natts_le_lease);
	le_rows_file_seen(rel);

	/*
	 * The caller's index oid was looked up before the invalidations that
	 * opening the table just read: a REINDEX CONCURRENTLY that committed
	 * meanwhile replaced it by an index of the same name.  With the table
	 * locked, the oid found by name now is current (an index build or drop
	 * waits for our lock).
	 */
	key_indexid = le_rows_relid(RelationGetNamespace(rel), LE_REL_LEASE_KEY);

	/*
	 * SnapshotSelf judges each version when it is looked at: committed (by
	 * the commit log, once the writer has left the proc array, which it does
	 * before releasing its locks) or ours.  That is what a snapshot taken at
	 * that moment would show, without building and registering one
	 * (callgrind: about 700 instructions per read, and ProcArrayLock taken
	 * shared each time).  On one HOT chain the versions are looked at in
	 * order, so exactly one is seen even while a renewal commits.  Only
	 * across two index entries (a non-HOT update, or a row deleted and
	 * created again, committing while we look) can it see none: then look
	 * again with an MVCC snapshot taken now.
	 */
	stamp->lsn = InvalidXLogRecPtr;
	stamp->buffer = InvalidBuffer;
	found = le_rows_read_in_place(rel, key, hint, InvalidBuffer, row, written_by_us, stamp);
	if (!found)
	{
		slot = table_slot_create(rel, NULL);
		found = le_rows_find(rel, key_indexid, key, SnapshotSelf, slot, hint);
		if (!found)
		{
			snap = RegisterSnapshot(GetLatestSnapshot());
			found = le_rows_find(rel, key_indexid, key, snap, slot, hint);
			UnregisterSnapshot(snap);
		}
		if (found)
		{
			bool		isnull;
			Datum		xmin = slot_getsysattr(slot, MinTransactionIdAttributeNumber, &isnull);

			le_rows_slot_row(slot, row);
			if (written_by_us != NULL)
				*written_by_us = !isnull &&
					TransactionIdIsCurrentTransactionId(DatumGetTransactionId(xmin));
		}
		ExecDropSingleTupleTableSlot(slot);
	}

	/*
	 * The lock goes at once.  Kept to the transaction's end it would save
	 * about 1,000 instructions per fenced transaction (callgrind), but an
	 * idle or frozen fenced writer would then hold it: an administrator's
	 * VACUUM FULL, CLUSTER or DROP EXTENSION would wait for that writer, and
	 * every lease call would queue behind them, takeovers included.
	 */
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * le_rows_read_latest without taking a lock on le_lease, for the fence's
 * early check of each write: the version of key's row that SnapshotSelf
 * sees on the HOT chain whose root is *hint, read only if the hint's block
 * is still in shared buffer recent (the buffer an earlier read found it
 * in; ReadRecentBuffer never reads a block from disk).  false otherwise
 * (no hint or buffer, the block left that buffer, nothing visible there or
 * a row of another key, le_lease gone or of another layout): the caller
 * then reads with le_rows_read_latest.  *stamp as there; *row has the
 * lease id, token, expiry and holder role, and holder is NULL or not as
 * the row's, but neither it nor the key is copied (le_rows_values_brief).
 * The lock's
 * acquisition and release were two thirds of the cost of a fenced write's
 * read (callgrind).
 *
 * Why no lock is needed.  Row changes (takeovers, renewals, releases) are
 * judged on the page under the buffer's share lock, as the locked read
 * does; the table lock only keeps le_lease's file and layout in place, and
 * here what stands in for it is:
 *	- the relcache entry is brought up to date first (AcceptInvalidationMessages,
 *	  as a lock acquisition does), and the block is read only from its
 *	  current file (rd_node: ReadRecentBuffer checks the buffer's tag);
 *	- a layout change that committed before our invalidations were read is
 *	  seen (le_rows_layout_ok); one committing at this moment changes no
 *	  page, and the row was written with the layout we check against.
 * A rewrite that has queued its invalidation after we read them (or whose
 * invalidation we have not seen yet) can have released its lock, and a
 * takeover can have committed in the new file, while the old file's pages
 * are still in their buffers (they are dropped after the rewrite released
 * its locks): then this read sees the lease as it was before the rewrite
 * and may accept a write that the takeover made stale.  That is why this
 * check only decides whether to reject early: the commit-time check
 * decides, under the fence lock and with the invalidations read after it
 * was granted (le_rows_page_unchanged, or a read with the table lock).
 */
bool
le_rows_read_unlocked(Oid lease_relid, const char *key, ItemPointer hint, Buffer recent,
					   LeaseRow *row, LeaseRowStamp *stamp)
{
	Relation	rel;
	bool		found = false;

	if (!BufferIsValid(recent) || hint == NULL || !ItemPointerIsValid(hint))
		return false;
	AcceptInvalidationMessages();
	rel = RelationIdGetRelation(lease_relid);
	if (rel == NULL)
		return false;
	stamp->lsn = InvalidXLogRecPtr;
	stamp->buffer = InvalidBuffer;
	if (rel->rd_rel->relkind == RELKIND_RELATION &&
		le_rows_layout_ok(rel, le_lease_types, Natts_le_lease))
	{
		le_rows_file_seen(rel);
		found = le_rows_read_in_place(rel, key, hint, recent, row, NULL, stamp);
	}
	RelationClose(rel);
	return found;
}

/*
 * For the fence's commit-time check, once the lease's fence lock is held:
 * hold le_lease in AccessShareLock to the end of the transaction, which
 * waits for whoever holds it against readers (a TRUNCATE, a rewrite, DROP
 * EXTENSION) and then reads the invalidations.  Such a transaction is seen
 * as committed before it sends them (AtEOXact_Inval runs after
 * ProcArrayEndTransaction), and when it also made the key's row anew
 * (TRUNCATE le_lease and a grant: a new lease id, whose fence lock is not
 * the one we hold), nothing else makes us wait for it, and a stale write
 * would commit (035_fence_rewrite_race.pl, the TRUNCATE).  Held to the
 * end, the lock also keeps such a transaction from starting between the
 * check and our commit record.  It is taken after the fence lock, the
 * order of the lease calls (fence lock, then le_lease), and held only while
 * the transaction commits, as the fence lock is, so no idle writer holds
 * it.
 */
void
le_rows_hold_lease_table(Oid lease_relid)
{
	LockRelationOid(lease_relid, AccessShareLock);
}

/*
 * le_rows_row_unchanged without opening le_lease: when the page is of the
 * table's current file and still in the shared buffer it was read from,
 * set *unchanged (its LSN is the one in *stamp) and return true; false when
 * that cannot be told this way (no stamp, another file, or the block left
 * that buffer).  Any change of the version since the read, a token change
 * included, wrote on this very page if the file is the same.  The file is
 * judged by what this backend last saw of le_lease with the invalidations
 * read now (le_rows_file_seen): a rewrite or truncation of le_lease sends
 * its invalidation before it releases its lock, but drops the old file's
 * buffers only after (smgrDoPendingDeletes runs after the locks are
 * released), and not at all until its own transaction ends, so a page still
 * found in its buffer can belong to a file that the table has left
 * (a release after a CLUSTER in the writer's own transaction, or a takeover
 * after another session's CLUSTER: 035_fence_rewrite_race.pl).  At the
 * commit-time check, the fence lock and then a lock on le_lease were
 * granted before we read the invalidations: a token change of the lease
 * row we judged that committed before that took its locks after the
 * rewrite had queued its invalidation, and a rewrite or truncation holding
 * le_lease (which may have made the key's row anew) has ended, so we read
 * them here (le_rows_hold_lease_table).  Used without those locks, by the
 * write-time check, it only decides whether to reject early.
 */
bool
le_rows_page_unchanged(Oid lease_relid, const LeaseRowStamp *stamp, bool *unchanged)
{
	if (XLogRecPtrIsInvalid(stamp->lsn) || !BufferIsValid(stamp->buffer))
		return false;
	AcceptInvalidationMessages();
	if (le_rows_file_relid != lease_relid || !RelFileNodeEquals(le_rows_file_node, stamp->node) ||
		!ReadRecentBuffer(stamp->node, MAIN_FORKNUM, stamp->blkno, stamp->buffer))
		return false;
	LockBuffer(stamp->buffer, BUFFER_LOCK_SHARE);
	*unchanged = (BufferGetLSNAtomic(stamp->buffer) == stamp->lsn);
	UnlockReleaseBuffer(stamp->buffer);
	return true;
}

/*
 * Is the version that le_rows_read_latest returned with *stamp still the
 * latest, unchanged?  True when the page it is on has the same LSN as at that
 * read: every change of a version (an update, a delete, a row lock, pruning or
 * freezing) writes WAL and sets the page's LSN to the end of its record, which
 * lies after anything written before the read, so an equal LSN means that
 * nobody has changed anything on the page since.  The caller still judges the
 * expiry by the clock, and holds whatever makes "since" matter (the fence
 * lock: a token change that committed before it was granted has changed the
 * page).  Only pages of the same file are compared: a rewrite of le_lease in
 * between (VACUUM FULL, CLUSTER, TRUNCATE, SET TABLESPACE) gives it a new one.
 * About half the cost of reading the row again (callgrind).  This rests on two
 * rules of PostgreSQL 15, the version built for: every change of a heap page's
 * contents is WAL-logged and sets the page's LSN, and above wal_level =
 * minimal a page keeps its LSN only while its file is the same (ALTER TABLE
 * ... SET LOGGED/UNLOGGED rewrite the table into a new file).  A version that
 * changed either rule (a persistence change without a rewrite, a page copy
 * without WAL) would need this shortcut revisited.
 */
bool
le_rows_row_unchanged(Oid lease_relid, const LeaseRowStamp *stamp)
{
	Relation	rel;
	bool		unchanged = false;

	if (XLogRecPtrIsInvalid(stamp->lsn))
		return false;

	/* the caller holds le_lease (le_rows_hold_lease_table) */
	if (le_rows_page_unchanged(lease_relid, stamp, &unchanged))
		return unchanged;
	rel = le_rows_open(lease_relid, AccessShareLock, le_lease_types, Natts_le_lease);
	if (RelFileNodeEquals(rel->rd_node, stamp->node) && RelationNeedsWAL(rel) &&
		le_rows_block_exists(rel, stamp->blkno))
	{
		Buffer		buf = ReadBuffer(rel, stamp->blkno);

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		unchanged = (BufferGetLSNAtomic(buf) == stamp->lsn);
		UnlockReleaseBuffer(buf);
	}
	table_close(rel, AccessShareLock);
	return unchanged;
}

/*
 * Replace the snapshot this call keeps registered by a new one: the
 * transaction snapshot at REPEATABLE READ and SERIALIZABLE, else a fresh
 * one.  Taken after CommandCounterIncrement, it sees this transaction's
 * earlier changes.
 */
static Snapshot
le_rows_new_snapshot(LeaseStoreState *st)
{
	if (st->snap != NULL)
		UnregisterSnapshot(st->snap);
	st->snap = NULL;
	st->snap = RegisterSnapshot(IsolationUsesXactSnapshot() ? GetTransactionSnapshot()
								: GetLatestSnapshot());
	return st->snap;
}

/*
 * le_lease, opened once per call by its first peek or lock and kept open to
 * the call's end (opening a relation, with its lock, is about 1,500
 * instructions).  Its AccessShareLock is given back by le_rows_let_go unless
 * a row version was read for writing or written (see le_rows_lock).
 */
static Relation
le_rows_lease(LeaseStoreState *st)
{
	if (st->lease_rel == NULL)
		st->lease_rel = le_rows_open(st->lease_relid, AccessShareLock,
									 le_lease_types, Natts_le_lease);
	return st->lease_rel;
}

/*
 * Close le_lease if this call has it open, keeping its lock only when
 * needed; for the end of the call and before any wait for a fence lock (so
 * that nobody waits for a table lock of ours while we wait for theirs).
 */
void
le_rows_let_go(LeaseStoreState *st)
{
	if (st->lease_rel != NULL)
		table_close(st->lease_rel, st->keep_lease_lock ? NoLock : AccessShareLock);
	st->lease_rel = NULL;
	st->peeked_tuple = NULL;	/* its TID is only safe under our table lock */
	st->adopted = false;
	if (!st->keep_lease_lock && st->scan_snap != NULL)
	{
		/* nor are those of a group scan: le_rows_group_adopt refuses them now */
		UnregisterSnapshot(st->scan_snap);
		st->scan_snap = NULL;
	}
}

/* Release what le_rows_peek and le_rows_lock kept for the rest of the call. */
void
le_rows_end(LeaseStoreState *st)
{
	le_rows_let_go(st);
	if (st->snap != NULL)
		UnregisterSnapshot(st->snap);
	st->snap = NULL;
	if (st->scan_snap != NULL)
		UnregisterSnapshot(st->scan_snap);
	st->scan_snap = NULL;
	st->adopted = false;
	le_rows_forget_due_history(st);
	ItemPointerSetInvalid(&st->tid);
	st->locked_tuple = NULL;
	st->peeked_tuple = NULL;
	st->tentative = false;
}

/*
 * Read the row of a lease into *row without locking it, for a decision that
 * le_rows_lock confirms before anything is written (or that only
 * refuses); false when the key has no row.  Writes nothing, takes no
 * transaction id.
 *
 * Locks: AccessShareLock on le_lease (and its key index while it is
 * searched), given back by le_rows_let_go at the end of the call or before
 * a wait; no row lock.
 */
bool
le_rows_peek(LeaseStoreState *st, const char *key, LeaseRow *row)
{
	Relation	rel;
	TupleTableSlot *slot;
	bool		found;

	/* A version handed in by le_rows_group_adopt stands for the read. */
	if (st->adopted && st->peeked_tuple != NULL && strcmp(st->peeked_row.lease_key, key) == 0)
	{
		st->adopted = false;
		*row = st->peeked_row;
		return true;
	}
	st->adopted = false;
	CommandCounterIncrement();
	rel = le_rows_lease(st);
	slot = table_slot_create(rel, NULL);
	found = le_rows_find(rel, st->key_indexid, key, le_rows_new_snapshot(st), slot,
						 le_rows_key_hint(st->lease_relid, key));
	if (found)
	{
		MemoryContext old = MemoryContextSwitchTo(st->caller_cxt);

		le_rows_slot_row(slot, row);
		st->peeked_tuple = ExecCopySlotHeapTuple(slot);
		st->peeked_tuple->t_self = slot->tts_tid;
		st->peeked_row = *row;
		MemoryContextSwitchTo(old);
	}
	ExecDropSingleTupleTableSlot(slot);
	/*
	 * A refusal leaves no lock behind: le_rows_let_go
	 * (sql/lease_cheap_refusals_hot_renewals.sql).
	 */
	return found;
}

/* The standard error of a row changed under a transaction-snapshot lock. */
static void
le_rows_serialization_failure(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not serialize access due to concurrent update"),
			 errhint("The lease changed after this transaction's snapshot was taken; retry the transaction.")));
}

/*
 * Lock the row of a lease (as SELECT ... FOR UPDATE) and read the locked
 * version into *row; false when the key has no row.  See the header
 * comment for the version locked at each isolation level.
 *
 * check, when not NULL, is first asked about the version found (in *row):
 * if it says no, the row is not locked, the call returns false and leaves
 * no lock behind at all (a failed renewal must not block the holder or a
 * takeover), saving a separate unlocked read for callers that only go on
 * when the row looks right.  The caller decides again on the version
 * locked, which at READ COMMITTED may be a later one.
 *
 * Locks: the lease row (unless the version is returned tentatively, for
 * le_rows_write to lock by updating it) and RowExclusiveLock on le_lease,
 * both to the end of the transaction; waits for them are bounded by the
 * lock_timeout le_store_begin put in force.  Call without holding anything
 * that a holder of the row may wait for, save the lease's fence lock
 * (taken first: lock order fence lock, then row lock).
 */
bool
le_rows_lock(LeaseStoreState *st, const char *key, LeaseRow *row,
			  LeaseRowCheck check, void *arg)
{
	Relation	rel;
	TupleTableSlot *slot;
	bool		found = false;
	bool		writing = false;
	int			attempt;

	CommandCounterIncrement();
	rel = le_rows_lease(st);

	/*
	 * The version this call's peek read, when nothing was waited for since
	 * (le_rows_let_go forgets it before a wait) and nothing locked: our
	 * table lock and the peek's snapshot, both held since, keep its TID
	 * naming that version, so it is returned as the tentative version.
	 * Finding the row again with a new snapshot could only give a later
	 * version, and a version changed since the peek makes the tentative
	 * write fail anyway (then the call locks and decides again).
	 */
	if (st->peeked_tuple != NULL && !st->must_lock && !st->locked &&
		strcmp(st->peeked_row.lease_key, key) == 0)
	{
		bool		go;

		*row = st->peeked_row;
		go = (check == NULL || check(row, arg));
		if (go)
		{
			st->tid = st->peeked_tuple->t_self;
			st->locked_tuple = st->peeked_tuple;
			st->tentative = true;
			st->keep_lease_lock = true;
		}
		st->peeked_tuple = NULL;
		return go;
	}
	st->peeked_tuple = NULL;
	slot = table_slot_create(rel, NULL);

	/*
	 * At READ COMMITTED a version whose row was deleted since it was found
	 * (only a superuser can delete lease rows) is looked up once more.
	 */
	for (attempt = 0; attempt < 2 && !found; attempt++)
	{
		ItemPointerData tid;
		TM_FailureData tmfd;
		TM_Result	res;

		if (!le_rows_find(rel, st->key_indexid, key, le_rows_new_snapshot(st), slot,
						  le_rows_key_hint(st->lease_relid, key)))
			break;
		if (check != NULL && attempt == 0)
		{
			MemoryContext old = MemoryContextSwitchTo(st->caller_cxt);
			bool		go;

			le_rows_slot_row(slot, row);
			MemoryContextSwitchTo(old);
			go = check(row, arg);
			if (!go)
				break;
		}
		if (!st->must_lock)
		{
			/*
			 * Tentative: the version found is what the caller decides on and
			 * what le_rows_write updates, if it is still the latest then
			 * (no row-lock WAL record, no second lookup); otherwise the
			 * write fails and the caller decides again on a locked version.
			 */
			found = true;
			st->tentative = true;
			break;
		}
		if (!writing)
		{
			/* What SELECT ... FOR UPDATE says, as SPI did before. */
			PreventCommandIfReadOnly("SELECT FOR UPDATE");
			if (!st->lease_rowex)
				LockRelationOid(st->lease_relid, RowExclusiveLock);
			st->lease_rowex = true;
			st->keep_lease_lock = true;
			le_durable_locks_taken();
			writing = true;
		}
		tid = slot->tts_tid;
		res = table_tuple_lock(rel, &tid, st->snap, slot, GetCurrentCommandId(true),
							   LockTupleExclusive, LockWaitBlock,
							   IsolationUsesXactSnapshot() ? 0 : TUPLE_LOCK_FLAG_FIND_LAST_VERSION,
							   &tmfd);
		switch (res)
		{
			case TM_Ok:
				found = true;
				break;
			case TM_Updated:
			case TM_Deleted:
				if (IsolationUsesXactSnapshot())
					le_rows_serialization_failure();
				break;
			default:
				elog(ERROR, "leader_election: unexpected result %d locking the row of lease \"%s\"",
					 (int) res, key);
		}
	}

	if (found)
	{
		MemoryContext old = MemoryContextSwitchTo(st->caller_cxt);

		st->tid = slot->tts_tid;
		st->locked_tuple = ExecCopySlotHeapTuple(slot);
		le_rows_slot_row(slot, row);
		MemoryContextSwitchTo(old);
		if (strcmp(row->lease_key, key) != 0)
			elog(ERROR, "leader_election: locked the row of lease \"%s\" while looking for \"%s\"",
				 row->lease_key, key);
		if (!st->tentative)
			st->locked = true;
	}
	ExecDropSingleTupleTableSlot(slot);

	/*
	 * Nothing locked: leave no table lock behind either (le_rows_let_go).
	 * A tentative version keeps its table lock to the end of the
	 * transaction: its TID must still name that version when le_rows_write
	 * updates it, which a rewrite in between (VACUUM FULL, CLUSTER,
	 * TRUNCATE: all need ACCESS EXCLUSIVE) would break.
	 */
	if (st->tentative)
		st->keep_lease_lock = true;
	return found;
}

/*
 * Make index entries for a tuple just inserted into rel, or for the new
 * version of a non-HOT update, through the executor's index insertion.
 */
static void
le_rows_index_tuple(Relation rel, HeapTuple tup)
{
	EState	   *estate = CreateExecutorState();
	ResultRelInfo *rri = makeNode(ResultRelInfo);
	TupleTableSlot *slot = ExecInitExtraTupleSlot(estate, RelationGetDescr(rel),
												  &TTSOpsHeapTuple);

	InitResultRelInfo(rri, rel, 1, NULL, 0);
	ExecOpenIndices(rri, false);
	ExecStoreHeapTuple(tup, slot, false);
	list_free(ExecInsertIndexTuples(rri, slot, estate, false, false, NULL, NIL));
	ExecCloseIndices(rri);
	ExecResetTupleTable(estate->es_tupleTable, false);
	FreeExecutorState(estate);
}

/* Update a tuple of ours that no one else can be changing, plus its index entries. */
static void
le_rows_update(Relation rel, ItemPointer otid, HeapTuple newtup)
{
	simple_heap_update(rel, otid, newtup);
	if (!HeapTupleIsHeapOnly(newtup))
		le_rows_index_tuple(rel, newtup);
}

/* The rules of le_lease's CHECK constraints, which we do not evaluate as SQL. */
static void
le_rows_check(const LeaseRow *row)
{
	if (row->fencing_token < 0 ||
		(row->holder == NULL) != (row->holder_role == NULL) ||
		(row->holder != NULL && row->expires_at == 0) ||
		(row->group_partition >= 0 && row->group_id == 0))
		elog(ERROR, "leader_election: refusing to write an inconsistent row for lease \"%s\"",
			 row->lease_key);
}

/* Datum and null flag of a timestamp that is 0 when the column should be NULL. */
static Datum
le_rows_time_datum(TimestampTz t, bool *isnull)
{
	*isnull = (t == 0);
	return TimestampTzGetDatum(t);
}

/* Datum and null flag of a text column (NULL stays NULL). */
static Datum
le_rows_text_datum(const char *s, bool *isnull)
{
	*isnull = (s == NULL);
	return s ? CStringGetTextDatum(s) : (Datum) 0;
}

/* Datum and null flag of a name column (NULL stays NULL). */
static Datum
le_rows_name_datum(const char *s, bool *isnull)
{
	Name		n = (Name) palloc0(NAMEDATALEN);

	*isnull = (s == NULL);
	if (s)
		namestrcpy(n, s);
	return NameGetDatum(n);
}

/* Set the metric columns of a row to write, those the table has (replace). */
static void
le_rows_metric_values(const LeaseRow *row, Datum *values, bool *nulls, bool *replace)
{
	const AttrNumber *att = le_rows_later_cols.att;
	const int64 v[LE_NMETRIC_COLS] = {
		row->expiries, row->force_releases, row->ttl_us, row->freed_at,
		row->renew_margin_us, row->renew_margin_min_us
	};
	const int64 null_value[LE_NMETRIC_COLS] = {-1, -1, 0, 0, -1, -1};
	int			m;

	for (m = 0; m < LE_NMETRIC_COLS; m++)
		if (att[m] != 0)
		{
			replace[att[m] - 1] = true;
			nulls[att[m] - 1] = (v[m] == null_value[m]);
			values[att[m] - 1] = Int64GetDatum(v[m]);
		}
}

/*
 * Set the group columns of a row to insert (they never change after);
 * a group row for a table that has no such columns yet (1.0) is an error.
 */
static void
le_rows_group_values(const LeaseRow *row, Datum *values, bool *nulls)
{
	AttrNumber	id_att = le_rows_later_cols.att[LE_COL_GROUP_ID];
	AttrNumber	part_att = le_rows_later_cols.att[LE_COL_GROUP_PARTITION];

	if (id_att == 0)
	{
		if (row->group_id != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("partition groups need leader_election 1.1"),
					 errhint("Run ALTER EXTENSION leader_election UPDATE.")));
		return;
	}
	nulls[id_att - 1] = (row->group_id == 0);
	values[id_att - 1] = Int64GetDatum(row->group_id);
	nulls[part_att - 1] = (row->group_partition < 0);
	values[part_att - 1] = Int32GetDatum(row->group_partition);
}

/*
 * Set a varlena column of the 1.1 columns of a row to write (replace), v
 * (NULL: SQL NULL): the metadata or a membership's held partitions; a
 * value for a table that has no such column yet (1.0) is an error (feature
 * names what needs 1.1), none is not.
 */
static void
le_rows_later_varlena_value(struct varlena *v, LeLaterColumn m, const char *feature,
							Datum *values, bool *nulls, bool *replace)
{
	AttrNumber	att = le_rows_later_cols.att[m];

	if (att == 0)
	{
		if (v != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("%s needs leader_election 1.1", feature),
					 errhint("Run ALTER EXTENSION leader_election UPDATE.")));
		return;
	}
	replace[att - 1] = true;
	nulls[att - 1] = (v == NULL);
	values[att - 1] = PointerGetDatum(v);
}

/*
 * Write every mutable column of the lease row that le_rows_lock returned
 * in this call (its id and key must be the row's); true when written.  A
 * version it locked is always written.  A tentative one is written only if
 * nobody changed or locked it since it was read: then the update itself
 * is the row lock, held to the end of the transaction like one; else
 * nothing is written, false is returned, and the next le_rows_lock of the
 * call locks the row (waiting for whoever has it) for the caller to decide
 * again.
 *
 * Locks: never waits; on success the row is locked (by the update) to the
 * end of the transaction, with RowExclusiveLock on le_lease.
 */
bool
le_rows_write(LeaseStoreState *st, const LeaseRow *row)
{
	Datum		values[LE_LEASE_MAX_NATTS];
	bool		nulls[LE_LEASE_MAX_NATTS];
	bool		replace[LE_LEASE_MAX_NATTS];
	Relation	rel;
	HeapTuple	newtup;

	if (st->locked_tuple == NULL)
		elog(ERROR, "leader_election: writing lease \"%s\" without its row lock", row->lease_key);
	le_rows_check(row);
	memset(replace, false, sizeof(replace));
	memset(replace, true, Natts_le_lease * sizeof(bool));
	memset(nulls, false, sizeof(nulls));
	replace[Anum_le_lease_lease_id - 1] = false;
	replace[Anum_le_lease_lease_key - 1] = false;
	replace[Anum_le_lease_created_at - 1] = false;
	values[Anum_le_lease_holder - 1] = le_rows_text_datum(row->holder, &nulls[Anum_le_lease_holder - 1]);
	values[Anum_le_lease_holder_role - 1] =
		le_rows_name_datum(row->holder_role, &nulls[Anum_le_lease_holder_role - 1]);
	values[Anum_le_lease_fencing_token - 1] = Int64GetDatum(row->fencing_token);
	values[Anum_le_lease_token_timeline - 1] = Int32GetDatum(row->token_timeline);
	values[Anum_le_lease_acquired_at - 1] =
		le_rows_time_datum(row->acquired_at, &nulls[Anum_le_lease_acquired_at - 1]);
	values[Anum_le_lease_renewed_at - 1] =
		le_rows_time_datum(row->renewed_at, &nulls[Anum_le_lease_renewed_at - 1]);
	values[Anum_le_lease_expires_at - 1] =
		le_rows_time_datum(row->holder ? row->expires_at : 0, &nulls[Anum_le_lease_expires_at - 1]);
	values[Anum_le_lease_transitions - 1] = Int64GetDatum(row->transitions);
	values[Anum_le_lease_token_system_id - 1] = Int64GetDatum(row->token_system_id);
	values[Anum_le_lease_history_min_ended_at - 1] =
		le_rows_time_datum(row->history_min_ended_at, &nulls[Anum_le_lease_history_min_ended_at - 1]);

	rel = le_rows_lease(st);
	le_rows_metric_values(row, values, nulls, replace);
	le_rows_later_varlena_value(row->metadata, LE_COL_METADATA, "lease metadata",
								values, nulls, replace);
	le_rows_later_varlena_value(row->group_held, LE_COL_GROUP_HELD, "partition groups",
								values, nulls, replace);
	if (!st->lease_rowex)
		LockRelationOid(st->lease_relid, RowExclusiveLock);
	st->lease_rowex = true;
	st->keep_lease_lock = true;
	newtup = heap_modify_tuple(st->locked_tuple, RelationGetDescr(rel), values, nulls, replace);
	if (DatumGetInt64(heap_getattr(newtup, Anum_le_lease_lease_id, RelationGetDescr(rel), &nulls[0])) !=
		row->lease_id)
		elog(ERROR, "leader_election: lease row " INT64_FORMAT " is not the row locked", row->lease_id);
	if (st->tentative)
	{
		TM_FailureData tmfd;
		LockTupleMode lockmode;
		TM_Result	res;

		PreventCommandIfReadOnly("UPDATE");
		res = heap_update(rel, &st->tid, newtup, GetCurrentCommandId(true), InvalidSnapshot,
						  false, &tmfd, &lockmode);
		st->tentative = false;
		if (res != TM_Ok)
		{
			/* Updated, deleted, or locked by someone (maybe us) meanwhile. */
			le_rows_release_due_history(st);
			st->must_lock = true;
			st->locked_tuple = NULL;
			ItemPointerSetInvalid(&st->tid);
			return false;
		}
		if (!HeapTupleIsHeapOnly(newtup))
			le_rows_index_tuple(rel, newtup);
		le_durable_locks_taken();
		st->locked = true;
	}
	else
		le_rows_update(rel, &st->tid, newtup);
	st->tid = newtup->t_self;
	st->locked_tuple = newtup;
	return true;
}

/* Open le_lease_history for writing. */
static Relation
le_rows_open_history(LeaseStoreState *st)
{
	return le_rows_open(le_rows_relid(st->nsp, LE_REL_HISTORY), RowExclusiveLock,
						le_history_types, Natts_le_history);
}

/*
 * The hint slot of the history row of a lease's period: where this backend
 * inserted it, so that closing it (usually done by the same session, the
 * holder's) fetches it there instead of by index.
 */
static ItemPointer
le_rows_period_hint(Relation rel, int64 lease_id, int64 token)
{
	int64		id[2];

	id[0] = lease_id;
	id[1] = token;
	return le_rows_hint(RelationGetRelid(rel), hash_bytes((const unsigned char *) id, sizeof(id)));
}

/*
 * The periods this backend granted while leader_election.history was off:
 * they have no history row, so ending them (mostly done by the session
 * that was granted them) need not look for one.  An entry names the period
 * by history table, lease id, token and start (acquired_at), all compared
 * with the lease row as read when the period ends.  An entry is kept only
 * while the grant's (sub)transaction may still commit, and for good once it
 * did (le_rows_unrecorded_xact_callback): the token of a grant that rolled back
 * can be drawn again after le_token_seq is set back by hand (the raise in
 * le_token_next goes only above the key's last committed token), and that
 * new period may be recorded.  A committed grant's token is the key's last
 * committed one, which no later grant of the key draws again; after DROP
 * and CREATE EXTENSION lease ids and tokens start again, but the table's
 * oid then differs (and, should oids have wrapped around, the start).  A
 * ring of the last 64: a period pushed out, or granted by another backend,
 * is looked for by index when it ends, and not found.
 */
#define LE_UNRECORDED_MAX	64

typedef struct UnrecordedPeriod
{
	Oid			relid;			/* le_lease_history; InvalidOid: unused */
	int64		lease_id;
	int64		token;
	TimestampTz acquired_at;
	SubTransactionId subid;		/* of the grant, until its transaction
								 * commits; then InvalidSubTransactionId */
} UnrecordedPeriod;

static UnrecordedPeriod le_rows_unrecorded[LE_UNRECORDED_MAX];
static int	le_rows_unrecorded_next = 0;
static bool le_rows_unrecorded_used = false; /* any entry made yet */
static bool le_rows_unrecorded_pending = false;	/* entries of the current transaction */

/*
 * At commit the current transaction's entries become permanent; at abort
 * (and at PREPARE: the outcome is decided elsewhere) they go, and so do
 * those of an aborted subtransaction and of its children, whose ids are
 * all at least its own.
 */
static void
le_rows_unrecorded_forget(SubTransactionId from, bool keep)
{
	int			i;

	for (i = 0; i < LE_UNRECORDED_MAX; i++)
	{
		UnrecordedPeriod *p = &le_rows_unrecorded[i];

		if (p->relid == InvalidOid || p->subid == InvalidSubTransactionId || p->subid < from)
			continue;
		if (keep)
			p->subid = InvalidSubTransactionId;
		else
			p->relid = InvalidOid;
	}
}

static void
le_rows_unrecorded_xact_callback(XactEvent event, void *arg)
{
	if (!le_rows_unrecorded_pending)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
		le_rows_unrecorded_forget(TopSubTransactionId, true);
	else if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
			 event == XACT_EVENT_PREPARE)
		le_rows_unrecorded_forget(TopSubTransactionId, false);
	else
		return;
	le_rows_unrecorded_pending = false;
}

static void
le_rows_unrecorded_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
							   SubTransactionId parentSubid, void *arg)
{
	if (le_rows_unrecorded_pending && event == SUBXACT_EVENT_ABORT_SUB)
		le_rows_unrecorded_forget(mySubid, false);
}

/*
 * Can the current period of row (as read from le_lease) have a history
 * row?  false only for one this backend granted with the history off (see
 * le_rows_unrecorded).
 */
bool
le_rows_period_recorded(LeaseStoreState *st, const LeaseRow *row)
{
	Oid			relid;
	int			i;

	if (!le_rows_unrecorded_used)	/* the history was never off here */
		return true;
	relid = le_rows_relid(st->nsp, LE_REL_HISTORY);
	for (i = 0; i < LE_UNRECORDED_MAX; i++)
	{
		const UnrecordedPeriod *p = &le_rows_unrecorded[i];

		if (p->relid == relid && p->lease_id == row->lease_id &&
			p->token == row->fencing_token && p->acquired_at == row->acquired_at)
			return false;
	}
	return true;
}

/*
 * Record the start of an ownership period in the history, unless
 * leader_election.history is off (then remember that it has no row).
 *
 * Locks: the caller holds the lease row (locked or written); the history
 * row needs no lock of its own.  RowExclusiveLock on le_lease_history.
 */
void
le_rows_history_open(LeaseStoreState *st, const LeaseRow *row)
{
	Datum		values[Natts_le_history];
	bool		nulls[Natts_le_history];
	Relation	rel;
	HeapTuple	tup;

	if (!le_history_enabled)
	{
		static bool registered = false;
		UnrecordedPeriod *p = &le_rows_unrecorded[le_rows_unrecorded_next];

		if (!registered)
		{
			RegisterXactCallback(le_rows_unrecorded_xact_callback, NULL);
			RegisterSubXactCallback(le_rows_unrecorded_subxact_callback, NULL);
			registered = true;
		}
		p->relid = le_rows_relid(st->nsp, LE_REL_HISTORY);
		p->lease_id = row->lease_id;
		p->token = row->fencing_token;
		p->acquired_at = row->acquired_at;
		p->subid = GetCurrentSubTransactionId();
		le_rows_unrecorded_pending = true;
		le_rows_unrecorded_used = true;
		le_rows_unrecorded_next = (le_rows_unrecorded_next + 1) % LE_UNRECORDED_MAX;
		return;
	}

	memset(nulls, false, sizeof(nulls));
	/* We run as the extension owner, who owns the sequence. */
	values[Anum_le_history_history_id - 1] =
		Int64GetDatum(nextval_internal(le_rows_relid(st->nsp, LE_REL_HISTORY_SEQ), true));
	values[Anum_le_history_lease_id - 1] = Int64GetDatum(row->lease_id);
	values[Anum_le_history_lease_key - 1] = CStringGetTextDatum(row->lease_key);
	values[Anum_le_history_holder - 1] = CStringGetTextDatum(row->holder);
	values[Anum_le_history_holder_role - 1] =
		le_rows_name_datum(row->holder_role, &nulls[Anum_le_history_holder_role - 1]);
	values[Anum_le_history_fencing_token - 1] = Int64GetDatum(row->fencing_token);
	values[Anum_le_history_acquired_at - 1] = TimestampTzGetDatum(row->acquired_at);
	nulls[Anum_le_history_ended_at - 1] = true;
	nulls[Anum_le_history_end_reason - 1] = true;
	values[Anum_le_history_ended_at - 1] = values[Anum_le_history_end_reason - 1] = (Datum) 0;

	rel = le_rows_open_history(st);
	tup = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	simple_heap_insert(rel, tup);
	le_rows_index_tuple(rel, tup);
	*le_rows_period_hint(rel, row->lease_id, row->fencing_token) = tup->t_self;
	table_close(rel, NoLock);
}

/*
 * Scan the history of one lease in token order, from the lowest token, or
 * from token when it is positive.  The caller fetches rows with
 * index_getnext_slot and ends with le_rows_history_scan_end.
 */
static IndexScanDesc
le_rows_history_scan(LeaseStoreState *st, Relation rel, Relation *idx, Snapshot snap,
					 int64 lease_id, int64 token)
{
	ScanKeyData skey[2];
	IndexScanDesc scan;
	int			nkeys = (token > 0) ? 2 : 1;

	*idx = le_rows_open_index(le_rows_relid(st->nsp, LE_REL_HISTORY_PKEY), AccessShareLock);
	ScanKeyInit(&skey[0], 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(lease_id));
	ScanKeyInit(&skey[1], 2, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(token));
	scan = index_beginscan(rel, *idx, snap, nkeys, 0);
	index_rescan(scan, skey, nkeys, NULL, 0);
	return scan;
}

static void
le_rows_history_scan_end(IndexScanDesc scan, Relation idx)
{
	index_endscan(scan);
	index_close(idx, NoLock);
}

/*
 * Record the end of the ownership period that had the given token; with
 * reason NULL, delete its row instead (a period that ends already past the
 * retention, see le_lease_plan_period_end in lease.c).
 *
 * Locks: as le_rows_history_open.  The period's row is open, and only the
 * holder of the lease row changes an open period's row, so nothing waits.
 */
void
le_rows_history_close(LeaseStoreState *st, int64 lease_id, int64 token,
					   TimestampTz ended_at, const char *reason)
{
	Relation	rel;
	Relation	idx;
	Snapshot	snap;
	IndexScanDesc scan;
	TupleTableSlot *slot;

	ItemPointer hint;
	bool		found = false;

	CommandCounterIncrement();
	rel = le_rows_open_history(st);
	snap = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);

	/*
	 * The period's row (lease_id, token) is unique, and a version of it
	 * that snap sees is the one to close: found by this backend's hint, or
	 * else by the primary key.
	 */
	hint = le_rows_period_hint(rel, lease_id, token);
	if (le_rows_fetch_hinted(rel, hint, snap, slot))
	{
		bool		isnull1;
		bool		isnull2;
		Datum		id = slot_getattr(slot, Anum_le_history_lease_id, &isnull1);
		Datum		tok = slot_getattr(slot, Anum_le_history_fencing_token, &isnull2);

		found = !isnull1 && !isnull2 && DatumGetInt64(id) == lease_id &&
			DatumGetInt64(tok) == token;
	}
	if (!found)
	{
		scan = le_rows_history_scan(st, rel, &idx, snap, lease_id, token);
		found = index_getnext_slot(scan, ForwardScanDirection, slot);	/* the slot pins its buffer */
		le_rows_history_scan_end(scan, idx);
	}
	if (found)
	{
		Datum		values[Natts_le_history];
		bool		nulls[Natts_le_history];
		bool		replace[Natts_le_history];
		bool		isnull;
		HeapTuple	oldtup;
		HeapTuple	newtup;

		(void) slot_getattr(slot, Anum_le_history_ended_at, &isnull);
		if (isnull && reason == NULL)
			simple_heap_delete(rel, &slot->tts_tid);
		else if (isnull)		/* else already closed */
		{
			memset(replace, false, sizeof(replace));
			memset(nulls, false, sizeof(nulls));
			replace[Anum_le_history_ended_at - 1] = replace[Anum_le_history_end_reason - 1] = true;
			values[Anum_le_history_ended_at - 1] = TimestampTzGetDatum(ended_at);
			values[Anum_le_history_end_reason - 1] = CStringGetTextDatum(reason);
			oldtup = ExecFetchSlotHeapTuple(slot, false, NULL);
			newtup = heap_modify_tuple(oldtup, RelationGetDescr(rel), values, nulls, replace);
			le_rows_update(rel, &slot->tts_tid, newtup);
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	table_close(rel, NoLock);
}

/* Drop what le_rows_find_due_history found (its snapshot, its arrays). */
void
le_rows_forget_due_history(LeaseStoreState *st)
{
	if (st->prune_snap != NULL)
		UnregisterSnapshot(st->prune_snap);
	st->prune_snap = NULL;
	if (st->prune_tids != NULL)
	{
		pfree(st->prune_tids);
		pfree(st->prune_ends);
	}
	st->prune_tids = NULL;
	st->prune_ends = NULL;
	st->prune_n = 0;
}

/*
 * At most this many history rows go per grant: a grant after a long backlog
 * (the retention lowered, le_prune_history() never run) stays short, and
 * the rest goes at the next grants (the bound left is a due row's end).
 */
#define LE_PRUNE_BATCH	1024

/*
 * Find the history rows of one lease whose period ended before cutoff, for
 * le_rows_delete_due_history to delete once the grant has written the lease
 * row (and so holds its lock: a grant whose write failed then waits for the
 * row without holding any deletion, which a holder's open transaction pruning
 * too would otherwise wait for: a deadlock, history_prune_tentative.spec).
 * Reads only.  Periods of a lease follow each other, so in token order the
 * ended_at of its rows rise: the scan stops at the first row that is open or
 * young enough, having read only the rows due and one more.  (A server clock
 * set back can leave a few rows for le_prune_history() to take.)  Returns the
 * history_min_ended_at the lease will have once the rows collected are gone:
 * the ended_at of the first row kept (now if it lies ahead or the row is
 * open), 'infinity' when none is left.  The snapshot that found them stays
 * registered until they are deleted, and le_lease_history locked, so that none
 * of their line pointers can be pruned and given to another row meanwhile.
 */
TimestampTz
le_rows_find_due_history(LeaseStoreState *st, int64 lease_id, TimestampTz cutoff,
						  TimestampTz now)
{
	Relation	rel;
	Relation	idx;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	TimestampTz earliest = DT_NOEND;
	int			size = 0;

	le_rows_forget_due_history(st);
	CommandCounterIncrement();
	rel = le_rows_open_history(st);
	st->prune_snap = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);
	scan = le_rows_history_scan(st, rel, &idx, st->prune_snap, lease_id, 0);
	st->prune_locked = true;
	st->prune_relid = RelationGetRelid(rel);
	st->prune_indexid = RelationGetRelid(idx);
	while (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		ended = slot_getattr(slot, Anum_le_history_ended_at, &isnull);
		TimestampTz end = isnull ? 0 : DatumGetTimestampTz(ended);

		if (isnull || end >= cutoff)
		{
			earliest = isnull ? now : Min(end, now);
			break;
		}
		if (st->prune_n == LE_PRUNE_BATCH)
		{
			earliest = end;		/* due: the next grant goes on */
			break;
		}
		if (st->prune_n == size)
		{
			size = size == 0 ? 8 : Min(size * 2, LE_PRUNE_BATCH);
			if (st->prune_tids == NULL)
			{
				st->prune_tids = MemoryContextAlloc(st->caller_cxt, size * sizeof(ItemPointerData));
				st->prune_ends = MemoryContextAlloc(st->caller_cxt, size * sizeof(TimestampTz));
			}
			else
			{
				st->prune_tids = repalloc(st->prune_tids, size * sizeof(ItemPointerData));
				st->prune_ends = repalloc(st->prune_ends, size * sizeof(TimestampTz));
			}
		}
		st->prune_tids[st->prune_n] = slot->tts_tid;
		st->prune_ends[st->prune_n] = end;
		st->prune_n++;
	}
	le_rows_history_scan_end(scan, idx);
	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, NoLock);
	return earliest;
}

/*
 * Delete the rows le_rows_find_due_history found; the caller holds the
 * lease row's lock.  A row that another transaction is deleting (an open
 * le_prune_history()) is not waited for: a grant must not wait for an idle
 * administrator's transaction (G9).  Returns the lowest ended_at
 * of the rows that did not go (0: none), which the caller folds back into
 * the lease's history_min_ended_at (should that transaction roll back, or a
 * row have been changed meanwhile, the next grant looks again); a row that
 * a committed transaction deleted meanwhile is gone, as wanted.
 */
TimestampTz
le_rows_delete_due_history(LeaseStoreState *st)
{
	Relation	rel;
	TimestampTz kept = 0;
	int			i;

	st->prune_locked = false;	/* kept: the grant wrote */
	if (st->prune_n == 0)
		return 0;
	rel = le_rows_open_history(st);
	for (i = 0; i < st->prune_n; i++)
	{
		TM_FailureData tmfd;
		TM_Result	res;

		res = table_tuple_delete(rel, &st->prune_tids[i], GetCurrentCommandId(true), st->prune_snap,
								 InvalidSnapshot, false, &tmfd, false);
		if (res != TM_Ok && res != TM_Deleted && (kept == 0 || st->prune_ends[i] < kept))
			kept = st->prune_ends[i];
	}
	table_close(rel, NoLock);
	le_rows_forget_due_history(st);
	return kept;
}

/*
 * A grant's tentative write failed after le_rows_find_due_history: forget
 * what the find found and give back the locks it took on le_lease_history
 * and its index (only its own hold: one the transaction took before
 * stays), so that the call's coming wait for the row lock holds nothing of
 * the history, on which a VACUUM FULL, and every lease call behind it,
 * would otherwise queue (history_prune_tentative.spec).  By the oids the
 * find opened, not looked up again by name (a rename in between must not
 * make us give back another relation's lock).
 */
static void
le_rows_release_due_history(LeaseStoreState *st)
{
	if (!st->prune_locked)
		return;
	le_rows_forget_due_history(st);
	UnlockRelationOid(st->prune_indexid, AccessShareLock);
	UnlockRelationOid(st->prune_relid, RowExclusiveLock);
	st->prune_locked = false;
}

/*
 * The tuple of a new, free lease row of key in rel (le_lease, open with its
 * layout checked), of group group_id and partition group_partition (0 and
 * -1: a plain lease), with a new lease id.
 */
static HeapTuple
le_rows_form_new_lease(LeaseStoreState *st, Relation rel, const char *key, int64 group_id,
					   int32 group_partition)
{
	Datum		values[LE_LEASE_MAX_NATTS];
	bool		nulls[LE_LEASE_MAX_NATTS];
	bool		replace[LE_LEASE_MAX_NATTS];
	LeaseRow	fresh;

	memset(nulls, true, sizeof(nulls));
	values[Anum_le_lease_lease_id - 1] =
		Int64GetDatum(nextval_internal(le_rows_relid(st->nsp, LE_REL_LEASE_SEQ), true));
	values[Anum_le_lease_lease_key - 1] = CStringGetTextDatum(key);
	values[Anum_le_lease_fencing_token - 1] = Int64GetDatum(0);
	values[Anum_le_lease_token_timeline - 1] = Int32GetDatum(0);
	values[Anum_le_lease_transitions - 1] = Int64GetDatum(0);
	values[Anum_le_lease_created_at - 1] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[Anum_le_lease_token_system_id - 1] = Int64GetDatum(0);
	values[Anum_le_lease_history_min_ended_at - 1] = TimestampTzGetDatum(DT_NOEND);
	nulls[Anum_le_lease_lease_id - 1] = nulls[Anum_le_lease_lease_key - 1] =
		nulls[Anum_le_lease_fencing_token - 1] = nulls[Anum_le_lease_token_timeline - 1] =
		nulls[Anum_le_lease_transitions - 1] = nulls[Anum_le_lease_created_at - 1] =
		nulls[Anum_le_lease_token_system_id - 1] =
		nulls[Anum_le_lease_history_min_ended_at - 1] = false;

	/* The metric columns start at 0 (counters) or NULL. */
	memset(&fresh, 0, sizeof(fresh));
	fresh.renew_margin_us = fresh.renew_margin_min_us = -1;
	fresh.group_id = group_id;
	fresh.group_partition = group_partition;
	le_rows_metric_values(&fresh, values, nulls, replace);
	le_rows_group_values(&fresh, values, nulls);
	return heap_form_tuple(RelationGetDescr(rel), values, nulls);
}

/*
 * Insert the tuple form() makes into relid, in a subtransaction, unless a
 * unique index finds its key taken: true when inserted; false when a
 * concurrent call inserted the same key first (the unique index made us
 * wait for that transaction and then failed with 23505; the subtransaction
 * is rolled back) or, at REPEATABLE READ and SERIALIZABLE, where the row
 * made meanwhile is not in our snapshot, 40001 (the serialization failure
 * INSERT ... ON CONFLICT raises there too, lease_serializable.spec).  Any
 * other error is raised again.
 *
 * Locks: RowExclusiveLock on relid to the end of the transaction.
 */
typedef HeapTuple (*LeaseRowForm) (LeaseStoreState *st, Relation rel, void *arg);

static bool
le_rows_insert_once(LeaseStoreState *st, Oid relid, const Oid *types, int natts,
					LeaseRowForm form, void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool inserted = false;

	PreventCommandIfReadOnly("INSERT");
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		Relation	rel = le_rows_open(relid, RowExclusiveLock, types, natts);
		HeapTuple	tup = form(st, rel, arg);

		simple_heap_insert(rel, tup);
		le_rows_index_tuple(rel, tup);
		table_close(rel, NoLock);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		inserted = true;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (edata->sqlerrcode != ERRCODE_UNIQUE_VIOLATION)
			ReThrowError(edata);
		FreeErrorData(edata);
		if (IsolationUsesXactSnapshot())
			le_rows_serialization_failure();
	}
	PG_END_TRY();
	return inserted;
}

/* What le_rows_insert_once inserts for le_rows_create: a free lease row. */
typedef struct NewLease
{
	const char *key;
	int64		group_id;
	int32		group_partition;
} NewLease;

static HeapTuple
le_rows_form_new_lease_cb(LeaseStoreState *st, Relation rel, void *arg)
{
	NewLease   *n = arg;

	return le_rows_form_new_lease(st, rel, n->key, n->group_id, n->group_partition);
}

/*
 * Create the (free) row of a lease key unless it exists already: what
 * INSERT ... ON CONFLICT (lease_key) DO NOTHING does, by direct access (no
 * SQL, so no name is resolved as the extension owner).  The row is inserted
 * in a subtransaction; when a concurrent call created the key first, the
 * unique index makes ours wait for that transaction and then fail with
 * 23505 if it committed, and the subtransaction is rolled back: the key
 * exists, as wanted (at READ COMMITTED; 40001 at the stricter levels).
 * Any other error is raised again.  Rare: once per key.  A membership row
 * of a partition group gives its group (group_id, group_partition -1).
 */
void
le_rows_create(LeaseStoreState *st, const char *key, int64 group_id, int32 group_partition)
{
	NewLease	n = {key, group_id, group_partition};

	(void) le_rows_insert_once(st, st->lease_relid, le_lease_types, Natts_le_lease,
							   le_rows_form_new_lease_cb, &n);
}

/*
 * Delete the history rows of every lease whose period ended before cutoff
 * (le_prune_history()); returns how many went.  A row deleted or closed
 * meanwhile by a concurrent call is skipped.
 *
 * Locks: RowExclusiveLock on le_lease_history and the rows it deletes
 * (waiting, within the bound le_store_begin put in force, for a concurrent
 * deleter of the same row); no lease row.
 */
int64
le_rows_prune_all_history(LeaseStoreState *st, TimestampTz cutoff)
{
	Relation	rel;
	Snapshot	snap;
	TableScanDesc scan;
	TupleTableSlot *slot;
	int64		deleted = 0;

	PreventCommandIfReadOnly("DELETE");
	CommandCounterIncrement();
	rel = le_rows_open_history(st);
	snap = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);
	scan = table_beginscan(rel, snap, 0, NULL);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		ended = slot_getattr(slot, Anum_le_history_ended_at, &isnull);
		TM_FailureData tmfd;

		if (isnull || DatumGetTimestampTz(ended) >= cutoff)
			continue;
		if (table_tuple_delete(rel, &slot->tts_tid, GetCurrentCommandId(true), snap,
							   InvalidSnapshot, true, &tmfd, false) == TM_Ok)
			deleted++;
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	table_close(rel, NoLock);
	return deleted;
}

/*
 * Does le_lease have the group columns of 1.1?  (A 1.0 catalog not yet
 * updated has none: it has no groups, and no key is reserved for them.)
 */
bool
le_rows_has_groups(LeaseStoreState *st)
{
	(void) le_rows_lease(st);
	return le_rows_later_cols.att[LE_COL_GROUP_ID] != 0;
}

/* The oid of a relation of the groups (1.1), or the error of a 1.0 catalog. */
static Oid
le_rows_group_relid(Oid nsp, LeaseRel which)
{
	Oid			relid = le_rows_lookup_relid(nsp, which);

	if (!OidIsValid(relid) && !OidIsValid(le_rows_lookup_relid(nsp, LE_REL_GROUP)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("partition groups need leader_election 1.1"),
				 errhint("Run ALTER EXTENSION leader_election UPDATE.")));
	if (!OidIsValid(relid))
		le_rows_missing(le_rel_names[which]);
	return relid;
}

/*
 * Read the le_group row of group name into *group (strings in the caller's
 * context); false when there is none.  At READ COMMITTED the latest
 * committed version, at the stricter levels the transaction snapshot's.
 *
 * Locks: AccessShareLock on le_group and its name index while it reads.
 */
bool
le_rows_group_find(LeaseStoreState *st, const char *name, LeaseGroup *group)
{
	Relation	rel;
	Relation	idx;
	Snapshot	snap;
	IndexScanDesc scan;
	ScanKeyData skey;
	TupleTableSlot *slot;
	bool		found;

	CommandCounterIncrement();
	rel = le_rows_open(le_rows_group_relid(st->nsp, LE_REL_GROUP), AccessShareLock,
					   le_group_types, Natts_le_group);
	idx = le_rows_open_index(le_rows_group_relid(st->nsp, LE_REL_GROUP_NAME), AccessShareLock);
	snap = RegisterSnapshot(IsolationUsesXactSnapshot() ? GetTransactionSnapshot()
							: GetLatestSnapshot());
	ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   idx->rd_indcollation[0], F_TEXTEQ, CStringGetTextDatum(name));
	scan = index_beginscan(rel, idx, snap, 1, 0);
	index_rescan(scan, &skey, 1, NULL, 0);
	slot = table_slot_create(rel, NULL);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	if (found)
	{
		MemoryContext old = MemoryContextSwitchTo(st->caller_cxt);

		slot_getallattrs(slot);
		group->group_id = DatumGetInt64(slot->tts_values[Anum_le_group_group_id - 1]);
		group->group_name = TextDatumGetCString(slot->tts_values[Anum_le_group_group_name - 1]);
		group->partitions = DatumGetInt32(slot->tts_values[Anum_le_group_partitions - 1]);
		group->owner_role = DatumGetObjectId(slot->tts_values[Anum_le_group_owner_role - 1]);
		group->max_moves = DatumGetInt32(slot->tts_values[Anum_le_group_max_moves - 1]);
		group->created_at = DatumGetTimestampTz(slot->tts_values[Anum_le_group_created_at - 1]);
		MemoryContextSwitchTo(old);
		if (group->partitions < 1 || group->partitions > LE_MAX_PARTITIONS || group->max_moves < 1)
			elog(ERROR, "leader_election: inconsistent row of group \"%s\"", name);
	}
	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	UnregisterSnapshot(snap);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	return found;
}

/* What le_rows_insert_once inserts for le_rows_group_insert. */
typedef struct NewGroup
{
	Datum		values[Natts_le_group];
	bool		nulls[Natts_le_group];
} NewGroup;

static HeapTuple
le_rows_form_group_cb(LeaseStoreState *st, Relation rel, void *arg)
{
	NewGroup   *g = arg;

	return heap_form_tuple(RelationGetDescr(rel), g->values, g->nulls);
}

/*
 * Insert the le_group row of a new group owned by the caller; returns its
 * id, or 0 when a concurrent call created a group of that name first (the
 * name's unique index made us wait for it, as le_rows_create does for a
 * key; 40001 at the stricter levels).
 *
 * Locks: RowExclusiveLock on le_group to the end of the transaction.
 */
int64
le_rows_group_insert(LeaseStoreState *st, const char *name, int32 partitions, int32 max_moves)
{
	NewGroup	g;
	int64		group_id;

	PreventCommandIfReadOnly("INSERT");
	group_id = nextval_internal(le_rows_group_relid(st->nsp, LE_REL_GROUP_SEQ), true);
	memset(g.nulls, false, sizeof(g.nulls));
	g.values[Anum_le_group_group_id - 1] = Int64GetDatum(group_id);
	g.values[Anum_le_group_group_name - 1] = CStringGetTextDatum(name);
	g.values[Anum_le_group_partitions - 1] = Int32GetDatum(partitions);
	g.values[Anum_le_group_owner_role - 1] = ObjectIdGetDatum(st->caller);
	g.values[Anum_le_group_max_moves - 1] = Int32GetDatum(max_moves);
	g.values[Anum_le_group_created_at - 1] = TimestampTzGetDatum(GetCurrentTimestamp());
	if (!le_rows_insert_once(st, le_rows_group_relid(st->nsp, LE_REL_GROUP), le_group_types,
							 Natts_le_group, le_rows_form_group_cb, &g))
		return 0;
	return group_id;
}

/*
 * Insert the free rows of every partition of a group the caller has just
 * inserted (so nobody else inserts them: the group's le_group row is ours,
 * uncommitted); the caller has checked that no plain lease has one of their
 * keys.  One executor state for all the index entries.
 *
 * Locks: RowExclusiveLock on le_lease to the end of the transaction.
 */
void
le_rows_group_partitions_insert(LeaseStoreState *st, const LeaseGroup *group)
{
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;
	MemoryContext rowcxt;
	MemoryContext old;
	int32		p;

	PreventCommandIfReadOnly("INSERT");
	rel = le_rows_open(st->lease_relid, RowExclusiveLock, le_lease_types, Natts_le_lease);
	estate = CreateExecutorState();
	rri = makeNode(ResultRelInfo);
	slot = ExecInitExtraTupleSlot(estate, RelationGetDescr(rel), &TTSOpsHeapTuple);
	InitResultRelInfo(rri, rel, 1, NULL, 0);
	ExecOpenIndices(rri, false);
	rowcxt = AllocSetContextCreate(CurrentMemoryContext, "le_group partition rows",
								   ALLOCSET_DEFAULT_SIZES);
	for (p = 0; p < group->partitions; p++)
	{
		HeapTuple	tup;

		CHECK_FOR_INTERRUPTS();
		old = MemoryContextSwitchTo(rowcxt);
		tup = le_rows_form_new_lease(st, rel,
									 psprintf(LE_GROUP_KEY_PREFIX "%s:%d", group->group_name, p),
									 group->group_id, p);
		simple_heap_insert(rel, tup);
		ExecStoreHeapTuple(tup, slot, false);
		list_free(ExecInsertIndexTuples(rri, slot, estate, false, false, NULL, NIL));
		ExecClearTuple(slot);
		ResetPerTupleExprContext(estate);
		MemoryContextSwitchTo(old);
		MemoryContextReset(rowcxt);
	}
	MemoryContextDelete(rowcxt);
	ExecCloseIndices(rri);
	ExecResetTupleTable(estate->es_tupleTable, false);
	FreeExecutorState(estate);
	table_close(rel, NoLock);
}

/* Append a string to the scan's buffer; its offset, or -1 for NULL. */
static int
le_rows_group_keep(StringInfo buf, const char *s, int len)
{
	int			off = buf->len;

	if (s == NULL)
		return -1;
	appendBinaryStringInfo(buf, s, len);
	appendStringInfoChar(buf, '\0');
	return off;
}

/* Read the brief form of a partition's row from slot into *part. */
static void
le_rows_group_part(TupleTableSlot *slot, LeaseGroupPart *part, StringInfo buf,
				   int *holder_off, int *role_off)
{
	const Datum *values = slot->tts_values;
	const bool *isnull = slot->tts_isnull;

	part->lease_id = DatumGetInt64(values[Anum_le_lease_lease_id - 1]);
	part->fencing_token = DatumGetInt64(values[Anum_le_lease_fencing_token - 1]);
	part->expires_at = le_rows_time(values, isnull, Anum_le_lease_expires_at);
	part->tid = slot->tts_tid;
	*holder_off = *role_off = -1;
	if (!isnull[Anum_le_lease_holder - 1] && !isnull[Anum_le_lease_holder_role - 1])
	{
		text	   *t = DatumGetTextPP(values[Anum_le_lease_holder - 1]);
		const char *role = NameStr(*DatumGetName(values[Anum_le_lease_holder_role - 1]));

		*holder_off = le_rows_group_keep(buf, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
		*role_off = le_rows_group_keep(buf, role, strlen(role));
	}
}

/* What le_rows_group_scan fills as it reads: rows, and where strings are kept. */
typedef struct GroupScan
{
	const LeaseGroup *group;
	LeaseGroupRows *rows;
	int			size;			/* of rows->members */
	int		   *holder_off;		/* per partition: offset in buf, -1: none */
	int		   *role_off;
	StringInfoData buf;
} GroupScan;

/*
 * Read the rows of the group's index entries (idx) that match keys (the
 * group id first), each into gs->rows: a partition briefly, a membership in
 * full (in the caller's context).
 */
static void
le_rows_group_scan_keys(LeaseStoreState *st, Relation idx, TupleTableSlot *slot,
						ScanKey keys, int nkeys, GroupScan *gs)
{
	LeaseGroupRows *rows = gs->rows;
	IndexScanDesc scan;
	MemoryContext old;

	scan = index_beginscan(st->lease_rel, idx, st->scan_snap, nkeys, 0);
	scan->xs_want_itup = true;	/* the partition number from the index entry */
	index_rescan(scan, keys, nkeys, NULL, 0);
	while (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		part = scan->xs_itup == NULL ? (Datum) 0 :
			index_getattr(scan->xs_itup, 2, scan->xs_itupdesc, &isnull);
		int32		p;

		if (scan->xs_itup == NULL)
			part = slot_getattr(slot, le_rows_later_cols.att[LE_COL_GROUP_PARTITION], &isnull);
		p = isnull ? -1 : DatumGetInt32(part);
		if (p >= gs->group->partitions || (p >= 0 && rows->partitions[p].lease_id != 0))
			elog(ERROR, "leader_election: unexpected row of partition %d of group \"%s\"",
				 p, gs->group->group_name);
		old = MemoryContextSwitchTo(st->caller_cxt);
		if (p >= 0)
		{
			/* the brief form's columns come first: deform no further */
			slot_getsomeattrs(slot, Anum_le_lease_expires_at);
			le_rows_group_part(slot, &rows->partitions[p], &gs->buf, &gs->holder_off[p],
							   &gs->role_off[p]);
		}
		else
		{
			if (rows->nmembers == gs->size)
			{
				gs->size *= 2;
				rows->members = repalloc(rows->members, sizeof(LeaseRow) * gs->size);
			}
			le_rows_slot_row(slot, &rows->members[rows->nmembers++]);
		}
		MemoryContextSwitchTo(old);
	}
	index_endscan(scan);
}

/*
 * Read le_lease rows of a group, by the partial index le_lease_group
 * (partitions in ascending order, then the memberships), with one snapshot
 * (the transaction's at REPEATABLE READ and SERIALIZABLE, else a fresh
 * one), into *rows, in the caller's context: the memberships in full, the
 * partitions briefly (le_rows_group_adopt reads those again in full).  All
 * the partitions when held is NULL; else only those whose bit is set in
 * held (held_len bytes, as LeaseRow.group_held), a scan per run of
 * consecutive ones, and the others have lease_id 0.  The snapshot stays
 * registered, and le_lease open, to the end of the call, so that the
 * versions read stay where they were found.
 *
 * Locks: AccessShareLock on le_lease and its group index; no row lock.
 */
void
le_rows_group_scan(LeaseStoreState *st, const LeaseGroup *group, const bits8 *held, int held_len,
				   LeaseGroupRows *rows)
{
	Relation	rel;
	Relation	idx;
	ScanKeyData skey[3];
	TupleTableSlot *slot;
	GroupScan	gs;
	MemoryContext old;
	int32		p;

	CommandCounterIncrement();
	rel = le_rows_lease(st);
	idx = le_rows_open_index(le_rows_group_relid(st->nsp, LE_REL_LEASE_GROUP), AccessShareLock);
	if (st->scan_snap != NULL)
		UnregisterSnapshot(st->scan_snap);
	st->scan_snap = NULL;
	st->scan_snap = RegisterSnapshot(IsolationUsesXactSnapshot() ? GetTransactionSnapshot()
									 : GetLatestSnapshot());
	old = MemoryContextSwitchTo(st->caller_cxt);
	gs.group = group;
	gs.rows = rows;
	gs.size = 8;
	rows->npartitions = group->partitions;
	rows->partitions = palloc0(sizeof(LeaseGroupPart) * group->partitions);
	rows->nmembers = 0;
	rows->members = palloc(sizeof(LeaseRow) * gs.size);
	gs.holder_off = palloc(sizeof(int) * group->partitions);
	gs.role_off = palloc(sizeof(int) * group->partitions);
	initStringInfo(&gs.buf);
	MemoryContextSwitchTo(old);
	for (p = 0; p < group->partitions; p++)
		gs.holder_off[p] = gs.role_off[p] = -1;

	ScanKeyInit(&skey[0], 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(group->group_id));
	slot = table_slot_create(rel, NULL);
	if (held == NULL)
		le_rows_group_scan_keys(st, idx, slot, skey, 1, &gs);
	else
	{
		/* the memberships (partition NULL), then each run of held partitions */
		ScanKeyEntryInitialize(&skey[1], SK_ISNULL | SK_SEARCHNULL, 2, InvalidStrategy,
							   InvalidOid, InvalidOid, InvalidOid, (Datum) 0);
		le_rows_group_scan_keys(st, idx, slot, skey, 2, &gs);
		for (p = 0; p < group->partitions; p++)
		{
			int32		last = p;

			if (!le_group_held_test(held, held_len, p))
				continue;
			while (last + 1 < group->partitions && le_group_held_test(held, held_len, last + 1))
				last++;
			ScanKeyInit(&skey[1], 2, BTGreaterEqualStrategyNumber, F_INT4GE, Int32GetDatum(p));
			ScanKeyInit(&skey[2], 2, BTLessEqualStrategyNumber, F_INT4LE, Int32GetDatum(last));
			le_rows_group_scan_keys(st, idx, slot, skey, 3, &gs);
			p = last;
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	index_close(idx, AccessShareLock);

	/* The buffer has stopped moving: point into it. */
	for (p = 0; p < group->partitions; p++)
	{
		rows->partitions[p].holder = gs.holder_off[p] < 0 ? NULL : gs.buf.data + gs.holder_off[p];
		rows->partitions[p].holder_role = gs.role_off[p] < 0 ? NULL : gs.buf.data + gs.role_off[p];
	}
	pfree(gs.holder_off);
	pfree(gs.role_off);
}

/*
 * Read in full, into *row, the version of a partition's row that
 * le_rows_group_scan read in this call, and hand it to the next le_rows_peek
 * of its key, which returns it instead of reading (le_rows_lock then tries
 * it as its tentative version).  Only while the scan's snapshot and our
 * lock on le_lease are held (the version cannot have been pruned, nor its
 * place reused); false otherwise, and the next peek reads the row again.
 */
bool
le_rows_group_adopt(LeaseStoreState *st, const LeaseGroupPart *part, LeaseRow *row)
{
	HeapTupleData tuple;
	Buffer		buf;
	MemoryContext old;
	HeapTuple	copy;
	Datum		values[LE_LEASE_MAX_NATTS];
	bool		isnull[LE_LEASE_MAX_NATTS];

	if (st->lease_rel == NULL || st->scan_snap == NULL)
		return false;
	tuple.t_self = part->tid;
	if (!heap_fetch(st->lease_rel, st->scan_snap, &tuple, &buf, false))
		return false;
	old = MemoryContextSwitchTo(st->caller_cxt);
	copy = heap_copytuple(&tuple);
	ReleaseBuffer(buf);
	heap_deform_tuple(copy, RelationGetDescr(st->lease_rel), values, isnull);
	le_rows_values_row(values, isnull, row);
	MemoryContextSwitchTo(old);
	if (row->lease_id != part->lease_id)
		return false;
	st->peeked_tuple = copy;
	st->peeked_row = *row;
	st->adopted = true;
	return true;
}

/*
 * Between two rows of one call (a group's heartbeat or leave): forget what
 * was read, tried or locked for the last row, keeping le_lease open, its
 * locks, and the scan's snapshot.
 */
void
le_rows_next(LeaseStoreState *st)
{
	le_rows_release_due_history(st);
	le_rows_forget_due_history(st);
	if (st->snap != NULL)
		UnregisterSnapshot(st->snap);
	st->snap = NULL;
	ItemPointerSetInvalid(&st->tid);
	st->locked_tuple = NULL;
	st->peeked_tuple = NULL;
	st->adopted = false;
	st->tentative = false;
	st->must_lock = false;
}
