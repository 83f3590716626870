/*-------------------------------------------------------------------------
 *
 * group.c
 *		The SQL-callable calls of partition groups: le_group_create,
 *		le_group_heartbeat, le_group_leave and le_group_assignment.
 *
 * A group's partitions and memberships are ordinary rows of le_lease
 * (keys "le:group:G:P" and "le:group:G:member:M"), taken, renewed and
 * released through lease.c's one-row paths inside one frame of
 * lease_store.c, so every guarantee of a lease holds per partition.  A
 * heartbeat reads the group's rows once (le_rows_group_scan): all, or only
 * the memberships and its own partitions while the memberships' held lists
 * show the group settled (le_group_view_settled).  It computes the
 * assignment from that read (group_assign.c), then works on the caller's
 * partitions in ascending order, never waiting for a fence lock once it
 * holds its membership row.  src/README.md ("Partition groups") describes
 * the design and its locks.
 *
 * Invariant (G15 in doc/lease-guarantees.md): a partition is validly held
 * by at most one member (id and role) at any moment, each new holding
 * period has a new, higher token, and only a member whose membership is
 * valid is given or renewed partitions, each to the membership's expiry.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "leader_election.h"

PG_FUNCTION_INFO_V1(le_group_create);
PG_FUNCTION_INFO_V1(le_group_heartbeat);
PG_FUNCTION_INFO_V1(le_group_leave);
PG_FUNCTION_INFO_V1(le_group_assignment);

/*
 * A group as one call read it: its le_group row, its lease rows, the live
 * members (valid memberships, in member id order), who holds each partition
 * validly, and the assignment computed from that.
 */
typedef struct GroupView
{
	LeaseGroup	group;
	LeaseGroupRows rows;
	int32		nlive;
	LeaseRow  **live;			/* membership rows of the live members */
	int32	   *holder;			/* per partition: index in live, or LE_ASSIGN_*_HOLDER */
	TimestampTz now;			/* the instant that judged the rows */
	LeaseAssignment assign;
} GroupView;

/* The key of a member's membership row. */
static char *
le_group_member_key(const char *name, const char *member)
{
	return psprintf(LE_GROUP_KEY_PREFIX "%s:member:%s", name, member);
}

/*
 * The key of a group's partition p (what psprintf("le:group:%s:%d") makes,
 * without its format parsing: a heartbeat makes one per partition it
 * works on).
 */
static char *
le_group_partition_key(const LeaseGroup *group, int32 p)
{
	size_t		name_len = strlen(group->group_name);
	char	   *key = palloc(sizeof(LE_GROUP_KEY_PREFIX) + name_len + 1 + MAXINT8LEN);
	char	   *end = key;

	memcpy(end, LE_GROUP_KEY_PREFIX, sizeof(LE_GROUP_KEY_PREFIX) - 1);
	end += sizeof(LE_GROUP_KEY_PREFIX) - 1;
	memcpy(end, group->group_name, name_len);
	end += name_len;
	*end++ = ':';
	pg_ltoa(p, end);
	return key;
}

/* Read the group name into *group, or raise 42704. */
static void
le_group_lookup(LeaseStoreState *st, const char *name, LeaseGroup *group)
{
	if (!le_rows_group_find(st, name, group))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("partition group \"%s\" does not exist", name),
				 errhint("Create it with le_group_create.")));
}

/* Members of a group must be members of its owner role (42501). */
static void
le_group_check_role(const LeaseStoreState *st, const LeaseGroup *group)
{
	const char *owner;

	if (is_member_of_role(st->caller, group->owner_role))
		return;
	owner = GetUserNameFromId(group->owner_role, true);
	if (owner == NULL)
		owner = psprintf("%u", group->owner_role);	/* the role was dropped */
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("role \"%s\" may not be a member of partition group \"%s\"", st->caller_name,
					group->group_name),
			 errdetail("Members of a group must be members of its owner role \"%s\".", owner),
			 errhint("GRANT \"%s\" TO the member's role.", owner)));
}

/* qsort order of live members: member id (the holder), bytewise. */
static int
le_group_member_cmp(const void *a, const void *b)
{
	const LeaseRow *x = *(const LeaseRow *const *) a;
	const LeaseRow *y = *(const LeaseRow *const *) b;

	return strcmp(x->holder, y->holder);
}

