/*-------------------------------------------------------------------------
 *
 * fence_group.c
 *		The group side of the fence: a partition group's row of le_group
 *		(its id and number of partitions), read by direct access, and the
 *		cheap test that a row read earlier is still the latest, unchanged.
 *
 * A table fenced per partition (le_protect(..., group_name, partition_column))
 * names, in each row, the partition whose lease judges the write; the
 * number of partitions bounds that value.  le_group is found by name in the
 * extension's schema by OID (lease_rows.c), never through search_path; a
 * catalog without it (1.0) has no groups.
 *
 * Invariant: a group's partitions are used only as read from the latest
 * committed le_group row, or from an earlier read of it whose page has not
 * changed since (its LSN, in the same file, with le_group's invalidations
 * read up to now).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "leader_election.h"

/*
 * Invalidations of le_group (or of every relation) this backend has read:
 * a read made before the latest of them is not trusted (its file may have
 * been rewritten, its pages copied elsewhere).
 */
static uint64 le_fence_group_invals = 1;
static Oid	le_fence_group_relid = InvalidOid;	/* le_group read last */

/* Count an invalidation of le_group, or of all relations. */
static void
le_fence_group_inval(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == le_fence_group_relid)
		le_fence_group_invals++;
}

/* The number of column name of desc, when it has type typid; else 0. */
static AttrNumber
le_fence_group_column(TupleDesc desc, const char *name, Oid typid)
{
	int			i;

	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			return att->atttypid == typid ? att->attnum : 0;
	}
	return 0;
}

/* The error for a le_group that is not the extension's table. */
static void
le_fence_group_broken(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("table le_group of extension leader_election is not as the extension made it"),
			 errdetail("It needs columns group_id bigint, group_name text and partitions integer, and its index le_group_name_unique."),
			 errhint("Reinstall the extension with DROP EXTENSION and CREATE EXTENSION.")));
}

/*
 * Where the version in slot lies, when its page's LSN can vouch for it
 * later: a version committed by another transaction that nobody is
 * updating or deleting (a locker must write the page again to update it),
 * in a file whose every change is WAL-logged (the rule of
 * le_rows_read_in_place).  Otherwise group->lsn stays invalid.
 */
static void
le_fence_group_stamp(Relation rel, TupleTableSlot *slot, LeGroup *group)
{
	BufferHeapTupleTableSlot *bslot = (BufferHeapTupleTableSlot *) slot;
	HeapTupleHeader td;
	Buffer		buf;

	group->lsn = InvalidXLogRecPtr;
	group->buffer = InvalidBuffer;
	if (!TTS_IS_BUFFERTUPLE(slot) || !BufferIsValid(bslot->buffer) ||
		!XLogIsNeeded() || !RelationNeedsWAL(rel))
		return;
	buf = bslot->buffer;
	td = bslot->base.tuple->t_data;
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	if (!TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetRawXmin(td)) &&
		((td->t_infomask & HEAP_XMAX_INVALID) ||
		 !TransactionIdIsValid(HeapTupleHeaderGetRawXmax(td)) ||
		 HEAP_XMAX_IS_LOCKED_ONLY(td->t_infomask)))
	{
		group->node = rel->rd_node;
		group->blkno = ItemPointerGetBlockNumber(&bslot->base.tuple->t_self);
		group->buffer = buf;
		group->lsn = BufferGetLSNAtomic(buf);
	}
	LockBuffer(buf, BUFFER_LOCK_UNLOCK);
}

/*
 * Look name up in le_group (rel) through its index idx with snapshot snap;
 * fill *group and return true when a version is visible.
 */
static bool
le_fence_group_scan(Relation rel, Relation idx, Snapshot snap, const char *name,
					AttrNumber id_att, AttrNumber parts_att, LeGroup *group)
{
	IndexScanDesc scan;
	ScanKeyData skey;
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	bool		found = false;

	ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   idx->rd_indcollation[0], F_TEXTEQ, CStringGetTextDatum(name));
	scan = index_beginscan(rel, idx, snap, 1, 0);
	index_rescan(scan, &skey, 1, NULL, 0);
	if (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		id_null;
		bool		parts_null;
		Datum		id = slot_getattr(slot, id_att, &id_null);
		Datum		parts = slot_getattr(slot, parts_att, &parts_null);

		if (id_null || parts_null)
			le_fence_group_broken();
		group->group_id = DatumGetInt64(id);
		group->partitions = DatumGetInt32(parts);
		le_fence_group_stamp(rel, slot, group);
		found = true;
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	return found;
}

