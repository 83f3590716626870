"""Conformance probe of the Python client (test/conformance/PROTOCOL.md).

Leads --key through leader_election.lead() (or run() with --ignore-cancel),
prints one JSON event a line on stdout (leader, act, write, lost, exit) and,
while leading, writes a row through the fenced-transaction helper every
--interval-ms.  SIGTERM: stop, release, print exit, exit 0.

Invariant: an `act` is printed only right after the library said it leads
(is_leader(), or run() running the child); the write after it carries the
period's token and is judged by the fence alone.
"""

import argparse
import json
import os
import signal
import sys
import threading
import time

import psycopg

import leader_election as le

CLIENT = os.environ.get("LE_CONFORMANCE_CLIENT", "python")
_out = threading.Lock()


def emit(ev, **fields):
    line = json.dumps(dict(ev=ev, **fields))
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def wall_us():
    return time.time_ns() // 1000


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsn", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--ttl-ms", type=int, required=True)
    p.add_argument("--interval-ms", type=int, default=20)
    p.add_argument("--duration-ms", type=int)
    p.add_argument("--table", default="conformance_writes")
    p.add_argument("--stall-once-ms", type=int)
    p.add_argument("--ignore-cancel", action="store_true")
    return p.parse_args()


class Probe:
    def __init__(self, a):
        self.a = a
        self.stop = threading.Event()
        self.end = None if a.duration_ms is None else le.now() + a.duration_ms / 1000
        self.conn = None
        self.wrote = False
        self.stall_pending = a.stall_once_ms is not None
        table = psycopg.sql.Identifier(*a.table.split(".", 1)) if "." in a.table else psycopg.sql.Identifier(a.table)
        self.insert = psycopg.sql.SQL("INSERT INTO {} (client, lease_key, owner_id, fencing_token)"
                                      " VALUES (%s, %s, %s, %s)").format(table)

    def done(self):
        return self.stop.is_set() or (self.end is not None and le.now() >= self.end)

    def left(self):
        return None if self.end is None else max(0.0, self.end - le.now())

    def write(self, lease):
        try:
            if self.conn is None or self.conn.closed:
                self.conn = psycopg.connect(self.a.dsn, connect_timeout=5)
            with lease.transaction(self.conn, check=False):
                # a write blocked behind a lock fails instead of hiding what comes next (PROTOCOL.md)
                self.conn.execute("SELECT set_config('statement_timeout', %s, true)",
                                  (str(max(1, self.a.ttl_ms // 4)),))
                self.conn.execute(self.insert, (CLIENT, lease.key, lease.owner_id, lease.token))
            emit("write", token=lease.token, ok=True)
            self.wrote = True
        except (psycopg.Error, le.LeaseError) as e:
            # the library's StaleToken / NotHeld carry the fence's SQLSTATE
            emit("write", token=lease.token, ok=False, sqlstate=getattr(e, "sqlstate", None) or "08006")
            if self.conn is not None and (self.conn.broken or self.conn.closed):
                self.conn = None

    def period(self):
        a = self.a
        # campaign every ttl/2 as the C probe does (the default 2 s is long for a 1 s ttl)
        lease = le.lead(a.dsn, a.key, ttl=a.ttl_ms / 1000, name=a.owner, cancel=self.stop, timeout=self.left(),
                        retry=a.ttl_ms / 2000)
        try:
            lease.acquire()
        except le.NotAcquired:
            return
        except le.LeaseError as e:
            print(f"conformance_probe: {e}", file=sys.stderr)
            self.stop.wait(0.2)
            return
        emit("leader", token=lease.token, owner=lease.owner_id, wall_us=wall_us())
        try:
            while not self.done():
                if not lease.is_leader():
                    break
                emit("act", token=lease.token, wall_us=wall_us())
                if self.stall_pending and self.wrote:
                    self.stall_pending = False
                    self.stop.wait(a.stall_once_ms / 1000)     # a SIGTERM ends the pause too
                self.write(lease)
                self.stop.wait(a.interval_ms / 1000)
        finally:
            ended = wall_us()
            reason = lease.lost_reason if lease.lost.is_set() else ("deadline_passed" if not lease.is_leader()
                                                                    else "shutdown")
            lease.release()
            emit("lost", token=lease.token, wall_us=ended, reason=reason)

    def task(self, info):
        """The ignore-cancel unit of work, in run()'s child: 2 x ttl of small sleeps, SIGTERM ignored."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        emit("leader", token=info.token, owner=info.owner_id, wall_us=wall_us())
        step = self.a.interval_ms / 1000
        until = le.now() + 2 * self.a.ttl_ms / 1000
        while le.now() < until:
            emit("act", token=info.token, wall_us=wall_us())
            time.sleep(step)
        return 0

    def run_period(self):
        a = self.a
        try:
            r = le.run(a.dsn, a.key, self.task, ttl=a.ttl_ms / 1000, name=a.owner, timeout=self.left(),
                       retry=a.ttl_ms / 2000)
        except le.NotAcquired:
            return
        except le.LeaseError as e:
            print(f"conformance_probe: {e}", file=sys.stderr)
            self.stop.wait(0.2)
            return
        if r.reason == "signal":
            self.stop.set()
        if r.token is not None:
            emit("lost", token=r.token, wall_us=wall_us(),
                 reason="released" if r.reason == "exited" else ("shutdown" if r.reason == "signal" else r.reason))

    def main(self):
        signal.signal(signal.SIGTERM, lambda s, f: self.stop.set())
        try:                            # the work's connection is ready before the first period
            self.conn = psycopg.connect(self.a.dsn, connect_timeout=5)
        except psycopg.Error:
            self.conn = None            # write() connects again
        while not self.done():
            (self.run_period if self.a.ignore_cancel else self.period)()
        emit("exit", code=0)
        return 0


if __name__ == "__main__":
    sys.exit(Probe(parse()).main())
