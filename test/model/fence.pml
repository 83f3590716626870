/*
 * fence.pml: a Promela model of one lease of leader_election and its
 * fence, as implemented in src/lease.c, src/lease_store.c and src/fence.c
 * (see doc/fence.md).  Checked by test/model/check.sh with spin.
 *
 * What is modelled.  One lease key; NCLIENTS clients (2 or 3).  Each
 * client has a lease session (the client library's or pg_leader's
 * connection) and, for the first NWRITERS clients, a writing session (the
 * leader's command, on its own connection) that writes with the last token
 * its client was granted, also after it lost the lease.  Transactions:
 *   - acquire: a plain read of the latest committed row (a refusal when it
 *     is validly held, which changes nothing and is left out); else the
 *     fence lock EXCLUSIVE, then the row lock, the decision on the latest
 *     committed row by the server clock, a token drawn from a
 *     non-transactional sequence, commit (the locks go after the commit
 *     record);
 *   - renew: the row lock only; extends the expiry of its own valid period
 *     (the holder's own le_acquire, which does the same, is left out);
 *   - release: the fence lock EXCLUSIVE, the row lock, frees the lease
 *     (valid or lapsed);
 *   - fenced write: the early check without any lock on the latest
 *     committed row (the transaction records its token), then at COMMIT
 *     (PRE_COMMIT): the fence lock SHARED, the row read again, the decision
 *     (token still current, lease held and unexpired by the clock now), the
 *     commit record, and only then the lock released.
 * Faults:
 *   - a backend crash or rollback: an acquire between drawing its token and
 *     its commit record, a release before its commit record, a fenced write
 *     while open and in its commit between the check and the commit record.
 *     It changes nothing but the sequence, and its locks go.  (A call that
 *     aborts before it holds a lock or drew a token, e.g. on lock_timeout,
 *     is the same as one never made, and is left out.)
 *   - a process pause: spin explores every interleaving, so any session can
 *     stay still (between any two of its steps, also inside an open
 *     transaction or in its commit) while the clock and the others run.
 *   - the clock: a process that advances abstract time 0..MAXT; a lease is
 *     valid while now < expires (TTL 2).
 * Not modelled: le_force_release (it ends a holder's period without its
 * consent, so the holder's own belief in P1 does not apply), the acquire
 * path that finds its own row lapsed between its two reads (it only
 * try-locks the fence lock and refuses when it is taken), prepared
 * transactions (which keep the fence lock; see doc/fence.md), and
 * several keys (fence locks and rows are per lease).
 * Beyond the bounds: time stops at MAXT and at most MAXTOK tokens are drawn,
 * which bounds the state space (every interleaving within them is checked).
 *
 * Properties, all checked as assertions (pan -DSAFETY):
 *   P1 at most one client believes it holds a valid lease (monitor);
 *   P2 per key, every token drawn exceeds every token drawn before,
 *      granted, rolled back or lost in a crash, and every granted token
 *      exceeds the lease's previous one;
 *   P3 a fenced write commits only if, when its fence lock was granted,
 *      its token was the lease's current one and the lease held and
 *      unexpired (expiry is judged at the lock point), and if no later grant
 *      and no release has committed by its commit record;
 *   P4 a takeover attempt on an expired or free lease never has to wait
 *      for a fenced writer that is not in its commit step (an idle or
 *      paused writer blocks nobody).
 *
 * Mutants (compile-time flags, each must make spin find a violation):
 *   MUTANT_READ_BEFORE_LOCK  the commit-time check reads the lease row
 *                            before the fence lock is granted (P3);
 *   MUTANT_LOCK_AT_WRITE     writers take the shared fence lock at the early
 *                            check and keep it to the end of the transaction
 *                            (the earlier design; P4);
 *   MUTANT_TX_SEQUENCE       the token counter is rolled back with the
 *                            transaction, like an ordinary table (P2);
 *   MUTANT_NO_FENCE_LOCK     acquire takes no fence lock (P3);
 *   MUTANT_UNLOCK_BEFORE_COMMIT  the writer lets the fence lock go after
 *                            its check, before the commit record (P3);
 *   MUTANT_NO_EXPIRY_CHECK   the commit-time check ignores the expiry (P3).
 */