/*
 * The index in gv->live of the live member whose id and role hold part, or
 * LE_ASSIGN_OTHER_HOLDER when none does (binary search by member id).
 */
static int32
le_group_live_index(const GroupView *gv, const LeaseGroupPart *part)
{
	int32		lo = 0;
	int32		hi = gv->nlive - 1;

	while (lo <= hi)
	{
		int32		mid = lo + (hi - lo) / 2;
		int			c = strcmp(part->holder, gv->live[mid]->holder);

		if (c == 0)
			return strcmp(part->holder_role, gv->live[mid]->holder_role) == 0 ?
				mid : LE_ASSIGN_OTHER_HOLDER;
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return LE_ASSIGN_OTHER_HOLDER;
}

/*
 * Judge the memberships gv->rows read as of now (one reading of the server
 * clock judges every row): the live ones, in member id order.
 */
static void
le_group_view_members(GroupView *gv)
{
	int			i;

	gv->now = GetCurrentTimestamp();
	gv->live = palloc(sizeof(LeaseRow *) * Max(gv->rows.nmembers, 1));
	gv->nlive = 0;
	for (i = 0; i < gv->rows.nmembers; i++)
		if (le_store_lease_valid(&gv->rows.members[i], gv->now))
			gv->live[gv->nlive++] = &gv->rows.members[i];
	qsort(gv->live, gv->nlive, sizeof(LeaseRow *), le_group_member_cmp);
}

/*
 * Read the group's rows and compute its assignment as of now.
 */
static void
le_group_view(LeaseStoreState *st, GroupView *gv)
{
	int32		p;

	le_rows_group_scan(st, &gv->group, NULL, 0, &gv->rows);
	le_group_view_members(gv);
	gv->holder = palloc(sizeof(int32) * gv->group.partitions);
	for (p = 0; p < gv->group.partitions; p++)
	{
		const LeaseGroupPart *part = &gv->rows.partitions[p];

		if (part->lease_id == 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("partition %d of group \"%s\" has no lease row", p, gv->group.group_name),
					 errhint("A superuser deleted it; restore le_lease from a backup.")));
		gv->holder[p] = part->holder != NULL && part->expires_at > gv->now ?
			le_group_live_index(gv, part) : LE_ASSIGN_FREE_HOLDER;
	}
	le_group_assign_compute(gv->group.partitions, gv->group.max_moves, gv->nlive, gv->holder,
							&gv->assign);
}

/* A membership's held list when it is one of this group's, else NULL. */
static const bits8 *
le_group_held_list(const GroupView *gv, const LeaseRow *m)
{
	if (m->group_held == NULL ||
		VARSIZE_ANY_EXHDR(m->group_held) != (Size) le_group_held_len(gv->group.partitions))
		return NULL;
	return (const bits8 *) VARDATA_ANY(m->group_held);
}

/*
 * The heartbeat's view when the group is settled: the held lists of the
 * live memberships are settled (le_group_assign_settled, which says why
 * the assignment then keeps each member's partitions as they are) and the
 * caller's membership mrow lists exactly the partitions member holds
 * validly.  Reads only the memberships and those partitions, each assigned
 * to the caller and kept; false when the group is not settled so (gv must
 * then be read again with le_group_view).
 */
