"""Tests of the Python client against a running server with the extension.

Run by test/t/140_python_client.pl (a throwaway node, a virtual environment
made with the documented pip command); by hand:
LE_TEST_DSN='host=... dbname=... user=SUPERUSER' venv/bin/python -m unittest -v tests/test_client.py

They prove, from the Python side, G1 (one holder: two leases of one
process are two owners), G3 (the token rises after a takeover), G4 (the
release is compare-and-release), G5 (a stale fenced write gets LE001; the
work ends before the server-side end of its period: is_leader/lost in
threads, cancellation in asyncio, SIGKILL of the child in run()).
No assertion depends on absolute timings: moments are compared with the
server's expiry of the same period.  The renewal reconnects after its
backend is terminated, and abandons a renewal hung on a frozen backend for
a new connection, keeping the token.  A follower is woken by a release
(G11) instead of waiting for its next poll.  The README's SIGTERM recipe
releases the lease before the process exits (G4).  Against extension 1.1 a
crashed holder's lease is taken at its expiry by the server-side wait, not
at the follower's next poll (G5, G13), metadata is published with the lease
and changed only with the current token (LE001/LE002); against 1.0 metadata
is refused (42883) and those checks are skipped with a message.
"""

import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import psycopg

import leader_election as le

DSN = os.environ.get("LE_TEST_DSN", "")
HERE = os.path.dirname(os.path.abspath(__file__))
FIGURES = []       # measured margins, printed at the end (never asserted as absolute times)


def tearDownModule():
    for line in FIGURES:
        print("figure:", line, file=sys.stderr)


def admin():
    return psycopg.connect(DSN, autocommit=True)


def schema(conn):
    return conn.execute("SELECT n.nspname FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace"
                        " WHERE x.extname = 'leader_election'").fetchone()[0]


class RowLock:
    """Holds the lease row FOR UPDATE from another session (as superuser), so every le_renew hangs
    until leader_election.lock_timeout; .expires_at is the server's expiry once the lock is held."""

    def __init__(self, key):
        self.conn = admin()
        self.key = key

    def __enter__(self):
        s = schema(self.conn)
        self.conn.execute("BEGIN")
        self.expires_at = self.conn.execute(
            f'SELECT extract(epoch FROM expires_at)::float8 FROM "{s}".le_lease WHERE lease_key = %s FOR UPDATE',
            (self.key,)).fetchone()[0]
        return self

    def __exit__(self, *exc):
        self.conn.execute("ROLLBACK")
        self.conn.close()


def history(conn, key):
    return conn.execute("SELECT holder, fencing_token, end_reason FROM le_lease_history WHERE lease_key = %s"
                        " ORDER BY fencing_token", (key,)).fetchall()


