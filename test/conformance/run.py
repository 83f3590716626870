#!/usr/bin/env python3
"""Conformance harness: one scenario suite for every client library.

Runs the scenarios of test/conformance/PROTOCOL.md against the probe of each
client (test/conformance/probe-LANG), injecting faults from outside and
judging only from the database (le_lease_history, le_leases, the writes
tables) and the probes' event streams.  Prints one markdown table per client
and exits 1 when any check failed.

  run.py --admin-dsn DSN [--dsn DSN] [--client c|python|go|all]
         [--scenarios a,b,...] [--reps 20] [--quick] [--parallel] [--ttl-ms 1000]
         [--pgdata DIR --pg-ctl PATH]

--admin-dsn is a superuser's (it creates the tables and the probes' role,
locks lease rows, stops backends, forges notifications); --dsn is the
probes' (default: the admin DSN with user=le_conformance, a role created
with le_grant(..., 'campaign')).  The harness must run as the server's OS
user (or root) to SIGSTOP backends; "restart" needs --pgdata and --pg-ctl.
The repetitions of a scenario run concurrently, each on a key of its own.

The one invariant it checks for every client: nothing a probe does as
leader (an "act", a committed write) happens at or after the server's end
of that period.
"""
import argparse
import atexit
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENTS = ['c', 'python', 'go']
SCENARIOS = ['sigstop', 'short_stop', 'frozen_renewal', 'hung_renewals', 'restart', 'terminate',
             'forged_notify', 'same_owner', 'handoff', 'stall', 'stall_commit', 'ignore_cancel']
PROBE_ROLE = 'le_conformance'
# scenarios whose probe may end without an "exit" event or with a code other
# than 0 (PROTOCOL.md: the strongest mode of --ignore-cancel may end the process),
# but only as OVERRUN_EXIT and TERM_EXIT say
EXIT_EXEMPT = {'ignore_cancel'}
# the exit status with which a client's strongest mode ends the process of a task that
# overran its period (Go: ExitProcess, Options.ExitCode); C and Python keep their process
OVERRUN_EXIT = {'go': 70}
# the exit status, without an exit event, of a probe that SIGTERM ended in the strongest mode
# when not 0 (C: the probe is then pg_leader run, which ends with 128 + SIGTERM)
TERM_EXIT = {'c': 143}
# scenarios that need a probe option only some probes have (PROTOCOL.md)
ONLY_FOR = {'stall_commit': ('c',)}
CONNS_PER_REP = 9               # two probes of up to 4 connections, and the harness

# what a SIGTERM or exit of the harness must undo: stopped probe process
# groups and stopped backends get SIGCONT, probe groups get SIGKILL
FROZEN_GROUPS, FROZEN_PIDS, LIVE_GROUPS = set(), set(), set()
REG_MU = threading.Lock()


def cleanup():
    with REG_MU:
        for pid in list(FROZEN_PIDS):
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        for grp in list(FROZEN_GROUPS) + list(LIVE_GROUPS):
            try:
                os.killpg(grp, signal.SIGCONT)
            except OSError:
                pass
        for grp in list(LIVE_GROUPS):
            try:
                os.killpg(grp, signal.SIGKILL)
            except OSError:
                pass
        FROZEN_PIDS.clear()
        FROZEN_GROUPS.clear()
        LIVE_GROUPS.clear()


def on_signal(sig, frame):
    cleanup()
    os._exit(128 + sig)


def freeze_backends(pids, seconds):
    """SIGSTOP the server processes pids for seconds, SIGCONT them whatever happens."""
    try:
        with REG_MU:
            FROZEN_PIDS.update(pids)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(seconds)
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        with REG_MU:
            FROZEN_PIDS.difference_update(pids)


def dsn_with(dsn, **params):
    """dsn (keyword form or URI) with params added."""
    if dsn.startswith(('postgres://', 'postgresql://')):
        sep = '&' if '?' in dsn else '?'
        return dsn + sep + '&'.join('%s=%s' % kv for kv in params.items())
    return dsn + ''.join(" %s='%s'" % kv for kv in params.items())


class Admin:
    """Superuser statements, each on a fresh autocommit connection (servers restart)."""

    def __init__(self, dsn):
        self.dsn = dsn

    def connect(self, timeout=15.0):
        t0 = time.time()
        while True:
            try:
                c = psycopg2.connect(dsn_with(self.dsn, application_name='conformance harness'))
                c.autocommit = True
                return c
            except psycopg2.OperationalError:
                if time.time() - t0 > timeout:
                    raise
                time.sleep(0.1)

    def sql(self, query, params=None):
        c = self.connect()
        try:
            with c.cursor() as cur:
                cur.execute(query, params)
                return cur.fetchall() if cur.description else []
        finally:
            c.close()