static bool
le_group_view_settled(LeaseStoreState *st, GroupView *gv, const LeaseRow *mrow, const char *member)
{
	int32		n = gv->group.partitions;
	int			len = le_group_held_len(n);
	const bits8 *mine = le_group_held_list(gv, mrow);
	const bits8 **lists;
	int32		me = -1;
	int32		p;
	int			i;

	if (mine == NULL)
		return false;
	le_rows_group_scan(st, &gv->group, mine, len, &gv->rows);
	le_group_view_members(gv);
	lists = palloc(sizeof(bits8 *) * Max(gv->nlive, 1));
	for (i = 0; i < gv->nlive; i++)
	{
		lists[i] = le_group_held_list(gv, gv->live[i]);
		if (gv->live[i]->lease_id == mrow->lease_id)
			me = i;
	}
	if (me < 0 || !le_group_assign_settled(n, gv->nlive, lists))
	{
		elog(DEBUG1, "leader_election: group \"%s\" is not settled", gv->group.group_name);
		return false;
	}

	gv->holder = palloc(sizeof(int32) * n);
	gv->assign.npartitions = n;
	gv->assign.nmembers = gv->nlive;
	gv->assign.target = palloc(sizeof(int32) * n);
	gv->assign.state = palloc(sizeof(LeaseAssignState) * n);
	for (p = 0; p < n; p++)
	{
		const LeaseGroupPart *part = &gv->rows.partitions[p];

		gv->holder[p] = LE_ASSIGN_OTHER_HOLDER;	/* not read */
		gv->assign.target[p] = -1;
		gv->assign.state[p] = LE_ASSIGN_UNASSIGNED;
		if (!le_group_held_test(mine, len, p))
			continue;
		if (part->lease_id == 0 || part->holder == NULL || part->expires_at <= gv->now ||
			strcmp(part->holder, member) != 0 || strcmp(part->holder_role, st->caller_name) != 0)
		{
			elog(DEBUG1, "leader_election: member \"%s\" no longer holds partition %d of group \"%s\"",
				 le_check_show(member), p, gv->group.group_name);
			return false;
		}
		gv->holder[p] = me;
		gv->assign.target[p] = me;
		gv->assign.state[p] = LE_ASSIGN_OWNED;
	}
	elog(DEBUG1, "leader_election: group \"%s\" is settled: read its memberships and the member's partitions only",
		 gv->group.group_name);
	return true;
}

/*
 * le_group_create(group_name, partitions, max_moves) -> true when created,
 * false when the group exists with these partitions and max_moves; 42710
 * when it exists with others, or a plain lease (made before 1.1) has one of
 * its keys.  The caller becomes its owner role.  Writes the le_group row and
 * the free rows of its partitions (token 0).
 *
 * Locks: RowExclusiveLock on le_group and le_lease to the end of the
 * transaction; a concurrent creation of the same name is waited for (the
 * name's unique index) and then compared.
 */
Datum
le_group_create(PG_FUNCTION_ARGS)
{
	char	   *name = le_check_group_name(fcinfo, 0);
	int32		partitions;
	int32		max_moves;
	LeaseStoreState st;
	LeaseGroup	group;
	LeaseRow	row;
	bool		created = false;
	int32		p;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("partitions must not be NULL")));
	partitions = PG_GETARG_INT32(1);
	if (partitions < 1 || partitions > LE_MAX_PARTITIONS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("partitions must be between 1 and %d, got %d", LE_MAX_PARTITIONS, partitions)));
	max_moves = PG_ARGISNULL(2) ? Max(1, (partitions + 7) / 8) : PG_GETARG_INT32(2);
	if (max_moves < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_moves must be at least 1, got %d", max_moves)));
	le_check_writable("create");

	le_store_begin(&st, fcinfo->flinfo->fn_oid, NULL);
	if (!le_rows_group_find(&st, name, &group))
	{
		int64		group_id = le_rows_group_insert(&st, name, partitions, max_moves);

		if (group_id != 0)
		{
			created = true;
			group.group_id = group_id;
			group.group_name = name;
			group.partitions = partitions;
			group.max_moves = max_moves;
			group.owner_role = st.caller;
		}
		else if (!le_rows_group_find(&st, name, &group))	/* a concurrent call made it */
			elog(ERROR, "leader_election: group \"%s\" vanished", name);
	}
	if (!created)
	{
		if (group.partitions != partitions || group.max_moves != max_moves)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("partition group \"%s\" exists with other settings", name),
					 errdetail("It has %d partitions and max_moves %d.", group.partitions,
							   group.max_moves),
					 errhint("The number of partitions of a group never changes; create a new group.")));
		le_store_end(&st);
		PG_RETURN_BOOL(false);
	}

	/* Keys that plain leases took before 1.1 reserved them. */
	for (p = 0; p < partitions; p++)
	{
		char	   *key = psprintf(LE_GROUP_KEY_PREFIX "%s:%d", name, p);

		if (le_rows_peek(&st, key, &row))
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("lease \"%s\" exists already as a plain lease", key),
					 errdetail("It was taken before version 1.1 reserved the keys of partition groups."),
					 errhint("Use another group name.")));
		pfree(key);
	}
	le_rows_group_partitions_insert(&st, &group);
	le_store_end(&st);
	PG_RETURN_BOOL(true);
}

