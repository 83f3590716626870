#!/usr/bin/python3
"""Fault-injection run of leader_election (test/run.sh chaos; G1, G3, G5, G9).

Starts a throwaway server (track_commit_timestamp = on, Unix socket in
--dir), then candidates that compete for short-ttl leases:

  cli    three `pg_leader run --loop` candidates for each of keys k1, k2;
         each leader's command (writer.py) writes fenced rows with its token
  sql    three plain SQL clients (sql_client.py) for each of keys q1, q2 that
         hold a transaction open across their fenced writes
  mixed  (default) k1, k2 with pg_leader and q1 with SQL clients

and a fault loop that, one fault at a time, picks at random: SIGSTOP and
later SIGCONT of a candidate (mostly the leader; 0.2 to 3 ttl, so often past
its ttl and often in the middle of a write transaction; for pg_leader the
wrapper and its command, the command alone or the wrapper alone), SIGKILL of
a candidate (restarted under a new owner id) or of a leader's command,
pg_terminate_backend of a random client connection, and an immediate server
stop and restart (pg_ctl stop -m immediate; start).

Then the checker reads only the database (le_lease_history, le_lease, the
fenced rows with pg_xact_commit_timestamp(xmin)), the candidates' logs and
the server log, and prints the faults by kind, the operations, each
invariant with its number of violations and the failover times; exit 1 on
any violation.  The invariant checks on the history are those of
test/random/le_checks.py (shared with le_random.py).

Liveness bound: after a fault that took a leader away (its period ended
within ttl of the fault instead of being renewed), the next grant of the
key comes at most ttl + LIVENESS_BOUND after the fault (plus the time the
server was down when the fault was a restart); and between two periods of
a key no more than LIVENESS_BOUND passes outside server downtime.  The
bound covers the candidates' retry interval (500 ms + 20 % jitter) and
scheduling delays on a loaded two-core machine.

CHAOS_BREAK=nofence (or --break nofence) leaves the tables unprotected, to
show that the checker catches a build without the fence: that run must fail.
"""
import argparse
import collections
import glob
import json
import os
import random
import signal
import subprocess
import sys
import time

import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'random'))
import le_checks  # noqa: E402

PY = '/usr/bin/python3' if os.access('/usr/bin/python3', os.X_OK) else sys.executable
LIVENESS_BOUND = 2.0      # seconds, see the docstring
LATE_MS = 250.0           # tolerated commit lateness after an expiry (le_random.py, check B)
T0 = time.time()


def log(msg):
    print('[%7.1fs] %s' % (time.time() - T0, msg), flush=True)