class Probe:
    """One probe process and the events it printed, each stamped with its arrival."""

    def __init__(self, run, key, table, tag, owner=None, extra=(), env=None):
        self.run, self.key, self.tag = run, key, tag
        self.app = ('lec-%s-%s' % (key, tag))[:63]
        self.owner = owner or '%s-%s' % (key, tag)
        cmd = [run.launcher, '--dsn', dsn_with(run.dsn, application_name=self.app),
               '--key', key, '--owner', self.owner, '--ttl-ms', str(run.ttl_ms),
               '--interval-ms', str(run.interval_ms), '--table', table] + list(extra)
        penv = dict(os.environ, LE_CONFORMANCE_CLIENT=run.client)
        penv.pop('PGAPPNAME', None)
        penv.update(env or {})
        self.errlog = open(os.path.join(run.logdir, '%s-%s.log' % (key, tag)), 'w')
        self.events = []
        self.cv = threading.Condition()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.errlog,
                                     env=penv, start_new_session=True)
        self.rc = self.early_rc = None
        self.termed = False     # the scenario sent SIGTERM itself
        with REG_MU:
            LIVE_GROUPS.add(self.proc.pid)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {'ev': 'garbage', 'line': line.decode(errors='replace')}
            with self.cv:
                self.events.append(ev)
                self.cv.notify_all()

    def wait(self, pred, timeout):
        """The first event (from the start) matching pred, waiting up to timeout s."""
        end = time.time() + timeout
        with self.cv:
            while True:
                for ev in self.events:
                    if pred(ev):
                        return ev
                left = end - time.time()
                if left <= 0 or self.proc.poll() is not None and not self.reader.is_alive():
                    return None
                self.cv.wait(min(left, 0.05))

    def of(self, kind):
        with self.cv:
            return [e for e in self.events if e.get('ev') == kind]

    def signal(self, sig):
        """sig to the probe's process group (the launcher and all it started)."""
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def freeze(self, seconds):
        """SIGSTOP the probe's group for seconds, SIGCONT it whatever happens."""
        try:
            with REG_MU:
                FROZEN_GROUPS.add(self.proc.pid)
            self.signal(signal.SIGSTOP)
            time.sleep(seconds)
        finally:
            self.signal(signal.SIGCONT)
            with REG_MU:
                FROZEN_GROUPS.discard(self.proc.pid)

    def stop(self):
        self.early_rc = None if self.termed else self.proc.poll()
        self.signal(signal.SIGCONT)
        if not self.termed:             # a second SIGTERM could land in the exit of the first
            self.signal(signal.SIGTERM)
        try:
            self.rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.rc = 'none within 10 s of SIGTERM'
        self.signal(signal.SIGKILL)     # whatever the launcher left behind
        self.proc.wait()
        with REG_MU:
            LIVE_GROUPS.discard(self.proc.pid)
        self.reader.join(timeout=2)
        self.errlog.close()
        with open(os.path.join(self.run.logdir, '%s-%s.events' % (self.key, self.tag)), 'w') as f:
            for ev in self.events:      # the stream the judgement used, for a failure's diagnosis
                f.write(json.dumps(ev) + '\n')


def overrun_end(r, p, rc):
    """Did probe p of rep r end with status rc as its library's strongest mode ends a task that
    overran its period (PROTOCOL.md, Exit)?  Only in an EXIT_EXEMPT scenario, with its client's
    OVERRUN_EXIT, after it led a period and without an exit event."""
    code = OVERRUN_EXIT.get(r.run.client)
    return (r.scenario in EXIT_EXEMPT and code is not None and rc == code
            and bool(p.of('leader')) and not p.of('exit'))


def term_end(r, p, rc):
    """Did probe p of rep r end after the harness's SIGTERM as its client's strongest mode ends
    (TERM_EXIT), in an EXIT_EXEMPT scenario?"""
    code = TERM_EXIT.get(r.run.client)
    return r.scenario in EXIT_EXEMPT and code is not None and rc == code and not p.of('exit')


def first_leader(probes, timeout):
    """The probe that reports a period first (within timeout s), or None."""
    end = time.time() + timeout
    while time.time() < end:
        for p in probes:
            if p.of('leader'):
                return p
        time.sleep(0.02)
    return None