/* Refuse a group call in a REPEATABLE READ or SERIALIZABLE transaction. */
static void
le_group_check_isolation(const char *call)
{
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s cannot run in a REPEATABLE READ or SERIALIZABLE transaction", call),
				 errdetail("It decides on the latest committed rows of the group, not on a snapshot."),
				 errhint("Call it in a READ COMMITTED transaction of its own.")));
}

/* One row of le_group_heartbeat's result; partition < 0: the membership's. */
static void
le_group_emit(ReturnSetInfo *rsinfo, int32 partition, const char *key, int64 token,
			  TimestampTz expires_at, const char *state, bool new_period)
{
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};

	values[0] = Int32GetDatum(partition);
	nulls[0] = partition < 0;
	values[1] = CStringGetTextDatum(key);
	values[2] = Int64GetDatum(token);
	nulls[2] = token == 0;
	values[3] = TimestampTzGetDatum(expires_at);
	nulls[3] = expires_at == 0;
	values[4] = CStringGetTextDatum(state);
	values[5] = BoolGetDatum(new_period);
	nulls[5] = strcmp(state, "pending") == 0;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * Take or renew the caller's membership of a group for ttl (the acquire of
 * its lease row, which waits for the row's fence lock if it must); true when
 * it is a new membership.  55006 when another role holds the member id
 * validly.
 */
static bool
le_group_join(LeaseStoreState *st, const LeaseGroup *group, const char *key, char *member,
			  int64 ttl, LeaseRow *out)
{
	LeaseAcquireRequest req;
	LeaseAcquireResult r;

	memset(&req, 0, sizeof(req));
	req.key = key;
	req.owner = member;
	req.ttl = ttl;
	req.count_renewal = true;
	req.group_id = group->group_id;
	req.group_partition = -1;
	r = le_lease_acquire_row(st, &req, out);
	if (r == LE_ACQUIRE_REFUSED && le_store_lease_valid(out, GetCurrentTimestamp()))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("member \"%s\" of partition group \"%s\" is held by role \"%s\"",
						le_check_show(member), group->group_name, out->holder_role),
				 errdetail("Its membership is valid until %s.", timestamptz_to_str(out->expires_at)),
				 errhint("Each member id belongs to one role at a time; choose another member id.")));
	if (r != LE_ACQUIRE_GRANTED && r != LE_ACQUIRE_EXTENDED)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("membership \"%s\" is busy", le_check_show(key)),
				 errdetail("A fenced writer is committing under its lease."),
				 errhint("Retry the heartbeat.")));
	return r == LE_ACQUIRE_GRANTED;
}

/*
 * Partition p (row part), which the caller (member id and role) holds validly and
 * this heartbeat does not renew: bring its expiry down to the membership's
 * new one, expires_at, when it is later (never extend it), so that no
 * partition outlives the membership it was given under, and report it for
 * the caller to give up ('revoke').
 */
static void
le_group_heartbeat_give_up(LeaseStoreState *st, const LeaseGroupPart *part, int32 p,
						   char *key, char *member, TimestampTz expires_at, ReturnSetInfo *rsinfo,
						   bool *locked)
{
	TimestampTz until = part->expires_at;
	LeaseRow	out;

	if (until > expires_at)
	{
		le_store_next_row(st, key);
		(void) le_rows_group_adopt(st, part, &out);
		if (le_lease_cap_row(st, key, member, part->fencing_token, expires_at, &out))
			until = out.expires_at;
		if (st->locked)
			*locked = true;
	}
	le_group_emit(rsinfo, p, key, part->fencing_token, until, "revoke", false);
}