class SyncTests(unittest.TestCase):
    def test_acquire_renew_release(self):
        with admin() as a:
            with le.lead(DSN, "py-basic", ttl="1s") as lease:
                self.assertTrue(lease.is_leader())
                self.assertIsNotNone(lease.token)
                first = a.execute("SELECT holder, fencing_token, renewed_at FROM le_leases WHERE lease_key = 'py-basic'").fetchone()
                self.assertEqual(first[:2], (lease.owner_id, lease.token))
                time.sleep(1.5)             # longer than the ttl: only renewals keep it
                self.assertTrue(lease.is_leader(), lease.lost_reason)
                later = a.execute("SELECT holder, fencing_token, renewed_at, is_valid FROM le_leases"
                                  " WHERE lease_key = 'py-basic'").fetchone()
                self.assertEqual(later[:2], first[:2])
                self.assertGreater(later[2], first[2])
                self.assertTrue(later[3])
            self.assertFalse(lease.is_leader())
            self.assertEqual(lease.lost_reason, "released")
            row = a.execute("SELECT holder FROM le_leases WHERE lease_key = 'py-basic'").fetchone()
            self.assertIsNone(row[0])
            self.assertEqual(history(a, "py-basic")[-1], (lease.owner_id, lease.token, "released"))

    def test_follower_woken_by_release(self):
        # the follower polls only every 60 s: it gets the lease within its 10 s timeout only
        # because the release is announced (LISTEN, le_watch) and wakes it
        leader = le.lead(DSN, "py-wake", ttl="5s").acquire()
        got = {}
        t = threading.Thread(target=lambda: got.update(
            lease=le.lead(DSN, "py-wake", ttl="5s", retry=60, timeout=10).acquire()))
        t.start()
        time.sleep(0.5)                         # the follower was refused once and listens
        leader.release()
        t.join(15)
        self.assertIn("lease", got)
        self.assertGreater(got["lease"].token, leader.token)
        got["lease"].release()

    def test_follower_woken_by_release_async(self):
        async def main():
            leader = await le.lead_async(DSN, "py-wake-async", ttl="5s").acquire()
            follower = asyncio.create_task(le.lead_async(DSN, "py-wake-async", ttl="5s", retry=60, timeout=10).acquire())
            await asyncio.sleep(0.5)
            await leader.release()
            lease = await follower
            await lease.release()
            return leader.token, lease.token

        old, new = asyncio.run(main())
        self.assertGreater(new, old)

    def test_text_parameters_checked(self):
        # libpq ends a parameter at a NUL: "svc\x00" names would make two leases one owner
        for kw in ({"key": "billing\x00shard2"}, {"name": "svc\x00"}, {"owner_id": "a\x00b"},
                   {"dsn": DSN + "\x00"}):
            args = dict(dict(dsn=DSN, key="py-nul", ttl="5s", timeout=0), **kw)
            with self.assertRaises(ValueError, msg=kw):
                le.lead(**args).acquire()
        with self.assertRaisesRegex(ValueError, "NUL"):
            le.make_owner_id("svc\x00")
        with self.assertRaisesRegex(TypeError, "key must be a str, not int"):
            le.lead(DSN, 123)
        with self.assertRaisesRegex(TypeError, "owner_id must be a str"):
            le.lead(DSN, "py-nul", owner_id=b"x")
        with self.assertRaises(ValueError):
            asyncio.run(le.lead_async(DSN, "py-nul\x00", timeout=0).acquire())
        with admin() as a:
            self.assertEqual(history(a, "py-nul"), [])

    def test_connection_errors(self):
        # refusals no retry can cure end the campaign at once (timeout 60 s is never reached),
        # with the server's SQLSTATE
        for what, state in (({"dbname": "py_no_such_db"}, "3D000"), ({"user": "py_no_such_role"}, "28")):
            dsn = psycopg.conninfo.make_conninfo(DSN, **what)
            with self.assertRaises(le.LeaseError) as cm:
                le.lead(dsn, "py-badconn", ttl="2s", timeout=60).acquire()
            self.assertNotIsInstance(cm.exception, le.NotAcquired)
            self.assertTrue((cm.exception.sqlstate or "").startswith(state), cm.exception)
            self.assertIn(next(iter(what.values())), str(cm.exception))
        with self.assertRaises(le.LeaseError) as cm:
            asyncio.run(le.lead_async(psycopg.conninfo.make_conninfo(DSN, dbname="py_no_such_db"),
                                      "py-badconn", ttl="2s", timeout=60).acquire())
        self.assertEqual(cm.exception.sqlstate, "3D000")
        # a server that does not answer: retried until the timeout, and NotAcquired says why
        dsn = psycopg.conninfo.make_conninfo(DSN, port="1")
        with self.assertRaises(le.NotAcquired) as cm:
            le.lead(dsn, "py-badconn", ttl="2s", timeout=0.5, retry=0.1).acquire()
        self.assertIsInstance(cm.exception.last_error, le.LeaseError)
        self.assertIn("connection failed", str(cm.exception))

    def test_forked_child_leaves_the_lease_alone(self):
        # the child shares the lease's sockets: leaving the block there must send nothing
        with admin() as a, le.lead(DSN, "py-fork", ttl="1s") as lease:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    os.write(w, f"{lease.is_leader()}".encode())
                    lease.__exit__(None, None, None)    # leaving the block in the child: nothing sent
                finally:
                    os._exit(0)
            os.close(w)
            seen = os.read(r, 100).decode()
            os.close(r)
            os.waitpid(pid, 0)
            self.assertEqual(seen, "False")
            before = a.execute("SELECT renewed_at FROM le_leases WHERE lease_key = 'py-fork'").fetchone()[0]
            time.sleep(0.8)                 # more than two renewals
            self.assertTrue(lease.is_leader(), lease.lost_reason)
            row = a.execute("SELECT holder, fencing_token, renewed_at > %s FROM le_leases WHERE lease_key = 'py-fork'",
                            (before,)).fetchone()
            self.assertEqual(row, (lease.owner_id, lease.token, True))

    def test_durations_checked(self):
        for kw in ({"ttl": float("inf")}, {"ttl": float("nan")}, {"timeout": float("nan")}, {"timeout": -1},
                   {"retry": 0}, {"retry": -1}, {"retry": "0s"}, {"timeout": "soon"}, {"jitter": float("nan")}):
            with self.assertRaises(ValueError, msg=kw):
                le.lead(DSN, "py-durations", **kw)
        with self.assertRaisesRegex(TypeError, "retry must be a number of seconds"):
            le.lead(DSN, "py-durations", retry=None)
        self.assertEqual(le.lead(DSN, "py-durations", timeout="5s").timeout, 5.0)
        self.assertEqual(le.lead(DSN, "py-durations", timeout="250ms").timeout, 0.25)
        with le.lead(DSN, "py-durations", ttl="2s", timeout="1s") as lease:
            with self.assertRaises(le.NotAcquired):
                le.lead(DSN, "py-durations", ttl="2s").acquire(timeout="300ms")
            self.assertTrue(lease.is_leader())

    def test_abandoned_acquire_is_cancelled(self):
        # the lease row is locked: each le_acquire waits (up to leader_election.lock_timeout, 2 s) and
        # is given up on the client side after 300 ms; its statement must not go on to be granted
        # once the lock goes, in threads and in asyncio
        with admin() as a:
            for key in ("py-abandon", "py-abandon-async"):     # the lease rows exist, free
                le.lead(DSN, key, ttl="1s").acquire().release()
            owners = []
            with RowLock("py-abandon"), RowLock("py-abandon-async"):
                lease = le.lead(DSN, "py-abandon", ttl="5s", statement_timeout="300ms", timeout=0.2)
                owners.append(lease.owner_id)
                with self.assertRaises(le.NotAcquired) as cm:
                    lease.acquire()
                self.assertIsInstance(cm.exception.last_error, le.Timeout)
                alease = le.lead_async(DSN, "py-abandon-async", ttl="5s", statement_timeout="300ms", timeout=0.2)
                owners.append(alease.owner_id)
                with self.assertRaises(le.NotAcquired):
                    asyncio.run(alease.acquire())
            time.sleep(0.5)                 # what was still waiting for the lock has run by now
            rows = a.execute("SELECT count(*) FROM le_lease_history WHERE holder = ANY(%s)", (owners,)).fetchone()
            self.assertEqual(rows[0], 0)
            self.assertEqual(a.execute("SELECT count(*) FROM le_leases WHERE holder = ANY(%s)", (owners,)).fetchone()[0], 0)

    def test_owner_id_used_by_another_lease_refused(self):
        with le.lead(DSN, "py-dup-owner", ttl="5s", owner_id="py-dup") as first:
            with self.assertRaises(le.NotAcquired) as cm:
                le.lead(DSN, "py-dup-owner", ttl="5s", owner_id="py-dup", timeout=0.3).acquire()
            self.assertIn("owner ids must be unique", str(cm.exception))
            with self.assertRaises(le.NotAcquired):
                asyncio.run(le.lead_async(DSN, "py-dup-owner", ttl="5s", owner_id="py-dup", timeout=0.3).acquire())
            self.assertTrue(first.is_leader())
        with admin() as a:
            self.assertEqual(history(a, "py-dup-owner")[-1][1:], (first.token, "released"))

    def test_two_leases_one_process(self):
        with le.lead(DSN, "py-two-a", ttl="5s", name="same") as a, \
                le.lead(DSN, "py-two-b", ttl="5s", name="same") as b:
            self.assertNotEqual(a.owner_id, b.owner_id)
            self.assertTrue(a.owner_id.startswith("same-") and b.owner_id.startswith("same-"))
            self.assertTrue(a.is_leader() and b.is_leader())
            # the same name on a held key is another owner: refused, not shared
            with self.assertRaises(le.NotAcquired) as cm:
                le.lead(DSN, "py-two-a", ttl="5s", name="same", timeout=0.3).acquire()
            self.assertEqual(cm.exception.holder, a.owner_id)

    def test_takeover_token_rises_and_stale_write_fails(self):
        with admin() as a:
            a.execute("DROP TABLE IF EXISTS py_fenced")
            a.execute("CREATE TABLE py_fenced (id int, note text, fencing_token bigint NOT NULL)")
            a.execute("SELECT le_protect('py_fenced', 'py-fence')")
            work = psycopg.connect(DSN)
            old = le.lead(DSN, "py-fence", ttl="3s").acquire()
            with old.transaction(work):
                work.execute("INSERT INTO py_fenced VALUES (%(id)s, %(note)s, %(fencing_token)s)",
                             old.stamp(id=1, note="old"))
                work.execute("INSERT INTO py_fenced VALUES (2, 'old', %s)", (old.token,))
            with old.transaction(work):    # DELETE carries the token only in the setting
                self.assertEqual(work.execute("SELECT current_setting('leader_election.fencing_token')").fetchone()[0],
                                 str(old.token))
                work.execute("DELETE FROM py_fenced WHERE id = 2")
            self.assertEqual(a.execute("SELECT count(*) FROM py_fenced").fetchone()[0], 1)
            a.execute("SELECT le_force_release('py-fence')")
            with le.lead(DSN, "py-fence", ttl="5s") as new:
                self.assertGreater(new.token, old.token)
                # whether or not the old lease has heard yet, the fence refuses its token
                with self.assertRaises(le.StaleToken) as cm:
                    with old.transaction(work, check=False):
                        work.execute("DELETE FROM py_fenced")
                self.assertEqual(cm.exception.sqlstate, "LE001")
                self.assertIsInstance(cm.exception, le.NotLeader)
                self.assertIsInstance(cm.exception.__cause__, psycopg.Error)
                with new.transaction(work):
                    work.execute("INSERT INTO py_fenced VALUES (3, 'new', %s)", (new.token,))
                # the old lease's next renewal is refused: lost
                self.assertTrue(old.lost.wait(10))
                self.assertEqual(old.lost_reason, "lost")
                self.assertFalse(old.is_leader())
                with self.assertRaises(le.NotLeader):
                    with old.transaction(work):
                        pass
            self.assertFalse(old.release())        # compare-and-release: no longer ours
            with self.assertRaises(le.NotHeld) as cm:  # released: nobody holds it
                with new.transaction(work, check=False):
                    work.execute("INSERT INTO py_fenced VALUES (4, 'late', %s)", (new.token,))
            self.assertEqual(cm.exception.sqlstate, "LE002")
            self.assertEqual(a.execute("SELECT array_agg(id ORDER BY id) FROM py_fenced").fetchone()[0], [1, 3])
            work.close()

    def renew_backend(self, a, app):
        # the DSN's application_name `app` names this test's connections alone (other tests run at the
        # same time); the renewal connection is the one whose last statement was le_renew
        for _ in range(100):
            row = a.execute("SELECT pid FROM pg_stat_activity WHERE query LIKE %s AND application_name = %s"
                            " AND state = 'idle' ORDER BY backend_start DESC LIMIT 1",
                            ("%.le_renew(%", app)).fetchone()
            if row:
                return row[0]
            time.sleep(0.05)
        self.fail("no renewal connection")

    def test_renewal_reconnects(self):
        dsn = psycopg.conninfo.make_conninfo(DSN, application_name="py-reconnect")
        # a ttl of 6 s leaves a loaded machine time to fork the new backend
        with admin() as a, le.lead(dsn, "py-reconnect", ttl="6s") as lease:
            token = lease.token
            first = self.renew_backend(a, "py-reconnect")
            a.execute("SELECT pg_terminate_backend(%s)", (first,))
            time.sleep(1.0)
            # a frozen idle backend: the renewal on it hangs, is abandoned, and another connection
            # renews (frozen inside a renewal, it would hold the lease's row lock, and no connection
            # could renew: then thaw it and freeze it again once idle)
            for _ in range(20):
                frozen = self.renew_backend(a, "py-reconnect")
                os.kill(frozen, signal.SIGSTOP)
                state = a.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (frozen,)).fetchone()
                if state == ("idle",):
                    break
                os.kill(frozen, signal.SIGCONT)
            self.assertEqual(state, ("idle",), "no idle moment of the renewal backend")
            self.assertNotEqual(frozen, first)
            try:
                time.sleep(6.5)                     # longer than the ttl
                self.assertTrue(lease.is_leader(), lease.lost_reason)
                self.assertEqual(lease.token, token)
                row = a.execute("SELECT fencing_token, is_valid FROM le_leases WHERE lease_key = 'py-reconnect'").fetchone()
                self.assertEqual(row, (token, True))
            finally:
                os.kill(frozen, signal.SIGCONT)

    def test_release_does_not_wait_for_a_hung_renewal(self):
        dsn = psycopg.conninfo.make_conninfo(DSN, application_name="py-rel-hung")
        lease = le.lead(dsn, "py-rel-hung", ttl="20s", renew_every="0.3s").acquire()
        with admin() as a:
            frozen = self.renew_backend(a, "py-rel-hung")
            os.kill(frozen, signal.SIGSTOP)     # the next renewal hangs for its bound, the 5 s statement timeout
            try:
                time.sleep(0.6)
                t0 = time.monotonic()
                self.assertTrue(lease.release())
                took = time.monotonic() - t0
            finally:
                os.kill(frozen, signal.SIGCONT)
            self.assertLess(took, lease.timing.statement_timeout / 2)
            self.assertEqual(history(a, "py-rel-hung")[-1][1:], (lease.token, "released"))
            FIGURES.append(f"release() with a renewal hung: {1000 * took:.0f} ms")

    def test_release_from_on_lost(self):
        answers = []
        lease = le.lead(DSN, "py-onlost", ttl="2s", on_lost=lambda l: answers.append(l.release())).acquire()
        with admin() as a:
            a.execute("SELECT le_force_release('py-onlost')")
            self.assertTrue(lease.lost.wait(5))
            for _ in range(100):
                if answers:
                    break
                time.sleep(0.02)
            self.assertEqual(lease.lost_reason, "lost")
            self.assertEqual(answers, [False])      # compare-and-release ran: no longer ours
            self.assertEqual(lease.release(), False)    # once: the same answer
            self.assertTrue(all(not t.is_alive() for t in lease._threads))

    def test_hung_renewals_end_leadership_before_expiry(self):
        with le.lead(DSN, "py-hung", ttl="2s") as lease:
            time.sleep(0.3)
            with RowLock("py-hung") as lock:
                self.assertTrue(lease.lost.wait(10))
                lost_wall = time.time()
                self.assertFalse(lease.is_leader())
                self.assertEqual(lease.lost_reason, "deadline_passed")
                self.assertLess(lost_wall, lock.expires_at)   # before the server's expiry of that period
                FIGURES.append(f"threads, ttl 2 s, renewals hung: lost set {1000 * (lock.expires_at - lost_wall):.0f} ms"
                               " before the server's expiry")