class Rep:
    """One repetition of a scenario on a key of its own."""

    def __init__(self, run, scenario, i):
        self.run = run
        self.key = 'cf%s-%s-%s-%d' % (run.runid, run.client, scenario, i)
        self.table = ('cfw_%s_%s_%s_%d' % (run.runid, run.client, scenario, i))[:63]
        self.probes = []
        self.problems = []
        self.handoff_ms = None
        self.margins = []
        self.faults = []        # (kind, token of the leader, start, end, takeover required)
        self.effects = []       # per fault: True when leadership changed hands
        self.keeper = None      # the thread of keep_running, if any
        self.restarts = []      # the probes keep_running replaced, and by which
        self.done = threading.Event()

    def keep_running(self, extra, limit=20):
        """Until the scenario ends, start a probe anew (tag a1, a2, ...) whenever its library ended it
        for an overrun (overrun_end), as a service manager would: a candidate must be left for the
        liveness check.  Each restart is noted; judge checks every end again, with all its events."""
        def loop():
            restarted, serial = set(), 0
            while not self.done.wait(0.05) and serial < limit:
                for p in list(self.probes):
                    rc = p.proc.poll()
                    if p not in restarted and not p.termed and overrun_end(self, p, rc):
                        restarted.add(p)
                        serial += 1
                        q = self.probe('%s%d' % (p.tag[0], serial), extra=extra)
                        self.restarts.append('%s (exit %s) by %s' % (p.tag, rc, q.tag))

        def guarded():
            try:
                loop()
            except Exception as ex:        # a probe that cannot start: the rep cannot be judged
                self.problems.append('restarting an ended probe failed: %r' % ex)
        self.keeper = threading.Thread(target=guarded, daemon=True)
        self.keeper.start()

    def end(self):
        """Stop restarting probes (keep_running), then stop every probe."""
        self.done.set()
        if self.keeper:
            self.keeper.join()
        for p in list(self.probes):
            p.stop()

    def probe(self, tag, **kw):
        p = Probe(self.run, self.key, self.table, tag, **kw)
        self.probes.append(p)
        return p

    def pair(self, **kw):
        return self.probe('a', **kw), self.probe('b', **kw)

    def leader(self, settle=2):
        """The probe leading a period still valid `settle` ttl after it began, once it acted in it:
        faults are injected into a steady period, not into one still starting up (a loaded machine
        can starve a probe just started; such a period is judged all the same).  A renewal that
        reaches the server is sent before the client's local deadline, and only a confirmed one
        moves that deadline, so a period valid at 2 ttl had a renewal confirmed.  settle=0: a period
        the server saw renewed once (for periods shorter than 2 ttl by design).  Sets self.token."""
        ttl = self.run.ttl
        p = first_leader(self.probes, 5 * ttl + 10)
        if p is None:
            self.problems.append('no probe became leader')
            return None
        c, end, tok = self.run.admin.connect(), time.time() + 5 * ttl + 10, None
        try:
            with c.cursor() as cur:
                while time.time() < end:
                    cur.execute("SELECT fencing_token FROM le_leases WHERE lease_key = %s AND is_valid"
                                " AND renewed_at > acquired_at"
                                " AND clock_timestamp() >= acquired_at + %s * interval '1 ms'",
                                [self.key, settle * self.run.ttl_ms])
                    row = cur.fetchone()
                    holders = [q for q in self.probes if row and any(e.get('token') == row[0] for e in q.of('leader'))]
                    if holders:
                        p, tok = holders[0], row[0]
                        break
                    time.sleep(0.05)
        finally:
            c.close()
        if tok is None:
            self.problems.append('no period of a probe lasted %s ttl within %.0f s' % (settle, 5 * ttl + 10))
            return None
        self.token = tok
        if p.wait(lambda e: e.get('ev') == 'act' and e.get('token') == tok, 2 * ttl) is None:
            self.problems.append('the leader %s did not act in its period %s' % (p.tag, tok))
        return p

    def live_bound(self):
        """Liveness bound after a fault (PROTOCOL.md): ttl + (ttl + slack)."""
        return 2 * self.run.ttl + self.run.args.slack_s

    def fault(self, kind, p, t0, t1, takeover=None):
        """Record a fault on p's current period over [t0, t1] (time.time()), then
        require a new act by some probe within the liveness bound after t1.
        takeover: 'during' (a newer period must start inside the fault),
        'after' (one must start by t1 + the bound), None (the library may survive)."""
        leads = [e for e in p.of('leader') if e['wall_us'] < t0 * 1e6] if p else []
        tok = leads[-1]['token'] if leads else None
        self.faults.append((kind, tok, t0, t1, takeover))
        end = time.time() + self.live_bound()
        while not any(e['wall_us'] > t1 * 1e6 for q in self.probes for e in q.of('act')):
            if time.time() > end:
                self.problems.append('no act by any probe within %.1f s after the %s ended'
                                     % (self.live_bound(), kind))
                return
            time.sleep(0.02)
        # watch what the probes do for a ttl after the fault (late acts, exits)
        time.sleep(max(0.0, t1 + self.run.ttl - time.time()))


# ---------------------------------------------------------------- scenarios

def current_leader(r):
    """The probe whose last act is the latest, if within the last half ttl."""
    best, at = None, (time.time() - 0.5 * r.run.ttl) * 1e6
    for q in r.probes:
        acts = q.of('act')
        if acts and acts[-1]['wall_us'] > at:
            best, at = q, acts[-1]['wall_us']
    return best


def sc_sigstop(r):
    r.pair()
    p = r.leader()
    if p:
        t0 = time.time()
        p.freeze(3 * r.run.ttl)     # the lease expires, and a follower retrying every ttl takes it
        r.fault('SIGSTOP of the leader', p, t0, time.time(), 'during')


def sc_short_stop(r):
    """A SIGSTOP below the ttl, starting near a renewal of the period."""
    r.pair()
    p = r.leader()
    if not p:
        return
    c = r.run.admin.connect()
    try:
        with c.cursor() as cur:
            q = 'SELECT fencing_token, renewed_at FROM le_leases WHERE lease_key = %s'
            cur.execute(q, [r.key])
            first = cur.fetchall()
            end, renewed = time.time() + 3 * r.run.ttl, False
            while not renewed and time.time() < end:
                time.sleep(0.005)
                cur.execute(q, [r.key])
                renewed = cur.fetchall() != first
    finally:
        c.close()
    if not renewed:             # stop it anyway, at no known point of its schedule
        r.notes = 'no renewal (nor new period) seen within 3 ttl before the stop'
    else:
        time.sleep(0.3 * r.run.ttl)
    t0 = time.time()
    p.freeze(0.7 * r.run.ttl)
    r.fault('short SIGSTOP of the leader', p, t0, time.time())


def backends(r, app, like=None, cur=None, active=True):
    q = 'SELECT pid FROM pg_stat_activity WHERE application_name = %s'
    args = [app]
    if like:
        q += " AND query ILIKE %s" + (" AND state = 'active'" if active else '')
        args.append(like)
    if cur is None:
        return [x[0] for x in r.run.admin.sql(q, args)]
    cur.execute(q, args)
    return [x[0] for x in cur.fetchall()]


