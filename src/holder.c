/*-------------------------------------------------------------------------
 *
 * holder.c
 *		The holder deadline: a transaction that keeps a lease locked while
 *		its client stalls is ended.
 *
 * A lease call that locked a lease row inside a transaction keeps the lock
 * until the transaction ends.  Each such call sets a deadline for its lease
 * (le_holder_bound_idle); from the transaction's earliest deadline on, a
 * timeout of ours ends the session if, and only if, it is waiting for its
 * client.  src/README.md ("The holder deadline") describes the rule and why
 * it is safe.
 *
 * Invariant: the deadlines are exactly those of the lease calls whose locks
 * the transaction still holds (a subtransaction's go when it rolls back,
 * all go when the transaction ends), and the timeout is armed at the
 * earliest of them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "leader_election.h"

/*
 * How often, from the deadline on, the timeout looks whether the backend
 * waits for its client (src/README.md, "The holder deadline").  The handler
 * runs in the SIGALRM handler: it only reads the wait event (a plain word),
 * sets flags and the latch.
 */
#define LE_HOLDER_BOUND_POLL_MS		50

/*
 * The deadlines of the transaction, in the order the calls set them.  A
 * call on a lease that already has an entry from the same subtransaction
 * replaces its deadline; from another one, it adds an entry that hides the
 * earlier one (superseded) until its subtransaction rolls back.  Entries
 * set in a subtransaction (or its children) are thus the last ones in the
 * array while it is open.
 */
typedef struct HolderDeadline
{
	char	   *key;			/* in TopTransactionContext */
	TimestampTz deadline;
	SubTransactionId subid;		/* subtransaction of the call that set it */
	int			hides;			/* index of the entry it supersedes, or -1 */
	bool		superseded;		/* a later entry for the same key counts */
	uint64		gen;			/* changes with deadline and superseded */
} HolderDeadline;

/* key -> index of its last entry, in TopTransactionContext */
typedef struct HolderKeyEntry
{
	const char *key;			/* the entries' copy */
	int			idx;
} HolderKeyEntry;

/*
 * A min-heap of deadlines, so that a transaction calling on tens of
 * thousands of leases costs O(log n) per call: a node counts while its
 * entry exists, has the same gen and is not superseded; others are dropped
 * when they come to the top, and the heap is rebuilt when mostly stale.
 */
typedef struct HolderHeapNode
{
	TimestampTz deadline;
	int			idx;
	uint64		gen;
} HolderHeapNode;

static TimeoutId le_holder_timeout = MAX_TIMEOUTS;	/* not registered yet */
static HolderDeadline *le_holder_deadlines = NULL;	/* of this transaction */
static int	le_holder_n = 0;
static int	le_holder_size = 0;
static HTAB *le_holder_keys = NULL;
static HolderHeapNode *le_holder_heap = NULL;
static int	le_holder_heap_n = 0;
static int	le_holder_heap_size = 0;
static uint64 le_holder_gen = 0;
static bool le_holder_armed = false;

static void le_holder_bound_rearm(void);

/* le_holder_keys is keyed by a pointer to the key's text. */
static uint32
le_holder_key_hash(const void *key, Size keysize)
{
	return string_hash(*(const char *const *) key, LE_MAX_KEY_LEN + 1);
}

static int
le_holder_key_match(const void *key1, const void *key2, Size keysize)
{
	return strcmp(*(const char *const *) key1, *(const char *const *) key2);
}

/* Set by the handler; read by le_holder_bound_emit_log. */
static volatile sig_atomic_t le_holder_fired = false;

/* What the FATAL names: the lease whose deadline is armed, and when. */
static char le_holder_key[NAMEDATALEN * 2];
static TimestampTz le_holder_when = 0;
static emit_log_hook_type le_holder_prev_emit_log_hook = NULL;

/* SIGALRM context: end the session only while it waits for its client. */
static void
le_holder_bound_handler(void)
{
	uint32		wait = *(volatile uint32 *) my_wait_event_info;

	if (wait == WAIT_EVENT_CLIENT_READ || wait == WAIT_EVENT_CLIENT_WRITE)
	{
		le_holder_fired = true;
		ProcDiePending = true;
		InterruptPending = true;
	}
	SetLatch(MyLatch);
}

/*
 * The FATAL that ProcessInterrupts raises for ProcDiePending says
 * "administrator command": when our timeout set it, say what happened.
 */