class AsyncTests(unittest.TestCase):
    def test_body_cancelled_before_deadline(self):
        seen = {}

        async def main():
            lease = le.lead_async(DSN, "py-async", ttl="2s")
            lock = None
            try:
                async with lease:
                    seen["token"] = lease.token
                    lock = RowLock("py-async").__enter__()
                    try:
                        while True:
                            seen["last_deadline"] = lease.deadline()
                            seen["last_wall"] = time.time()
                            await asyncio.sleep(0.01)
                    except asyncio.CancelledError:
                        seen["cancelled"] = le.now()
                        seen["expires_at"] = lock.expires_at
                        lock.__exit__(None, None, None)     # so that the release is not kept waiting
                        lock = None
                        raise
            except le.LeadershipLost:
                seen["reason"] = lease.lost_reason
            finally:
                if lock is not None:
                    seen["expires_at"] = lock.expires_at
                    lock.__exit__(None, None, None)
            self.assertEqual(asyncio.current_task().cancelling(), 0)   # LeadershipLost, not a stray cancel

        asyncio.run(main())
        self.assertIn("cancelled", seen)
        self.assertLess(seen["cancelled"], seen["last_deadline"])
        self.assertLess(seen["last_wall"], seen["expires_at"])
        self.assertEqual(seen["reason"], "deadline_near")
        FIGURES.append(f"asyncio, ttl 2 s, renewals hung: body cancelled {1000 * (seen['last_deadline'] - seen['cancelled']):.0f} ms"
                       f" before the local deadline, last step {1000 * (seen['expires_at'] - seen['last_wall']):.0f} ms"
                       " before the server's expiry")

    def test_body_swallowing_cancellation_is_cancelled_again(self):
        seen = {"cancels": 0, "slices": []}

        async def main():
            loop = asyncio.get_running_loop()
            lease = le.lead_async(DSN, "py-async-swallow", ttl="3s")
            try:
                async with lease:
                    with admin() as a:
                        a.execute("SELECT le_force_release('py-async-swallow')")
                    for _ in range(300):            # at most ~3 s, then it ends by itself
                        try:
                            seen["slices"].append(lease._cancel_handle.when() - loop.time())
                            await asyncio.sleep(0.01)
                        except asyncio.CancelledError:
                            seen["cancels"] += 1
                            if seen["cancels"] == 4:
                                raise
            except le.LeadershipLost:
                seen["reason"] = lease.lost_reason
            seen["cancelling"] = asyncio.current_task().cancelling()

        asyncio.run(main())
        self.assertEqual(seen["cancels"], 4)        # cancelled again until it gave in
        self.assertEqual(seen["reason"], "lost")
        self.assertEqual(seen["cancelling"], 0)
        self.assertLessEqual(max(seen["slices"]), 0.5 + 0.05)     # the timer never sleeps through a suspend
        with admin() as a:
            self.assertEqual(history(a, "py-async-swallow")[-1][2], "force_released")

    def test_async_fenced_transaction(self):
        async def main():
            async with await psycopg.AsyncConnection.connect(DSN) as conn:
                async with le.lead_async(DSN, "py-async-tx", ttl="5s") as lease:
                    async with lease.transaction(conn):
                        cur = await conn.execute("SELECT current_setting('leader_election.fencing_token')")
                        return lease.token, (await cur.fetchone())[0]

        token, setting = asyncio.run(main())
        self.assertEqual(setting, str(token))


