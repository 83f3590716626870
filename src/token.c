/*-------------------------------------------------------------------------
 *
 * token.c
 *		The fencing token of each new ownership period of a lease.
 *
 * A token is (range << LE_TIMELINE_SHIFT) + a value of the sequence
 * le_token_seq.  The sequence is non-transactional and its WAL is flushed
 * before a token is returned, so no value that reached anyone is drawn
 * again, after a rollback or a crash; the range jumps on a new WAL timeline
 * or for a row issued by another cluster, so a promoted standby or a
 * restored dump cannot repeat one either.  src/README.md ("The token
 * rule") gives the details.
 *
 * Invariant (G3 in doc/lease-guarantees.md): per lease, every token
 * le_token_next returns exceeds every token issued before it, and none is
 * ever returned twice.  The caller holds the lease row's lock and the
 * lease's fence lock in LE_FENCE_CHANGE_LOCKMODE.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "commands/sequence.h"
#include "storage/lmgr.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"

#include "compat.h"
#include "leader_election.h"

/* Bits below the timeline in a token: 2^40 grants per key per timeline. */
#define LE_TIMELINE_SHIFT		40

/* The oid of le_token_seq, the source of new tokens. */
static Oid
le_token_seq_oid(LeaseStoreState *st)
{
	Oid			seqid = le_rows_lookup_relid(st->nsp, LE_REL_TOKEN_SEQ);

	if (!OidIsValid(seqid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sequence le_token_seq of extension leader_election is missing from schema \"%s\"",
						get_namespace_name(st->nsp)),
				 errhint("Reinstall the extension with DROP EXTENSION and CREATE EXTENSION.")));
	return seqid;
}

/*
 * The next value of le_token_seq, the source of the low bits of every new
 * token.  A sequence is never rolled back, so a value handed out by a grant
 * that later rolls back (or whose savepoint does) is never drawn again.
 * nextval() WAL-logs the sequence only every few values, and the WAL of a
 * transaction that rolls back is not flushed: when this call wrote WAL, it
 * is flushed here, before the token can reach anyone, so that no crash can
 * bring the sequence back below a value already returned.  The test is on
 * this backend's own last record, so the flush is skipped (and costs
 * nothing) for the values that nextval() did not log.
 */
static int64
le_token_seq_next(Oid seqid)
{
	XLogRecPtr	before = XactLastRecEnd;
	MemoryContext cxt = CurrentMemoryContext;
	int64		value = 0;

	/*
	 * We run as the extension owner, who owns the sequence.  Its MAXVALUE
	 * is the last low-bits value a token can take: reaching it is the
	 * documented exhaustion (22003), not nextval's own 2200H.  The error is
	 * only replaced, never swallowed: the transaction still aborts.
	 */
	PG_TRY();
	{
		value = nextval_internal(seqid, true);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED)
			PG_RE_THROW();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("sequence le_token_seq is exhausted"),
				 errdetail("%s", edata->message),
				 errhint("Tokens take values from 1 to " INT64_FORMAT " in each range; a new range starts only with a new timeline.",
						 (INT64CONST(1) << LE_TIMELINE_SHIFT) - 1)));
	}
	PG_END_TRY();
	if (XactLastRecEnd != before)
		XLogFlush(XactLastRecEnd);
	return value;
}

/*
 * A value of le_token_seq above floor, raising the sequence when it is not
 * (it was set back by hand, or restored older than the lease rows).  The
 * sequence is locked against every nextval() until the end of the
 * transaction first, so that the raise can never set it below a value that
 * another grant drew in the meantime; the wait is bounded by
 * leader_election.lock_timeout.
 */
