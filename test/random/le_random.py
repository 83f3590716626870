#!/usr/bin/python3
"""Randomized adversarial schedule test for leader_election (G1, G3, G5, G9).

Several sessions, driven from this one program by a seeded random number
generator, take random steps against one server: le_acquire, le_renew and
le_release in autocommit, in explicit transactions that commit or roll back
and inside savepoints; fenced INSERT, UPDATE and DELETE on two protected
tables with the token the session believes it holds (sometimes a stale one
on purpose); le_fence_check followed by a write; le_schedule_job; pauses
inside open transactions (past short ttls); VACUUM FULL le_lease;
pg_terminate_backend of a random session; several le_acquire calls in one
statement; and scripted interleavings of three sessions that reproduce the
known failure shapes (a fence trusting a rolled-back lease row, a token
returned in a rolled-back transaction and issued again).

Every session connection is a psycopg2 asynchronous connection, so a session
blocked on a lock never blocks the driver; transactions are opened and ended
with explicit BEGIN/COMMIT/ROLLBACK.  Every token returned to a client
(including inside transactions that later roll back) is recorded at once
into rt_obs through a separate autocommit connection.

The checker (--check-only runs it alone) reads only the database and the
server log, and prints each check with its number of violations:

  A  no protected write committed after the grant of a newer token for its
     key: commit timestamp of the writing transaction
     (pg_xact_commit_timestamp(xmin)) < acquired_at of every later period.
     Sound because le_acquire sets acquired_at from the clock read after it
     was granted the fence lock exclusively, and a writer holds the fence
     lock (share) until its transaction's commit record is written (the
     commit timestamp is taken before the locks are released): a write that
     passed the fence first commits before the lock is released, so before
     acquired_at; a grant that came first makes the writer read the new
     token and be rejected.  Zero tolerance.
  B  no protected write committed after its own period ended: commit
     timestamp <= ended_at (release time, taken after the fence lock, or the
     expiry in force) or, for the open period, le_lease.expires_at; and not
     before the period's acquired_at.  The expiry is enforced by the check
     at pre-commit, and the commit timestamp is read a little later (after
     the remaining pre-commit work, e.g. the NOTIFY queue lock, and before
     the commit record): lateness up to --late-ms (default 250 ms) is
     tolerated for periods that ended by expiry; none for released ones.
     The maximum lateness observed is printed.
  C  no token returned to two ownership periods: per (key, token) every
     grant observed by a client (rt_obs, including grants inside
     transactions that rolled back) names one owner id, and the committed
     period of that token (if any) has that owner.  The driver never reuses
     an owner id unless the session holds the lease by a committed grant,
     so two owner ids for one token mean the token was issued twice.  Also:
     a granted row names the owner that asked (several calls per statement
     must not mix their results), and every grant acknowledged in
     autocommit is in le_lease_history.
  D  per key, tokens strictly increase in grant order and the periods of
     le_lease_history do not overlap (at most one valid holder at any
     instant); le_lease's token is the highest granted.
  E  no backend crash and no internal error: the server log has no
     "terminated by signal", "was terminated by", "terminating any other
     active server processes", "could not read block" lines, and no client
     got an unexpected SQLSTATE (classes XX, 58, 42704, 57P02) or lost its
     connection without being terminated on purpose.

Exit status: 0 when every check found nothing, 1 on a violation, 2 on a
driver error.

Rules the driver keeps so the checks stay sound: inside one transaction,
lease calls (acquire/renew/release) come before any protected write, never
after one; owner ids are fresh for every new campaign.

What each known failure looks like: a fence trusting the
id of a lease row created in a transaction that rolled back, fails A and B
(a token-1 row committed after token 2 was granted, after the release of
token 1); le_acquire results freed before they are returned, fails
E (SIGSEGV in the log, 42704 "type with OID 0 does not exist") and C (a
column holding another call's row); a token returned in a
rolled-back transaction or savepoint issued again, fails C; cached
row locations after VACUUM FULL, fails E ("could not read block", XX001).

Usage: le_random.py --dsn CONNINFO [--seconds N] [--seed N]
       [--server-log FILE] [--sessions N] [--late-ms N] [--check-only]
       [--exclude KIND,...] [--no-grant-rollback]
--exclude leaves out step kinds (the names printed as step:KIND, and
"vacuum", "terminate") and --no-grant-rollback never rolls back a
transaction or savepoint holding a grant: both narrow a failure down.
Environment: LE_RANDOM_SECONDS and LE_RANDOM_SEED give the defaults.
"""

import argparse
import collections
import csv
import os
import random
import select
import sys
import time
import traceback

import psycopg2
import psycopg2.extensions as ext

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import le_checks  # noqa: E402  (the history checks, shared with test/chaos)

APP_ROLE = 'rt_app'
FIXED_TABLES = {'rt_t1': 'rt_ka', 'rt_t2': 'rt_kb'}
CHECK_KEY = 'rt_kc'
TTLS = [0.5, 1.0, 1.5, 2.0, 3.0]

# Outcomes that are part of normal operation under contention.
EXPECTED_STATES = {
    '55P03',    # lock_not_available (fence lock or lease row, bounded wait)
    'LE001',    # stale fencing token
    'LE002',    # lease not held
    '40001',    # serialization failure
    '40P01',    # deadlock detected
    '57014',    # statement timeout / cancel by the driver
    '55000',    # object_not_in_prerequisite_state (e.g. VACUUM in a busy state)
    '25001',    # active_sql_transaction: a token rule could refuse
                # grants inside transaction blocks instead of burning tokens
}
UNEXPECTED_PREFIXES = ('XX', '58')
UNEXPECTED_STATES = {'42704', '57P02'}



class Result:
    """Outcome of one statement sent to a session."""

    def __init__(self, ok, rows=None, state=None, msg=None, lost=False):
        self.ok = ok
        self.rows = rows or []
        self.state = state
        self.msg = msg
        self.lost = lost

    def __repr__(self):
        return 'Result(%s,%s,%s)' % (self.ok, self.state, self.rows[:2])


