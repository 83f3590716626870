"""Leases for threaded (synchronous) code: `with lead(dsn, key) as lease:`.

A Lease is one ownership period.  Renewing runs in a thread of its own, on
the campaign connection (idle while leading), so work never delays a
renewal and no connect has to fit into the period; a watchdog thread ends
the period at its local deadline even when a renewal hangs.  Python cannot stop the body of a `with` block safely, so
in this mode is_leader() and `lost` are advisory: the fence (a token the
database checks in the same transaction as the write) is the guarantee.

Invariant: is_leader() is true only before the local deadline (send time
of the last confirmed acquire/renew + ttl - safety margin), and a token,
once its period ended, is never reported as held again.
"""

import contextlib
import os
import threading
import weakref

from . import _common as c

_LEASES = weakref.WeakSet()


def _after_fork_in_child():
    """A forked child shares the lease connections' sockets: it must never send on them.  Its
    copies of the leases drop their connections (psycopg does not close a connection made in
    another process) and, by the pid check, are not leading and release nothing."""
    for lease in list(_LEASES):
        lease._conn, lease._watching = None, False


os.register_at_fork(after_in_child=_after_fork_in_child)


class Lease:
    """One ownership period of `key`.  Create it with lead(); see lead() for the parameters.

    Attributes: key, owner_id, token (None until acquired), expires_at (the server's expiry at the
    last confirmed acquire/renew, text), lost (threading.Event, set when the period ended),
    lost_reason ('lost', 'renew_failed', 'deadline_passed', 'released')."""

    def __init__(self, dsn, key, ttl="15s", *, name=None, owner_id=None, timeout=None, cancel=None,
                 on_lost=None, renew_by=0.0, metadata=None, **timing):
        if not c.text(key, "key") or len(key.encode()) > 200:
            raise ValueError("lease key must be 1 to 200 bytes")
        for value, what in ((dsn, "dsn"), (name, "name"), (owner_id, "owner_id")):
            if value is not None:
                c.text(value, what)
        self.dsn = dsn
        self.key = key
        self.owner_id = owner_id or c.make_owner_id(name)
        self.timing = c.Timing(ttl, renew_by=renew_by, **timing)
        self.timeout = None if timeout is None else c.seconds(timeout, "timeout", wait=True)
        self.cancel = cancel
        self.on_lost = on_lost
        self.metadata = c.metadata_text(metadata)
        self.token = None
        self.expires_at = None
        self.holder = None
        self.last_error = None
        self.lost = threading.Event()
        self.lost_reason = None
        self._deadline = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conn = None
        self._stmts = None
        self._threads = []
        self._unknown_acquire = False
        self._cancels = []              # cancel requests of acquires given up on (threads)
        self._unanswered = False        # an acquire was sent and its answer lost
        self._not_before = 0.0          # no attempt before (an owner id conflict)
        self._watching = False
        self._watch_failed = False
        self._acquire_rtt = 0.0
        self._wait_conn = None          # the connection whose _server_waits was asked
        self._server_waits = False      # its server has the 1.1 le_acquire (wait, metadata)
        self._waited = False            # the last attempt waited in the server and was refused
        self._release_lock = threading.Lock()
        self._released = False
        self._release_result = None
        self._pid = os.getpid()         # the process that owns the period; a forked copy is inert
        _LEASES.add(self)

    # --- public --------------------------------------------------------------

    def is_leader(self):
        """True while this period lasts by the local monotonic deadline (read at every call).

        Advisory in threaded code: the period can end right after it returned True. Every write
        that matters must carry the token through the fence (transaction(), stamp())."""
        return (self.token is not None and not self.lost.is_set() and c.now() < self._deadline
                and os.getpid() == self._pid)

    def remaining(self):
        """Seconds left before the local deadline (0 when not leading)."""
        if not self.is_leader():
            return 0.0
        return max(0.0, self._deadline - c.now())

    def deadline(self):
        """The local deadline on the clock of leader_election.now() (CLOCK_BOOTTIME)."""
        return self._deadline

    @contextlib.contextmanager
    def transaction(self, conn, check=True):
        """`with lease.transaction(conn) as tx:` a psycopg transaction stamped with the token.

        Begins a transaction (a savepoint inside one) on the psycopg Connection `conn` and runs
        `SELECT set_config('leader_election.fencing_token', token, true)` first, so every fenced
        write in it (INSERT, UPDATE, DELETE, TRUNCATE on tables under le_protect) is judged with this
        period's token: after a takeover the database refuses it (SQLSTATE LE001 or LE002) and nothing
        commits.  Raises NotLeader without touching `conn` when the local deadline has passed
        (check=False: stamp the period's token anyway and let the fence alone judge it).  A write the
        fence refuses raises StaleToken (LE001) or NotHeld (LE002), subclasses of NotLeader with
        .sqlstate, the psycopg error as __cause__; other errors pass through unchanged."""
        if self.token is None or (check and not self.is_leader()):
            raise c.NotLeader(f'not leading lease "{self.key}"')
        try:
            with conn.transaction() as tx:
                conn.execute("SELECT pg_catalog.set_config('leader_election.fencing_token', %s, true)",
                             (str(self.token),))
                yield tx
        except c.psycopg.Error as e:
            fenced = c.fence_error(e)
            if fenced is None:
                raise
            raise fenced from e

    def stamp(self, values=None, column="fencing_token", **more):
        """A dict of column values with this period's token added under `column`.

        `cur.execute("INSERT INTO t (a, fencing_token) VALUES (%(a)s, %(fencing_token)s)",
        lease.stamp(a=1))`.  It does not look at the deadline (the fence judges the token); raises
        NotLeader before the lease was acquired."""
        if self.token is None:
            raise c.NotLeader(f'not leading lease "{self.key}"')
        row = dict(values or {}, **more)
        row[column] = self.token
        return row

    def acquire(self, timeout=None):
        """Campaign until this process holds the lease; returns self.

        Tries le_acquire every `retry` seconds (+- jitter) until it is granted, or raises
        NotAcquired after `timeout` seconds (None: wait for ever; 0: one attempt), or when the
        `cancel` event given to lead() is set (its last_error: the last failed attempt's LeaseError).
        Permanent errors (permission denied, missing extension, bad input, refused authentication,
        missing role or database: _common.permanent()) raise LeaseError at once."""
        if self.token is not None or os.getpid() != self._pid:
            raise RuntimeError("a Lease is one ownership period of one process: call lead() again for another")
        timeout = self.timeout if timeout is None else c.seconds(timeout, "timeout", wait=True)
        end = None if timeout is None else c.now() + timeout
        while True:
            if self.cancel is not None and self.cancel.is_set():
                self._give_up()
                raise c.not_acquired(self, "campaign cancelled")
            if self._attempt(self.timing.server_wait(end)):
                self._unwatch()
                self._start_threads()
                return self
            # after a wait in the server the next attempt follows at once
            delay = max(0.0 if self._waited else self.timing.retry_delay(), self._not_before - c.now())
            if end is not None:
                left = end - c.now()
                if left <= 0:
                    self._give_up()
                    raise c.not_acquired(self, f"not acquired within {timeout}s")
                delay = min(delay, left)
            self._wait_release(delay)

    def set_metadata(self, metadata):
        """Publish `metadata` (a dict or other JSON value, or JSON text; None clears it) with the lease
        (le_leases.metadata), compare-and-set with this period's owner id and token on a connection of
        its own (bounded by connect_timeout and statement_timeout).  Raises StaleToken (LE001) when
        the lease has a newer token, NotHeld (LE002) when it is released or expired, LeaseError
        (42883) against a server without extension 1.1."""
        if self.token is None:
            raise c.NotLeader(f'not leading lease "{self.key}"')
        text = c.metadata_text(metadata)
        conn = self._connect("metadata", self.timing.connect_timeout)
        try:
            res = c.drive(c._query_gen(conn, c.HAS_WAIT_SQL, (self._stmts.signature_wait,)),
                          c.now() + self.timing.statement_timeout)
            if c.value(res, 0) != "t":
                raise c.no_metadata_error()
            c.drive(c._query_gen(conn, self._stmts.set_metadata, (self.key, self.owner_id, str(self.token), text)),
                    c.now() + self.timing.statement_timeout)
        except c.LeaseError as e:
            cls = c.FENCE_ERRORS.get(e.sqlstate)
            if cls is None:
                raise
            raise cls(str(e), e.sqlstate) from e
        finally:
            c.close_quietly(conn)
        self.metadata = text

    def release(self):
        """End the period (reason 'released' unless it already ended) and compare-and-release it
        on the server with our owner id and token, so that a follower gets it at once.  Returns
        the server's answer (False when it was no longer ours), None when it could not be asked.
        In a forked child (another pid than the one that created the Lease) it does nothing and
        returns None: the period belongs to the parent."""
        if os.getpid() != self._pid:
            return None
        self._end("released")
        self._stop.set()
        me = threading.current_thread()
        for t in self._threads:     # they see _stop within a 250 ms slice, even in a hung renewal
            if t is not me:         # release() from on_lost runs in one of them
                t.join(1.0)
        with self._release_lock:    # once, even from two threads: one campaign connection
            if self._released:
                return self._release_result
            self._released = True
            if self.token is None:
                return None
            try:
                self._release_result = self._release_token(self.token)
            except c.LeaseError:
                self._release_result = None
            c.close_quietly(self._conn)
            self._conn, self._watching = None, False
            return self._release_result

    def __enter__(self):
        try:
            return self.acquire()
        except BaseException:
            c.close_quietly(self._conn)
            self._conn = None
            raise

    def __exit__(self, *exc):
        self.release()
        return False

    # --- campaign --------------------------------------------------------------

    def _connect(self, purpose, bound, stop=None):
        conn = c.drive(c._connect_gen(c.lease_conninfo(self.dsn, purpose, self.timing.connect_timeout)),
                       c.now() + bound, stop)
        if self._stmts is None:
            try:
                res = c.drive(c._query_gen(conn, c.SCHEMA_SQL), c.now() + self.timing.statement_timeout, stop)
                self._stmts = c.Statements(c.schema_from(res))
            except BaseException:
                c.close_quietly(conn)
                raise
        return conn

    def _has_server_wait(self):
        """Does the campaign connection's server have the 1.1 le_acquire?  Asked once per connection."""
        if self._wait_conn is not self._conn:
            res = c.drive(c._query_gen(self._conn, c.HAS_WAIT_SQL, (self._stmts.signature_wait,)),
                          c.now() + self.timing.statement_timeout)
            self._wait_conn, self._server_waits = self._conn, c.value(res, 0) == "t"
        return self._server_waits

    def _attempt(self, wait=0.0):
        """One le_acquire.  With extension 1.1 it waits up to `wait` seconds in the server (0: one
        try) and publishes the metadata; against 1.0 it is one try, and a refusal LISTENs."""
        t = self.timing
        sent = None
        self._waited = False
        try:
            if self._conn is None:
                self._conn = self._connect("campaign", t.connect_timeout)
            v11 = self._has_server_wait()
            if self.metadata is not None and not v11:
                raise c.no_metadata_error()
            sent = c.now()
            if v11:
                res = c.drive(c._query_gen(self._conn, self._stmts.acquire_wait,
                                           (self.key, self.owner_id, t.ttl_sql(), c.wait_sql(wait), self.metadata)),
                              sent + wait + t.statement_timeout, self.cancel if wait > 0 else None)
            else:
                res = c.drive(c._query_gen(self._conn, self._stmts.acquire, (self.key, self.owner_id, t.ttl_sql())),
                              sent + t.statement_timeout)
        except c.LeaseError as e:
            self._attempt_failed(e, sent)
            return False
        verdict, token = self._judge_answer(res, v11, wait, sent)
        if verdict == "watch":
            self._watch()
        elif verdict == "late":
            self._release_token(token)
        return verdict == "granted"

    def _attempt_failed(self, e, sent):
        """What an attempt that failed with e leaves behind (shared by both APIs): a timed-out call is
        cancelled and its answer counts as unknown, the connection is dropped; re-raises a permanent
        error."""
        if isinstance(e, c.Timeout) and self._conn is not None and self._conn.status == c.pq.ConnStatus.OK:
            self._unknown_acquire = True
            self._cancels.append(c.cancel_request(self._conn))
        if sent is not None and e.sqlstate is None:
            self._unanswered = True
        c.close_quietly(self._conn)
        self._conn, self._watching = None, False
        self.last_error = e
        if c.permanent(e.sqlstate):
            raise e

    def _judge_answer(self, res, v11, wait, sent):
        """Judge le_acquire's answer to an attempt sent at sent (shared by both APIs): ("granted", token)
        when the period is ours (recorded); ("refused", None); ("watch", None) when refused by a 1.0
        server (watch for the release); ("late", token) when granted too late to act on (release it)."""
        t = self.timing
        self.holder, self.last_error = c.value(res, 2), None
        if c.value(res, 0) != "t":
            self._waited = v11 and wait > 0
            return ("refused" if v11 else "watch"), None
        token = int(c.value(res, 1))
        if self._owner_conflict(token, c.value(res, 4)):
            return "refused", None
        deadline = sent + t.ttl - t.margin
        if c.now() >= deadline:
            return "late", token
        self.token, self.expires_at, self._deadline = token, c.value(res, 3), deadline
        self._acquire_rtt = c.now() - sent
        return "granted", token

    def _owner_conflict(self, token, new_period):
        """True when a grant continues a period we never had (new_period false, and no earlier attempt
        of ours lost its answer, which could have begun it): another process holds the lease with our
        owner id.  Then neither lead (both would use one token) nor release (it is theirs); try again
        after a ttl, when it will have expired if that process is gone."""
        if new_period != "f" or self._unanswered:
            return False
        self.last_error = c.LeaseError(f'another process holds lease "{self.key}" with owner id'
                                       f' "{self.owner_id}" (token {token}); owner ids must be unique')
        self._not_before = c.now() + self.timing.ttl
        return True

    def _watch(self):
        """LISTEN and le_watch(key) on the campaign connection, so that a release wakes us at once."""
        if self._watching or self._watch_failed or self._conn is None:
            return
        try:
            for sql, params in ((c.LISTEN_SQL, ()), (self._stmts.watch, (self.key,))):
                c.drive(c._query_gen(self._conn, sql, params), c.now() + self.timing.statement_timeout)
            self._watching = True
        except c.LeaseError as e:       # a server without le_watch, a timeout: polling alone
            self._watch_failed = e.sqlstate is not None
            c.close_quietly(self._conn)
            self._conn = None

    def _unwatch(self):
        """Leading: stop listening, so that no notification piles up on the idle campaign connection."""
        if not self._watching:
            return
        self._watching = False
        try:
            for sql, params in (("UNLISTEN *", ()), (self._stmts.unwatch, (self.key,))):
                c.drive(c._query_gen(self._conn, sql, params),
                        c.now() + min(self.timing.statement_timeout, self.timing.renew_every))
        except c.LeaseError:
            c.close_quietly(self._conn)
            self._conn = None

    def _wait_release(self, delay):
        """Sleep `delay`, less when the campaign connection hears that the lease was released
        (then 0-10 ms of random spread) or when the cancel event is set."""
        end = c.now() + delay
        while c.now() < end:
            if self.cancel is not None and self.cancel.is_set():
                return
            slice_ = min(0.05, end - c.now())
            if not self._watching or self._conn is None:
                (self.cancel or self._stop).wait(slice_)
                continue
            p = c.select.poll()
            p.register(self._conn.socket, c.select.POLLIN)
            if p.poll(slice_ * 1000):
                try:
                    heard = c.released_heard(self._conn, self.key)
                except Exception:
                    heard = False
                    c.close_quietly(self._conn)
                    self._conn, self._watching = None, False
                if heard:
                    self._stop.wait(c.random.uniform(0, 0.01))
                    return

    def _give_up(self):
        """After an acquire whose answer never came, the server may have granted it late: take it
        back (once, bounded) so that it does not block the key for a ttl."""
        if not self._unknown_acquire:
            return
        self._unknown_acquire = False
        self._join_cancels()            # the cancel requests first (bounded): then what is left
        try:
            if self._attempt():
                self._release_token(self.token)
                self.token = None
        except c.LeaseError:
            pass
        self._join_cancels()            # that attempt's own, if it was given up too

    def _join_cancels(self):
        for t in self._cancels:
            if t is not None:
                t.join(self.timing.connect_timeout)
        self._cancels = []

    def _release_token(self, token):
        for _ in range(2):
            try:
                if self._conn is None:
                    self._conn = self._connect("campaign", self.timing.connect_timeout)
                res = c.drive(c._query_gen(self._conn, self._stmts.release, (self.key, self.owner_id, token)),
                              c.now() + self.timing.statement_timeout)
                return c.value(res, 0) == "t"
            except c.LeaseError:
                c.close_quietly(self._conn)
                self._conn, self._watching = None, False
        raise c.LeaseError(f'could not release lease "{self.key}"')

    # --- leadership -------------------------------------------------------------

    def _end(self, reason):
        with self._lock:
            if self.lost.is_set():
                return
            self.lost_reason = reason
            self._deadline = min(self._deadline, c.now())
            self.lost.set()
        if self.on_lost is not None and reason != "released":
            try:
                self.on_lost(self)
            except Exception:
                pass

    def _start_threads(self):
        for target, what in ((self._renew_loop, "renew"), (self._watchdog, "deadline")):
            th = threading.Thread(target=target, name=f"leader_election {what} {self.key}", daemon=True)
            self._threads.append(th)
            th.start()

    def _watchdog(self):
        while not self.lost.is_set():
            left = self._deadline - c.now()
            if left <= 0:
                self._end("deadline_passed")
                return
            self._stop.wait(min(left, 0.5))
            if self._stop.is_set():
                return

    def _renew_loop(self):
        t = self.timing
        # The campaign connection, idle while leading, renews: no connect to fit into the period.
        # Without one, connect now, with all the time before the first renewal is due.
        conn, self._conn, rtt = self._conn, None, self._acquire_rtt
        next_at = self._deadline - (t.ttl - t.margin) + t.renew_every
        try:
            if conn is None:
                try:
                    conn = self._connect("renew", t.first_connect_bound(self._deadline))
                except c.LeaseError:
                    conn = None         # the renewal connects again and retries
            while not self.lost.is_set():
                if self._stop.wait(max(0.0, next_at - c.now())):
                    return
                if c.now() >= self._deadline:
                    self._end("deadline_passed")
                    return
                try:
                    bound = t.attempt_bound(self._deadline, rtt)
                    if conn is None:
                        conn = self._connect("renew", min(t.connect_timeout, max(bound, 3 * rtt)), self._stop)
                    sent = c.now()
                    res = c.drive(c._query_gen(conn, self._stmts.renew,
                                               (self.key, self.owner_id, self.token, t.ttl_sql())),
                                  sent + bound, self._stop)
                    rtt = c.now() - sent
                except Exception as e:          # LeaseError, or anything unexpected: retry, never die
                    c.close_quietly(conn)
                    conn = None
                    if c.permanent(getattr(e, "sqlstate", None)):
                        self._end("renew_failed")
                        return
                    left = self._deadline - c.now()
                    next_at = c.now() + min(t.renew_every / 4, 0.2, max(left / 4, 0.0)) * (0.75 + 0.5 * c.random.random())
                    continue
                expiry = c.value(res, 0)
                if expiry is None:
                    self._end("lost")
                    return
                with self._lock:
                    if not self.lost.is_set() and c.now() < self._deadline:
                        self._deadline = max(self._deadline, sent + t.ttl - t.margin)
                        self.expires_at = expiry
                next_at = sent + t.renew_every
        finally:
            if (conn is not None and self._stop.is_set() and self._conn is None
                    and conn.status == c.pq.ConnStatus.OK and conn.transaction_status == c.pq.TransactionStatus.IDLE):
                self._conn = conn       # release() asks on it
            else:
                c.close_quietly(conn)