def sc_frozen_renewal(r):
    r.pair()
    p = r.leader()
    if not p:
        return
    c = r.run.admin.connect()
    try:
        with c.cursor() as cur:
            end = time.time() + 3 * r.run.ttl
            while time.time() < end:
                # best: the backend caught inside le_renew; after a ttl of trying,
                # the connection that renews (its last query was le_renew); after
                # two, every backend of the probe (a library that renews inside
                # BEGIN ... COMMIT shows "commit" as its last query)
                late = time.time() > end - 2 * r.run.ttl
                pids = backends(r, p.app, '%le_renew%', cur, active=not late)
                if not pids and time.time() > end - r.run.ttl:
                    pids = backends(r, p.app, cur=cur)
                if not pids:
                    time.sleep(0.002)
                    continue
                try:
                    with REG_MU:
                        FROZEN_PIDS.update(pids)
                    for pid in pids:
                        os.kill(pid, signal.SIGSTOP)
                    t0 = time.time()
                    # a stopped backend shows what it was doing when stopped
                    cur.execute("SELECT pid, state FROM pg_stat_activity WHERE pid = ANY(%s)"
                                " AND query ILIKE '%%le_renew%%'", [pids])
                    rows = cur.fetchall()
                    caught = [x[0] for x in rows if x[1] == 'active']
                    if rows and late:
                        caught = [x[0] for x in rows]
                        r.notes = 'froze the renewing connection between renewals (state %s)' % rows[0][1]
                    elif not rows and time.time() > end - r.run.ttl:
                        caught = pids
                        r.notes = 'no connection showed le_renew: froze all %d backends of the probe' % len(pids)
                    if caught:
                        q = 'SELECT renewed_at, fencing_token FROM le_leases WHERE lease_key = %s'
                        cur.execute(q, [r.key])
                        before = cur.fetchall()
                        time.sleep(2 * r.run.ttl)
                        cur.execute(q, [r.key])
                        after = cur.fetchall()
                        if after and before and after[0][1] == before[0][1] and after[0][0] != before[0][0]:
                            r.notes = ('period %s was renewed through another connection while the'
                                       ' renewing backend was frozen' % after[0][1])
                finally:
                    for pid in pids:
                        os.kill(pid, signal.SIGCONT)
                    with REG_MU:
                        FROZEN_PIDS.difference_update(pids)
                if caught:
                    r.fault('freeze of the backend renewing', p, t0, time.time())
                    return
    finally:
        c.close()
    r.problems.append('no backend of %s was caught running le_renew' % p.app)


def lock_lease_row(r, seconds):
    """Lock the lease row for seconds; (start, end) of the lock."""
    c = r.run.admin.connect()
    try:
        with c.cursor() as cur:
            cur.execute('BEGIN')
            cur.execute('SELECT 1 FROM le_lease WHERE lease_key = %s FOR UPDATE', [r.key])
            t0 = time.time()
            if cur.rowcount != 1:
                r.problems.append('locking the lease row took %d rows' % cur.rowcount)
            time.sleep(seconds)
            cur.execute('ROLLBACK')
            return t0, time.time()
    finally:
        c.close()


def sc_hung_renewals(r):
    r.pair()
    p = r.leader()
    if p:
        t0, t1 = lock_lease_row(r, 2 * r.run.ttl)
        r.fault('lock of the lease row', p, t0, t1, 'after')


def sc_restart(r):
    r.pair()
    p = r.leader()
    t0 = time.time()
    r.barrier.wait()            # its action restarts the server once for all reps
    if not r.run.restarted:
        r.problems.append('the server did not restart (pg_postmaster_start_time unchanged)')
    r.fault('restart of the server', p, t0, time.time())


def sc_terminate(r):
    r.pair()
    p = r.leader()
    if not p:
        return
    t0 = time.time()
    for _ in range(3):
        pids, end = backends(r, p.app), time.time() + r.run.ttl
        while not pids and time.time() < end:     # the probe may still be reconnecting
            time.sleep(0.05)
            pids = backends(r, p.app)
        done = [pid for pid in pids if r.run.admin.sql('SELECT pg_terminate_backend(%s)', [pid])[0][0]]
        if not done:
            r.problems.append('no backend of %s found to terminate' % p.app)
        time.sleep(0.5 * r.run.ttl)
    r.fault('termination of the backends', p, t0, time.time())


def sc_forged_notify(r):
    a, b = r.pair()
    p = r.leader()
    if not p:
        return
    other = b if p is a else a
    lead = [e for e in p.of('leader') if e.get('token') == r.token] or p.of('leader')
    tok, me = r.token, lead[0].get('owner') or p.owner
    forged = [
        {'event': 'released', 'lease_key': r.key, 'holder': me, 'fencing_token': tok, 'expires_at': None},
        {'event': 'acquired', 'lease_key': r.key, 'holder': other.owner, 'fencing_token': tok + 100,
         'expires_at': '2999-01-01T00:00:00+00:00'},
        {'event': 'acquired', 'lease_key': r.key, 'holder': me, 'fencing_token': tok + 50,
         'expires_at': '2999-01-01T00:00:00+00:00'},
        {'event': 'force_released', 'lease_key': r.key, 'holder': None, 'fencing_token': tok + 1,
         'expires_at': None},
    ]
    payloads = [json.dumps(f) for f in forged] + ['not json', '{"event":', '{}', '\u00e9' * 100]
    t0 = time.time()
    end = t0 + 2 * r.run.ttl
    c = r.run.admin.connect()
    try:
        with c.cursor() as cur:
            while time.time() < end:
                for pl in payloads:
                    cur.execute("SELECT pg_notify('leader_election', %s)", [pl])
                time.sleep(0.05)
    finally:
        c.close()
    if any(e.get('token') == tok for e in p.of('lost')):
        r.notes = 'leader lost its period during the forged notifications'
    r.fault('forged notifications', p, t0, time.time())


