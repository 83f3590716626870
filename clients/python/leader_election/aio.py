"""Leases for asyncio: `async with lead_async(dsn, key) as lease:`.

The same period rules as the threaded Lease (leader_election.sync), on the
event loop: acquiring and renewing use non-blocking libpq driven by the
loop, renewal is a task of its own on its own connection, and the task
that entered the block is CANCELLED cancel_margin (100 ms by default)
before the local deadline, or at once when the period ends earlier
(renewal answered NULL, permanent error).  The block then raises
LeadershipLost.

Invariant: the body's task gets its cancellation no later than
deadline - cancel_margin, provided the event loop is not blocked (code
that never awaits cannot be cancelled: the fence still stops its writes).
"""

import asyncio
import contextlib
import os

from . import _common as c
from .sync import Lease


_BACKGROUND = set()     # tasks that must run to their end: strong references


def _background(task):
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


RECANCEL = 0.1      # a body that swallowed its cancellation is cancelled again this often


class AsyncLease(Lease):
    """One ownership period for asyncio code.  Create it with lead_async(); `lost` is an
    asyncio.Event; is_leader(), remaining(), stamp() and the attributes are those of Lease."""

    def __init__(self, dsn, key, ttl="15s", *, cancel_margin=0.1, **options):
        super().__init__(dsn, key, ttl, **options)
        self.lost = asyncio.Event()
        self.cancel_margin = 0.0 if cancel_margin == 0 else c.seconds(cancel_margin, "cancel_margin")
        if not 0 <= self.cancel_margin < self.timing.ttl / 4:
            raise ValueError("cancel_margin must be in [0, ttl/4)")
        self._task = None
        self._body = None
        self._cancel_handle = None
        self._cancelled_by_us = False
        self._body_cancels = 0
        self._recancel_handle = None

    @contextlib.asynccontextmanager
    async def transaction(self, conn, check=True):
        """`async with lease.transaction(aconn) as tx:` the asyncio twin of Lease.transaction()."""
        if self.token is None or (check and not self.is_leader()):
            raise c.NotLeader(f'not leading lease "{self.key}"')
        try:
            async with conn.transaction() as tx:
                await conn.execute("SELECT pg_catalog.set_config('leader_election.fencing_token', %s, true)",
                                   (str(self.token),))
                yield tx
        except c.psycopg.Error as e:
            fenced = c.fence_error(e)
            if fenced is None:
                raise
            raise fenced from e

    async def acquire(self, timeout=None):
        """Campaign until leading (see Lease.acquire); NotAcquired after `timeout` seconds."""
        if self.token is not None:
            raise RuntimeError("a Lease is one ownership period: call lead_async() again for another")
        timeout = self.timeout if timeout is None else c.seconds(timeout, "timeout", wait=True)
        end = None if timeout is None else c.now() + timeout
        try:
            while True:
                if await self._attempt_async(self.timing.server_wait(end)):
                    self._task = asyncio.create_task(self._renew_task(), name=f"leader_election renew {self.key}")
                    self._arm()
                    await self._unwatch_async()
                    return self
                # after a wait in the server the next attempt follows at once
                delay = max(0.0 if self._waited else self.timing.retry_delay(), self._not_before - c.now())
                if end is not None:
                    left = end - c.now()
                    if left <= 0:
                        await self._give_up_async()
                        raise c.not_acquired(self, f"not acquired within {timeout}s")
                    delay = min(delay, left)
                await self._wait_release_async(delay)
        except asyncio.CancelledError:  # the campaign's task was cancelled: give up in the background
            if self._unknown_acquire and self.token is None:
                _background(asyncio.ensure_future(self._give_up_async()))
            raise

    async def _give_up_async(self):
        """The asyncio twin of Lease._give_up(): after an acquire whose answer never came (its
        statement was cancelled on the server), acquire once more and release what it got."""
        if not self._unknown_acquire:
            return
        self._unknown_acquire = False
        await self._join_cancels_async()        # the cancel requests first (bounded)
        try:
            if await self._attempt_async():
                await self._release_async(self.token)
                self.token = None
        except c.LeaseError:
            pass
        finally:
            c.close_quietly(self._conn)
            self._conn, self._watching = None, False
        await self._join_cancels_async()        # that attempt's own, if it was given up too

    async def _join_cancels_async(self):
        cancels, self._cancels = self._cancels, []
        for t in cancels:
            if t is not None:
                await asyncio.to_thread(t.join, self.timing.connect_timeout)

    async def release(self):
        """End the period and compare-and-release the lease (see Lease.release)."""
        if os.getpid() != self._pid:
            return None
        self._end("released")
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self.token is None:
            return None
        try:
            ok = await self._release_async(self.token)
        except c.LeaseError:
            ok = None
        c.close_quietly(self._conn)
        self._conn, self._watching = None, False
        return ok

    async def __aenter__(self):
        try:
            await self.acquire()
        except BaseException:
            c.close_quietly(self._conn)
            self._conn = None
            raise
        self._body = asyncio.current_task()
        self._arm()
        return self

    async def __aexit__(self, exc_type, exc, tb):
        body, self._body = self._body, None
        for h in (self._cancel_handle, self._recancel_handle):
            if h is not None:
                h.cancel()
        # a cancellation still on its way (the body swallowed an earlier one) must not stop the release
        releasing = asyncio.ensure_future(self.release())
        cancelled = False
        while not releasing.done():
            try:
                await asyncio.shield(releasing)
            except asyncio.CancelledError:
                cancelled = True
        if self._cancelled_by_us and (exc_type in (asyncio.CancelledError, None) or cancelled):
            for _ in range(self._body_cancels):
                if body is None or not body.cancelling():
                    break
                body.uncancel()
            if body is None or not body.cancelling():
                raise c.LeadershipLost(f'lease "{self.key}" ended ({self.lost_reason}): body cancelled')
        if cancelled:
            raise asyncio.CancelledError()
        return False

    # --- internals -------------------------------------------------------------

    def _arm(self):
        """(Re)schedule the cancellation of the body at deadline - cancel_margin."""
        if self._cancel_handle is not None:
            self._cancel_handle.cancel()
        loop = asyncio.get_running_loop()
        # in slices of at most 0.5 s: the loop's clock stops during a suspend, c.now() does not
        self._cancel_handle = loop.call_later(min(0.5, max(0.0, self._deadline - self.cancel_margin - c.now())),
                                              self._on_timer)

    def _on_timer(self):
        if c.now() >= self._deadline - self.cancel_margin:
            self._end("deadline_passed" if c.now() >= self._deadline else "deadline_near")
        else:
            self._arm()

    def _end(self, reason):
        if self.lost.is_set():
            return
        self.lost_reason = reason
        self._deadline = min(self._deadline, c.now())
        self.lost.set()
        if self._body is not None and reason != "released" and not self._body.done():
            self._cancelled_by_us = True
            self._cancel_body()
        if self.on_lost is not None and reason != "released":
            with contextlib.suppress(Exception):
                self.on_lost(self)

    def _cancel_body(self):
        """Cancel the body, and again every RECANCEL seconds while it goes on (it swallowed one)."""
        if self._body is None or self._body.done():
            return
        self._body.cancel()
        self._body_cancels += 1
        self._recancel_handle = asyncio.get_running_loop().call_later(RECANCEL, self._cancel_body)

    async def _connect_async(self, purpose, bound):
        conn = await c.drive_async(c._connect_gen(c.lease_conninfo(self.dsn, purpose, self.timing.connect_timeout)),
                                   c.now() + bound)
        if self._stmts is None:
            try:
                res = await c.drive_async(c._query_gen(conn, c.SCHEMA_SQL), c.now() + self.timing.statement_timeout)
                self._stmts = c.Statements(c.schema_from(res))
            except BaseException:
                c.close_quietly(conn)
                raise
        return conn

    async def _has_server_wait_async(self):
        if self._wait_conn is not self._conn:
            res = await c.drive_async(c._query_gen(self._conn, c.HAS_WAIT_SQL, (self._stmts.signature_wait,)),
                                      c.now() + self.timing.statement_timeout)
            self._wait_conn, self._server_waits = self._conn, c.value(res, 0) == "t"
        return self._server_waits

    async def _attempt_async(self, wait=0.0):
        """The asyncio twin of Lease._attempt()."""
        t = self.timing
        sent = None
        self._waited = False
        try:
            if self._conn is None:
                self._conn = await self._connect_async("campaign", t.connect_timeout)
            v11 = await self._has_server_wait_async()
            if self.metadata is not None and not v11:
                raise c.no_metadata_error()
            sent = c.now()
            if v11:
                sql, params = self._stmts.acquire_wait, (self.key, self.owner_id, t.ttl_sql(), c.wait_sql(wait),
                                                         self.metadata)
            else:
                sql, params = self._stmts.acquire, (self.key, self.owner_id, t.ttl_sql())
            res = await c.drive_async(c._query_gen(self._conn, sql, params), sent + wait + t.statement_timeout)
        except asyncio.CancelledError:
            # cancelled while the call (maybe a wait in the server) was out: its answer is unknown
            if sent is not None and self._conn is not None and self._conn.status == c.pq.ConnStatus.OK:
                self._unknown_acquire = self._unanswered = True
                self._cancels.append(c.cancel_request(self._conn))
            c.close_quietly(self._conn)
            self._conn, self._watching = None, False
            raise
        except c.LeaseError as e:
            self._attempt_failed(e, sent)
            return False
        verdict, token = self._judge_answer(res, v11, wait, sent)
        if verdict == "watch":
            await self._watch_async()
        elif verdict == "late":
            await self._release_async(token)
        return verdict == "granted"

    async def set_metadata(self, metadata):
        """The asyncio twin of Lease.set_metadata()."""
        if self.token is None:
            raise c.NotLeader(f'not leading lease "{self.key}"')
        text = c.metadata_text(metadata)
        conn = await self._connect_async("metadata", self.timing.connect_timeout)
        try:
            res = await c.drive_async(c._query_gen(conn, c.HAS_WAIT_SQL, (self._stmts.signature_wait,)),
                                      c.now() + self.timing.statement_timeout)
            if c.value(res, 0) != "t":
                raise c.no_metadata_error()
            await c.drive_async(c._query_gen(conn, self._stmts.set_metadata,
                                             (self.key, self.owner_id, str(self.token), text)),
                                c.now() + self.timing.statement_timeout)
        except c.LeaseError as e:
            cls = c.FENCE_ERRORS.get(e.sqlstate)
            if cls is None:
                raise
            raise cls(str(e), e.sqlstate) from e
        finally:
            c.close_quietly(conn)
        self.metadata = text

    async def _run_all(self, statements, bound):
        try:
            for sql, params in statements:
                await c.drive_async(c._query_gen(self._conn, sql, params), c.now() + bound)
            return True
        except c.LeaseError as e:
            c.close_quietly(self._conn)
            self._conn = None
            return e

    async def _watch_async(self):
        if self._watching or self._watch_failed or self._conn is None:
            return
        r = await self._run_all(((c.LISTEN_SQL, ()), (self._stmts.watch, (self.key,))), self.timing.statement_timeout)
        self._watching = r is True
        self._watch_failed = r is not True and r.sqlstate is not None

    async def _unwatch_async(self):
        if self._watching:
            self._watching = False
            await self._run_all((("UNLISTEN *", ()), (self._stmts.unwatch, (self.key,))),
                                min(self.timing.statement_timeout, self.timing.renew_every))

    async def _wait_release_async(self, delay):
        """Sleep `delay`, less when the campaign connection hears that the lease was released."""
        end = c.now() + delay
        loop = asyncio.get_running_loop()
        while c.now() < end:
            if not self._watching or self._conn is None:
                await asyncio.sleep(end - c.now())
                return
            fd = self._conn.socket
            fut = loop.create_future()
            loop.add_reader(fd, lambda: fut.done() or fut.set_result(None))
            try:
                await asyncio.wait_for(fut, end - c.now())
            except asyncio.TimeoutError:
                return
            finally:
                loop.remove_reader(fd)
            try:
                heard = c.released_heard(self._conn, self.key)
            except Exception:
                heard = False
                c.close_quietly(self._conn)
                self._conn, self._watching = None, False
            if heard:
                await asyncio.sleep(c.random.uniform(0, 0.01))
                return

    async def _release_async(self, token):
        for _ in range(2):
            try:
                if self._conn is None:
                    self._conn = await self._connect_async("campaign", self.timing.connect_timeout)
                res = await c.drive_async(c._query_gen(self._conn, self._stmts.release,
                                                       (self.key, self.owner_id, token)),
                                          c.now() + self.timing.statement_timeout)
                return c.value(res, 0) == "t"
            except c.LeaseError:
                c.close_quietly(self._conn)
                self._conn, self._watching = None, False
        raise c.LeaseError(f'could not release lease "{self.key}"')

    async def _renew_task(self):
        t = self.timing
        conn, rtt = None, self._acquire_rtt
        next_at = self._deadline - (t.ttl - t.margin) + t.renew_every
        try:
            try:                        # connect now, with all the time before the first renewal
                conn = await self._connect_async("renew", t.first_connect_bound(self._deadline))
            except c.LeaseError:
                conn = None             # the renewal connects again and retries
            while not self.lost.is_set():
                while next_at - c.now() > 0 and not self.lost.is_set():    # slices: see _arm()
                    await asyncio.sleep(min(0.5, next_at - c.now()))
                if self.lost.is_set():
                    return
                if c.now() >= self._deadline:
                    self._end("deadline_passed")
                    return
                try:
                    bound = t.attempt_bound(self._deadline, rtt)
                    if conn is None:
                        conn = await self._connect_async("renew", min(t.connect_timeout, max(bound, 3 * rtt)))
                    sent = c.now()
                    res = await c.drive_async(c._query_gen(conn, self._stmts.renew,
                                                           (self.key, self.owner_id, self.token, t.ttl_sql())),
                                              sent + bound)
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
                if not self.lost.is_set() and c.now() < self._deadline:
                    self._deadline = max(self._deadline, sent + t.ttl - t.margin)
                    self.expires_at = expiry
                    self._arm()
                next_at = sent + t.renew_every
        finally:
            c.close_quietly(conn)


def lead_async(dsn, key, ttl="15s", **options):
    """Lead `key` from asyncio: `async with lead_async(dsn, "billing", ttl="15s") as lease:`.

    Like lead() (same options), but the task running the block is cancelled cancel_margin
    (default 0.1 s) before the local deadline (send time of the last confirmed acquire/renew +
    ttl - safety margin), or as soon as the period ends otherwise, and the block then raises
    LeadershipLost.  A body that swallows CancelledError is cancelled again every 0.1 s until it
    ends.  A body that blocks the event loop (a blocking call, a loop without await) cannot be
    cancelled at all (use run() for such work);
    its writes are still refused by the fence.  Leaving the block releases the lease."""
    return AsyncLease(dsn, key, ttl, **options)