class Run:
    """The server, the candidates and the fault loop of one run."""

    def __init__(self, args):
        self.a = args
        self.rng = random.Random(args.seed)
        self.bindir = args.bindir
        self.dir = args.dir
        self.data = os.path.join(args.dir, 'data')
        self.logs = os.path.join(args.dir, 'logs')
        self.server_log = os.path.join(args.dir, 'server.log')
        self.dsn = 'host=%s port=%d dbname=postgres user=postgres' % (args.dir, args.port)
        self.ttl = args.ttl
        if args.mode == 'cli':
            self.keys = {'k1': 'cli', 'k2': 'cli'}
        elif args.mode == 'sql':
            self.keys = {'q1': 'sql', 'q2': 'sql'}
        else:
            self.keys = {'k1': 'cli', 'k2': 'cli', 'q1': 'sql'}
        self.cands = {}          # name -> dict(kind, key, owner, proc, gen)
        self.faults = []         # one dict per fault
        self.downtimes = []      # (down, up) wall-clock intervals of the server
        self.admin = None
        self.max_connections = 60

    # ---- server -------------------------------------------------------
    def pg(self, *cmd, check=True):
        return subprocess.run([os.path.join(self.bindir, cmd[0])] + list(cmd[1:]), check=check,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start_server(self):
        os.makedirs(self.logs, exist_ok=True)
        self.pg('initdb', '-D', self.data, '-A', 'trust', '-U', 'postgres', '--no-sync')
        with open(os.path.join(self.data, 'postgresql.conf'), 'a') as f:
            f.write("listen_addresses = ''\nunix_socket_directories = '%s'\nport = %d\n"
                    "track_commit_timestamp = on\nmax_connections = %d\n"
                    "log_line_prefix = '%%m [%%p] '\n" % (self.dir, self.a.port, self.max_connections))
        self.pg('pg_ctl', '-D', self.data, '-l', self.server_log, '-w', 'start')

    def restart_server(self):
        """pg_ctl stop -m immediate, a pause of 0.1 to 1 s, start; the
        downtime is recorded for the liveness checks."""
        down = time.time()
        self.pg('pg_ctl', '-D', self.data, '-m', 'immediate', 'stop', check=False)
        time.sleep(self.rng.uniform(0.1, 1.0))
        self.pg('pg_ctl', '-D', self.data, '-l', self.server_log, '-w', 'start')
        self.downtimes.append((down, time.time()))
        self.connect_admin()

    def connect_admin(self):
        for _ in range(100):
            try:
                self.admin = psycopg2.connect(self.dsn, application_name='chaos-harness', connect_timeout=2)
                self.admin.autocommit = True
                return
            except psycopg2.Error:
                time.sleep(0.1)
        raise SystemExit('FAIL: cannot connect to the server')

    def sql(self, q, args=None):
        """A statement on the harness's own connection (reconnecting once)."""
        for attempt in (1, 2):
            try:
                with self.admin.cursor() as cur:
                    cur.execute(q, args)
                    return cur.fetchall() if cur.description else None
            except (psycopg2.OperationalError, psycopg2.InterfaceError):
                if attempt == 2:
                    raise
                self.connect_admin()

    def setup(self):
        self.connect_admin()
        self.sql('CREATE EXTENSION leader_election')
        for key in self.keys:
            self.sql('CREATE TABLE chaos_%s (id bigserial PRIMARY KEY, lease_key text NOT NULL,'
                     ' fencing_token bigint NOT NULL, owner text NOT NULL,'
                     ' written_at timestamptz NOT NULL DEFAULT clock_timestamp())' % key)
            if self.a.brk != 'nofence':
                self.sql('SELECT le_protect(%s::regclass, %s)', ('chaos_' + key, key))
        if self.a.brk == 'nofence':
            log('CHAOS_BREAK=nofence: the tables are NOT protected; the run must fail')

    # ---- candidates ---------------------------------------------------
    def start_candidate(self, name):
        c = self.cands[name]
        c['gen'] += 1
        c['owner'] = '%s.%d' % (name, c['gen'])
        table = 'chaos_' + c['key']
        out = open(os.path.join(self.logs, c['owner'] + '.log'), 'a')
        if c['kind'] == 'cli':
            env = dict(os.environ, CHAOS_TABLE=table, CHAOS_LOG=os.path.join(self.logs, c['owner'] + '.writes'))
            cmd = [os.path.join(self.bindir, 'pg_leader'), 'run', '--loop', '-v', '--log-format', 'json',
                   '-d', self.dsn + ' connect_timeout=2', '-l', c['key'], '--owner', c['owner'],
                   '--ttl', '%gms' % (self.ttl * 1000), '--retry', '500ms', '--', PY, os.path.join(HERE, 'writer.py')]
        else:
            env = dict(os.environ)
            cmd = [PY, os.path.join(HERE, 'sql_client.py'), self.dsn, c['key'], c['owner'], str(self.ttl), table,
                   os.path.join(self.logs, c['owner'] + '.writes')]
        c['proc'] = subprocess.Popen(cmd, stdout=out, stderr=out, env=env, start_new_session=True)

    def start_all(self):
        for key, kind in self.keys.items():
            for i in range(1, 4):
                name = '%s-c%d' % (key, i)
                self.cands[name] = {'kind': kind, 'key': key, 'gen': 0}
                self.start_candidate(name)

    def command_pgids(self, c):
        """Process groups of a pg_leader's children (its command and the
        command's supervisor share one)."""
        pids = set()
        pid = c['proc'].pid
        for stat in glob.glob('/proc/[0-9]*/stat'):
            try:
                with open(stat) as f:
                    fields = f.read().rsplit(')', 1)[1].split()
                if int(fields[1]) == pid:
                    pids.add(int(fields[2]))
            except (OSError, IndexError, ValueError):
                pass
        pids.discard(os.getpgid(pid) if c['proc'].poll() is None else -1)
        return pids

    def holders(self):
        """key -> (owner, token) of the valid holders now."""
        rows = self.sql("SELECT lease_key, holder, fencing_token FROM le_lease"
                        " WHERE holder IS NOT NULL AND expires_at > clock_timestamp()")
        return {k: (h, t) for k, h, t in rows}

    def by_owner(self, owner):
        for name, c in self.cands.items():
            if c['owner'] == owner:
                return name
        return None

    # ---- faults -------------------------------------------------------
    def signal_procs(self, c, sig, part='whole'):
        try:
            if part in ('whole', 'command') and c['kind'] == 'cli':
                for g in self.command_pgids(c):
                    try:
                        os.killpg(g, sig)
                    except ProcessLookupError:
                        pass
            if part in ('whole', 'wrapper'):
                os.kill(c['proc'].pid, sig)
        except ProcessLookupError:
            pass

    def fault(self):
        try:
            hold = self.holders()
        except psycopg2.Error:
            hold = {}
        kinds = [('stop_leader', 30), ('stop_any', 8), ('kill_candidate', 12), ('terminate_backend', 15),
                 ('restart_server', 5)]
        if any(k == 'cli' for k in self.keys.values()):
            kinds.append(('kill_command', 8))
        kind = self.rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        # Short runs too see every kind: one not seen yet half of the time.
        unseen = [k for k, _ in kinds if not any(f['kind'].startswith(k) for f in self.faults)]
        if unseen and self.rng.random() < 0.5:
            kind = self.rng.choice(unseen)
        f = {'kind': kind, 't': time.time(), 'key': None, 'token': None, 'target': None}
        leaders = [(k, o, t) for k, (o, t) in hold.items() if k in self.keys and self.by_owner(o)]
        if kind in ('stop_leader', 'kill_command') and not leaders:
            kind = f['kind'] = 'stop_any'
        if kind == 'kill_command':
            leaders = [x for x in leaders if self.keys[x[0]] == 'cli'] or leaders
        if kind in ('stop_leader', 'kill_command') or (kind == 'kill_candidate' and leaders
                                                        and self.rng.random() < 0.7):
            key, owner, token = self.rng.choice(leaders)
            name = self.by_owner(owner)
            f.update(key=key, token=token)
        elif kind in ('stop_any', 'kill_candidate'):
            name = self.rng.choice(sorted(self.cands))
            owner = self.cands[name]['owner']
            for k, (o, t) in hold.items():
                if o == owner:
                    f.update(key=k, token=t)
        else:
            name = None
        c = self.cands.get(name)
        f['target'] = c['owner'] if c else None
        if kind in ('stop_leader', 'stop_any'):
            part = 'whole'
            if c['kind'] == 'cli':
                part = self.rng.choices(['whole', 'command', 'wrapper'], [70, 15, 15])[0]
            dur = self.rng.uniform(0.2, 3.0) * self.ttl
            f.update(kind='%s(%s)' % (kind, part) if c['kind'] == 'cli' else '%s(sql)' % kind, dur=dur)
            self.signal_procs(c, signal.SIGSTOP, part)
            time.sleep(dur)
            self.signal_procs(c, signal.SIGCONT, part)
        elif kind == 'kill_candidate':
            self.signal_procs(c, signal.SIGKILL, 'wrapper')
            c['proc'].wait()
            f['kind'] = 'kill_candidate(%s)' % c['kind']
            time.sleep(0.3)
            self.start_candidate(name)
        elif kind == 'kill_command':
            # The command itself (writer.py), not its group: the supervisor
            # that shares the group would take pg_leader down with it (82).
            groups = self.command_pgids(c)
            for stat in glob.glob('/proc/[0-9]*/stat'):
                try:
                    with open(stat) as fh:
                        pgid = int(fh.read().rsplit(')', 1)[1].split()[2])
                    with open(stat[:-4] + 'cmdline', 'rb') as fh:
                        argv = fh.read().split(b'\0')
                    # The supervisor is a fork of pg_leader: its argv names writer.py too, later.
                    is_writer = len(argv) > 1 and argv[1].endswith(b'writer.py')
                    if pgid in groups and is_writer:
                        os.kill(int(stat.split('/')[2]), signal.SIGKILL)
                except (OSError, IndexError, ValueError):
                    pass
        elif kind == 'terminate_backend':
            rows = self.sql("SELECT pid, application_name FROM pg_stat_activity WHERE backend_type = 'client backend'"
                            " AND pid <> pg_backend_pid() AND application_name <> 'chaos-harness'")
            if rows:
                pid, app = self.rng.choice(rows)
                f['target'] = '%s backend %d' % (app or 'pg_leader', pid)
                self.sql('SELECT pg_terminate_backend(%s)', (pid,))
        elif kind == 'restart_server':
            f['tokens'] = {k: t for k, (o, t) in hold.items()}
            self.restart_server()
        self.faults.append(f)

    def loop(self):
        end = time.time() + self.a.seconds
        progress = time.time() + 60
        while time.time() < end:
            self.fault()
            if time.time() > progress:
                progress += 60
                log('%d faults so far' % len(self.faults))
            # Keep every candidate alive: one that exited is started again.
            for name, c in self.cands.items():
                if c['proc'].poll() is not None:
                    log('%s exited with %s; started again' % (c['owner'], c['proc'].returncode))
                    self.start_candidate(name)
            time.sleep(self.rng.uniform(0.3, 1.5))
        self.stop_t = time.time()

    def stop_all(self):
        for c in self.cands.values():
            self.signal_procs(c, signal.SIGCONT)
            try:
                c['proc'].send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        for c in self.cands.values():
            try:
                c['proc'].wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.signal_procs(c, signal.SIGKILL)
                c['proc'].wait()

    def teardown(self):
        for c in self.cands.values():
            if c.get('proc') and c['proc'].poll() is None:
                self.signal_procs(c, signal.SIGCONT)
                self.signal_procs(c, signal.SIGKILL)
        self.pg('pg_ctl', '-D', self.data, '-m', 'immediate', 'stop', check=False)

    # ---- checker ------------------------------------------------------
    def client_events(self):
        events = []
        for fn in glob.glob(os.path.join(self.logs, '*')):
            with open(fn, errors='replace') as f:
                for line in f:
                    line = line.strip()
                    if line.startswith('{'):
                        try:
                            e = json.loads(line)
                        except ValueError:
                            continue
                        if 'lease_key' in e and 'key' not in e:
                            e['key'] = e['lease_key']   # a pg_leader line
                        events.append(e)
        return events

    @staticmethod
    def lost_acks(cur, ev, tables):
        """The writes a client saw commit ("ack" events of writer.py) that
        are not in the table of their key (tables: key -> table)."""
        cur.execute('CREATE TEMP TABLE chaos_acked (lease_key text, id bigint, token bigint, owner text)')
        for e in ev:
            if e.get('event') == 'ack':
                cur.execute('INSERT INTO chaos_acked VALUES (%s, %s, %s, %s)', (e['key'], e['id'], e['token'],
                                                                              e['owner']))
        lost = []
        for table in sorted(set(tables.values())):
            keys = [k for k, t in tables.items() if t == table]
            cur.execute('SELECT a.owner, a.token, a.id FROM chaos_acked a WHERE a.lease_key = ANY (%%s) AND NOT EXISTS'
                        ' (SELECT FROM %s r WHERE r.id = a.id AND r.fencing_token = a.token)' % table, (keys,))
            lost += cur.fetchall()
        return lost

    def downtime_within(self, a, b):
        return sum(max(0.0, min(b, up) - max(a, down)) for down, up in self.downtimes)

    def check(self):
        conn = psycopg2.connect(self.dsn, application_name='chaos-harness')
        conn.autocommit = True
        cur = conn.cursor()
        keys = 'k_%' if self.a.mode == 'cli' else ('q_%' if self.a.mode == 'sql' else '__')
        writes = 'WITH w AS (' + ' UNION ALL '.join(
            "SELECT 'row' AS src, lease_key, fencing_token AS token, xmin AS x,"
            " pg_xact_commit_timestamp(xmin) AS cts FROM chaos_%s" % k for k in self.keys) + ')\n'
        ev = self.client_events()
        results = []

        def report(name, rows):
            results.append((name, rows))

        # Every grant a client saw (pg_leader's "acquired", the SQL clients' own).
        cur.execute('CREATE TEMP TABLE chaos_obs (lease_key text, fencing_token bigint, owner_id text,'
                    ' ctx text, acquired bool)')
        for e in ev:
            if e.get('event') == 'acquired' and e.get('token') is not None:
                cur.execute('INSERT INTO chaos_obs VALUES (%s, %s, %s, %s, true)',
                            (e['key'], e['token'], e['owner'], 'pg_leader' if 'lease_key' in e else 'sql'))
        report('at most one valid holder per key at any instant; tokens strictly increase in grant order',
               le_checks.tokens_rise_periods_disjoint(cur, keys))
        report('the lease row carries the highest token granted (none reissued after a restart)',
               le_checks.lease_row_behind_history(cur, keys))
        report('no token given to two owners (client logs)', le_checks.token_given_twice(cur, 'chaos_obs'))
        report('no token a client was given belongs to another period',
               le_checks.token_of_other_period(cur, 'chaos_obs'))
        report('no fenced row committed after the next token was granted',
               le_checks.write_after_newer_grant(cur, writes, keys))
        b = le_checks.writes_against_own_period(cur, writes, keys, LATE_MS)
        report('no fenced row committed after its own period ended (server-side end; %d ms after an expiry'
               ' tolerated, max seen %.0f ms)' % (LATE_MS, b['max_late_ms']), b['late'])
        report('no fenced row committed before its period began', b['early'])
        report('every fenced row carries the token of a committed period', b['orphans'])
        # Every write a client believes committed is there (synchronous_commit on, immediate stops).
        lost = self.lost_acks(cur, ev, {k: 'chaos_' + k for k in self.keys})
        report('every write a client saw committed is in the table', lost)
        # Liveness.
        cur.execute("""SELECT h.lease_key, h.fencing_token, h.acquired_at, COALESCE(h.ended_at, l.expires_at),
                              h.end_reason
                         FROM le_lease_history h JOIN le_lease l USING (lease_key)
                        WHERE h.lease_key LIKE %s ORDER BY h.lease_key, h.acquired_at""", (keys,))
        periods = collections.defaultdict(list)
        for k, tok, acq, end, reason in cur.fetchall():
            periods[k].append((tok, acq.timestamp(), end.timestamp() if end else None, reason))
        gaps = []
        for k, ps in periods.items():
            for p, n in zip(ps, ps[1:]):
                gap = n[1] - p[2] - self.downtime_within(p[2], n[1])
                if gap > LIVENESS_BOUND:
                    gaps.append((k, p[0], n[0], '%.2fs without a holder' % gap))
            last = ps[-1]
            if last[2] is not None and last[2] < self.stop_t - LIVENESS_BOUND - self.downtime_within(
                    last[2], self.stop_t):
                gaps.append((k, last[0], None, 'expired %.1fs before the end, no next grant'
                             % (self.stop_t - last[2])))
        report('between two periods of a key at most %.1fs passed outside server downtime' % LIVENESS_BOUND, gaps)
        failovers, slow, kept = collections.defaultdict(list), [], 0
        handovers = collections.defaultdict(list)
        self.slow_handovers = []
        for f in self.faults:
            targets = f.get('tokens', {}).items() if f['kind'] == 'restart_server' else (
                [(f['key'], f['token'])] if f['key'] and f['kind'] != 'terminate_backend' else [])
            for k, tok in targets:
                ps = periods.get(k, [])
                mine = [p for p in ps if p[0] == tok]
                nxt = [p for p in ps if p[0] > tok]
                if mine and (mine[0][2] is None or mine[0][2] > f['t'] + self.ttl + 0.05):
                    kept += 1     # renewed after the fault: the leader carried on
                    continue
                limit = self.ttl + LIVENESS_BOUND + self.downtime_within(f['t'], f['t'] + 3600)
                if not nxt:
                    if f['t'] + limit < self.stop_t:
                        slow.append((f['kind'], k, tok, 'no new leader'))
                    continue
                dt = nxt[0][1] - f['t']
                failovers[f['kind'].split('(')[0]].append(dt)
                if mine and mine[0][2] is not None:
                    # From the moment the lease could be had (its expiry or
                    # release) to the next grant, without server downtime.
                    gap = nxt[0][1] - mine[0][2] - self.downtime_within(mine[0][2], nxt[0][1])
                    handovers[mine[0][3] or 'ended'].append(gap)
                    if gap > 0.1:
                        self.slow_handovers.append((f['kind'], k, tok, mine[0][3], '%.0f ms' % (1000 * gap)))
                if dt > self.ttl + LIVENESS_BOUND + self.downtime_within(f['t'], nxt[0][1]):
                    slow.append((f['kind'], k, tok, '%.2fs to the next grant' % dt))
        report('every fault that took a leader away was followed by a new leader within ttl + %.1fs'
               ' (+ server downtime)' % LIVENESS_BOUND, slow)
        report('no crash in the server log', le_checks.crash_lines(self.server_log))

        cur.execute(writes + 'SELECT count(*), count(DISTINCT (lease_key, token)) FROM w')
        nrows, ntok = cur.fetchone()
        cur.execute('SELECT count(*), max(fencing_token) FROM le_lease_history WHERE lease_key LIKE %s', (keys,))
        nper, maxtok = cur.fetchone()
        conn.close()
        cnt = collections.Counter()
        for e in ev:
            name = e.get('event')
            if name == 'refused':
                cnt['writes refused by the fence (%s)' % e.get('sqlstate')] += 1
            elif name in ('acquired', 'renewed', 'ack', 'conn_error', 'released', 'lost', 'error',
                          'stopping_command', 'command_exited'):
                cnt[{'ack': 'writes acknowledged', 'conn_error': 'client connection errors'}.get(name, name)] += 1
        return results, failovers, handovers, kept, cnt, nrows, ntok, nper, maxtok

    def summary(self):
        results, failovers, handovers, kept, cnt, nrows, ntok, nper, maxtok = self.check()
        print('\n==== chaos run summary: mode %s, keys %s, ttl %gs, %.0fs of faults, seed %d ===='
              % (self.a.mode, ','.join(self.keys), self.ttl, self.a.seconds, self.a.seed))
        print('faults injected: %d' % len(self.faults))
        for k, n in sorted(collections.Counter(f['kind'] for f in self.faults).items()):
            print('  %-34s %d' % (k, n))
        print('operations:')
        print('  %-34s %d (max token %s)' % ('ownership periods (history)', nper, maxtok))
        print('  %-34s %d (%d tokens)' % ('fenced rows committed', nrows, ntok))
        for k, n in sorted(cnt.items()):
            print('  %-34s %d' % (k, n))
        print('failover (fault -> next grant of the key; %d faults where the leader kept its lease):' % kept)
        allv = sorted(v for vs in failovers.values() for v in vs)
        for kind, vs in sorted(failovers.items()) + [('all', allv)]:
            vs = sorted(vs)
            if vs:
                print('  %-20s n=%-4d p50 %.2fs  p99 %.2fs  max %.2fs' % ((kind, len(vs)) + quantiles(vs)))
        print('handover (the end of that leader\'s period, by how it ended -> next grant; server downtime'
              ' taken out):')
        allv = sorted(v for vs in handovers.values() for v in vs)
        for why, vs in sorted(handovers.items()) + [('all', allv)]:
            vs = sorted(vs)
            if vs:
                print('  %-20s n=%-4d p50 %.0fms  p99 %.0fms  max %.0fms'
                      % ((why, len(vs)) + tuple(1000 * v for v in quantiles(vs))))
        for h in self.slow_handovers[:10]:
            print('  over 100 ms: ' + ' | '.join(str(x) for x in h))
        return print_invariants(results, 'chaos')


def quantiles(vs):
    """p50, p99 and maximum of the sorted, non-empty list vs."""
    return vs[len(vs) // 2], vs[min(len(vs) - 1, int(len(vs) * 0.99))], vs[-1]


def print_invariants(results, run):
    """Print each (invariant, violating rows) with its count and the first
    rows, then RUN's verdict; 1 when anything was violated, else 0."""
    print('invariants (violations):')
    bad = 0
    for name, rows in results:
        print('  %4d  %s' % (len(rows), name))
        for r in rows[:5]:
            print('          ' + ' | '.join(str(x) for x in r))
        bad += len(rows)
    print('%s: %s, %d violations' % (run, 'FAIL' if bad else 'ok', bad))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--bindir', required=True)
    ap.add_argument('--dir', required=True, help='scratch directory (created; data, logs, socket)')
    ap.add_argument('--port', type=int, default=58200)
    ap.add_argument('--seconds', type=float, default=60)
    ap.add_argument('--mode', choices=['cli', 'sql', 'mixed'], default='mixed')
    ap.add_argument('--ttl', type=float, default=2.0)
    ap.add_argument('--liveness-bound', type=float, default=LIVENESS_BOUND,
                    help='slack in seconds of the liveness checks (default %(default)s)')
    ap.add_argument('--seed', type=int, default=int(os.environ.get('CHAOS_SEED', '0')) or None)
    ap.add_argument('--break', dest='brk', default=os.environ.get('CHAOS_BREAK', ''), choices=['', 'nofence'])
    a = ap.parse_args()
    globals()['LIVENESS_BOUND'] = a.liveness_bound
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1, 2 ** 31)
    os.makedirs(a.dir, exist_ok=True)
    log('chaos: seed %d (CHAOS_SEED=%d replays the fault choices), mode %s, %gs, server in %s'
        % (a.seed, a.seed, a.mode, a.seconds, a.dir))
    r = Run(a)

    def stop(signum, frame):
        raise SystemExit('chaos: stopped by signal %d' % signum)
    # Interrupted (also when started in the background, SIGINT ignored): tear down first.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        r.start_server()
        r.setup()
        r.start_all()
        time.sleep(2 * a.ttl)
        r.loop()
        log('faults done; stopping the candidates')
        r.stop_all()
        return r.summary()
    finally:
        r.teardown()


if __name__ == '__main__':
    sys.exit(main())