class Q:
    """Action: run sql on session s and wait for its result."""

    def __init__(self, s, sql, args=None, wait=True):
        self.s, self.sql, self.args, self.wait = s, sql, args, wait


class Wait:
    """Action: wait for the result of a statement sent earlier without waiting."""

    def __init__(self, s):
        self.s = s


class Sleep:
    """Action: let other programs run for secs."""

    def __init__(self, secs):
        self.secs = secs


class Session:
    """One client connection driven asynchronously."""

    def __init__(self, drv, idx, dsn, admin=False):
        self.drv, self.idx, self.dsn, self.admin = drv, idx, dsn, admin
        self.conn = None
        self.cur = None
        self.busy = False
        self.result = None          # result not yet consumed
        self.sent_at = 0.0
        self.sql = ''
        self.pid = None
        self.expect_loss = False
        self.holds = {}             # key -> (owner, token), by committed grant
        self.stale = collections.defaultdict(list)   # key -> tokens no longer ours
        self.prog = None
        self.connect()

    def connect(self):
        """(Re)connect, waiting for the server to accept connections again."""
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = psycopg2.connect(self.dsn, async_=1)
                self.drv.wait_conn(conn)
                break
            except psycopg2.Error as e:
                if time.monotonic() > deadline:
                    raise
                self.drv.count('reconnect-retry', e.pgcode or 'conn')
                time.sleep(0.2)
        self.conn = conn
        self.cur = conn.cursor()
        self.busy = False
        self.result = None
        self.expect_loss = False
        self.idle_killed = False
        self.lost = False
        setup = ("SET leader_election.lock_timeout = '1s'; SET lock_timeout = '1500ms'; "
                 "SET statement_timeout = '8s'; SELECT pg_backend_pid()")
        if self.admin:
            setup = "SET lock_timeout = '700ms'; SET statement_timeout = '8s'; SELECT pg_backend_pid()"
        self.cur.execute(setup)
        self.drv.wait_conn(conn)
        self.pid = self.cur.fetchone()[0]
        # Holdings by committed grants survive a lost connection (the lease
        # does); uncommitted ones were already kept only as stale tokens.

    def send(self, sql, args=None):
        assert not self.busy, 'session %d busy' % self.idx
        self.busy = True
        self.result = None
        self.sent_at = time.monotonic()
        self.sql = sql
        try:
            self.cur.execute(sql, args)
        except psycopg2.Error as e:
            self.finish(self.error_result(e))

    def error_result(self, e):
        lost = self.conn.closed != 0 or e.pgcode in ('57P01', '57P02', '57P03') or \
            (isinstance(e, (psycopg2.OperationalError, psycopg2.InterfaceError)) and e.pgcode is None)
        return Result(False, state=e.pgcode, msg=str(e).strip().split('\n')[0], lost=lost)

    def finish(self, res):
        self.busy = False
        self.result = res
        if res.lost:
            self.lost = True
            # A lease call inside a transaction sets a deadline (its ttl): a
            # session found waiting for its client past it is ended, by
            # design (doc/lease-guarantees.md, the holder deadline).
            if res.state == '25P03' or 'locked past' in (res.msg or ''):
                self.idle_killed = True

    def poll(self):
        """Advance a running statement; True when it finished."""
        if not self.busy:
            return False
        try:
            st = self.conn.poll()
        except psycopg2.Error as e:
            self.finish(self.error_result(e))
            return True
        if st == ext.POLL_OK:
            rows = []
            try:
                if self.cur.description is not None:
                    rows = self.cur.fetchall()
            except psycopg2.Error as e:
                self.finish(self.error_result(e))
                return True
            self.finish(Result(True, rows))
            return True
        return False

    def in_txn(self):
        if self.conn.closed:
            return False
        return self.conn.info.transaction_status in (ext.TRANSACTION_STATUS_INTRANS,
                                                     ext.TRANSACTION_STATUS_INERROR)