def lead(dsn, key, ttl="15s", **options):
    """Lead `key`: `with lead(dsn, "billing", ttl="15s") as lease:` ... `lease.token`.

    Entering the block campaigns until the lease is granted (NotAcquired after `timeout` seconds
    when given); leaving it releases the lease (compare-and-release with the token).  While inside,
    a thread renews on its own connection every `renew_every` (default a third of ttl - margin), each
    attempt bounded by the statement timeout and by half the time left, reconnecting and retrying
    with jitter; `lease.is_leader()` reads the local monotonic deadline at every call and
    `lease.lost` is set when the period ends (within milliseconds of the deadline, by a watchdog
    thread, even when renewals hang).  The body is NOT interrupted: use `lease.transaction(conn)` or
    `lease.stamp()` so that the database fences every write, or run() for work that must be killed.

    Options: name (owner id prefix; ids are NAME-host-pid-random, new for every Lease), owner_id
    (use exactly this id: it must be unique per process), timeout, cancel (a threading.Event that
    ends the campaign), on_lost (callable(lease), run in a library thread), safety_margin,
    renew_every, retry (default 2 s), jitter (0.2), connect_timeout, statement_timeout (5 s),
    metadata (a dict or JSON text published with the lease; needs extension 1.1).
    Against extension 1.1 each attempt waits in the server (up to min(retry, ttl/4,
    statement_timeout/2, 1 s)) and the next follows at once; against 1.0 it polls and LISTENs.
    Durations are seconds or strings such as '500ms', '15s'."""
    return Lease(dsn, key, ttl, **options)
