/*-------------------------------------------------------------------------
 *
 * group_assign.c
 *		The assignment of a partition group's partitions to its live
 *		members: a pure function of what a heartbeat read, no I/O.
 *
 * Every heartbeat, and le_group_assignment, computes it from one read of
 * the group's rows, without any group-wide lock, so it must be the same
 * function of the same input everywhere: members in member id order
 * (bytewise), partitions in ascending order, no randomness, no clock.
 * Balanced (targets differ by at most one) and sticky (a member keeps the
 * partitions it holds as far as its target allows; only surplus moves, at
 * most max_moves of a member's at once).  The rules are those of
 * GROUPS-SPEC's "Assignment", described in src/README.md ("Partition
 * groups").  le_group_assign_settled tells, from the members' held lists
 * alone, when a member's share is what it holds, so that its heartbeat
 * need not read the other partitions.
 *
 * Invariant: a partition validly held by a live member is either kept by
 * it (LE_ASSIGN_OWNED) or marked for its holder to give up
 * (LE_ASSIGN_REVOKE); only partitions not validly held by anyone are
 * assigned for claiming (LE_ASSIGN_FREE).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "port/pg_bitutils.h"

#include "leader_election.h"

/* A member's place in the ranking: held partitions descending, then index. */
typedef struct AssignRank
{
	int32		member;
	int32		held;
} AssignRank;

/* qsort order of AssignRank: more held first, then the lower member index. */
static int
le_group_assign_rank_cmp(const void *a, const void *b)
{
	const AssignRank *x = (const AssignRank *) a;
	const AssignRank *y = (const AssignRank *) b;

	if (x->held != y->held)
		return x->held > y->held ? -1 : 1;
	return x->member < y->member ? -1 : (x->member > y->member ? 1 : 0);
}

/*
 * Compute the assignment of npartitions partitions to nmembers live
 * members (indexes 0..nmembers-1 in member id order), given holder[p]: the
 * member holding partition p validly, LE_ASSIGN_FREE_HOLDER when nobody
 * does, LE_ASSIGN_OTHER_HOLDER when a non-member does.  Fills out->target
 * and out->state (allocated here, in the current context):
 *
 * - with no member, every partition is LE_ASSIGN_UNASSIGNED;
 * - q = N / M, r = N % M; members ranked by (held desc, index asc), the
 *   first r target q + 1, the others q;
 * - a member keeps its lowest target held partitions (OWNED); of the rest
 *   (surplus) the lowest max_moves are REVOKE, the others stay OWNED;
 * - the pool (partitions validly held by nobody, ascending, then the
 *   revoking ones, ascending) goes to the members short of their target in
 *   index order: a free one becomes FREE with that target, a revoking one
 *   keeps REVOKE and gets that target;
 * - a partition held by a non-member is BLOCKED, with no target.
 */
void
le_group_assign_compute(int32 npartitions, int32 max_moves, int32 nmembers,
						const int32 *holder, LeaseAssignment *out)
{
	int32	   *held = palloc0(sizeof(int32) * Max(nmembers, 1));
	int32	   *target = palloc0(sizeof(int32) * Max(nmembers, 1));
	int32	   *kept = palloc0(sizeof(int32) * Max(nmembers, 1));
	int32	   *revoked = palloc0(sizeof(int32) * Max(nmembers, 1));
	int32	   *pool = palloc(sizeof(int32) * npartitions);
	AssignRank *rank = palloc(sizeof(AssignRank) * Max(nmembers, 1));
	int32		npool = 0;
	int32		next = 0;
	int32		q;
	int32		r;
	int32		m;
	int32		p;

	out->npartitions = npartitions;
	out->nmembers = nmembers;
	out->target = palloc(sizeof(int32) * npartitions);
	out->state = palloc(sizeof(LeaseAssignState) * npartitions);
	for (p = 0; p < npartitions; p++)
	{
		out->target[p] = -1;
		out->state[p] = LE_ASSIGN_UNASSIGNED;
	}
	if (nmembers <= 0)
		return;

	for (p = 0; p < npartitions; p++)
		if (holder[p] >= 0)
		{
			Assert(holder[p] < nmembers);
			held[holder[p]]++;
		}
	for (m = 0; m < nmembers; m++)
	{
		rank[m].member = m;
		rank[m].held = held[m];
	}
	qsort(rank, nmembers, sizeof(AssignRank), le_group_assign_rank_cmp);
	q = npartitions / nmembers;
	r = npartitions % nmembers;
	for (m = 0; m < nmembers; m++)
		target[rank[m].member] = q + (m < r ? 1 : 0);

	/* What each holder keeps, and the surplus it gives up. */
	for (p = 0; p < npartitions; p++)
	{
		int32		h = holder[p];

		if (h == LE_ASSIGN_OTHER_HOLDER)
			out->state[p] = LE_ASSIGN_BLOCKED;
		else if (h < 0)
			out->state[p] = LE_ASSIGN_FREE;
		else if (kept[h] < target[h])
		{
			kept[h]++;
			out->state[p] = LE_ASSIGN_OWNED;
			out->target[p] = h;
		}
		else if (revoked[h] < max_moves)
		{
			revoked[h]++;
			out->state[p] = LE_ASSIGN_REVOKE;
		}
		else
		{
			out->state[p] = LE_ASSIGN_OWNED;	/* surplus, kept for now */
			out->target[p] = h;
		}
	}

	/* The pool: free partitions, then the revoking ones, each ascending. */
	for (p = 0; p < npartitions; p++)
		if (out->state[p] == LE_ASSIGN_FREE)
			pool[npool++] = p;
	for (p = 0; p < npartitions; p++)
		if (out->state[p] == LE_ASSIGN_REVOKE)
			pool[npool++] = p;

	/* Members short of their target take from it in member order. */
	for (m = 0; m < nmembers && next < npool; m++)
	{
		int32		deficit = target[m] - kept[m];

		while (deficit-- > 0 && next < npool)
			out->target[pool[next++]] = m;
	}

	pfree(held);
	pfree(target);
	pfree(kept);
	pfree(revoked);
	pfree(pool);
	pfree(rank);
}