#ifndef NCLIENTS
#define NCLIENTS 2
#endif
#ifndef NWRITERS
#define NWRITERS NCLIENTS
#endif
#ifndef MAXT
#define MAXT 4
#endif
#ifndef MAXTOK
#define MAXTOK 3
#endif
#define TTL 2
#define NONE 255

/* The latest committed lease row. */
byte r_tok = 0;					/* current token; 0: never granted */
byte r_holder = NONE;			/* NONE: free (never granted or released) */
byte r_exp = 0;					/* valid while now < r_exp */

byte now = 0;					/* the server clock */
byte seq = 0;					/* the token sequence (non-transactional) */
byte maxdrawn = 0;				/* ghost: highest token ever drawn */

/* Locks: the fence lock (exclusive holder or shared holders), the row lock. */
byte xholder = NONE;
byte nshared = 0;
bool shared[3];
byte rowlock = NONE;

/* Each client's own view: its last token and the expiry it was granted. */
byte mytok[3];
byte myexp[3];

/* Where each client's fenced write transaction is. */
#define W_NONE   0				/* no fenced write open */
#define W_OPEN   1				/* wrote under the early check, not committing */
#define W_COMMIT 2				/* in its COMMIT (PRE_COMMIT to the end) */
byte wphase[3];
bool lockok[3];					/* ghost: lease valid with its token at its lock point */

#define ROWVALID	(r_holder != NONE && now < r_exp)
#define BELIEVES(i)	(mytok[i] != 0 && now < myexp[i])
#define TWO_HOLDERS	((BELIEVES(0) && BELIEVES(1)) || (BELIEVES(0) && BELIEVES(2)) || (BELIEVES(1) && BELIEVES(2)))
#define IDLE_SHARED(i)	(shared[i] && wphase[i] != W_COMMIT)
#define FENCE_FREE	(xholder == NONE && nshared == 0)

/* P1: at most one valid holder, checked in every reachable state. */
active proctype monitor()
{
end:
	atomic { TWO_HOLDERS -> assert(false) }
}

/* The clock: any number of ticks between any two steps of anyone. */
active proctype clock()
{
end:
	do
	:: now < MAXT -> now++
	od
}

/* Give back the locks of client me's lease session (commit or abort). */
inline drop_lease_locks(me)
{
	if
	:: xholder == me -> xholder = NONE
	:: else -> skip
	fi;
	if
	:: rowlock == me -> rowlock = NONE
	:: else -> skip
	fi
}

/* Give back the lock of client me's writing session (commit or abort). */
inline drop_writer_lock(me)
{
	if
	:: shared[me] -> shared[me] = false; nshared--
	:: else -> skip
	fi;
	wphase[me] = W_NONE;
	lockok[me] = false;
	t_tok = 0; t_holder = 0; t_exp = 0
}

/*
 * A lease call that aborts (crash, rollback): its locks go, nothing it
 * wrote is kept.  Only the sequence keeps what was drawn, unless it is the
 * mutant.
 */
inline abort_lease(me)
{
	d_step {
		drop_lease_locks(me);
#ifdef MUTANT_TX_SEQUENCE
		seq = seq0;
#endif
		newtok = 0; newexp = 0; seq0 = 0
	}
}

/*
 * Client me's lease session: acquire, renew and release, each its own
 * transaction, as the client library and pg_leader make them.
 */