/*
 * The heartbeat's work on partition p for member me (index in gv->live;
 * -1 when its membership lapsed before the group was read, a tiny ttl),
 * whose membership now lasts to expires_at: renew a partition it keeps and
 * claim a free one assigned to it (both to exactly expires_at, trying the
 * fence lock, never waiting for it), give up any other partition it holds
 * (revoke: not renewed, and never valid past expires_at), also every one
 * it still holds from an earlier membership when this one is new (joined:
 * after its membership was force released, or after a le_group_leave that
 * left partitions for a later call), so that a new membership's partitions
 * all come with new tokens; report one it waits for (pending).  Others'
 * partitions are left alone.  *locked is set when a row was locked.  Sets
 * p's bit in held_after when the member holds p after this call (it held
 * it, or it was granted).  A renewal or claim runs in row_cxt, a child of st's caller_cxt reset for
 * each row (what it returns is reported here and not kept).
 */
static void
le_group_heartbeat_partition(LeaseStoreState *st, GroupView *gv, int32 p, int32 me,
							 bool joined, char *member, TimestampTz expires_at,
							 ReturnSetInfo *rsinfo, MemoryContext row_cxt, bool *locked,
							 int *claims, bits8 *held_after)
{
	const LeaseGroupPart *part = &gv->rows.partitions[p];
	LeaseAssignState state = gv->assign.state[p];
	bool		assigned = me >= 0 && gv->assign.target[p] == me;
	bool		held;
	char	   *key;
	MemoryContext old;
	LeaseAcquireRequest req;
	LeaseAcquireResult r;
	LeaseRow	out;

	/* Held validly by this member id and role (as the view read it). */
	held = part->holder != NULL && part->expires_at > gv->now &&
		strcmp(part->holder, member) == 0 && strcmp(part->holder_role, st->caller_name) == 0;
	if (!assigned && !held)
		return;
	if (held)
		le_group_held_set(held_after, p);	/* a heartbeat never frees it */
	key = le_group_partition_key(&gv->group, p);
	if (held && (joined || !assigned || state == LE_ASSIGN_REVOKE ||
				 GetCurrentTimestamp() >= expires_at))
	{
		le_group_heartbeat_give_up(st, part, p, key, member, expires_at, rsinfo, locked);
		return;
	}
#ifdef LE_BREAK_EARLY_GRANT

	/*
	 * A deliberately broken build, only for the self-test of the partition
	 * groups' fault run (GROUPS_BREAK=early-grant test/run.sh groups-fault):
	 * a partition its valid holder must give up to this member is released
	 * on the holder's behalf and taken at once, while the holder's instance
	 * still runs.  Never defined otherwise.
	 */
	if (state == LE_ASSIGN_REVOKE && gv->holder[p] >= 0)
	{
		le_store_next_row(st, key);
		if (le_lease_free_row(st, key, part->holder, part->fencing_token, "released"))
			state = LE_ASSIGN_FREE;
	}
#endif
	if ((state != LE_ASSIGN_OWNED && state != LE_ASSIGN_FREE) || GetCurrentTimestamp() >= expires_at)
	{
		/* held by another member, or the membership lapsed meanwhile */
		le_group_emit(rsinfo, p, key, 0, 0, "pending", false);
		return;
	}
	if (state == LE_ASSIGN_FREE && ++(*claims) > LE_GROUP_MAX_CHANGES)
	{
		/* over this heartbeat's claims: the next heartbeat takes it */
		le_group_emit(rsinfo, p, key, 0, 0, "pending", false);
		return;
	}

	/*
	 * What the last row's call read and allocated is forgotten first, so
	 * that nothing of st points into row_cxt when it is reset: a heartbeat's
	 * memory stays that of one row, however many partitions it renews.
	 */
	le_store_next_row(st, key);
	MemoryContextReset(row_cxt);
	old = MemoryContextSwitchTo(row_cxt);
	st->caller_cxt = row_cxt;
	(void) le_rows_group_adopt(st, part, &out);
	memset(&req, 0, sizeof(req));
	req.key = key;
	req.owner = member;
	req.expires_at = expires_at;
	req.fence_try = true;
	req.count_renewal = true;
	req.group_id = gv->group.group_id;
	req.group_partition = p;
	r = le_lease_acquire_row(st, &req, &out);
	if (st->locked)
		*locked = true;
	if (r == LE_ACQUIRE_GRANTED || r == LE_ACQUIRE_EXTENDED)
	{
		le_group_emit(rsinfo, p, key, out.fencing_token, out.expires_at, "owned",
					  r == LE_ACQUIRE_GRANTED);
		le_group_held_set(held_after, p);
	}
	else
		le_group_emit(rsinfo, p, key, 0, 0, "pending", false);
	st->caller_cxt = MemoryContextGetParent(row_cxt);
	MemoryContextSwitchTo(old);
}