/*
 * Read the latest committed row of group name from le_group in schema nsp
 * into *group; false when there is none, or no le_group (a 1.0 catalog).
 * By direct access through the unique index on group_name, judged when
 * each version is looked at (SnapshotSelf, as le_rows_read_latest: no
 * snapshot built, no predicate lock at SERIALIZABLE), or, when that sees
 * none (a non-HOT update committing while we look), with a snapshot taken
 * now; whatever the caller's isolation level: the fence judges by the
 * latest state.  Takes AccessShareLock on le_group and its index for the
 * read only.
 */
bool
le_fence_group_read(Oid nsp, const char *name, LeGroup *group)
{
	static bool registered = false;
	Oid			relid = le_rows_lookup_relid(nsp, LE_REL_GROUP);
	Relation	rel;
	Relation	idx;
	TupleDesc	desc;
	AttrNumber	id_att;
	AttrNumber	name_att;
	AttrNumber	parts_att;
	Oid			indexid;
	bool		found;

	if (!registered)
	{
		CacheRegisterRelcacheCallback(le_fence_group_inval, (Datum) 0);
		registered = true;
	}
	group->lsn = InvalidXLogRecPtr;
	if (!OidIsValid(relid))
		return false;
	rel = try_relation_open(relid, AccessShareLock);
	if (rel == NULL)
		return false;			/* dropped since the lookup */
	le_fence_group_relid = relid;
	group->inval_count = le_fence_group_invals;

	desc = RelationGetDescr(rel);
	id_att = le_fence_group_column(desc, "group_id", INT8OID);
	name_att = le_fence_group_column(desc, "group_name", TEXTOID);
	parts_att = le_fence_group_column(desc, "partitions", INT4OID);
	if (rel->rd_rel->relkind != RELKIND_RELATION || id_att == 0 || name_att == 0 || parts_att == 0)
		le_fence_group_broken();
	/* with le_group locked, the index oid found by name now is current */
	indexid = le_rows_lookup_relid(nsp, LE_REL_GROUP_NAME);
	idx = OidIsValid(indexid) ? try_index_open(indexid, AccessShareLock) : NULL;
	if (idx == NULL || idx->rd_index->indrelid != relid)
		le_fence_group_broken();
	found = le_fence_group_scan(rel, idx, SnapshotSelf, name, id_att, parts_att, group);
	if (!found)
	{
		Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());

		found = le_fence_group_scan(rel, idx, snap, name, id_att, parts_att, group);
		UnregisterSnapshot(snap);
	}
	index_close(idx, AccessShareLock);
	relation_close(rel, AccessShareLock);
	return found;
}

/*
 * Is the le_group row that le_fence_group_read returned in *group still
 * the latest version, unchanged?  True when its page, in the same file and
 * still in the shared buffer it was read from, has the LSN it had then, and
 * no invalidation of le_group arrived since: every change of a heap page
 * (an update or delete of the row, pruning, freezing) writes WAL and moves
 * that LSN; a rewrite of le_group (a new file) sends an invalidation before
 * it lets anyone write the new file.  False when that cannot be told this
 * way; the caller then reads the row again.  No lock on le_group: only the
 * buffer's share lock, briefly.
 */
bool
le_fence_group_unchanged(const LeGroup *group)
{
	bool		unchanged;

	if (XLogRecPtrIsInvalid(group->lsn) || !BufferIsValid(group->buffer))
		return false;
	AcceptInvalidationMessages();
	if (group->inval_count != le_fence_group_invals ||
		!ReadRecentBuffer(group->node, MAIN_FORKNUM, group->blkno, group->buffer))
		return false;
	LockBuffer(group->buffer, BUFFER_LOCK_SHARE);
	unchanged = (BufferGetLSNAtomic(group->buffer) == group->lsn);
	UnlockReleaseBuffer(group->buffer);
	return unchanged;
}