static void
le_holder_bound_emit_log(ErrorData *edata)
{
	if (le_holder_fired && edata->elevel == FATAL &&
		edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN)
	{
		edata->sqlerrcode = ERRCODE_IDLE_IN_TRANSACTION_SESSION_TIMEOUT;
		edata->message = psprintf("terminating connection because its transaction kept lease \"%s\" locked past %s while waiting for the client",
								  le_holder_key, timestamptz_to_str(le_holder_when));
		edata->detail = pstrdup("A transaction that granted, renewed, released or locked a lease ends by the ttl the call granted (leader_election.lock_timeout after a call that changed nothing) once it waits for its client; other candidates wait for the locks it holds.");
		edata->hint = pstrdup("Commit right after le_acquire(), le_renew() or le_release(), or call them in autocommit mode.");
	}
	/*
	 * PostgresMain cancels every timeout before it reports an error and
	 * aborts: when the error leaves the transaction's locks in place (a
	 * subtransaction aborts, or the transaction block is already in its
	 * aborted state), put our timeout back.  The transaction's abort, if
	 * it comes next, disarms it again.
	 */
	if (edata->elevel == ERROR && le_holder_n > 0)
		le_holder_bound_rearm();
	if (le_holder_prev_emit_log_hook)
		le_holder_prev_emit_log_hook(edata);
}

static bool
le_holder_node_counts(const HolderHeapNode *node)
{
	return node->idx < le_holder_n &&
		le_holder_deadlines[node->idx].gen == node->gen &&
		!le_holder_deadlines[node->idx].superseded;
}

/* Add entry idx, with its current deadline, to the heap. */
static void
le_holder_heap_push(int idx)
{
	HolderHeapNode node;
	int			i;

	if (le_holder_heap_n == le_holder_heap_size)
	{
		int			size = le_holder_heap_size == 0 ? 8 : le_holder_heap_size * 2;

		le_holder_heap = le_holder_heap == NULL ?
			MemoryContextAlloc(TopTransactionContext, size * sizeof(HolderHeapNode)) :
			repalloc(le_holder_heap, size * sizeof(HolderHeapNode));
		le_holder_heap_size = size;
	}
	node.deadline = le_holder_deadlines[idx].deadline;
	node.idx = idx;
	node.gen = le_holder_deadlines[idx].gen;
	for (i = le_holder_heap_n++; i > 0; i = (i - 1) / 2)
	{
		if (le_holder_heap[(i - 1) / 2].deadline <= node.deadline)
			break;
		le_holder_heap[i] = le_holder_heap[(i - 1) / 2];
	}
	le_holder_heap[i] = node;
}

/* Drop the heap's top. */
static void
le_holder_heap_pop(void)
{
	HolderHeapNode last = le_holder_heap[--le_holder_heap_n];
	int			i = 0;

	for (;;)
	{
		int			c = 2 * i + 1;

		if (c >= le_holder_heap_n)
			break;
		if (c + 1 < le_holder_heap_n &&
			le_holder_heap[c + 1].deadline < le_holder_heap[c].deadline)
			c++;
		if (last.deadline <= le_holder_heap[c].deadline)
			break;
		le_holder_heap[i] = le_holder_heap[c];
		i = c;
	}
	if (le_holder_heap_n > 0)
		le_holder_heap[i] = last;
}

/* Give entry idx a new deadline (or none, superseded) and heap it. */
static void
le_holder_set(int idx, TimestampTz deadline, bool superseded)
{
	le_holder_deadlines[idx].deadline = deadline;
	le_holder_deadlines[idx].superseded = superseded;
	le_holder_deadlines[idx].gen = ++le_holder_gen;
	if (!superseded)
		le_holder_heap_push(idx);
}

/*
 * Arm our timeout at the earliest deadline of the transaction, or disarm
 * it.  Also after something cancelled it (PostgresMain does all timeouts
 * before it reports an error).
 */
static void
le_holder_bound_rearm(void)
{
	const HolderDeadline *min;

	if (le_holder_heap_n > 2 * le_holder_n + 64)
	{
		le_holder_heap_n = 0;
		for (int i = 0; i < le_holder_n; i++)
			if (!le_holder_deadlines[i].superseded)
				le_holder_heap_push(i);
	}
	while (le_holder_heap_n > 0 && !le_holder_node_counts(&le_holder_heap[0]))
		le_holder_heap_pop();
	if (le_holder_heap_n == 0)
	{
		if (le_holder_armed)
			disable_timeout(le_holder_timeout, false);
		le_holder_armed = false;
		return;
	}
	min = &le_holder_deadlines[le_holder_heap[0].idx];
	strlcpy(le_holder_key, min->key, sizeof(le_holder_key));
	if (le_holder_armed && le_holder_when == min->deadline &&
		get_timeout_active(le_holder_timeout))
		return;
	le_holder_when = min->deadline;
	enable_timeout_every(le_holder_timeout, le_holder_when, LE_HOLDER_BOUND_POLL_MS);
	le_holder_armed = true;
}