def sc_same_owner(r):
    r.pair(owner='same-owner-%s' % r.key)
    p = r.leader()
    time.sleep(2 * r.run.ttl)
    if p:
        p = current_leader(r) or p
        t0 = time.time()
        p.freeze(2.5 * r.run.ttl)
        r.fault('SIGSTOP of the leader', p, t0, time.time(), 'during')


def sc_handoff(r):
    a, b = r.pair()
    p = r.leader()
    if not p:
        return
    other = b if p is a else a
    tok = r.token
    time.sleep(0.5 * r.run.ttl)
    termed_us = time.time() * 1e6
    p.termed = True
    p.signal(signal.SIGTERM)
    ev = other.wait(lambda e: e.get('ev') == 'leader' and e.get('token', 0) > tok, 5 * r.run.ttl)
    if ev is None:
        r.problems.append('no takeover within 5 ttl after the SIGTERM of the leader')
        return
    rows = r.run.admin.sql(
        "SELECT extract(epoch FROM ended_at)::float8 * 1e6, end_reason FROM le_lease_history"
        " WHERE lease_key = %s AND fencing_token = %s", [r.key, tok])
    if rows and rows[0][1] != 'released' and rows[0][0] < termed_us:
        r.problems.append('the leader lost its period (end_reason %s) %.0f ms before the SIGTERM'
                          % (rows[0][1], (termed_us - rows[0][0]) / 1000))
        return
    if not rows or rows[0][1] != 'released':
        r.problems.append('the SIGTERMed leader did not release (end_reason %s)'
                          % (rows[0][1] if rows else 'missing'))
        return
    r.handoff_ms = (ev['wall_us'] - rows[0][0]) / 1000.0
    r.effects.append(True)


class TakeOver:
    """The harness as the newer owner: it force-releases the lease and acquires it in one
    transaction (no probe can get it in between), then renews it on a connection of its own
    until done(), so that during a probe's stall a newer token is held whatever the probes'
    libraries do, and the stale write must fail with LE001."""

    def __init__(self, r):
        self.r, self.owner, self.ttl_ms = r, 'conformance-harness-%s' % r.key, 2 * r.run.ttl_ms
        self.conn = r.run.admin.connect()
        self.conn.autocommit = False
        with self.conn.cursor() as cur:
            cur.execute('SELECT le_force_release(%s)', [r.key])
            cur.execute("SELECT acquired, fencing_token FROM le_acquire(%s, %s, %s * interval '1 ms')",
                        [r.key, self.owner, self.ttl_ms])
            self.acquired, self.token = cur.fetchone()
        self.conn.commit()
        self.conn.autocommit = True

    def hold(self, done, timeout):
        """Renew every half ttl until done() or timeout s; False when a renewal was refused."""
        end = time.time() + timeout
        while not done() and time.time() < end:
            time.sleep(min(0.02, max(0.0, end - time.time())))
            if time.time() >= getattr(self, 'next_renew', 0):
                with self.conn.cursor() as cur:
                    cur.execute("SELECT le_renew(%s, %s, %s, %s * interval '1 ms')",
                                [self.r.key, self.owner, self.token, self.ttl_ms])
                    if cur.fetchone()[0] is None:
                        return False
                self.next_renew = time.time() + self.ttl_ms / 2000.0
        return True

    def release(self):
        try:
            with self.conn.cursor() as cur:
                cur.execute('SELECT le_release(%s, %s, %s)', [self.r.key, self.owner, self.token])
        finally:
            self.conn.close()


def sc_stall(r):
    ttl = r.run.ttl
    a = r.probe('a', extra=['--stall-once-ms', str(int(3000 * ttl))])
    if not a.wait(lambda e: e.get('ev') == 'write' and e.get('ok'), 5 * ttl + 10):
        r.problems.append('the stalling probe never wrote')
        return
    writes = a.of('write')
    first = next(i for i, e in enumerate(writes) if e.get('ok'))
    tok = writes[first]['token']
    r.probe('b')                # a campaigner, which gets the lease after the harness's period
    time.sleep(0.3 * ttl)       # inside the stall (3 ttl) by now
    if len(a.of('write')) > first + 1:
        r.problems.append('the probe wrote again %.0f ms after its first write: no stall'
                          % (0.3 * r.run.ttl_ms))
        return
    t = TakeOver(r)
    try:
        if not t.acquired or t.token <= tok:
            r.problems.append('the harness could not take the lease over (acquired %s, token %s after %s)'
                              % (t.acquired, t.token, tok))
            return
        if not t.hold(lambda: len(a.of('write')) > first + 1, 5 * ttl):
            r.problems.append("the harness's takeover period ended before the stalled write")
    finally:
        t.release()
    writes = a.of('write')
    if len(writes) <= first + 1:
        r.problems.append('the stalled write never finished')
        return
    stale = writes[first + 1]
    if stale.get('ok') or stale.get('sqlstate') != 'LE001':
        r.problems.append('stale write: ok=%s sqlstate=%s (LE001 expected)'
                          % (stale.get('ok'), stale.get('sqlstate')))
    time.sleep(0.5 * ttl)