static int64
le_token_seq_raise(Oid seqid, int64 floor, const char *key)
{
	int64		value;

	LockRelationOid(seqid, ShareRowExclusiveLock);
	value = le_token_seq_next(seqid);
	if (value <= floor)
	{
		ereport(LOG,
				(errmsg("leader_election: sequence le_token_seq was behind the last token of lease \"%s\", raised from " INT64_FORMAT " to " INT64_FORMAT,
						key, value, floor)));
		(void) DirectFunctionCall2(setval_oid, ObjectIdGetDatum(seqid), Int64GetDatum(floor));
		value = le_token_seq_next(seqid);
	}
	return value;
}

/*
 * The token of the next ownership period of a lease, and the timeline and
 * system identifier to record with it.
 *
 * A token is (range << LE_TIMELINE_SHIFT) + a fresh value of le_token_seq.
 * The range is the last token's range; on a newer WAL timeline than the one
 * that issued the last token, at least timeline - 1 and as many ranges above
 * the last token's as timelines passed; for a token another cluster issued,
 * the current timeline's number of ranges above the last token's.  So a
 * primary and its later-promoted standby, starting from the same row, issue
 * tokens in different ranges, the later timeline's higher; and within a
 * range no two grants ever share a sequence value, acknowledged or rolled
 * back.  The result must still exceed the row's last token: a sequence set
 * back by hand (setval, or a restore of an older sequence next to newer
 * rows) would make it lower, so then the sequence is first raised to the
 * last token's value.  Exhaustion (range or sequence) is an error.
 *
 * Locks: the caller holds the lease row and its fence lock in
 * LE_FENCE_CHANGE_LOCKMODE; a raise of the sequence takes
 * ShareRowExclusiveLock on le_token_seq to the end of the transaction.
 */
int64
le_token_next(LeaseStoreState *st, const LeaseRow *row, int32 *timeline, int64 *system_id)
{
	TimeLineID	tli = le_current_timeline();
	int64		sysid = (int64) GetSystemIdentifier();
	int64		last_range = row->fencing_token >> LE_TIMELINE_SHIFT;
	int64		low_mask = (INT64CONST(1) << LE_TIMELINE_SHIFT) - 1;
	int64		range;
	Oid			seqid;
	int64		seq;
	int64		next;

	if ((int64) (tli - 1) > (PG_INT64_MAX >> LE_TIMELINE_SHIFT))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("WAL timeline %u is too high for fencing tokens", tli)));

	if (row->fencing_token == 0)
		range = (int64) tli - 1;	/* never granted */
	else if (row->token_system_id != sysid)
		range = last_range + (int64) tli;	/* issued by another cluster */
	else if ((int64) tli > (int64) row->token_timeline)
		range = Max((int64) tli - 1, last_range + (int64) tli - row->token_timeline);
	else
		range = last_range;

	/* A range whose last value was issued cannot take another token. */
	if (range > (PG_INT64_MAX >> LE_TIMELINE_SHIFT) ||
		(range == last_range && (row->fencing_token & low_mask) == low_mask))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("fencing token of lease \"%s\" is exhausted", row->lease_key),
				 errdetail("The last token issued was " INT64_FORMAT ".", row->fencing_token),
				 errhint("Use a new lease key.")));

	seqid = le_token_seq_oid(st);
	seq = le_token_seq_next(seqid);
	if (range == last_range && seq <= (row->fencing_token & low_mask))
		seq = le_token_seq_raise(seqid, row->fencing_token & low_mask, row->lease_key);
	if (seq <= 0 || seq > low_mask)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("sequence le_token_seq is exhausted"),
				 errdetail("It gave " INT64_FORMAT "; tokens take values from 1 to " INT64_FORMAT ".",
						   seq, low_mask)));
	next = (range << LE_TIMELINE_SHIFT) + seq;
	if (next <= row->fencing_token)
		elog(ERROR, "leader_election: new token " INT64_FORMAT " of lease \"%s\" is not above the last one, " INT64_FORMAT,
			 next, row->lease_key, row->fencing_token);

	*timeline = (int32) tli;
	*system_id = sysid;
	return next;
}