/*
 * le_group_heartbeat(group_name, member_id, ttl) -> the caller's membership
 * (state 'member') and then its partitions in ascending order: 'owned'
 * (held, renewed or granted to the membership's new expiry), 'revoke'
 * (still held, not renewed: release it), 'pending' (assigned, held by
 * another member that gives it up first).  See GroupView and
 * group_assign.c for the assignment.
 *
 * Locks: the membership row (and its fence lock, waited for, when the
 * membership is new), then the rows of the partitions renewed or claimed,
 * ascending, each claim's fence lock only tried; all to the end of the
 * transaction, under a holder deadline of the membership's ttl.
 */
Datum
le_group_heartbeat(PG_FUNCTION_ARGS)
{
	char	   *name = le_check_group_name(fcinfo, 0);
	char	   *member = le_check_member(fcinfo, 1);
	int64		ttl = le_check_ttl(fcinfo, 2);
	char	   *key = le_group_member_key(name, member);
	ReturnSetInfo *rsinfo;
	LeaseStoreState st;
	GroupView	gv;
	LeaseRow	mrow;
	MemoryContext row_cxt;
	struct varlena *held_after;
	int			held_len;
	bool		joined;
	bool		locked = true;	/* the membership row */
	int32		me = -1;
	int32		p;
	int			i;
	int			claims = 0;

	le_check_writable("take");
	le_group_check_isolation("le_group_heartbeat");
	InitMaterializedSRF(fcinfo, 0);
	rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	le_store_begin(&st, fcinfo->flinfo->fn_oid, key);
	le_group_lookup(&st, name, &gv.group);
	le_group_check_role(&st, &gv.group);
	joined = le_group_join(&st, &gv.group, key, member, ttl, &mrow);
	le_group_emit(rsinfo, -1, key, mrow.fencing_token, mrow.expires_at, "member", joined);

	le_store_next_row(&st, key);
	if (joined || !le_group_view_settled(&st, &gv, &mrow, member))
		le_group_view(&st, &gv);
	for (i = 0; i < gv.nlive; i++)
		if (gv.live[i]->lease_id == mrow.lease_id)
			me = i;
	held_len = le_group_held_len(gv.group.partitions);
	held_after = palloc(VARHDRSZ + held_len);
	SET_VARSIZE(held_after, VARHDRSZ + held_len);
	memset(VARDATA(held_after), 0, held_len);
	row_cxt = AllocSetContextCreate(st.caller_cxt, "le_group_heartbeat row", ALLOCSET_DEFAULT_SIZES);
	for (p = 0; p < gv.group.partitions; p++)
		le_group_heartbeat_partition(&st, &gv, p, me, joined, member, mrow.expires_at, rsinfo,
									 row_cxt, &locked, &claims, (bits8 *) VARDATA(held_after));

	/*
	 * What the member holds now, for the next heartbeat's
	 * le_group_view_settled; written when it changed (mrow is the latest
	 * version: the membership row is locked since le_group_join).
	 */
	if (mrow.group_held == NULL || VARSIZE_ANY(mrow.group_held) != VARSIZE(held_after) ||
		memcmp(VARDATA_ANY(mrow.group_held), VARDATA(held_after), held_len) != 0)
	{
		le_store_next_row(&st, key);
		(void) le_lease_note_held_row(&st, key, member, mrow.fencing_token, held_after);
	}

	/* One deadline covers every row locked: they all last to the same expiry. */
	st.lease_key = key;
	st.locked = locked;
	st.idle_bound_us = Max(mrow.expires_at - GetCurrentTimestamp(), 1);
	le_store_end(&st);
	return (Datum) 0;
}

/*
 * le_group_leave(group_name, member_id) -> the number of partitions
 * released: frees every partition the caller (member id and role) holds,
 * valid or lapsed, and its membership, in this transaction.  55006 when
 * another role holds the member id validly.  The caller need not be a
 * member of the group's owner role any more (removed from it, or the role
 * dropped): it only gives up what it holds.
 *
 * Locks: as le_release, for the membership first and then each partition
 * in ascending order (the heartbeat's order: a heartbeat of the same member
 * in another session cannot deadlock with it).
 */