def sc_stall_commit(r):
    """A write paused between its INSERT and its COMMIT while the lease is force-released
    and taken over: the COMMIT must fail, or commit before the period's end (judge)."""
    ttl = r.run.ttl
    a = r.probe('a', extra=['--stall-commit-once-ms', str(int(2000 * ttl))])
    if not a.wait(lambda e: e.get('ev') == 'write' and e.get('ok'), 5 * ttl + 10):
        r.problems.append('the stalling probe never wrote')
        return
    first = len(a.of('write'))
    lead = a.of('leader')
    r.probe('b')
    time.sleep(0.3 * ttl)       # inside the pause between INSERT and COMMIT by now
    t0 = time.time()
    r.run.admin.sql('SELECT le_force_release(%s)', [r.key])
    end = time.time() + 4 * ttl
    while len(a.of('write')) <= first and time.time() < end:
        time.sleep(0.02)
    writes = a.of('write')
    if len(writes) <= first:
        r.problems.append('the write paused before its COMMIT never finished')
        return
    w = writes[first]
    if not w.get('ok') and w.get('sqlstate') not in ('LE001', 'LE002'):
        r.problems.append('the paused COMMIT failed with %s (LE001 or LE002 expected)' % w.get('sqlstate'))
    r.notes = 'the paused COMMIT %s' % ('committed (before the force release)' if w.get('ok')
                                        else 'failed with %s' % w.get('sqlstate'))
    r.fault('force release during a paused COMMIT', a if lead else None, t0, time.time())


def sc_ignore_cancel(r):
    r.pair(extra=['--ignore-cancel'])
    # a probe whose library ended the process (Go's ExitProcess) is started again, so that
    # one lost period, e.g. to a starved renewal before the fault, does not leave no candidate
    r.keep_running(['--ignore-cancel'])
    p = r.leader(settle=0)      # each period is one task of 2 ttl: inject within it
    if p:
        t0, t1 = lock_lease_row(r, 2.5 * r.run.ttl)
        r.fault('lock of the lease row', p, t0, t1)


# ---------------------------------------------------------------- judging

def judge(r):
    """Checks of PROTOCOL.md from the database and the events of r's probes."""
    adm = r.run.admin
    ends, tokens, released, holder, acquired = {}, set(), set(), {}, {}
    for tok, who, acq, ended, reason in adm.sql(
            "SELECT fencing_token, holder, extract(epoch FROM acquired_at)::float8 * 1e6,"
            " extract(epoch FROM ended_at)::float8 * 1e6, end_reason"
            " FROM le_lease_history WHERE lease_key = %s", [r.key]):
        tokens.add(tok)
        ends[tok], holder[tok], acquired[tok] = ended, who, acq
        if reason == 'released':
            released.add(tok)
    for tok, exp in adm.sql(
            "SELECT fencing_token, extract(epoch FROM expires_at)::float8 * 1e6 FROM le_leases"
            " WHERE lease_key = %s AND holder IS NOT NULL", [r.key]):
        if ends.get(tok) is None:
            ends[tok] = exp
    last_act, actors = {}, {}
    for p in r.probes:
        with p.cv:
            events = list(p.events)
        # tokens p's library reported (its callback may print after the first act)
        told = {e.get('token'): e.get('owner') for e in events if e.get('ev') == 'leader'}
        lost = set()                # periods whose end p's library reported so far
        for e in events:
            kind, tok = e.get('ev'), e.get('token')
            if kind == 'lost':
                lost.add(tok)
            if kind != 'act':
                continue
            t = e['wall_us']
            actors.setdefault(tok, set()).add(p.tag)
            end = ends.get(tok)
            if tok in lost and r.scenario not in EXIT_EXEMPT:
                r.problems.append('%s acted in period %s after its library reported the end' % (p.tag, tok))
            if tok not in tokens:
                r.problems.append('%s acted with token %s, which the server never granted' % (p.tag, tok))
                continue
            if tok not in told:
                r.problems.append('%s acted with token %s, which its library never reported' % (p.tag, tok))
            elif told[tok] != holder[tok]:
                r.problems.append('%s acted in period %s of %s as %s' % (p.tag, tok, holder[tok], told[tok]))
            if t < acquired[tok]:
                r.problems.append('%s acted %.1f ms before period %s began' % (p.tag, (acquired[tok] - t) / 1000, tok))
            if end is None:
                r.problems.append('period %s has no end on the server' % tok)
            elif t >= end:
                r.problems.append('%s acted %.1f ms after the end of period %s' % (p.tag, (t - end) / 1000, tok))
            last_act[tok] = max(last_act.get(tok, 0), t)
        for e in p.of('garbage'):
            r.problems.append('%s printed a line that is not JSON: %r' % (p.tag, e['line'][:80]))
        # the events are all read by now (Probe.stop): overrun_end decides on the whole stream
        if p.early_rc is not None:
            if not overrun_end(r, p, p.early_rc):
                r.problems.append('%s ended by itself (code %s) before the harness stopped it'
                                  % (p.tag, p.early_rc))
        elif (p.rc != 0 or not p.of('exit')) and not overrun_end(r, p, p.rc) and not term_end(r, p, p.rc):
            r.problems.append('%s after SIGTERM: exit code %s, exit event %s (0 and one expected)'
                              % (p.tag, p.rc, 'printed' if p.of('exit') else 'missing'))
    for tok, who in actors.items():
        if len(who) > 1:
            r.problems.append('probes %s all acted in period %s' % (','.join(sorted(who)), tok))
    for tok, t in last_act.items():     # released periods end after the work stopped
        if ends.get(tok) is not None and tok not in released:
            r.margins.append((ends[tok] - t) / 1000.0)
    # a write counts when it committed: its commit timestamp (track_commit_timestamp),
    # else the time of its INSERT
    for tok, who, t in adm.sql(
            'SELECT fencing_token, owner_id, extract(epoch FROM coalesce('
            'pg_xact_commit_timestamp(xmin), written_at))::float8 * 1e6 FROM %s' % r.table):
        end = ends.get(tok)
        if tok not in tokens:
            r.problems.append('a write with token %s, which the server never granted, committed' % tok)
        elif end is not None and t >= end:
            r.problems.append('a write of period %s committed %.1f ms after its end' % (tok, (t - end) / 1000))
        elif t < acquired[tok] or who != holder[tok]:
            r.problems.append('a write of period %s by %s committed outside it (holder %s)'
                              % (tok, who, holder[tok]))
    for kind, tok, t0, t1, takeover in r.faults:
        newer = [acquired[t] / 1e6 for t in tokens if tok is not None and t > tok]
        first = min(newer) if newer else None
        effect = first is not None and first >= t0 and first <= t1 + r.live_bound()
        if takeover == 'during' and not (effect and first <= t1):
            r.problems.append('the %s had no effect: no newer period than %s began during it'
                              ' (first newer one at %s s of the fault of %.1f s)'
                              % (kind, tok, first and '%.2f' % (first - t0), t1 - t0))
        elif takeover == 'after' and not effect:
            r.problems.append('the %s had no effect: no newer period than %s began by %.1f s after it'
                              % (kind, tok, r.live_bound()))
        r.effects.append(effect)