/* The length in bytes of a held list of npartitions (LeaseRow.group_held). */
int
le_group_held_len(int32 npartitions)
{
	return (npartitions + 7) / 8;
}

/* Is partition p's bit set in the held list held (len bytes)? */
bool
le_group_held_test(const bits8 *held, int len, int32 p)
{
	return p >= 0 && p / 8 < len && (held[p / 8] & (1 << (p % 8))) != 0;
}

/* Set partition p's bit in the held list held. */
void
le_group_held_set(bits8 *held, int32 p)
{
	held[p / 8] |= (bits8) (1 << (p % 8));
}

/*
 * Is the group settled as the held lists of its nmembers live members
 * tell it (held[m]: le_group_held_len(npartitions) bytes, NULL when not
 * known)?  True when the lists are disjoint, cover every partition, and
 * each has N / M or N / M + 1 partitions.
 *
 * Then a member (index me) whose list is exactly what it holds validly is
 * assigned exactly its own partitions by le_group_assign_compute, provided
 * each list is a superset of what its member holds validly (the partitions
 * of a list that its member gave up meanwhile only lower the counts
 * le_group_assign_compute ranks by): no member holds more than N / M + 1,
 * so at most r - 1 rank before a member holding N / M + 1 (r = N % M of
 * them hold that many by the lists), and its target is what it holds; a
 * member holding N / M has no surplus.  The assignment might only give it
 * more, a partition another member lost since its list was written (a
 * release outside a heartbeat, a force release, a lapse): that member's
 * next heartbeat, finding its list a strict superset, reads the whole
 * group and writes its list again, and the heartbeat after that of the
 * member the partition is assigned to claims it.  If that member stops
 * heartbeating, its membership lapses within its ttl, and its list counts
 * no more.
 */
bool
le_group_assign_settled(int32 npartitions, int32 nmembers, const bits8 *const *held)
{
	int			len = le_group_held_len(npartitions);
	bits8	   *seen;
	int32		q;
	int32		covered = 0;
	int32		m;
	int			i;
	bool		settled = true;

	if (nmembers <= 0)
		return false;
	for (m = 0; m < nmembers; m++)
		if (held[m] == NULL)
			return false;
	q = npartitions / nmembers;
	seen = palloc0(len);
	for (m = 0; m < nmembers && settled; m++)
	{
		uint64		count = pg_popcount((const char *) held[m], len);

		if (count != (uint64) q && count != (uint64) q + 1)
			settled = false;
		for (i = 0; i < len && settled; i++)
		{
			if ((seen[i] & held[m][i]) != 0)
				settled = false;
			seen[i] |= held[m][i];
		}
		covered += (int32) count;
	}
	/* no bits past the last partition, and every partition in a list */
	if (settled && (npartitions % 8 != 0 && (seen[len - 1] >> (npartitions % 8)) != 0))
		settled = false;
	pfree(seen);
	return settled && covered == npartitions;
}
