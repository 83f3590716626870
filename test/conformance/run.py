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
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENTS = ['c', 'python', 'go']
SCENARIOS = ['sigstop', 'frozen_renewal', 'hung_renewals', 'restart', 'terminate',
             'forged_notify', 'same_owner', 'handoff', 'stall', 'ignore_cancel']
PROBE_ROLE = 'le_conformance'


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
        try:
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self):
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.reader.join(timeout=2)
        self.errlog.close()
        with open(os.path.join(self.run.logdir, '%s-%s.events' % (self.key, self.tag)), 'w') as f:
            for ev in self.events:      # the stream the judgement used, for a failure's diagnosis
                f.write(json.dumps(ev) + '\n')


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


# ---------------------------------------------------------------- scenarios

def sc_sigstop(r):
    r.pair()
    p = r.leader()
    if p:
        p.signal(signal.SIGSTOP)
        time.sleep(2 * r.run.ttl)
        p.signal(signal.SIGCONT)
        time.sleep(1.5 * r.run.ttl)


def backends(r, app, like=None):
    q = 'SELECT pid FROM pg_stat_activity WHERE application_name = %s'
    args = [app]
    if like:
        q += ' AND query ILIKE %s'
        args.append(like)
    return [x[0] for x in r.run.admin.sql(q, args)]


def sc_frozen_renewal(r):
    r.pair()
    p = r.leader()
    if not p:
        return
    pids, end = [], time.time() + 3 * r.run.ttl
    while not pids and time.time() < end:
        pids = backends(r, p.app, '%le_renew%')
        time.sleep(0.02)
    if not pids:
        r.problems.append('no backend of %s ran le_renew' % p.app)
        return
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    time.sleep(2 * r.run.ttl)
    for pid in pids:
        os.kill(pid, signal.SIGCONT)
    time.sleep(1.5 * r.run.ttl)


def lock_lease_row(r, seconds):
    c = r.run.admin.connect()
    try:
        with c.cursor() as cur:
            cur.execute('BEGIN')
            cur.execute('SELECT 1 FROM le_lease WHERE lease_key = %s FOR UPDATE', [r.key])
            time.sleep(seconds)
            cur.execute('ROLLBACK')
    finally:
        c.close()


def sc_hung_renewals(r):
    r.pair()
    if r.leader():
        lock_lease_row(r, 2 * r.run.ttl)
        time.sleep(1.5 * r.run.ttl)


def sc_restart(r):
    r.pair()
    r.leader()
    r.barrier.wait()            # its action restarts the server once for all reps
    time.sleep(2 * r.run.ttl)


def sc_terminate(r):
    r.pair()
    p = r.leader()
    if not p:
        return
    for _ in range(3):
        pids, end = backends(r, p.app), time.time() + r.run.ttl
        while not pids and time.time() < end:     # the probe may still be reconnecting
            time.sleep(0.05)
            pids = backends(r, p.app)
        if not pids:
            r.problems.append('no backend of %s found' % p.app)
        for pid in pids:
            r.run.admin.sql('SELECT pg_terminate_backend(%s)', [pid])
        time.sleep(0.5 * r.run.ttl)
    time.sleep(1.5 * r.run.ttl)


def sc_forged_notify(r):
    a, b = r.pair()
    p = r.leader()
    if not p:
        return
    other = b if p is a else a
    tok = r.token
    forged = [
        {'event': 'released', 'lease_key': r.key, 'holder': None, 'fencing_token': tok, 'expires_at': None},
        {'event': 'acquired', 'lease_key': r.key, 'holder': other.owner, 'fencing_token': tok + 100,
         'expires_at': '2999-01-01T00:00:00+00:00'},
        {'event': 'force_released', 'lease_key': r.key, 'holder': None, 'fencing_token': tok + 1,
         'expires_at': None},
    ]
    payloads = [json.dumps(f) for f in forged] + ['not json', '{"event":', '{}', '\u00e9' * 100]
    end = time.time() + 2 * r.run.ttl
    while time.time() < end:
        for pl in payloads:
            r.run.admin.sql("SELECT pg_notify('leader_election', %s)", [pl])
        time.sleep(0.05)
    if any(e.get('token') == tok for e in p.of('lost')):
        r.notes = 'leader lost its period during the forged notifications'
    time.sleep(0.5 * r.run.ttl)


def sc_same_owner(r):
    r.pair(owner='same-owner-%s' % r.key)
    p = r.leader()
    time.sleep(2 * r.run.ttl)
    if p:
        p.signal(signal.SIGSTOP)
        time.sleep(1.5 * r.run.ttl)
        p.signal(signal.SIGCONT)
        time.sleep(r.run.ttl)