def setup(run, reps):
    adm = run.admin
    for r in reps:
        adm.sql('CREATE TABLE %s (id bigserial PRIMARY KEY, client text, lease_key text, owner_id text,'
                ' fencing_token bigint, written_at timestamptz DEFAULT clock_timestamp())' % r.table)
        adm.sql('GRANT INSERT, SELECT ON %s TO %s' % (r.table, PROBE_ROLE))
        adm.sql('GRANT USAGE ON SEQUENCE %s_id_seq TO %s' % (r.table, PROBE_ROLE))
        adm.sql('SELECT le_protect(%s::regclass, %s)', [r.table, r.key])


def restart_server(run):
    if not (run.args.pgdata and run.args.pg_ctl):
        return
    q = 'SELECT pg_postmaster_start_time()'
    before = run.admin.sql(q)[0][0]
    subprocess.run([run.args.pg_ctl, '-D', run.args.pgdata, '-m', 'fast', '-w', 'restart',
                    '-l', run.args.pg_log or os.path.join(run.logdir, 'restart.log')],
                   stdout=subprocess.DEVNULL, check=True)
    run.restarted = run.admin.sql(q)[0][0] != before


def run_scenario(run, name):
    reps = [Rep(run, name, i) for i in range(run.reps)]
    for r in reps:
        r.scenario = name
    setup(run, reps)
    barrier = threading.Barrier(len(reps), action=lambda: restart_server(run))
    for r in reps:
        r.barrier = barrier
    fn = globals()['sc_' + name]

    def body(r):
        try:
            fn(r)
        except Exception as exc:   # a harness error counts as a failure, with its text
            r.problems.append('harness: %r' % exc)
            barrier.abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in reps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in reps:
        r.end()
    for r in reps:
        try:
            judge(r)
        except Exception as exc:
            r.problems.append('judge: %r' % exc)
    return reps


def fmt3(xs):
    if not xs:
        return '-'
    return '%.0f / %.0f / %.0f (%d)' % (min(xs), statistics.median(xs), max(xs), len(xs))


def report(client, results, out):
    out.write('\n### client %s\n\n' % client)
    out.write('| scenario | result | margin min / median / max (ms) (periods) | handoff min / median / max (ms) (n) |\n')
    out.write('|---|---|---|---|\n')
    failed = False
    for name, reps in results:
        bad = [r for r in reps if r.problems]
        failed |= bool(bad)
        margins = [m for r in reps for m in r.margins]
        hand = [r.handoff_ms for r in reps if r.handoff_ms is not None]
        # a repetition whose faults all left leadership where it was passes
        # only on what it still checks: "fault survived", not a plain PASS
        survived = sum(1 for r in reps if r.effects and not any(r.effects))
        if bad:
            res = 'FAIL (%d of %d)' % (len(bad), len(reps))
        elif survived == len(reps):
            res = 'fault survived (%d)' % survived
        elif survived:
            res = 'PASS (%d), fault survived (%d)' % (len(reps) - survived, survived)
        else:
            res = 'PASS (%d)' % len(reps)
        out.write('| %s | %s | %s | %s |\n' % (name, res, fmt3(margins), fmt3(hand)))
    for name, reps in results:
        lines = ['- %s %s: %s' % (name, r.key, pr) for r in reps for pr in r.problems[:3]]
        lines += ['- note %s %s: %s' % (name, r.key, r.notes) for r in reps if getattr(r, 'notes', None)]
        lines += ['- note %s %s: ended by an overrun, started anew: %s' % (name, r.key, ', '.join(r.restarts))
                  for r in reps if r.restarts]
        for ln in lines[:12]:
            out.write(ln + '\n')
        if len(lines) > 12:
            out.write('- %s: %d more lines\n' % (name, len(lines) - 12))
    out.flush()
    return failed


