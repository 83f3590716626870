#!/usr/bin/python3
"""Fault-injection run of partition groups (test/run.sh groups-fault).

Starts a throwaway server (track_commit_timestamp = on) with a group "g" of
64 partitions and a table "tbl" fenced per partition
(le_protect('tbl', group_name => 'g', partition_column => 'part')), then
four `pg_leader group run --ttl 3s` members (3 to 5 at any time), each
running one instance of writer.py per partition it owns: it writes fenced
rows (partition, LE_FENCING_TOKEN, member, txid_current()) continuously.
A fault loop (the chaos run's machinery, test/chaos/chaos.py), random by
--seed, picks one fault at a time and waits until the group converged
before the next:

  join      a new member starts (at most 5)
  leave     a member gets SIGTERM (it leaves the group; at least 3 stay)
  stop      a member (pg_leader and its instances' process groups) is
            SIGSTOPped until the others own its partitions (past its ttl),
            then SIGCONT: the "resume" that follows is a join
  kill      SIGKILL of a member and of its instances' process groups; it
            starts again under a new member id
  restart   pg_ctl stop -m immediate, then start

Convergence after a fault: le_group_assignment('g') shows all 64
partitions 'owned' by running members, the valid memberships are exactly
the running members, their shares differ by at most one, and nothing
changes (holders, tokens) for 1.5 s; the time is that of the first
reading of that state.  Printed per fault kind
(p50/p99/max), with the balance and the partitions that moved (compared
with the sticky bound: at most ceil(N/(M+1)) for a join of an (M+1)th
member, only the departed member's for a leave).

What the checker proves, from the database alone (le_lease_history, the
rows of tbl with pg_xact_commit_timestamp(xmin)) unless said otherwise:

  (a) no two ownership periods of one partition (nor of one membership)
      overlap: at most one valid owner at any instant (a period ended by
      expiry ends at its expiry, by the server's record);
  (b) per partition, tokens strictly increase with the period's start;
  (c) every committed row's (partition, token) is a period of that
      partition in the history and its commit time lies within that
      period: not before its grant, not after its release, at most 250 ms
      after its expiry (le_random.py's tolerance for a commit already past
      the fence check), and not after the grant of a higher token;
  (d) from the instances' own logs: an instance whose member was never
      frozen was stopped (SIGTERM) before its period ended and never had a
      write refused by the fence (doc/client.md, "Each instance has run's
      guarantee");
  (e) every write an instance saw commit is in the table; the lease row
      carries the highest token; no crash in the server log;
  (f) every fault converged within --converge-bound seconds, and joins
      and leaves moved no more partitions than the sticky bound; a server
      restart moved only partitions that were free: a member's membership
      lapsed during it (a death, and its return a join), or the member
      stopped working on them when their local deadline passed.

GROUPS_BREAK=early-grant (--break early-grant) tells the run that the
server was built with LE_BREAK_EARLY_GRANT (src/group.c: a partition is
taken from its valid holder before the holder released it); test/run.sh
builds that server into a separate installation, and the run must fail.
Exit 1 on any violation.
"""
import argparse
import collections
import datetime
import math
import os
import random
import signal
import subprocess
import sys
import time

import psycopg2

import chaos
from chaos import log, le_checks

GROUP = 'g'
PARTITIONS = 64
KEYS = 'le:group:%s:%%' % GROUP
SETTLE = 1.5              # seconds a converged state must last (above 2 heartbeats of a 3 s ttl)