proctype lease_session(byte me)
{
	byte newtok, newexp;
	byte seq0;

end_idle:
	do
	/* ---- acquire: a takeover of a free or expired lease ------------- */
	/* (the fast path, a plain read that finds it validly held, changes
	 * nothing and is left out) */
	:: seq < MAXTOK && !ROWVALID ->
#ifndef MUTANT_NO_FENCE_LOCK
		/* P4: a takeover of an expired lease waits on no idle writer */
		d_step {
			if
			:: !FENCE_FREE -> assert(!IDLE_SHARED(0) && !IDLE_SHARED(1) && !IDLE_SHARED(2))
			:: else -> skip
			fi
		}
		atomic { FENCE_FREE -> xholder = me };
#endif
		atomic { rowlock == NONE -> rowlock = me };
		/* the decision on the latest committed row, by the clock now */
		if
		:: d_step { ROWVALID -> drop_lease_locks(me) }	/* lost a race */
		:: d_step { !ROWVALID ->
				seq0 = seq;
				seq++; newtok = seq;
				assert(newtok > maxdrawn);		/* P2: never drawn before */
				maxdrawn = newtok;
				newexp = now + TTL }
			if
			:: d_step {		/* commit; the locks go after the commit record */
					assert(newtok > r_tok);			/* P2: strictly increasing */
					r_tok = newtok; r_holder = me; r_exp = newexp;
					mytok[me] = newtok; myexp[me] = newexp;
					drop_lease_locks(me);
					newtok = 0; newexp = 0; seq0 = 0 }
			:: abort_lease(me)	/* crash before the commit record: a token lost */
			fi
		fi

	/* ---- renew its valid period (row lock, no fence lock) ----------- */
	:: atomic { rowlock == NONE && r_holder == me && r_tok == mytok[me] && now < r_exp ->
			rowlock = me; newexp = now + TTL }
		d_step { r_exp = newexp; myexp[me] = newexp; drop_lease_locks(me); newexp = 0 }

	/* ---- release its period, valid or lapsed ------------------------ */
	:: mytok[me] != 0 && r_holder == me && r_tok == mytok[me] ->
		atomic { FENCE_FREE -> xholder = me };
		atomic { rowlock == NONE -> rowlock = me };
		if
		:: d_step { r_holder == me && r_tok == mytok[me] ->
				r_holder = NONE; r_exp = 0; myexp[me] = 0; drop_lease_locks(me) }
		:: abort_lease(me)
		fi
	od
}

/*
 * Client me's writing session (the leader's command, on a connection of its
 * own): fenced write transactions with the last token client me was granted.
 */
proctype writer(byte me)
{
	byte t_tok, t_holder, t_exp;	/* the lease row as read at commit */

end_idle:
	do
	/* the early check, without a lock, on the latest committed row; a
	 * write it rejects (LE001 / LE002) changes nothing and is left out */
	:: d_step { mytok[me] != 0 && r_tok == mytok[me] && ROWVALID -> wphase[me] = W_OPEN }
#ifdef MUTANT_LOCK_AT_WRITE
		atomic { xholder == NONE -> shared[me] = true; nshared++ };
#endif
		/* open: it may pause here as long as it likes, or roll back */
		if
		:: d_step { drop_writer_lock(me) }; goto end_idle
		:: skip
		fi;
#ifdef MUTANT_READ_BEFORE_LOCK
		d_step { wphase[me] = W_COMMIT; t_tok = r_tok; t_holder = r_holder; t_exp = r_exp };
		atomic { (shared[me] || xholder == NONE) ->
			if
			:: !shared[me] -> shared[me] = true; nshared++
			:: else -> skip
			fi;
#else
		wphase[me] = W_COMMIT;
		atomic { (shared[me] || xholder == NONE) ->
			if
			:: !shared[me] -> shared[me] = true; nshared++
			:: else -> skip
			fi;
			t_tok = r_tok; t_holder = r_holder; t_exp = r_exp;
#endif
			/* ghost: was the lease valid with our token when the lock came? */
			lockok[me] = (r_tok == mytok[me] && ROWVALID);
			/* the decision at the lock point, by the clock now */
			if
#ifdef MUTANT_NO_EXPIRY_CHECK
			:: !(t_tok == mytok[me] && t_holder != NONE) ->
#else
			:: !(t_tok == mytok[me] && t_holder != NONE && now < t_exp) ->
#endif
				drop_writer_lock(me); goto end_idle	/* LE001 / LE002 */
			:: else -> skip
			fi
		}
#ifdef MUTANT_UNLOCK_BEFORE_COMMIT
		d_step { shared[me] = false; nshared-- };
#endif
		if
		:: d_step {		/* the commit record; then the lock goes */
				assert(lockok[me] && r_tok == mytok[me] && r_holder != NONE);	/* P3 */
				drop_writer_lock(me) }
		:: d_step { drop_writer_lock(me) }	/* crash before the commit record */
		fi
	od
}

init
{
	byte i;
	atomic {
		for (i : 0 .. NCLIENTS - 1) {
			run lease_session(i)
		}
		for (i : 0 .. NWRITERS - 1) {
			run writer(i)
		}
	}
}