class Run:
    pass


def main():
    ap = argparse.ArgumentParser(description='Conformance suite of the client libraries (PROTOCOL.md).')
    ap.add_argument('--admin-dsn', required=True)
    ap.add_argument('--dsn')
    ap.add_argument('--client', default='all', choices=CLIENTS + ['all'])
    ap.add_argument('--scenarios', default=','.join(SCENARIOS))
    ap.add_argument('--reps', type=int, default=20)
    ap.add_argument('--quick', action='store_true', help='3 repetitions per scenario')
    ap.add_argument('--parallel', action='store_true',
                    help='run the scenarios at the same time (restart after them, alone)')
    ap.add_argument('--ttl-ms', type=int, default=1000)
    ap.add_argument('--interval-ms', type=int, default=50)
    ap.add_argument('--pgdata')
    ap.add_argument('--pg-ctl')
    ap.add_argument('--slack-s', type=float, default=3.0,
                    help='scheduling slack of the liveness bound ttl + (ttl + slack) (default 3 s)')
    ap.add_argument('--logdir')
    ap.add_argument('--keep-logs', action='store_true', help='keep the probe logs (default: only --logdir keeps them)')
    ap.add_argument('--pg-log', help='server log file for pg_ctl restart (the one the server logs to)')
    args = ap.parse_args()
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    scen = [s for s in args.scenarios.split(',') if s]
    for s in scen:
        if s not in SCENARIOS:
            ap.error('unknown scenario %s (one of %s)' % (s, ', '.join(SCENARIOS)))
    if 'restart' in scen and not (args.pgdata and args.pg_ctl):
        print('scenario restart left out: it needs --pgdata and --pg-ctl')
        scen.remove('restart')
    admin = Admin(args.admin_dsn)
    if not admin.sql('SELECT 1 FROM pg_roles WHERE rolname = %s', [PROBE_ROLE]):
        admin.sql('CREATE ROLE %s LOGIN' % PROBE_ROLE)
        admin.sql("SELECT le_grant('%s', 'campaign')" % PROBE_ROLE)
    logdir = args.logdir or os.path.join(os.environ.get('TMPDIR', '/tmp'), 'le-conformance-%d' % os.getpid())
    os.makedirs(logdir, exist_ok=True)
    if not (args.logdir or args.keep_logs):
        atexit.register(shutil.rmtree, logdir, True)
    else:
        print('probe logs in %s' % logdir)
    maxconn = int(admin.sql('SHOW max_connections')[0][0])
    failed, ran = False, 0
    for client in (CLIENTS if args.client == 'all' else [args.client]):
        launcher = os.path.join(HERE, 'probe-' + client)
        if not os.access(launcher, os.X_OK):
            print('\n### client %s: not available (no executable %s)' % (client, launcher))
            continue
        # without arguments a probe prints its usage and exits 1, 2 or 64; the
        # launcher builds it first if needed (once, not by 40 probes at a time)
        chk = subprocess.run([launcher], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=dict(os.environ, LE_CONFORMANCE_CLIENT=client), timeout=600)
        if chk.returncode not in (1, 2, 64):
            print('\n### client %s: FAIL: %s without arguments exited %d:\n%s'
                  % (client, launcher, chk.returncode, chk.stderr.decode(errors='replace')[-2000:]))
            failed = True
            continue
        run = Run()
        run.args, run.admin, run.client, run.launcher, run.logdir = args, admin, client, launcher, logdir
        run.dsn = args.dsn or dsn_with(args.admin_dsn, user=PROBE_ROLE)
        run.ttl_ms, run.ttl, run.interval_ms = args.ttl_ms, args.ttl_ms / 1000.0, args.interval_ms
        run.reps = 3 if args.quick else args.reps
        run.runid = '%x%03x' % (int(time.time() * 10) % 0xfffff, os.getpid() % 0xfff)
        run.restarted = False
        skipped = [n for n in scen if client not in ONLY_FOR.get(n, (client,))]
        if skipped:
            print('client %s: %s left out (its probe lacks the option)' % (client, ', '.join(skipped)))
        cscen = [n for n in scen if n not in skipped]
        results = {}

        def one(name):
            t0 = time.time()
            results[name] = run_scenario(run, name)
            print('%s %s: %.1f s' % (client, name, time.time() - t0), flush=True)

        if args.parallel:       # the scenarios at once, as many as max_connections allows; restart alone
            per = max(1, (maxconn - 20) // (CONNS_PER_REP * run.reps))
            rest = [n for n in cscen if n != 'restart']
            for i in range(0, len(rest), per):
                threads = [threading.Thread(target=one, args=(n,)) for n in rest[i:i + per]]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            if 'restart' in cscen:
                one('restart')
        else:
            for name in cscen:
                one(name)
        results = [(n, results[n]) for n in cscen]
        failed |= report(client, results, sys.stdout)
        ran += 1
    if ran == 0:
        print('no client available')
        return 2
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