class GroupRun(chaos.Run):
    """The server, the members and the fault loop of one run."""

    def __init__(self, args):
        args.mode = 'cli'
        super().__init__(args)
        self.keys = {}
        self.max_connections = 150
        self.next_member = 0
        self.frozen = collections.defaultdict(list)    # member id -> [(stop, cont)]
        self.events = []         # one dict per fault with its convergence

    def setup(self):
        self.connect_admin()
        self.sql('CREATE EXTENSION leader_election')
        self.sql('CREATE TABLE tbl (id bigserial PRIMARY KEY, part integer NOT NULL, lease_key text NOT NULL,'
                 ' fencing_token bigint NOT NULL, owner text NOT NULL, xid bigint NOT NULL DEFAULT txid_current(),'
                 ' written_at timestamptz NOT NULL DEFAULT clock_timestamp())')
        self.sql('SELECT le_group_create(%s, %s)', (GROUP, PARTITIONS))
        self.sql("SELECT le_protect('tbl', group_name => %s, partition_column => 'part')", (GROUP,))
        if self.a.brk:
            log('GROUPS_BREAK=%s: the server grants a partition before its holder released it;'
                ' the run must fail' % self.a.brk)

    # ---- members ------------------------------------------------------
    def start_member(self):
        self.next_member += 1
        name = 'm%d' % self.next_member
        c = self.cands[name] = {'kind': 'cli', 'key': None, 'gen': 1, 'owner': name}
        out = open(os.path.join(self.logs, name + '.log'), 'a')
        env = dict(os.environ, CHAOS_TABLE='tbl', CHAOS_LOG=os.path.join(self.logs, name + '.writes'),
                   CHAOS_PAUSE='0.25,0.5')
        cmd = [os.path.join(self.bindir, 'pg_leader'), 'group', 'run', '-v', '--log-format', 'json',
               '-d', self.dsn + ' connect_timeout=2', '--group', GROUP, '--member', name,
               '--ttl', '%gms' % (self.ttl * 1000), '--retry', '500ms', '--',
               chaos.PY, os.path.join(chaos.HERE, 'writer.py')]
        c['proc'] = subprocess.Popen(cmd, stdout=out, stderr=out, env=env, start_new_session=True)
        return name

    # ---- convergence --------------------------------------------------
    def state(self):
        """(partition -> (holder, token) of an 'owned' partition or None, valid members)."""
        rows = self.sql('SELECT partition, holder, fencing_token, state FROM le_group_assignment(%s)', (GROUP,))
        mem = self.sql('SELECT member_id FROM le_group_members WHERE group_name = %s AND is_valid', (GROUP,))
        return {p: ((h, t) if s == 'owned' else None) for p, h, t, s in rows}, {m for m, in mem}

    def converged(self, expect, held, live):
        """Every partition owned by a member of expect, the valid members
        exactly expect, and their shares within one."""
        if live != expect or any(h is None or h[0] not in expect for h in held.values()):
            return False
        n = collections.Counter(h[0] for h in held.values())
        shares = [n.get(m, 0) for m in expect]
        return bool(shares) and max(shares) - min(shares) <= 1

    def converge(self, expect):
        """Seconds until the group converged on the member ids in expect
        and then stayed so, with the same holders and tokens, for
        SETTLE seconds (a state a heartbeat is about to undo does not
        count); None after --converge-bound.  Also the holders then."""
        t0 = time.time()
        since, last = None, None
        while time.time() - t0 < self.a.converge_bound + SETTLE:
            try:
                held, live = self.state()
            except psycopg2.Error:
                time.sleep(0.2)
                continue
            now = time.time()
            if not self.converged(expect, held, live):
                since = None
            elif since is None or held != last:
                since, last = now, held
            elif now - since >= SETTLE:
                if since - t0 > self.a.converge_bound:
                    break
                return since - t0, {p: h[0] for p, h in held.items()}
            time.sleep(0.05)
        return None, None

    def gave_up(self, t0, t1):
        """The partitions whose member stopped working on them between t0
        and t1 because its local deadline passed (no heartbeat got
        through in time): it hands them back, and they are free."""
        out = set()
        for e in self.client_events():
            if e.get('event') == 'revoked' and e.get('reason') == 'deadline_passed':
                t = datetime.datetime.strptime(e['ts'], '%Y-%m-%dT%H:%M:%S.%fZ').replace(
                    tzinfo=datetime.timezone.utc).timestamp()
                if t0 <= t <= t1:
                    out.add(int(e['lease_key'].rsplit(':', 1)[1]))
        return out

    def memberships(self):
        """member id -> token of each valid membership."""
        return dict(self.sql('SELECT member_id, fencing_token FROM le_group_members'
                             ' WHERE group_name = %s AND is_valid', (GROUP,)))

    def settle(self, kind, t0, expect, before, target=None, members_before=None):
        """Record the convergence of fault kind (injected at t0).  For a
        restart, members_before are the memberships before it: a member
        whose membership lapsed meanwhile (its token changed) counts as a
        member that died and joined again."""
        dt, after = self.converge(expect)
        e = {'kind': kind, 't': t0, 'dt': dt, 'target': target,
             'members': len(expect)}
        if after is not None:
            moved = {p for p in after if before.get(p) != after[p]}
            e['moved'] = len(moved)
            e['balance'] = ','.join(str(n) for n in sorted(collections.Counter(after.values()).values()))
            if kind in ('join', 'resume'):
                e['bound'] = math.ceil(PARTITIONS / len(expect))
                e['bad_moves'] = e['moved'] > e['bound']
            elif kind == 'leave':
                mine = {p for p, h in before.items() if h == target}
                e['bound'] = len(mine)
                e['bad_moves'] = bool(moved - mine)
            elif kind == 'restart':
                now = self.memberships()
                lapsed = {m for m, tok in members_before.items() if now.get(m) != tok}
                free = self.gave_up(t0, time.time()) | {p for p, h in before.items() if h in lapsed}
                e['lapsed'], e['gave_up'] = len(lapsed), len(free)
                rejoins = len(lapsed) * math.ceil(PARTITIONS / len(expect))
                e['bound'] = len(free) + rejoins
                e['bad_moves'] = len(moved - free) > rejoins
            self.last = after
        self.events.append(e)
        log('%-8s %-5s converged %s  members %d  balance %s  moved %s%s' % (
            kind, target or '', 'in %.2fs' % e['dt'] if e['dt'] is not None else 'NEVER', len(expect),
            e.get('balance', '?'), e.get('moved', '?'),
            ' (bound %d)' % e['bound'] if 'bound' in e else ''))
        return after

    # ---- faults -------------------------------------------------------
    def live_ids(self):
        return set(self.cands)

    def fault(self):
        kinds = [('stop', 25), ('kill', 20), ('restart', 10)]
        if len(self.cands) < 5:
            kinds.append(('join', 20))
        if len(self.cands) > 3:
            kinds.append(('leave', 20))
        kind = self.rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        unseen = [k for k, _ in kinds if not any(f['kind'] == k for f in self.faults)]
        if unseen:      # every kind early, also in short runs
            kind = self.rng.choice(unseen)
        before = dict(self.last)
        name = self.rng.choice(sorted(self.cands))
        t0 = time.time()
        self.faults.append({'kind': kind, 't': t0})
        if kind == 'join':
            new = self.start_member()
            self.settle('join', t0, self.live_ids(), before, new)
        elif kind == 'leave':
            c = self.cands.pop(name)
            c['proc'].send_signal(signal.SIGTERM)
            try:
                c['proc'].wait(timeout=30)
            except subprocess.TimeoutExpired:
                log('%s did not exit within 30 s of SIGTERM' % name)
                self.signal_procs(c, signal.SIGKILL)
                c['proc'].wait()
            self.settle('leave', t0, self.live_ids(), before, name)
        elif kind == 'stop':
            c = self.cands[name]
            self.signal_procs(c, signal.SIGSTOP)
            after = self.settle('stop', t0, self.live_ids() - {name}, before, name)
            time.sleep(self.rng.uniform(0, 1.0))
            t1 = time.time()
            self.signal_procs(c, signal.SIGCONT)
            self.frozen[name].append((t0, t1))
            self.settle('resume', t1, self.live_ids(), after or before, name)
        elif kind == 'kill':
            c = self.cands.pop(name)
            self.signal_procs(c, signal.SIGKILL)
            c['proc'].wait()
            time.sleep(0.3)
            new = self.start_member()
            self.settle('kill', t0, self.live_ids(), before, '%s>%s' % (name, new))
        else:
            members = self.memberships()
            self.restart_server()
            self.settle('restart', t0, self.live_ids(), before, members_before=members)

    def loop(self):
        end = time.time() + self.a.seconds
        while time.time() < end:
            self.fault()
            for name, c in self.cands.items():
                if c['proc'].poll() is not None:
                    log('%s exited with %s' % (name, c['proc'].returncode))
            time.sleep(self.rng.uniform(0.3, 1.5))
        self.stop_t = time.time()

    # ---- checker ------------------------------------------------------
    def was_frozen(self, owner, a, b):
        return any(s < b and e > a for s, e in self.frozen.get(owner, []))

    def instance_checks(self, cur, ev):
        """(d): stops after the period's end and refusals, of instances
        whose member was never frozen while they ran."""
        cur.execute("""SELECT h.lease_key, h.fencing_token, h.acquired_at, COALESCE(h.ended_at, l.expires_at)
                         FROM le_lease_history h JOIN le_lease l USING (lease_key)
                        WHERE h.lease_key LIKE %s""", (KEYS,))
        periods = {(k, t): (a.timestamp(), e.timestamp() if e else None) for k, t, a, e in cur.fetchall()}
        late, refused = [], []
        for e in ev:
            if e.get('event') not in ('stop', 'refused') or not isinstance(e.get('ts'), float):
                continue
            per = periods.get((e['key'], e['token']))
            if per is None or self.was_frozen(e['owner'], per[0] - 1, e['ts']):
                continue
            if e['event'] == 'refused':
                refused.append((e['owner'], e['key'], e['token'], e.get('sqlstate'), e.get('error', '')[:80]))
            elif per[1] is not None and e['ts'] > per[1]:
                late.append((e['owner'], e['key'], e['token'], 'SIGTERM %.3fs after the period ended'
                             % (e['ts'] - per[1])))
        return late, refused

    def check(self):
        conn = psycopg2.connect(self.dsn, application_name='chaos-harness')
        conn.autocommit = True
        cur = conn.cursor()
        writes = ("WITH w AS (SELECT 'row' AS src, 'le:group:%s:' || part AS lease_key, fencing_token AS token,"
                  " xmin AS x, pg_xact_commit_timestamp(xmin) AS cts FROM tbl)\n" % GROUP)
        ev = self.client_events()
        results = []

        def report(name, rows):
            results.append((name, rows))

        report('(a, b) periods of a partition or membership never overlap; tokens strictly increase with'
               ' their start', le_checks.tokens_rise_periods_disjoint(cur, KEYS))
        report('(e) the lease row carries the highest token granted', le_checks.lease_row_behind_history(cur, KEYS))
        report('(c) no row committed after a higher token of its partition was granted',
               le_checks.write_after_newer_grant(cur, writes, KEYS))
        b = le_checks.writes_against_own_period(cur, writes, KEYS, chaos.LATE_MS)
        report('(c) no row committed after its period ended (%d ms after an expiry tolerated, max seen %.0f ms)'
               % (chaos.LATE_MS, b['max_late_ms']), b['late'])
        report('(c) no row committed before its period began', b['early'])
        report('(c) every row carries the token of a period of its partition', b['orphans'])
        cur.execute('SELECT id, part, lease_key FROM tbl WHERE lease_key <> %s || part', ('le:group:%s:' % GROUP,))
        report('(c) every row names its instance\'s partition', cur.fetchall())
        late, refused = self.instance_checks(cur, ev)
        report('(d) every instance of a member not frozen was stopped before its period ended', late)
        report('(d) no write of an instance of a member not frozen was refused by the fence', refused)
        report('(e) every write an instance saw commit is in the table',
               self.lost_acks(cur, ev, {'le:group:%s:%d' % (GROUP, p): 'tbl' for p in range(PARTITIONS)}))
        report('(e) no crash in the server log', le_checks.crash_lines(self.server_log))
        report('(f) every fault converged within %gs' % self.a.converge_bound,
               [(e['kind'], e['target']) for e in self.events if e['dt'] is None])
        report('(f) joins moved at most ceil(N/(M+1)) partitions, leaves only the departed member\'s,'
               ' restarts only what was freed',
               [(e['kind'], e['target'], e['moved'], e['bound']) for e in self.events if e.get('bad_moves')])
        cur.execute('SELECT count(*), count(DISTINCT (part, fencing_token)), count(DISTINCT part) FROM tbl')
        nrows, ntok, nparts = cur.fetchone()
        cur.execute("SELECT count(*), max(fencing_token) FROM le_lease_history WHERE lease_key LIKE %s"
                    " AND lease_key NOT LIKE %s", (KEYS, 'le:group:%s:member:%%' % GROUP))
        nper, maxtok = cur.fetchone()
        conn.close()
        cnt = collections.Counter()
        for e in ev:
            if e.get('event') == 'refused':
                cnt['writes refused by the fence (%s)' % e.get('sqlstate')] += 1
            elif e.get('event') == 'ack':
                cnt['writes acknowledged'] += 1
            elif e.get('event') == 'conn_error':
                cnt['writer connection errors'] += 1
        return results, cnt, nrows, ntok, nparts, nper, maxtok

    def summary(self):
        results, cnt, nrows, ntok, nparts, nper, maxtok = self.check()
        print('\n==== groups fault run summary: %d partitions, ttl %gs, %.0fs of faults, seed %d%s ===='
              % (PARTITIONS, self.ttl, self.a.seconds, self.a.seed, ', break ' + self.a.brk if self.a.brk else ''))
        print('faults injected: %d' % len(self.faults))
        for k, n in sorted(collections.Counter(f['kind'] for f in self.faults).items()):
            print('  %-34s %d' % (k, n))
        print('operations:')
        print('  %-34s %d (max token %s)' % ('partition periods (history)', nper, maxtok))
        print('  %-34s %d (%d partitions, %d tokens)' % ('fenced rows committed', nrows, nparts, ntok))
        for k, n in sorted(cnt.items()):
            print('  %-34s %d' % (k, n))
        print('convergence (fault -> every partition owned, shares within one):')
        by = collections.defaultdict(list)
        for e in self.events:
            if e['dt'] is not None:
                by[e['kind']].append(e['dt'])
        for kind in ('join', 'leave', 'stop', 'resume', 'kill', 'restart'):
            vs = sorted(by.get(kind, []))
            never = sum(1 for e in self.events if e['kind'] == kind and e['dt'] is None)
            if vs or never:
                print('  %-8s n=%-3d p50 %6.2fs  p99 %6.2fs  max %6.2fs%s' % (
                    (kind, len(vs)) + (chaos.quantiles(vs) if vs else (0, 0, 0))
                    + ('  (%d never)' % never if never else '',)))
        print('moves (partitions whose owner changed, per event; bound: ceil(N/(M+1)) for a join or resume,'
              ' the departed member\'s share for a leave; for a server restart, the partitions freed meanwhile'
              ' (lapsed memberships and partitions past their local deadline, in brackets), plus a join\'s'
              ' bound for each lapsed member):')
        for kind in ('join', 'resume', 'leave', 'kill', 'stop', 'restart'):
            es = [e for e in self.events if e['kind'] == kind and 'moved' in e]
            if es:
                print('  %-8s %s' % (kind, ' '.join('%d%s%s' % (e['moved'], '/%d' % e['bound'] if 'bound' in e else '',
                                                               '(%d freed)' % e['gave_up'] if 'gave_up' in e else '')
                                                   for e in es)))
        print('balance after each convergence: %s' % ' '.join(
            '%s:%s' % (e['kind'], e.get('balance', 'NEVER')) for e in self.events))
        return chaos.print_invariants(results, 'groups fault')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--bindir', required=True)
    ap.add_argument('--dir', required=True, help='scratch directory (created; data, logs, socket)')
    ap.add_argument('--port', type=int, default=58260)
    ap.add_argument('--seconds', type=float, default=60)
    ap.add_argument('--ttl', type=float, default=3.0)
    ap.add_argument('--members', type=int, default=4, help='members at the start (3 to 5)')
    ap.add_argument('--converge-bound', type=float, default=60.0,
                    help='seconds a fault may take to converge (default %(default)s)')
    ap.add_argument('--seed', type=int, default=int(os.environ.get('GROUPS_SEED', '0')) or None)
    ap.add_argument('--break', dest='brk', default=os.environ.get('GROUPS_BREAK', ''), choices=['', 'early-grant'])
    a = ap.parse_args()
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1, 2 ** 31)
    os.makedirs(a.dir, exist_ok=True)
    log('groups fault: seed %d (GROUPS_SEED=%d or --seed replays the fault choices), %gs, server in %s'
        % (a.seed, a.seed, a.seconds, a.dir))
    r = GroupRun(a)

    def stop(signum, frame):
        raise SystemExit('groups fault: stopped by signal %d' % signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        r.start_server()
        r.setup()
        for _ in range(max(3, min(5, a.members))):
            r.start_member()
        dt, r.last = r.converge(r.live_ids())
        if dt is None:
            raise SystemExit('groups fault: FAIL, the first %d members never converged' % len(r.cands))
        log('%d members converged %.1fs after the start' % (len(r.cands), dt))
        r.loop()
        log('faults done; stopping the members')
        r.stop_all()
        return r.summary()
    finally:
        r.teardown()


if __name__ == '__main__':
    sys.exit(main())