def stubborn(info, path):
    """Ignores SIGTERM and appends its token and the wall time to `path` every 20 ms."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        with open(path, "a") as f:
            f.write(f"{info.token} {time.time():.6f}\n")
        time.sleep(0.02)


class RunTests(unittest.TestCase):
    def test_child_dead_before_deadline_even_ignoring_sigterm(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "writes")
            out = {}
            # the release comes while the row is still locked: let it wait 300 ms, not 2 s, per attempt
            dsn = psycopg.conninfo.make_conninfo(DSN, options="-c leader_election.lock_timeout=300ms")
            t = threading.Thread(target=lambda: out.update(r=le.run(dsn, "py-run", stubborn, path, ttl="2s")))
            t.start()
            deadline = time.time() + 10
            while not os.path.exists(path) and time.time() < deadline:
                time.sleep(0.02)
            self.assertTrue(os.path.exists(path), "the child runs")
            time.sleep(0.3)
            with RowLock("py-run") as lock:
                t.join(15)
                self.assertFalse(t.is_alive())
                expires_at = lock.expires_at
            r = out["r"]
            self.assertEqual(r.returncode, -signal.SIGKILL)    # SIGTERM was ignored: killed
            self.assertEqual(r.reason, "deadline_passed")
            with open(path) as f:
                writes = [line.split() for line in f if re.match(r"^\d+ \d+\.\d+$", line.strip())]
            self.assertEqual({w[0] for w in writes}, {str(r.token)})
            last = float(writes[-1][1])
            self.assertLess(last, expires_at)        # dead before the server-side end of the period
            FIGURES.append(f"run(), ttl 2 s, renewals hung, child ignoring SIGTERM: last write {1000 * (expires_at - last):.0f} ms"
                           " before the server's expiry")
            time.sleep(0.1)
            with open(path) as f:
                self.assertEqual(len(f.readlines()), len(writes), "nothing writes after run() returned")

    def test_missing_command_releases(self):
        with self.assertRaises(FileNotFoundError):
            le.run(DSN, "py-run-missing", ["/nonexistent/command"], ttl="5s")
        with admin() as a:
            self.assertEqual(history(a, "py-run-missing")[-1][2], "released")

    def test_sigchld_ignored(self):
        # with SIGCHLD ignored the kernel reaps the child: waitpid() fails with ECHILD; run() must
        # still return, release, and stop its renewal threads (main thread and another thread)
        code = ("import signal, sys, threading, leader_election as le\n"
                "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
                "r = le.run(sys.argv[1], 'py-run-chld', ['sh', '-c', 'exit 3'], ttl='2s')\n"
                "print(r.reason, r.returncode, signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN)\n"
                "out = {}\n"
                "t = threading.Thread(target=lambda: out.update(r=le.run(sys.argv[1], 'py-run-chld', ['true'], ttl='2s')))\n"
                "t.start(); t.join(10)\n"
                "print(out['r'].reason, out['r'].returncode)\n"
                "print([t.name for t in threading.enumerate() if t.name.startswith('leader_election')])\n")
        out = subprocess.run([sys.executable, "-c", code, DSN], capture_output=True, text=True, timeout=20)
        self.assertEqual(out.stdout.splitlines(), ["exited 3 True", "exited None", "[]"], out.stderr)
        with admin() as a:
            self.assertEqual([h[2] for h in history(a, "py-run-chld")[-2:]], ["released", "released"])

    def test_command_and_sigterm_release(self):
        code = ("import sys, leader_election as le\n"
                "r = le.run(sys.argv[1], 'py-run-cmd', ['sh', '-c', 'echo $LE_FENCING_TOKEN; exec sleep 30'], ttl='5s')\n"
                "print(r.reason, r.returncode, r.token, flush=True)\n")
        p = subprocess.Popen([sys.executable, "-c", code, DSN], stdout=subprocess.PIPE, text=True)
        token = p.stdout.readline().strip()
        self.assertTrue(token.isdigit(), token)
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=15)
        reason, rc, tok = out.split()
        self.assertEqual((reason, rc, tok), ("signal", str(-signal.SIGTERM), token))
        with admin() as a:
            self.assertEqual(history(a, "py-run-cmd")[-1][1:], (int(token), "released"))


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


PARENT = ("import os, subprocess, sys, leader_election as le\n"
          "def fn(info):\n"
          "    p = subprocess.Popen(['sleep', '60'])\n"
          "    print(os.getpid(), p.pid, flush=True)\n"
          "    p.wait()\n"
          "work = fn if sys.argv[2] == 'function' else ['sh', '-c', 'sleep 60 & echo $$ $!; wait']\n"
          "r = le.run(sys.argv[1], sys.argv[3], work, ttl='5s')\n"
          "print(r.reason, r.returncode, r.token, flush=True)\n")


class RunParentTests(unittest.TestCase):
    def test_parent_sigkill_kills_the_work_and_its_children(self):
        parents = {how: subprocess.Popen([sys.executable, "-c", PARENT, DSN, how, "py-run-kill-" + how],
                                         stdout=subprocess.PIPE, text=True)
                   for how in ("function", "command")}
        pids = {how: [int(x) for x in p.stdout.readline().split()] for how, p in parents.items()}
        for how, p in parents.items():
            self.assertEqual(len(pids[how]), 2, how)
            self.assertTrue(all(alive(x) for x in pids[how]), how)
            p.kill()
            p.wait()
            p.stdout.close()
        end = time.monotonic() + 10
        while time.monotonic() < end and any(alive(x) for v in pids.values() for x in v):
            time.sleep(0.05)
        self.assertEqual({how: [x for x in v if alive(x)] for how, v in pids.items()},
                         {"function": [], "command": []})

    def test_sighup_stops_and_releases(self):
        p = subprocess.Popen([sys.executable, "-c", PARENT, DSN, "command", "py-run-hup"], stdout=subprocess.PIPE, text=True)
        work = [int(x) for x in p.stdout.readline().split()]
        p.send_signal(signal.SIGHUP)
        reason, rc, token = p.communicate(timeout=15)[0].split()
        self.assertEqual(reason, "signal")
        self.assertFalse(any(alive(x) for x in work))
        with admin() as a:
            self.assertEqual(history(a, "py-run-hup")[-1][1:], (int(token), "released"))


def has_server_wait(conn):
    """Does the server have the 1.1 le_acquire (a wait in the server, metadata)?"""
    sig = f'"{schema(conn)}".le_acquire(text,text,interval,interval,jsonb)'
    return conn.execute("SELECT to_regprocedure(%s) IS NOT NULL", (sig,)).fetchone()[0]


NO_WAIT = ("SKIP: this server's leader_election has no le_acquire(text,text,interval,interval,jsonb)"
           " (extension 1.1): the server-side wait and metadata checks do not run")


class WaitMetadataTests(unittest.TestCase):
    def test_metadata_needs_1_1(self):
        with admin() as a:
            if has_server_wait(a):
                self.skipTest("the server has extension 1.1: the 1.0 fallback is tested against a 1.0 server")
        # against 1.0 the campaign polls and LISTENs (the other tests); metadata is refused at once
        with self.assertRaises(le.LeaseError) as cm:
            le.lead(DSN, "py-meta-10", ttl="2s", metadata={"addr": "x"}).acquire(timeout=5)
        self.assertEqual(cm.exception.sqlstate, "42883")

    def test_server_wait_takeover_and_metadata(self):
        with admin() as a:
            if not has_server_wait(a):
                self.skipTest(NO_WAIT)
            key = "py-wait"
            lease = le.lead(DSN, key, ttl="2s", metadata={"addr": "10.0.0.5:8080"}).acquire()
            meta = lambda: a.execute("SELECT metadata FROM le_leases WHERE lease_key = %s", (key,)).fetchone()[0]
            self.assertEqual(meta(), {"addr": "10.0.0.5:8080"})
            lease.set_metadata('{"addr": "10.0.0.6:8080"}')
            self.assertEqual(meta(), {"addr": "10.0.0.6:8080"})
            lease.release()
            with self.assertRaises(le.NotHeld) as cm:
                lease.set_metadata({"late": True})
            self.assertEqual(cm.exception.sqlstate, "LE002")
            # a crashed holder: its lease is taken at its expiry, not at the follower's next poll
            expires = a.execute("SELECT expires_at FROM le_acquire(%s, 'crashed', '1 second')", (key,)).fetchone()[0]
            follower = le.lead(DSN, key, ttl="2s", retry="5s").acquire(timeout=20)
            gap = (a.execute("SELECT clock_timestamp()").fetchone()[0] - expires).total_seconds()
            FIGURES.append(f"server-side wait: crash takeover {gap * 1000:.1f} ms after the expiry (poll interval 5 s)")
            # a poll would come 4 to 6 s after the first refusal, at least 3 s after the expiry
            self.assertLess(gap, 2.5)
            with self.assertRaises(le.StaleToken) as cm:
                lease.set_metadata({"late": True})
            self.assertEqual(cm.exception.sqlstate, "LE001")
            self.assertIsNone(meta())
            # a one-shot attempt does not wait
            t0 = time.monotonic()
            with self.assertRaises(le.NotAcquired):
                le.lead(DSN, key, ttl="2s").acquire(timeout=0)
            FIGURES.append(f"one-shot acquire refused in {(time.monotonic() - t0) * 1000:.1f} ms")
            follower.release()

            async def in_asyncio():
                async with le.lead_async(DSN, key, ttl="2s", metadata=["a", 1]) as l:
                    self.assertEqual(meta(), ["a", 1])
                    await l.set_metadata(None)
                    self.assertIsNone(meta())
            asyncio.run(in_asyncio())


class ReadmeTest(unittest.TestCase):
    def test_readme_example_runs(self):
        with open(os.path.join(HERE, "..", "README.md")) as f:
            blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
        self.assertTrue(blocks)
        with admin() as a:
            a.execute("DROP TABLE IF EXISTS invoices")
            a.execute("CREATE TABLE invoices (customer text, amount numeric, fencing_token bigint NOT NULL)")
            a.execute("SELECT le_protect('invoices', 'nightly-billing')")
            env = dict(os.environ, DATABASE_URL=DSN)
            out = subprocess.run([sys.executable, "-c", blocks[0]], env=env, capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stderr)
            rows = a.execute("SELECT customer, fencing_token FROM invoices").fetchall()
            self.assertEqual(len(rows), 1)
            self.assertIn(f"token {rows[0][1]}", out.stdout)

    def test_readme_sigterm_example_releases(self):
        with open(os.path.join(HERE, "..", "README.md")) as f:
            blocks = [b for b in re.findall(r"```python\n(.*?)```", f.read(), re.S) if "SIGTERM" in b]
        self.assertEqual(len(blocks), 1)
        env = dict(os.environ, DATABASE_URL=DSN)
        p = subprocess.Popen([sys.executable, "-c", blocks[0]], env=env, stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        m = re.match(r"leading with token (\d+)$", line.strip())
        self.assertIsNotNone(m, line)
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=15)
        self.assertEqual(p.returncode, 0)
        with admin() as a:
            self.assertEqual(history(a, "nightly-billing")[-1][1:], (int(m.group(1)), "released"))


if __name__ == "__main__":
    unittest.main()