/* The transaction ended: so did its locks and its deadlines. */
static void
le_holder_bound_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			if (le_holder_armed)
				disable_timeout(le_holder_timeout, false);
			le_holder_armed = false;
			le_holder_deadlines = NULL; /* TopTransactionContext goes */
			le_holder_n = le_holder_size = 0;
			le_holder_keys = NULL;
			le_holder_heap = NULL;
			le_holder_heap_n = le_holder_heap_size = 0;
			break;
		default:
			break;
	}
}

/*
 * A subtransaction rolled back: so did the locks of the lease calls made
 * only inside it (subtransaction ids of this one and of its children are
 * at least its own).
 */
static void
le_holder_bound_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								 SubTransactionId parentSubid, void *arg)
{
	if (event != SUBXACT_EVENT_ABORT_SUB || le_holder_n == 0)
		return;
	/* its entries are the last ones; those they hid count again */
	while (le_holder_n > 0 && le_holder_deadlines[le_holder_n - 1].subid >= mySubid)
	{
		HolderDeadline *gone = &le_holder_deadlines[--le_holder_n];
		HolderKeyEntry *ke;

		if (gone->hides >= 0)
		{
			ke = hash_search(le_holder_keys, &gone->key, HASH_FIND, NULL);
			Assert(ke != NULL);
			ke->idx = gone->hides;
			le_holder_set(gone->hides, le_holder_deadlines[gone->hides].deadline, false);
		}
		else
			(void) hash_search(le_holder_keys, &gone->key, HASH_REMOVE, NULL);
	}
	/* also when nothing went: an error on the way here cancelled timeouts */
	le_holder_bound_rearm();
}

/*
 * Set the deadline of the lease key, locked by the current transaction, to
 * now + bound_us (see above).  Also outside transaction blocks: a client
 * using the extended protocol keeps its implicit transaction open until it
 * sends Sync (a pipeline that stops before it holds the locks while the
 * backend waits for it), and a statement that returns a result the client
 * does not read waits for it in ClientWrite.  A statement that commits at
 * once disarms at its commit.
 */
void
le_holder_bound_idle(const char *key, int64 bound_us)
{
	TimestampTz deadline;
	SubTransactionId subid;
	HolderKeyEntry *ke;
	int			i;

	if (!IsTransactionState())
		return;
	if (le_holder_timeout == MAX_TIMEOUTS)
	{
		le_holder_timeout = RegisterTimeout(USER_TIMEOUT, le_holder_bound_handler);
		RegisterXactCallback(le_holder_bound_xact_callback, NULL);
		RegisterSubXactCallback(le_holder_bound_subxact_callback, NULL);
		le_holder_prev_emit_log_hook = emit_log_hook;
		emit_log_hook = le_holder_bound_emit_log;
	}
	deadline = GetCurrentTimestamp() + bound_us;
	subid = GetCurrentSubTransactionId();

	if (le_holder_keys == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(const char *);
		ctl.entrysize = sizeof(HolderKeyEntry);
		ctl.hash = le_holder_key_hash;
		ctl.match = le_holder_key_match;
		ctl.hcxt = TopTransactionContext;
		le_holder_keys = hash_create("leader_election holder deadlines", 16, &ctl,
									 HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	}

	/* The lease's entry that counts is its last one. */
	ke = hash_search(le_holder_keys, &key, HASH_FIND, NULL);
	i = ke != NULL ? ke->idx : -1;
	if (i < 0 || le_holder_deadlines[i].subid != subid)
	{
		int			hides = i;

		if (le_holder_n == le_holder_size)
		{
			int			size = le_holder_size == 0 ? 4 : le_holder_size * 2;

			le_holder_deadlines = le_holder_deadlines == NULL ?
				MemoryContextAlloc(TopTransactionContext, size * sizeof(HolderDeadline)) :
				repalloc(le_holder_deadlines, size * sizeof(HolderDeadline));
			le_holder_size = size;
		}
		i = le_holder_n++;
		le_holder_deadlines[i].key = hides >= 0 ? le_holder_deadlines[hides].key :
			MemoryContextStrdup(TopTransactionContext, key);
		le_holder_deadlines[i].subid = subid;
		le_holder_deadlines[i].hides = hides;
		if (hides >= 0)
			le_holder_set(hides, le_holder_deadlines[hides].deadline, true);
		else
			ke = hash_search(le_holder_keys, &le_holder_deadlines[i].key, HASH_ENTER, NULL);
		ke->idx = i;
	}

	/*
	 * A later call replaces the lease's deadline, until the subtransaction
	 * it was made in rolls back: then the earlier call's deadline counts
	 * again (its locks are the ones left).
	 */
	le_holder_set(i, deadline, false);
	le_holder_bound_rearm();
}