def sc_handoff(r):
    a, b = r.pair()
    p = r.leader()
    if not p:
        return
    other = b if p is a else a
    tok = r.token
    time.sleep(0.5 * r.run.ttl)
    termed_us = time.time() * 1e6
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


def sc_ignore_cancel(r):
    r.pair(extra=['--ignore-cancel'])
    p = r.leader(settle=0)      # each period is one task of 2 ttl: inject within it
    if p:
        lock_lease_row(r, 2.5 * r.run.ttl)
        time.sleep(r.run.ttl)


# ---------------------------------------------------------------- judging

def judge(r):
    """Checks of PROTOCOL.md from the database and the events of r's probes."""
    adm = r.run.admin
    ends, tokens, released = {}, set(), set()
    for tok, ended, reason in adm.sql(
            "SELECT fencing_token, extract(epoch FROM ended_at)::float8 * 1e6, end_reason"
            " FROM le_lease_history WHERE lease_key = %s", [r.key]):
        tokens.add(tok)
        ends[tok] = ended
        if reason == 'released':
            released.add(tok)
    for tok, exp in adm.sql(
            "SELECT fencing_token, extract(epoch FROM expires_at)::float8 * 1e6 FROM le_leases"
            " WHERE lease_key = %s AND holder IS NOT NULL", [r.key]):
        if ends.get(tok) is None:
            ends[tok] = exp
    last_act, actors = {}, {}
    for p in r.probes:
        for e in p.of('act'):
            tok, t = e['token'], e['wall_us']
            actors.setdefault(tok, set()).add(p.tag)
            end = ends.get(tok)
            if tok not in tokens:
                r.problems.append('%s acted with token %s, which the server never granted' % (p.tag, tok))
            elif end is None:
                r.problems.append('period %s has no end on the server' % tok)
            elif t >= end:
                r.problems.append('%s acted %.1f ms after the end of period %s' % (p.tag, (t - end) / 1000, tok))
            last_act[tok] = max(last_act.get(tok, 0), t)
        for e in p.of('garbage'):
            r.problems.append('%s printed a line that is not JSON: %r' % (p.tag, e['line'][:80]))
    for tok, who in actors.items():
        if len(who) > 1:
            r.problems.append('probes %s all acted in period %s' % (','.join(sorted(who)), tok))
    for tok, t in last_act.items():     # released periods end after the work stopped
        if ends.get(tok) is not None and tok not in released:
            r.margins.append((ends[tok] - t) / 1000.0)
    for tok, t in adm.sql('SELECT fencing_token, extract(epoch FROM written_at)::float8 * 1e6 FROM %s'
                          % r.table):
        end = ends.get(tok)
        if end is not None and t >= end:
            r.problems.append('a write of period %s committed %.1f ms after its end' % (tok, (t - end) / 1000))
        elif tok not in tokens:
            r.problems.append('a write with token %s, which the server never granted, committed' % tok)


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
    subprocess.run([run.args.pg_ctl, '-D', run.args.pgdata, '-m', 'fast', '-w', 'restart',
                    '-l', os.path.join(run.logdir, 'restart.log')],
                   stdout=subprocess.DEVNULL, check=True)


def run_scenario(run, name):
    reps = [Rep(run, name, i) for i in range(run.reps)]
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
        for p in r.probes:
            p.stop()
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
        out.write('| %s | %s | %s | %s |\n' % (name, 'FAIL (%d of %d)' % (len(bad), len(reps)) if bad
                                             else 'PASS (%d)' % len(reps), fmt3(margins), fmt3(hand)))
    for name, reps in results:
        lines = ['- %s %s: %s' % (name, r.key, pr) for r in reps for pr in r.problems[:3]]
        lines += ['- note %s %s: %s' % (name, r.key, r.notes) for r in reps if getattr(r, 'notes', None)]
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
    ap.add_argument('--logdir')
    args = ap.parse_args()
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
    print('probe logs in %s' % logdir)
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
        run.runid = '%x' % (int(time.time() * 10) % 0xffffff)
        results = {}

        def one(name):
            t0 = time.time()
            results[name] = run_scenario(run, name)
            print('%s %s: %.1f s' % (client, name, time.time() - t0), flush=True)

        if args.parallel:       # every scenario at once, then the restart alone
            threads = [threading.Thread(target=one, args=(n,)) for n in scen if n != 'restart']
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if 'restart' in scen:
                one('restart')
        else:
            for name in scen:
                one(name)
        results = [(n, results[n]) for n in scen]
        failed |= report(client, results, sys.stdout)
        ran += 1
    if ran == 0:
        print('no client available')
        return 2
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