Datum
le_group_leave(PG_FUNCTION_ARGS)
{
	char	   *name = le_check_group_name(fcinfo, 0);
	char	   *member = le_check_member(fcinfo, 1);
	char	   *key = le_group_member_key(name, member);
	LeaseStoreState st;
	LeaseGroup	group;
	LeaseGroupRows rows;
	int32		released = 0;
	int32		tried = 0;
	int32		p;
	int			i;

	le_check_writable("release");
	le_group_check_isolation("le_group_leave");
	le_store_begin(&st, fcinfo->flinfo->fn_oid, key);
	le_group_lookup(&st, name, &group);
	/* no owner role check: giving up what the caller holds needs none */
	le_rows_group_scan(&st, &group, NULL, 0, &rows);
	for (i = 0; i < rows.nmembers; i++)
	{
		LeaseRow   *m = &rows.members[i];

		if (strcmp(m->lease_key, key) != 0 || m->holder == NULL)
			continue;
		if (strcmp(m->holder_role, st.caller_name) != 0 &&
			le_store_lease_valid(m, GetCurrentTimestamp()))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("member \"%s\" of partition group \"%s\" is held by role \"%s\"",
							le_check_show(member), name, m->holder_role)));
		if (strcmp(m->holder, member) == 0)
			(void) le_lease_free_row(&st, key, member, m->fencing_token, "released");
	}
	for (p = 0; p < rows.npartitions; p++)
	{
		const LeaseGroupPart *part = &rows.partitions[p];
		char	   *pkey;

		if (part->holder == NULL || strcmp(part->holder, member) != 0 ||
			strcmp(part->holder_role, st.caller_name) != 0)
			continue;
		if (++tried > LE_GROUP_MAX_CHANGES)
			break;				/* the next call releases the rest */
		pkey = le_group_partition_key(&group, p);
		le_store_next_row(&st, pkey);
		if (le_lease_free_row(&st, pkey, member, part->fencing_token, "released"))
			released++;
	}
	le_store_end(&st);
	PG_RETURN_INT32(released);
}

/*
 * le_group_assignment(group_name) -> one row per partition: its lease as
 * read now, the member it is assigned to and its state ('owned': held
 * validly by its target; 'moving': held validly by a member that gives it
 * up, or by a former member until it lapses; 'free': not validly held, its
 * target claims it at its next heartbeat; 'unassigned': no live member).
 * Reads only; readable by everyone, like le_leases.
 *
 * Locks: AccessShareLock on le_group and le_lease while it reads.
 */
Datum
le_group_assignment(PG_FUNCTION_ARGS)
{
	char	   *name = le_check_group_name(fcinfo, 0);
	static const char *const names[] = {"unassigned", "owned", "moving", "free", "moving"};
	ReturnSetInfo *rsinfo;
	LeaseStoreState st;
	GroupView	gv;
	int32		p;

	InitMaterializedSRF(fcinfo, 0);
	rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	le_store_begin(&st, fcinfo->flinfo->fn_oid, NULL);
	le_group_lookup(&st, name, &gv.group);
	le_group_view(&st, &gv);
	for (p = 0; p < gv.group.partitions; p++)
	{
		const LeaseGroupPart *part = &gv.rows.partitions[p];
		int32		t = gv.assign.target[p];
		Datum		values[7];
		bool		nulls[7] = {false, false, false, false, false, false, false};

		values[0] = Int32GetDatum(p);
		values[1] = CStringGetTextDatum(le_group_partition_key(&gv.group, p));
		nulls[2] = part->holder == NULL;
		if (part->holder != NULL)
			values[2] = CStringGetTextDatum(part->holder);
		values[3] = Int64GetDatum(part->fencing_token);
		values[4] = TimestampTzGetDatum(part->expires_at);
		nulls[4] = part->expires_at == 0;
		nulls[5] = t < 0;
		if (t >= 0)
			values[5] = CStringGetTextDatum(gv.live[t]->holder);
		values[6] = CStringGetTextDatum(names[gv.assign.state[p]]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	le_store_end(&st);
	return (Datum) 0;
}