class Driver:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.dsn = args.dsn
        self.app_dsn = args.dsn + ' user=' + APP_ROLE
        self.counts = collections.Counter()      # (kind, outcome) -> n
        self.steps = collections.Counter()
        self.owner_seq = 0
        self.fresh_seq = 0
        self.fresh_keys = []
        self.obs = None
        self.events = []
        self.programs = []                       # running generators
        self.driver_errors = []

    # ---- connections ----------------------------------------------------
    def wait_conn(self, conn, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            st = conn.poll()
            if st == ext.POLL_OK:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError('connection/statement did not finish')
            if st == ext.POLL_READ:
                select.select([conn.fileno()], [], [], min(left, 0.5))
            elif st == ext.POLL_WRITE:
                select.select([], [conn.fileno()], [], min(left, 0.5))

    def obs_connect(self):
        deadline = time.monotonic() + 60
        while True:
            try:
                self.obs = psycopg2.connect(self.dsn)
                self.obs.autocommit = True
                return
            except psycopg2.Error:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def obs_exec(self, sql, args=None):
        """Run sql on the observer connection, reconnecting after a loss."""
        for attempt in range(50):
            try:
                if self.obs is None or self.obs.closed:
                    self.obs_connect()
                with self.obs.cursor() as c:
                    c.execute(sql, args)
                    return c.fetchall() if c.description else None
            except (psycopg2.OperationalError, psycopg2.InterfaceError):
                self.count('observer', 'reconnect')
                self.obs = None
                time.sleep(0.2)
        raise RuntimeError('observer connection keeps failing')

    def record(self, s, step, ctx, key, owner, acquired, token, holder):
        self.obs_exec(
            "INSERT INTO rt_obs (session, step, ctx, lease_key, owner_id, acquired, fencing_token, holder)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (s.idx, step, ctx, key, owner, acquired, token, holder))

    def count(self, kind, outcome):
        self.counts[(kind, outcome)] += 1

    # ---- setup ------------------------------------------------------------
    def setup(self):
        self.obs_connect()
        self.obs_exec("""
DROP TABLE IF EXISTS rt_obs, rt_audit, rt_checked, rt_outcome, rt_t1, rt_t2;
DO $$ DECLARE t text; BEGIN
  FOR t IN SELECT relname FROM pg_class WHERE relname LIKE 'rt\_p\_%' AND relkind = 'r' LOOP
    EXECUTE format('DROP TABLE %I', t);
  END LOOP;
END $$;
CREATE EXTENSION IF NOT EXISTS leader_election;
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rt_app') THEN CREATE ROLE rt_app LOGIN; END IF;
END $$;
GRANT EXECUTE ON FUNCTION le_acquire(text, text, interval, interval, jsonb), le_renew(text, text, bigint, interval),
  le_release(text, text, bigint), le_fence_check(text, bigint),
  le_schedule_job(text, bigint, text, text, timestamptz, jsonb, integer) TO rt_app;
CREATE TABLE rt_obs (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp(),
  session int, step text, ctx text, lease_key text, owner_id text, acquired boolean,
  fencing_token bigint, holder text);
CREATE TABLE rt_outcome (kind text, outcome text, n bigint);
CREATE TABLE rt_audit (id bigserial PRIMARY KEY, tbl text, op text, lease_key text, fencing_token bigint);
CREATE TABLE rt_checked (id bigserial PRIMARY KEY, lease_key text, fencing_token bigint, session int);
CREATE TABLE rt_t1 (id bigserial PRIMARY KEY, v int NOT NULL DEFAULT 0, fencing_token bigint NOT NULL);
CREATE TABLE rt_t2 (id bigserial PRIMARY KEY, v int NOT NULL DEFAULT 0, fencing_token bigint NOT NULL);
CREATE OR REPLACE FUNCTION rt_audit_row() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = public, pg_catalog AS $$
BEGIN
  INSERT INTO rt_audit (tbl, op, lease_key, fencing_token)
  VALUES (TG_TABLE_NAME, TG_OP, TG_ARGV[0],
          CASE WHEN TG_OP = 'DELETE' THEN current_setting('leader_election.fencing_token')::bigint
               ELSE NEW.fencing_token END);
  RETURN NULL;
END $$;
CREATE TRIGGER rt_audit AFTER INSERT OR UPDATE OR DELETE ON rt_t1 FOR EACH ROW EXECUTE FUNCTION rt_audit_row('rt_ka');
CREATE TRIGGER rt_audit AFTER INSERT OR UPDATE OR DELETE ON rt_t2 FOR EACH ROW EXECUTE FUNCTION rt_audit_row('rt_kb');
SELECT le_protect('rt_t1', 'rt_ka');
SELECT le_protect('rt_t2', 'rt_kb');
GRANT SELECT, INSERT, UPDATE, DELETE ON rt_t1, rt_t2 TO rt_app;
GRANT INSERT ON rt_checked TO rt_app;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO rt_app;
""")

    # ---- helpers for programs -------------------------------------------
    def new_owner(self, s):
        self.owner_seq += 1
        return 's%d-o%d' % (s.idx, self.owner_seq)

    def protected_table(self, key):
        """A new table protected by the fence on key, audited like rt_t1."""
        table = 'rt_p_' + key
        self.obs_exec(
            "CREATE TABLE " + table + " (id bigserial PRIMARY KEY, v int NOT NULL DEFAULT 0,"
            " fencing_token bigint NOT NULL);"
            " CREATE TRIGGER rt_audit AFTER INSERT OR UPDATE OR DELETE ON " + table +
            " FOR EACH ROW EXECUTE FUNCTION rt_audit_row(%s);"
            " SELECT le_protect(%s, %s);"
            " GRANT SELECT, INSERT, UPDATE, DELETE ON " + table + " TO rt_app;"
            " GRANT USAGE ON SEQUENCE " + table + "_id_seq TO rt_app", (key, table, key))
        return table

    def new_fresh_key(self):
        self.fresh_seq += 1
        k = 'rt_kf%d' % self.fresh_seq
        self.fresh_keys.append(k)
        del self.fresh_keys[:-3]
        return k

    def any_key(self):
        r = self.rng.random()
        if r < 0.35:
            return 'rt_ka'
        if r < 0.65:
            return 'rt_kb'
        if r < 0.85 or not self.fresh_keys:
            return CHECK_KEY
        return self.rng.choice(self.fresh_keys)

    def ttl(self):
        return self.rng.choice(TTLS)

    def token_for(self, s, key):
        """The token to write with: ours, or (about one time in four) a stale one."""
        held = s.holds.get(key)
        r = self.rng.random()
        if held and r < 0.75:
            return held[1]
        if s.stale[key] and r < 0.9:
            return self.rng.choice(s.stale[key])
        if held:
            return max(1, held[1] - 1)
        return None

    def drop_hold(self, s, key):
        held = s.holds.pop(key, None)
        if held:
            s.stale[key].append(held[1])
            del s.stale[key][:-4]

    # ---- the event loop ---------------------------------------------------
    def run(self):
        n = self.args.sessions
        self.sessions = [Session(self, i + 1, self.app_dsn) for i in range(n)]
        self.admin = Session(self, 0, self.dsn, admin=True)
        end = time.monotonic() + self.args.seconds
        while time.monotonic() < end or self.programs:
            stopping = time.monotonic() >= end
            if stopping and time.monotonic() > end + 20:
                break
            self.poll_all(0.01)
            now = time.monotonic()
            # Wake sleepers and deliver results.
            for p in list(self.programs):
                self.maybe_resume(p, now)
            if stopping:
                continue
            # Start new programs on idle sessions (think time keeps CPU modest).
            idle = [s for s in self.sessions if s.prog is None]
            if idle and self.rng.random() < 0.25:
                self.start_program(idle)
            if self.admin.prog is None and self.rng.random() < 0.004:
                self.start(self.admin_program(), [self.admin])
        # Anything still running is abandoned: cancel and roll back.
        for s in self.sessions + [self.admin]:
            try:
                if s.busy:
                    s.conn.cancel()
            except psycopg2.Error:
                pass

    def poll_all(self, timeout):
        busy = [s for s in self.sessions + [self.admin] if s.busy and not s.conn.closed]
        if busy:
            try:
                select.select([s.conn.fileno() for s in busy], [], [], timeout)
            except (ValueError, OSError):
                pass
            for s in busy:
                s.poll()
                if s.busy and time.monotonic() - s.sent_at > 12:
                    # A statement the server did not end by statement_timeout.
                    self.count('driver', 'cancel-stuck')
                    try:
                        s.conn.cancel()
                    except psycopg2.Error:
                        pass
                    s.sent_at = time.monotonic()
        else:
            time.sleep(timeout)

    def start_program(self, idle):
        kinds = [('acquire_auto', 14), ('acquire_txn', 10), ('acquire_savepoint', 7),
                 ('renew', 7), ('release', 7), ('write', 20), ('fence_check_write', 10),
                 ('schedule_job', 4), ('multi_call', 5), ('pattern_fence_cache', 6),
                 ('pattern_rollback_token', 5)]
        kinds = [(k, w) for k, w in kinds if k not in self.args.exclude]
        kind = self.rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        need = 3 if kind == 'pattern_fence_cache' else 2 if kind == 'pattern_rollback_token' else 1
        if len(idle) < need:
            kind, need = 'acquire_auto', 1
        ss = self.rng.sample(idle, need)
        self.steps[kind] += 1
        self.start(getattr(self, 'p_' + kind)(*ss), ss)

    def start(self, gen, ss):
        p = {'gen': gen, 'sessions': ss, 'wait': None, 'wake': None, 'value': None}
        for s in ss:
            s.prog = p
        self.programs.append(p)
        self.advance(p, None)

    def maybe_resume(self, p, now):
        if p not in self.programs:
            return
        if p['wake'] is not None:
            if now >= p['wake']:
                p['wake'] = None
                self.advance(p, None)
        elif p['wait'] is not None:
            s = p['wait']
            if not s.busy and s.result is not None:
                res = s.result
                s.result = None
                p['wait'] = None
                self.advance(p, res)

    def advance(self, p, value):
        gen = p['gen']
        while True:
            try:
                act = gen.send(value)
            except StopIteration:
                self.end_program(p)
                return
            except Exception:
                # A bug of the driver itself: report it, keep going, fail at the end.
                self.driver_errors.append(traceback.format_exc())
                self.end_program(p)
                return
            value = None
            if isinstance(act, Q):
                s = act.s
                if s.conn.closed or s.lost:
                    value = Result(False, state=None, msg='connection lost', lost=True)
                    continue
                if s.busy:
                    raise RuntimeError('program sent to a busy session: %s' % act.sql)
                s.send(act.sql, act.args)
                if act.wait:
                    p['wait'] = s
                    return
                continue
            if isinstance(act, Wait):
                if not act.s.busy and act.s.result is None:
                    value = Result(False, msg='nothing to wait for', lost=True)
                    continue
                p['wait'] = act.s
                return
            if isinstance(act, Sleep):
                p['wake'] = time.monotonic() + act.secs
                return
            raise RuntimeError('bad action %r' % (act,))

    def end_program(self, p):
        self.programs.remove(p)
        for s in p['sessions']:
            s.prog = None
            self.cleanup_session(s)

    def cleanup_session(self, s):
        """Leave the session idle, out of any transaction, connected."""
        lost = s.lost or s.conn.closed
        if not lost and s.busy:
            # A statement sent without wait is still running: cancel and collect it.
            try:
                s.conn.cancel()
            except psycopg2.Error:
                pass
            deadline = time.monotonic() + 15
            while s.busy and time.monotonic() < deadline:
                self.poll_one(s)
            if s.busy:
                lost = True
            elif s.result is not None:
                self.classify(s, 'abandoned', s.result)
                if s.result.lost:
                    lost = True
        if not lost and s.in_txn():
            s.send('ROLLBACK')
            while s.busy:
                self.poll_one(s)
            if not s.result.ok:
                lost = True
        s.result = None
        if lost:
            if s.idle_killed:
                self.count('connection', 'lost-idle-timeout')
            elif not s.expect_loss:
                self.count('connection', 'lost-unexpectedly')
                self.obs_exec("INSERT INTO rt_outcome VALUES ('connection', 'lost-unexpectedly', 1)")
            else:
                self.count('connection', 'lost-terminated')
            try:
                s.conn.close()
            except psycopg2.Error:
                pass
            s.lost = False
            s.connect()

    def poll_one(self, s):
        try:
            select.select([s.conn.fileno()], [], [], 0.05)
        except (ValueError, OSError):
            pass
        s.poll()

    # ---- outcome bookkeeping ------------------------------------------
    def classify(self, s, kind, res):
        """Count an outcome; returns its label."""
        if res.ok:
            label = 'ok'
        elif res.lost:
            label = 'terminated' if s.expect_loss else 'connection-lost'
        else:
            label = res.state or 'no-sqlstate'
        self.count(kind, label)
        if not res.ok and not res.lost:
            st = res.state or ''
            if st.startswith(UNEXPECTED_PREFIXES) or st in UNEXPECTED_STATES or \
                    (st not in EXPECTED_STATES and st != '57P01'):
                self.events.append((kind, st, res.msg))
                self.obs_exec("INSERT INTO rt_outcome VALUES (%s, %s, -1)", (kind, st + ' ' + (res.msg or '')))
        return label

    # ---- programs ------------------------------------------------------
    # Each program is a generator yielding actions; results come back from
    # yield.  A program that gets an error inside a transaction stops: the
    # driver rolls the transaction back (cleanup_session).

    def acquire_sql(self):
        return "SELECT acquired, fencing_token, holder FROM le_acquire(%s, %s, %s::interval)"

    def do_acquire(self, s, key, owner, ttl, ctx, step):
        """Yields one acquire; returns (res, acquired, token)."""
        res = yield Q(s, self.acquire_sql(), (key, owner, '%g s' % ttl))
        self.classify(s, 'acquire-' + ctx, res)
        if not res.ok:
            return res, False, None
        acq, tok, holder = res.rows[0]
        self.record(s, step, ctx, key, owner, acq, tok, holder)
        return res, acq, tok

    def campaign_owner(self, s, key):
        held = s.holds.get(key)
        if held and self.rng.random() < 0.6:
            return held[0]          # the holder again: must get the same token
        return self.new_owner(s)

    def p_acquire_auto(self, s):
        key = self.any_key()
        owner = self.campaign_owner(s, key)
        res, acq, tok = yield from self.do_acquire(s, key, owner, self.ttl(), 'auto', 'acquire_auto')
        if res.ok:
            if acq:
                if key in s.holds and s.holds[key][1] != tok:
                    self.drop_hold(s, key)
                s.holds[key] = (owner, tok)
            elif key in s.holds:
                self.drop_hold(s, key)

    def p_acquire_txn(self, s):
        key = self.any_key()
        owner = self.campaign_owner(s, key)
        res = yield Q(s, 'BEGIN')
        if not res.ok:
            return
        res, acq, tok = yield from self.do_acquire(s, key, owner, self.ttl(), 'txn', 'acquire_txn')
        if not res.ok:
            return
        if acq and self.rng.random() < 0.6:
            ok = yield from self.write_rows(s, key, tok, 'write-in-acquire-txn')
            if not ok:
                self.forget_uncommitted(s, key, owner, acq, tok)
                return
        if self.rng.random() < 0.3:
            yield Sleep(self.rng.uniform(0.05, 2.5))
        commit = self.rng.random() < 0.65 or (acq and self.args.no_grant_rollback)
        res = yield Q(s, 'COMMIT' if commit else 'ROLLBACK')
        self.classify(s, 'commit' if commit else 'rollback', res)
        if commit and res.ok:
            if acq:
                s.holds[key] = (owner, tok)
        else:
            self.forget_uncommitted(s, key, owner, acq, tok)

    def forget_uncommitted(self, s, key, owner, acq, tok):
        """A grant that did not commit: keep its token only as a stale one."""
        if acq:
            if s.holds.get(key, (None,))[0] == owner:
                # The holder re-acquired inside the rolled-back transaction:
                # its committed lease is unchanged.
                return
            s.stale[key].append(tok)

    def p_acquire_savepoint(self, s):
        key = self.any_key()
        res = yield Q(s, 'BEGIN')
        if not res.ok:
            return
        res = yield Q(s, 'SAVEPOINT sp')
        owner = self.new_owner(s)
        res, acq, tok = yield from self.do_acquire(s, key, owner, self.ttl(), 'savepoint', 'acquire_savepoint')
        if not res.ok:
            res = yield Q(s, 'ROLLBACK TO SAVEPOINT sp')
            if not res.ok:
                return
            acq = False
        elif self.rng.random() < 0.6 and not (acq and self.args.no_grant_rollback):
            res = yield Q(s, 'ROLLBACK TO SAVEPOINT sp')
            self.classify(s, 'rollback-to-savepoint', res)
            if not res.ok:
                return
            self.forget_uncommitted(s, key, owner, acq, tok)
            acq = False
            # Campaign again in the same transaction, as a new owner.
            owner = self.new_owner(s)
            res, acq, tok = yield from self.do_acquire(s, key, owner, self.ttl(), 'after-savepoint',
                                                       'acquire_savepoint')
            if not res.ok:
                return
        else:
            res = yield Q(s, 'RELEASE SAVEPOINT sp')
            if not res.ok:
                return
        commit = self.rng.random() < 0.7 or (acq and self.args.no_grant_rollback)
        res = yield Q(s, 'COMMIT' if commit else 'ROLLBACK')
        self.classify(s, 'commit' if commit else 'rollback', res)
        if commit and res.ok and acq:
            s.holds[key] = (owner, tok)
        elif acq:
            self.forget_uncommitted(s, key, owner, acq, tok)

    def p_renew(self, s):
        if not s.holds:
            yield from self.p_acquire_auto(s)
            return
        key = self.rng.choice(sorted(s.holds))
        owner, tok = s.holds[key]
        in_txn = self.rng.random() < 0.3
        if in_txn:
            res = yield Q(s, 'BEGIN')
            if not res.ok:
                return
        res = yield Q(s, "SELECT le_renew(%s, %s, %s, %s::interval)", (key, owner, tok, '%g s' % self.ttl()))
        self.classify(s, 'renew', res)
        if not res.ok:
            return
        renewed = res.rows[0][0] is not None
        if in_txn:
            commit = self.rng.random() < 0.7
            res = yield Q(s, 'COMMIT' if commit else 'ROLLBACK')
            if not res.ok:
                return
        if not renewed:
            self.drop_hold(s, key)

    def p_release(self, s):
        if not s.holds:
            yield from self.p_acquire_auto(s)
            return
        key = self.rng.choice(sorted(s.holds))
        owner, tok = s.holds[key]
        in_txn = self.rng.random() < 0.35
        if in_txn:
            res = yield Q(s, 'BEGIN')
            if not res.ok:
                return
        res = yield Q(s, "SELECT le_release(%s, %s, %s)", (key, owner, tok))
        self.classify(s, 'release', res)
        if not res.ok:
            return
        released = res.rows[0][0]
        if in_txn:
            if self.rng.random() < 0.3:
                yield Sleep(self.rng.uniform(0.05, 1.0))
            commit = self.rng.random() < 0.6
            res = yield Q(s, 'COMMIT' if commit else 'ROLLBACK')
            self.classify(s, 'commit' if commit else 'rollback', res)
            if not (commit and res.ok):
                return          # still ours (or lost: later steps find out)
        self.drop_hold(s, key)

    def write_rows(self, s, key, tok, kind):
        """Fenced writes with token tok on the table protected by key (or a
        le_fence_check + write for other keys); True when all succeeded."""
        table = {v: k for k, v in FIXED_TABLES.items()}.get(key)
        if table is None:
            res = yield Q(s, "SELECT le_fence_check(%s, %s); INSERT INTO rt_checked (lease_key, fencing_token, session)"
                             " VALUES (%s, %s, %s)", (key, tok, key, tok, s.idx))
            self.classify(s, kind + '-fence_check', res)
            return res.ok
        op = self.rng.choice(['INSERT', 'INSERT', 'UPDATE', 'DELETE'])
        if op == 'INSERT':
            res = yield Q(s, "INSERT INTO " + table + " (v, fencing_token) SELECT g, %s FROM generate_series(1, %s) g",
                          (tok, self.rng.randint(1, 3)))
        elif op == 'UPDATE':
            # The row may carry tok already: an UPDATE that keeps a row's
            # token needs the token declared (doc/fence.md).
            res = yield Q(s, "SET LOCAL leader_election.fencing_token = %s; UPDATE " + table +
                          " SET v = v + 1, fencing_token = %s WHERE id IN "
                          "(SELECT id FROM " + table + " ORDER BY random() LIMIT 2)", (str(tok), tok))
        else:
            res = yield Q(s, "SET LOCAL leader_election.fencing_token = %s; DELETE FROM " + table +
                          " WHERE id IN (SELECT id FROM " + table + " ORDER BY random() LIMIT 1)", (str(tok),))
        self.classify(s, kind + '-' + op.lower(), res)
        return res.ok

    def p_write(self, s):
        key = self.rng.choice(['rt_ka', 'rt_kb', 'rt_ka', 'rt_kb', CHECK_KEY])
        tok = self.token_for(s, key)
        if tok is None:
            yield from self.p_acquire_auto(s)
            return
        auto = self.rng.random() < 0.25
        table = {v: k for k, v in FIXED_TABLES.items()}.get(key)
        if auto and table is not None:
            res = yield Q(s, "INSERT INTO " + table + " (fencing_token) VALUES (%s)", (tok,))
            self.classify(s, 'write-auto', res)
            if not res.ok and res.state in ('LE001', 'LE002'):
                self.drop_hold(s, key) if s.holds.get(key, (0, 0))[1] == tok else None
            return
        res = yield Q(s, 'BEGIN')
        if not res.ok:
            return
        n = self.rng.randint(1, 3)
        for i in range(n):
            ok = yield from self.write_rows(s, key, tok, 'write')
            if not ok:
                return
            if self.rng.random() < 0.3:
                # Paused inside the transaction, possibly past the ttl.
                yield Sleep(self.rng.choice([0.05, 0.3, 1.0, 2.5]))
        commit = self.rng.random() < 0.85
        res = yield Q(s, 'COMMIT' if commit else 'ROLLBACK')
        self.classify(s, 'write-commit' if commit else 'write-rollback', res)

    def p_fence_check_write(self, s):
        key = self.rng.choice([CHECK_KEY, CHECK_KEY] + self.fresh_keys)
        tok = self.token_for(s, key)
        if tok is None:
            yield from self.p_acquire_auto(s)
            return
        res = yield Q(s, 'BEGIN')
        if not res.ok:
            return
        ok = yield from self.write_rows(s, key, tok, 'checked')
        if not ok:
            return
        if self.rng.random() < 0.4:
            yield Sleep(self.rng.choice([0.1, 0.6, 1.5, 3.0]))
        res = yield Q(s, 'COMMIT')
        self.classify(s, 'checked-commit', res)

    def p_schedule_job(self, s):
        key = self.rng.choice(['rt_ka', 'rt_kb', CHECK_KEY])
        tok = self.token_for(s, key)
        if tok is None:
            yield from self.p_acquire_auto(s)
            return
        self.owner_seq += 1
        res = yield Q(s, "SELECT le_schedule_job(%s, %s, %s, 'rt', clock_timestamp())",
                      (key, tok, 'job-%d' % self.owner_seq))
        self.classify(s, 'schedule_job', res)

    def p_multi_call(self, s):
        """Several le_acquire calls in one statement (select list or FROM)."""
        n = self.rng.randint(2, 3)
        calls = []
        for i in range(n):
            if i > 0 and self.rng.random() < 0.4:
                calls.append(calls[self.rng.randrange(i)])      # the same call again
            else:
                # Keys this session holds (the holder's re-acquire) and new
                # keys (a grant) take the full path through the lease row;
                # keys held by others are mostly refused on the read-only path.
                r = self.rng.random()
                if r < 0.35 and s.holds:
                    key = self.rng.choice(sorted(s.holds))
                    owner = s.holds[key][0]
                elif r < 0.75:
                    self.fresh_seq += 1
                    key, owner = 'rt_km%d' % self.fresh_seq, self.new_owner(s)
                else:
                    key, owner = self.rng.choice(['rt_ka', 'rt_kb', CHECK_KEY]), self.new_owner(s)
                calls.append((key, owner, '%g s' % self.ttl()))
        args = [a for c in calls for a in c]
        r = self.rng.random()
        if r < 0.5:
            # The records themselves go to the client (output functions run
            # after all calls); psycopg2 hands them over as text.
            sql = 'SELECT ' + ', '.join('le_acquire(%s, %s, %s::interval)' for _ in calls)
            form = 'select-list'
        elif r < 0.75:
            sql = 'SELECT ' + ', '.join('le_acquire(%s, %s, %s::interval)::text' for _ in calls)
            form = 'select-list'
        else:
            sql = 'SELECT ' + ', '.join('row(a%d.*)::text' % i for i in range(n)) + ' FROM ' + \
                  ', '.join('le_acquire(%%s, %%s, %%s::interval) AS a%d' % i for i in range(n))
            form = 'from'
        res = yield Q(s, sql, args)
        self.classify(s, 'multi-call-' + form, res)
        if not res.ok:
            return
        for (key, owner, ttl), txt in zip(calls, res.rows[0]):
            fields = next(csv.reader([txt[1:-1]]))
            acq = fields[0] == 't'
            tok = int(fields[1]) if fields[1] else None
            holder = fields[2] or None
            self.record(s, 'multi_call', form, key, owner, acq, tok, holder)
            if acq and holder == owner and not key.startswith('rt_km'):
                if key in s.holds and s.holds[key][1] != tok:
                    self.drop_hold(s, key)
                s.holds[key] = (owner, tok)

    def p_pattern_fence_cache(self, w, a, b):
        """W caches the id of a lease row that rolls back,
        A gets token 1, W passes the fence, A releases, B gets token 2,
        W commits."""
        key = self.new_fresh_key()
        wo, ao, bo = self.new_owner(w), self.new_owner(a), self.new_owner(b)
        if self.rng.random() < 0.5:
            # Through le_fence_check, or through the trigger of a table
            # protected on this new key (created now, by the superuser).
            fenced_write = ("SELECT le_fence_check(%s, %s); INSERT INTO rt_checked (lease_key, fencing_token, session)"
                            " VALUES (%s, %s, %s)", lambda t: (key, t, key, t, w.idx))
        else:
            table = self.protected_table(key)
            fenced_write = ("INSERT INTO " + table + " (fencing_token) VALUES (%s)", lambda t: (t,))
        res = yield Q(w, 'BEGIN')
        res, acq, tok = yield from self.do_acquire(w, key, wo, 2.0, 'txn', 'pattern_fence_cache')
        if not res.ok:
            return
        if acq:
            res = yield Q(w, fenced_write[0], fenced_write[1](tok))
            self.classify(w, 'pattern1-w-write', res)
        res = yield Q(w, 'ROLLBACK')
        if acq:
            w.stale[key].append(tok)
        res, acq, tok = yield from self.do_acquire(a, key, ao, self.rng.choice([2.0, 3.0]), 'auto',
                                                   'pattern_fence_cache')
        if not (res.ok and acq):
            return
        a.holds[key] = (ao, tok)
        res = yield Q(w, 'BEGIN')
        res = yield Q(w, fenced_write[0], fenced_write[1](tok))
        self.classify(w, 'pattern1-w-write', res)
        if not res.ok:
            return
        # A releases while W's write is open (not waited for: with the fence
        # lock taken at commit it returns at once, before it may wait).
        yield Q(a, "SELECT le_release(%s, %s, %s)", (key, ao, tok), wait=False)
        yield Sleep(0.05)
        ra = None
        if not a.busy:
            ra = a.result
            a.result = None
        # B campaigns, also without waiting.
        yield Q(b, self.acquire_sql(), (key, bo, '3 s'), wait=False)
        yield Sleep(self.rng.choice([0.05, 0.2]))
        res = yield Q(w, 'COMMIT')
        self.classify(w, 'pattern1-w-commit', res)
        if ra is None:
            ra = yield Wait(a)
        self.classify(a, 'pattern1-a-release', ra)
        if ra.ok:
            a.holds.pop(key, None)
        rb = yield Wait(b)
        self.classify(b, 'pattern1-b-acquire', rb)
        if rb.ok:
            acq, tok2, holder = rb.rows[0]
            self.record(b, 'pattern_fence_cache', 'auto', key, bo, acq, tok2, holder)
            if acq:
                b.holds[key] = (bo, tok2)

    def p_pattern_rollback_token(self, a, b):
        """G3: a token returned in a transaction (or savepoint)
        that rolls back must not be issued again to another owner."""
        key = self.new_fresh_key() if self.rng.random() < 0.5 else self.any_key()
        ao, bo = self.new_owner(a), self.new_owner(b)
        sp = self.rng.random() < 0.5
        res = yield Q(a, 'BEGIN')
        if sp:
            res = yield Q(a, 'SAVEPOINT x')
        res, acq, tok = yield from self.do_acquire(a, key, ao, self.ttl(), 'savepoint' if sp else 'txn',
                                                   'pattern_rollback_token')
        if not res.ok:
            return
        res = yield Q(a, 'ROLLBACK TO SAVEPOINT x; COMMIT' if sp else 'ROLLBACK')
        if acq:
            a.stale[key].append(tok)
        res, acq2, tok2 = yield from self.do_acquire(b, key, bo, self.ttl(), 'auto', 'pattern_rollback_token')
        if res.ok and acq2:
            b.holds[key] = (bo, tok2)

    def admin_program(self):
        s = self.admin
        what = self.rng.choice([w for w in ['vacuum', 'vacuum', 'terminate', 'terminate', 'terminate']
                                if w not in self.args.exclude] or ['none'])
        if what == 'none':
            return
        self.steps['admin-' + what] += 1
        if what == 'vacuum':
            table = self.rng.choice(['le_lease', 'le_lease', 'le_lease_history'])
            res = yield Q(s, 'VACUUM FULL ' + table)
            self.classify(s, 'vacuum-full', res)
        else:
            victim = self.rng.choice(self.sessions)
            victim.expect_loss = True
            # Its holdings survive in the database; its open transaction does not.
            res = yield Q(s, 'SELECT pg_terminate_backend(%s)', (victim.pid,))
            self.classify(s, 'terminate', res)

    # ---- end -----------------------------------------------------------
    def save_outcomes(self):
        rows = [(k, o, n) for (k, o), n in sorted(self.counts.items())]
        rows += [('step:' + k, 'started', n) for k, n in sorted(self.steps.items())]
        for r in rows:
            self.obs_exec('INSERT INTO rt_outcome VALUES (%s, %s, %s)', r)


# ---------------------------------------------------------------------------
# The checker: reads only the database and the server log.
# ---------------------------------------------------------------------------

WRITES_SQL = """
WITH w AS (
  SELECT 'audit:' || a.tbl || ':' || a.op AS src, a.lease_key, a.fencing_token AS token,
         a.xmin AS x, pg_xact_commit_timestamp(a.xmin) AS cts FROM rt_audit AS a
  UNION ALL
  SELECT 'checked', c.lease_key, c.fencing_token, c.xmin, pg_xact_commit_timestamp(c.xmin) FROM rt_checked AS c
  UNION ALL
  SELECT 'job', j.lease_key, j.fencing_token, j.xmin, pg_xact_commit_timestamp(j.xmin)
    FROM le_scheduled_jobs AS j WHERE j.lease_key LIKE 'rt\\_%%'
)
"""


def check(dsn, server_log, late_ms):
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()

    def q(sql, args=None):
        cur.execute(sql, args)
        return cur.fetchall()

    violations = 0

    def report(name, n, detail_rows=(), extra=''):
        nonlocal violations
        violations += n
        print('check %-58s %s  violations: %d%s' % (name, 'FAIL' if n else 'ok  ', n, extra))
        for r in list(detail_rows)[:8]:
            print('    ', ' | '.join(str(x) for x in r))

    print('--- steps and outcomes (from rt_outcome) ---')
    for kind, outcome, n in q("SELECT kind, outcome, sum(n)::bigint FROM rt_outcome WHERE n >= 0 "
                              "GROUP BY 1, 2 ORDER BY 1, 2"):
        print('  %-40s %-22s %d' % (kind, outcome, n))
    by_state = q("SELECT outcome, sum(n)::bigint FROM rt_outcome WHERE n >= 0 AND kind NOT LIKE 'step:%%' "
                 "GROUP BY 1 ORDER BY 2 DESC")
    print('--- outcomes by SQLSTATE: ' + ', '.join('%s %d' % r for r in by_state))
    nw, nobs, nper = q(WRITES_SQL + "SELECT (SELECT count(*) FROM w), (SELECT count(*) FROM rt_obs),"
                       " (SELECT count(*) FROM le_lease_history WHERE lease_key LIKE 'rt\\_%%')")[0]
    print('--- %d committed protected writes, %d tokens observed by clients, %d ownership periods'
          % (nw, nobs, nper))

    # A: no write committed after the grant of a newer token.
    rows = le_checks.write_after_newer_grant(cur, WRITES_SQL, 'rt\\_%')
    report('A: no write committed after a newer token was granted', len(rows), rows)

    # B: no write committed after its own period ended (or before it began).
    b = le_checks.writes_against_own_period(cur, WRITES_SQL, 'rt\\_%', late_ms)
    report('B: no write committed after its own period ended', len(b['late']), b['late'],
           '  (max lateness %.1f ms, %d rows late within the %d ms tolerance)'
           % (b['max_late_ms'], b['late_tolerated'], late_ms))
    report('B: no write committed before its period began', len(b['early']), b['early'])
    report('B: every write carries a token of a committed period', len(b['orphans']), b['orphans'])

    # C: no token returned to two ownership periods.
    rows = le_checks.token_given_twice(cur, 'rt_obs')
    report('C: no token returned to two different owners', len(rows), rows)
    rows = le_checks.token_of_other_period(cur, 'rt_obs')
    report('C: a returned token belongs to no other committed period', len(rows), rows)
    rows = q("""
SELECT lease_key, owner_id, holder, fencing_token, step, ctx FROM rt_obs
 WHERE acquired AND (holder IS DISTINCT FROM owner_id OR fencing_token IS NULL)""")
    report('C: a grant returns the row of the call that asked', len(rows), rows)
    rows = q("""
SELECT o.lease_key, o.fencing_token, o.owner_id, o.step FROM rt_obs AS o
 WHERE o.acquired AND o.ctx IN ('auto', 'select-list', 'from')
   AND NOT EXISTS (SELECT FROM le_lease_history AS h
                    WHERE h.lease_key = o.lease_key AND h.fencing_token = o.fencing_token)""")
    report('C: every grant acknowledged in autocommit is in the history', len(rows), rows)

    # D: tokens rise in grant order; periods never overlap.
    rows = le_checks.tokens_rise_periods_disjoint(cur, 'rt\\_%')
    report('D: tokens rise and periods do not overlap', len(rows), rows)
    rows = le_checks.lease_row_behind_history(cur, 'rt\\_%')
    report('D: the lease row carries the highest granted token', len(rows), rows)

    # E: no crash, no internal error.
    if server_log:
        hits = le_checks.crash_lines(server_log)
        report('E: no backend crash in the server log', len(hits), hits)
    else:
        print('check E: server log not given, crash lines not checked')
    rows = q("SELECT kind, outcome FROM rt_outcome WHERE n < 0 OR outcome = 'lost-unexpectedly'")
    report('E: no unexpected SQLSTATE or connection loss', len(rows), rows)
    conn.close()
    return violations


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--dsn', required=True, help='libpq conninfo of a superuser connection')
    ap.add_argument('--seconds', type=float, default=float(os.environ.get('LE_RANDOM_SECONDS', '50')))
    ap.add_argument('--seed', type=int, default=int(os.environ.get('LE_RANDOM_SEED', '0')) or None)
    ap.add_argument('--sessions', type=int, default=5)
    ap.add_argument('--server-log')
    ap.add_argument('--late-ms', type=float, default=250.0)
    ap.add_argument('--check-only', action='store_true')
    ap.add_argument('--exclude', default='', type=lambda v: set(x for x in v.split(',') if x),
                    help='step kinds not to take (e.g. pattern_fence_cache,vacuum), to narrow a failure down')
    ap.add_argument('--no-grant-rollback', action='store_true',
                    help='never roll back a transaction or savepoint that holds a grant')
    args = ap.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 2 ** 31)
    print('le_random: seed %d (set LE_RANDOM_SEED=%d to replay the same choices), %g s, %d sessions'
          % (args.seed, args.seed, args.seconds, args.sessions))
    sys.stdout.flush()
    if not args.check_only:
        drv = Driver(args)
        drv.setup()
        t0 = time.monotonic()
        drv.run()
        drv.save_outcomes()
        print('--- driver ran %.1f s' % (time.monotonic() - t0))
        for kind, n in sorted(drv.steps.items()):
            print('  step %-36s %d' % (kind, n))
        for kind, st, msg in drv.events[:10]:
            print('  unexpected: %s %s %s' % (kind, st, msg))
        for tb in drv.driver_errors[:3]:
            print('driver error:\n' + tb)
    v = check(args.dsn, args.server_log, args.late_ms)
    print('le_random: %d violations (seed %d)' % (v, args.seed))
    if not args.check_only and drv.driver_errors:
        print('le_random: %d driver errors' % len(drv.driver_errors))
        return 2
    return 1 if v else 0


if __name__ == '__main__':
    sys.exit(main())
