#!/usr/bin/env python3
"""Bad-input and misuse sweep of extension leader_election (G6).

Generated, not hand-listed: every SQL function of the installed extension is
read from pg_proc/pg_depend at run time (argument names and types from
pg_proc), and every pg_leader option from `pg_leader --help`.  Each function
is called with a valid baseline argument list and then with one argument at a
time replaced by each edge value of its type (NULL, empty and 10 MB strings,
invalid UTF-8, intervals at every edge, tokens 0, -1, 1, 2^63-1, ...); then
with the baseline inside an aborted, a read-only and a prepared transaction,
several times per statement, by a role without privileges, on the standby and
while another session drops the extension.

Every case must give a result or a documented SQLSTATE (the codes of the
doc/reference.md's SQLSTATE table and doc/fence.md's, read at run time, plus the
documented rules below), a failed call must leave le_lease, le_lease_history,
le_scheduled_jobs, le_fence_resource and the protected fixture table as they
were (fingerprint before/after), and the server must stay up.  Prints the case
count and a per-function/option summary; exits 1 when any case failed.

  sweep.py --dsn DSN [--standby-dsn DSN] --pg-leader PATH --docs DIR
"""
import argparse
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict, Counter

import psycopg2
import psycopg2.extensions

BIG = 10 * 1024 * 1024
MAXTOK = '9223372036854775807'
TOK = "(SELECT fencing_token FROM le_leases WHERE lease_key = 'sweep-k')"
JOB = ("(SELECT schedule_key FROM le_scheduled_jobs WHERE status = 'running'"
       " AND claimed_by = 'sweep-w' ORDER BY job_id LIMIT 1)")

# Edge values by type: (label, SQL expression).  Expressions, not client
# parameters, so that 10 MB values are built by the server and every case
# prints as one SQL statement that reproduces it.
TEXT = [
    ('NULL', 'NULL'), ('empty', "''"), ('1 byte', "'a'"),
    ('200 bytes', "repeat('x', 200)"), ('201 bytes', "repeat('x', 201)"),
    ('100 x e-acute (200 bytes)', "repeat(U&'\\00E9', 100)"),
    ('101 x e-acute (202 bytes)', "repeat(U&'\\00E9', 101)"),
    ('10 MB', "repeat('x', %d)" % BIG),
    ('invalid UTF-8', "convert_from('\\xc328ff'::bytea, 'UTF8')"),
    ('quote and format chars', "$q$'; DROP TABLE le_lease; -- %s %n %%$q$"),
    ('newline and tab', "E'a\\nb\\tc'"),
]
BIGINT = [
    ('NULL', 'NULL'), ('0', '0'), ('-1', '-1'), ('1', '1'), ('2', '2'),
    ('2^63-1', MAXTOK), ('-2^63', '(-' + MAXTOK + ' - 1)'),
    ('current token', TOK), ('current token + 1', TOK + ' + 1'),
    ('current token - 1', TOK + ' - 1'),
]
INTEGER = [('NULL', 'NULL'), ('0', '0'), ('-1', '-1'), ('1', '1'),
           ('2^31-1', '2147483647'), ('-2^31', '(-2147483647 - 1)')]
INTERVAL = [
    ('NULL', 'NULL'), ('0', "'0'"), ('-1 s', "'-1 s'"),
    ('1 microsecond', "'1 microsecond'"), ('1 hour', "'1 hour'"),
    ('1 hour 1 microsecond', "'1 hour 1 microsecond'"), ('1 day', "'1 day'"),
    ('1 mon', "'1 mon'"), ('1 mon -30 days (zero)', "'1 mon -30 days'"),
    ('-1 mon 31 days', "'-1 mon 31 days'"), ('100 years', "'100 years'"),
    ('max interval', "make_interval(years => 178956970, months => 7, days => 2147483647,"
                     " hours => 2562047788, secs => 54.775807)"),
    ('min interval', "(-make_interval(years => 178956970, months => 8, days => 2147483647,"
                     " hours => 2562047788, secs => 54.775808))"),
    ('interval overflow', "'178956971 years'"),
]
TIMESTAMPTZ = [('NULL', 'NULL'), ('now', 'now()'), ('infinity', "'infinity'"),
               ('-infinity', "'-infinity'"), ('max', "'294276-12-31 23:59:59+00'"),
               ('min', "'4713-01-01 00:00:00+00 BC'")]
JSONB = [('NULL', 'NULL'), ('{}', "'{}'"), ('null', "'null'"), ('[]', "'[]'"),
         ('string', "'\"x\"'"), ('10 MB', "jsonb_build_object('x', repeat('x', %d))" % BIG),
         ('deeply nested', "repeat('[', 5000) || repeat(']', 5000)")]
TEXTARR = [('NULL', 'NULL'), ('{}', "'{}'"), ('{NULL}', "'{NULL}'"),
           ('{""}', "ARRAY['']"), ('{sweep}', "ARRAY['sweep']"),
           ('10 MB element', "ARRAY[repeat('x', %d)]" % BIG)]
REGCLASS = [('NULL', 'NULL'), ('protected table', "'sweep_t'"),
            ('table without token column', "'sweep_nocol'"),
            ('view', "'sweep_v'"), ('sequence', "'sweep_seq'"),
            ('partitioned table', "'sweep_part'"), ('pg_class', "'pg_class'"),
            ("extension's le_lease", "'le_lease'"),
            ("extension's le_scheduled_jobs", "'le_scheduled_jobs'"),
            ("extension's le_lease_history", "'le_lease_history'"),
            ("extension's le_fence_resource", "'le_fence_resource'"),
            ('oid 0', "'0'"), ('missing relation', "'sweep_missing'")]
NAME = [('NULL', 'NULL'), ('empty', "''"), ('fencing_token', "'fencing_token'"),
        ('missing column', "'nope'"), ('text column', "'note'"), ('id', "'id'"),
        ('100 chars (truncated)', "repeat('x', 100)")]
REGROLE = [('NULL', 'NULL'), ('current_user', 'current_user'),
           ('sweep_noperm', "'sweep_noperm'"), ('pg_monitor', "'pg_monitor'"),
           ('oid 0', "'0'"), ('missing role', "'sweep_missing_role'")]
OID = [('NULL', 'NULL'), ('0', '0'), ('10', '10'), ('2^32-1', '4294967295'),
       ('sweep_noperm', "(SELECT oid FROM pg_roles WHERE rolname = 'sweep_noperm')")]
BOOLEAN = [('NULL', 'NULL'), ('true', 'true'), ('false', 'false')]
EDGES = {'text': TEXT, 'bigint': BIGINT, 'integer': INTEGER, 'interval': INTERVAL,
         'timestamp with time zone': TIMESTAMPTZ, 'jsonb': JSONB, 'text[]': TEXTARR,
         'regclass': REGCLASS, 'name': NAME, 'regrole': REGROLE, 'oid': OID,
         'boolean': BOOLEAN}

# Valid baseline arguments by argument name (then by type, so that functions
# added later get a value too).
BASE_BY_NAME = {
    'lease_key': "'sweep-k'", 'owner_id': "'sweep-owner'", 'ttl': "'1 hour'",
    'fencing_token': TOK, 'resource': "'sweep-res'",
    'caller': "(SELECT oid FROM pg_roles WHERE rolname = current_user)",
    'table': "'sweep_t'", 'token_column': "'fencing_token'", 'mode': "'lease'",
    'owner_role': 'current_user', 'job_type': "'sweep'", 'scheduled_for': 'now()',
    'payload': "'{}'", 'max_attempts': '5', 'worker_id': "'sweep-w'", 'max_jobs': '1',
    'visibility_timeout': "'1 hour'", 'job_types': "ARRAY['sweep']", 'error': "'boom'",
    'retry_delay': "'10 s'", 'role': "'sweep_grantee'", 'use': "'monitor'", 'grant': 'true',
    # le_acquire's wait: none in the baseline, or every case that is refused the
    # lease (another owner id, ...) would wait for it in the server
    'wait': 'NULL', 'metadata': "'{}'",
}
BASE_BY_TYPE = {'text': "'sweep'", 'bigint': '1', 'integer': '1', 'interval': "'1 hour'",
                'timestamp with time zone': 'now()', 'jsonb': "'{}'", 'text[]': "ARRAY['sweep']",
                'regclass': "'sweep_t'", 'name': "'fencing_token'", 'regrole': 'current_user',
                'oid': '10', 'boolean': 'true'}

# Documented rules for the lease API (doc/reference.md "Limits" and "SQLSTATEs"): the
# SQLSTATE a value of a named argument must give.
LEASE_API = {'le_acquire', 'le_renew', 'le_release', 'le_force_release',
             'le_fence_check', 'le_schedule_job'}
RULES = {
    ('lease_key', 'NULL'): '22004', ('owner_id', 'NULL'): '22004',
    ('ttl', 'NULL'): '22004', ('fencing_token', 'NULL'): '22004',
    ('lease_key', 'empty'): '22023', ('owner_id', 'empty'): '22023',
    ('lease_key', '201 bytes'): '22001', ('owner_id', '201 bytes'): '22001',
    ('lease_key', '101 x e-acute (202 bytes)'): '22001',
    ('owner_id', '101 x e-acute (202 bytes)'): '22001',
    ('lease_key', '10 MB'): '22001', ('owner_id', '10 MB'): '22001',
    ('ttl', '0'): '22023', ('ttl', '-1 s'): '22023', ('ttl', '1 mon -30 days (zero)'): '22023',
    ('ttl', 'min interval'): '22023', ('ttl', '1 day'): '22023', ('ttl', '1 mon'): '22023',
    ('ttl', '-1 mon 31 days'): '22023',
    ('ttl', '100 years'): '22023', ('ttl', 'max interval'): '22023',
    ('ttl', '1 hour 1 microsecond'): '22023',
    ('fencing_token', '0'): '22023', ('fencing_token', '-1'): '22023',
    ('fencing_token', '-2^63'): '22023',
}
# Misuse that must be refused (any documented SQLSTATE), by function.
REFUSE = {
    ('le_protect', 'table', "extension's le_lease"),
    ('le_protect', 'table', "extension's le_scheduled_jobs"),
}
# The SQLSTATE that doc/reference.md's and doc/fence.md's SQLSTATE tables give for a
# value of a named argument of one function: (function, argument, edge
# value label) -> SQLSTATE.
EXPECT = {
    # the extension's own tables cannot be fenced
    ('le_protect', 'table', "extension's le_lease"): '42809',
    ('le_protect', 'table', "extension's le_scheduled_jobs"): '42809',
    ('le_protect', 'table', "extension's le_lease_history"): '42809',
    ('le_protect', 'table', "extension's le_fence_resource"): '42809',
    # a regclass or regrole that names nothing
    ('le_protect', 'table', 'oid 0'): '42P01',
    ('le_unprotect', 'table', 'oid 0'): '42P01',
    ('le_fence_assign', 'owner_role', 'oid 0'): '22023',
    ('le_grant', 'role', 'oid 0'): '22023',
    ('le_revoke', 'role', 'oid 0'): '22023',
    ('_le_grant_use', 'role', 'oid 0'): '22023',
    # unknown values, quoted cut to 64 characters
    ('le_protect', 'mode', '10 MB'): '22023',
    ('le_grant', 'use', '10 MB'): '22023',
    ('le_revoke', 'use', '10 MB'): '22023',
    ('_le_grant_use', 'use', '10 MB'): '22023',
}
# A schedule_key that names no job: the worker holds no claim on it (LE003).
for _f in ('le_complete_job', 'le_fail_job', '_le_lock_claimed_job'):
    for _label in ('empty', '1 byte', '200 bytes', '201 bytes', '10 MB'):
        EXPECT[(_f, 'schedule_key', _label)] = 'LE003'
# Trigger functions called as plain functions (baseline): 39P01, like the
# trigger protocol of le_fence().
EXPECT_BASELINE = {'le_fence': '39P01', 'le_fence_advance_trigger': '39P01'}
# Executable by PUBLIC (it only reads what le_group_partitions shows): a role
# without privileges gets its answer or a documented error, not 42501.
PUBLIC_FUNCTIONS = {'le_group_assignment'}
# Findings in the code as the sweep found it (reported to the lead, not fixed
# here): (group regex, case label regex, reason regex).  They are printed as
# KNOWN and do not fail the run; one that no longer happens is printed as
# such so that its entry can go.  Everything else fails the run.
KNOWN = [
]
MAX_MESSAGE = 10000   # an error message longer than this echoes unbounded input

FINGERPRINT = """
SELECT md5(concat_ws('#',
  (SELECT string_agg(t::text, '|' ORDER BY t::text) FROM le_lease t),
  (SELECT string_agg(t::text, '|' ORDER BY t::text) FROM le_lease_history t),
  (SELECT string_agg(t::text, '|' ORDER BY t::text) FROM le_scheduled_jobs t),
  (SELECT string_agg(t::text, '|' ORDER BY t::text) FROM le_fence_resource t),
  (SELECT string_agg(t::text, '|' ORDER BY t::text) FROM sweep_t t)))
"""

SETUP = """
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sweep_noperm') THEN
    CREATE ROLE sweep_noperm LOGIN; END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sweep_grantee') THEN
    CREATE ROLE sweep_grantee; END IF;
END $$;
CREATE EXTENSION IF NOT EXISTS leader_election;
CREATE TABLE IF NOT EXISTS sweep_t (id serial PRIMARY KEY, note text, fencing_token bigint);
CREATE TABLE IF NOT EXISTS sweep_nocol (id int);
CREATE OR REPLACE VIEW sweep_v AS SELECT 1::bigint AS fencing_token;
CREATE SEQUENCE IF NOT EXISTS sweep_seq;
CREATE TABLE IF NOT EXISTS sweep_part (id int, fencing_token bigint) PARTITION BY RANGE (id);
CREATE TABLE IF NOT EXISTS sweep_part_1 PARTITION OF sweep_part FOR VALUES FROM (0) TO (10);
GRANT SELECT ON sweep_t TO sweep_noperm;
-- Brings the fixtures back to a known state before each case: lease sweep-k
-- held by sweep-owner for an hour, a job claimed by worker sweep-w, the fence
-- on sweep_t.  Tokens are never assumed: cases read the current one.
CREATE OR REPLACE FUNCTION sweep_reset() RETURNS void LANGUAGE plpgsql AS $f$
DECLARE tok bigint;
BEGIN
  -- le_protect refuses the extension's own tables (42809); should a fence
  -- get there anyway, take it off first, or every later lease change fails.
  PERFORM le_unprotect(c.oid)
     FROM pg_class c
     JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
     JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leader_election'
    WHERE c.relkind IN ('r', 'p')
      AND EXISTS (SELECT FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal);
  -- Jobs other than the claimed one go: a 10 MB payload would slow every
  -- later fingerprint.
  DELETE FROM le_scheduled_jobs WHERE status <> 'running' OR claimed_by IS DISTINCT FROM 'sweep-w';
  SELECT fencing_token INTO tok FROM le_acquire('sweep-k', 'sweep-owner', '1 hour');
  IF tok IS NULL THEN
    PERFORM le_force_release('sweep-k');
    SELECT fencing_token INTO tok FROM le_acquire('sweep-k', 'sweep-owner', '1 hour');
  END IF;
  IF NOT EXISTS (SELECT FROM le_scheduled_jobs WHERE status = 'running' AND claimed_by = 'sweep-w') THEN
    PERFORM le_schedule_job('sweep-k', tok, 'sweep-job-' || clock_timestamp()::text, 'sweep',
                            now() - interval '1 s');
    PERFORM le_claim_jobs('sweep-w', 1, '1 hour', ARRAY['sweep']);
  END IF;
  IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = 'sweep_t'::regclass AND NOT tgisinternal) THEN
    PERFORM le_protect('sweep_t', 'sweep-k');
  END IF;
  SET leader_election.fencing_token TO DEFAULT;
END $f$;
"""


def documented_sqlstates(docs):
    """The SQLSTATEs in doc/reference.md's and doc/fence.md's SQLSTATE tables."""
    codes = set()
    for path, heading in ((docs + '/doc/reference.md', '## SQLSTATEs'),
                          (docs + '/doc/fence.md', '## SQLSTATEs')):
        text = open(path, encoding='utf-8').read()
        part = text.split(heading, 1)[1]
        for line in part.splitlines()[1:]:
            if line.startswith('#'):
                break
            if line.startswith('|'):
                first = line.split('|')[1]
                codes.update(re.findall(r'`([0-9A-Z]{5})`', first))
    return codes


class Sweep:
    def __init__(self, args):
        self.args = args
        self.documented = documented_sqlstates(args.docs)
        self.cases = 0
        self.failures = []
        self.summary = defaultdict(Counter)
        self.input_errors = {}
        self.slow = []
        self.conn = self.connect(args.dsn)

    @staticmethod
    def connect(dsn):
        # a call that hangs (a wait nobody ends) fails the sweep with 57014
        # instead of hanging the suite
        c = psycopg2.connect(dsn, options='-c statement_timeout=60s')
        c.autocommit = True
        return c

    def q(self, sql, conn=None):
        cur = (conn or self.conn).cursor()
        cur.execute(sql)
        return cur.fetchall() if cur.description else None

    def setup(self):
        self.q(SETUP)
        self.q('SELECT sweep_reset()')

    def functions(self):
        return self.q("""
            SELECT p.proname, p.oid::regprocedure::text,
                   coalesce(p.proargnames[1:p.pronargs], '{}'),
                   ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t),
                   format_type(p.prorettype, NULL), p.proretset
              FROM pg_proc p
              JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                              AND d.deptype = 'e'
              JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leader_election'
             ORDER BY p.proname, p.oid""")

    def fingerprint(self, conn=None, reset=True):
        return self.q(('SELECT sweep_reset();' if reset else '') + FINGERPRINT, conn)[0][0]

    def alive(self):
        try:
            self.q('SELECT 1')
            return True
        except psycopg2.Error:
            return False

    def reconnect(self):
        for _ in range(100):
            try:
                self.conn = self.connect(self.args.dsn)
                return
            except psycopg2.Error:
                time.sleep(0.2)
        sys.exit('sweep: cannot reconnect to the primary')

    def input_error(self, typ, expr):
        """SQLSTATE PostgreSQL itself raises while building the value, or None."""
        key = (typ, expr)
        if key not in self.input_errors:
            try:
                self.q('SELECT (%s)::%s IS NULL' % (expr, typ))
                self.input_errors[key] = None
            except psycopg2.Error as e:
                self.input_errors[key] = e.pgcode
        return self.input_errors[key]

    def fail(self, group, label, sql, why):
        self.failures.append((group, label, sql, why))
        self.summary[group]['FAILED'] += 1

    @staticmethod
    def call_sql(fname, retset, rettype, argexprs, argtypes):
        args = ', '.join('(%s)::%s' % (e, t) for e, t in zip(argexprs, argtypes))
        if retset or rettype == 'record' or rettype not in ('void',):
            return 'SELECT * FROM %s(%s)' % (fname, args) if (retset or rettype == 'record') \
                else 'SELECT %s(%s)' % (fname, args)
        return 'SELECT %s(%s)' % (fname, args)

    def run_case(self, group, label, sql, expect=None, allowed=(), pre=None, post=None,
                 conn=None, check_state=True):
        """Run one case; return its SQLSTATE ('ok' on success)."""
        self.cases += 1
        t0 = time.time()
        conn = conn or self.conn
        before = self.fingerprint() if check_state else None
        code = 'ok'
        cur = conn.cursor()
        try:
            for s in pre or ():
                try:
                    cur.execute(s)
                except psycopg2.Error:
                    pass
            cur.execute(sql)
            if cur.description:
                cur.fetchall()
            for s in post or ():
                cur.execute(s)
        except psycopg2.Error as e:
            code = e.pgcode or 'no-sqlstate'
            full = e.pgerror or str(e)
            msg = full.strip().splitlines()[0][:200] if full.strip() else ''
            if len(full) > MAX_MESSAGE:
                self.fail(group, label, sql, 'error message of %d characters echoes the input: %s...'
                          % (len(full), msg[:120]))
        finally:
            try:
                if conn.status != psycopg2.extensions.STATUS_READY or not conn.autocommit:
                    pass
                cur.execute('ROLLBACK') if conn.get_transaction_status() != 0 else None
            except psycopg2.Error:
                pass
        self.summary[group][code] += 1
        self.slow.append((time.time() - t0, group, label))
        if not self.alive():
            self.fail(group, label, sql, 'server connection lost: crash?')
            self.reconnect()
            return code
        if code == 'no-sqlstate':
            self.fail(group, label, sql, 'error without SQLSTATE: %s' % msg)
        elif expect == 'error' and code == 'ok':
            self.fail(group, label, sql, 'accepted; expected a refusal')
        elif expect == 'error' and code not in self.documented:
            self.fail(group, label, sql, 'undocumented SQLSTATE %s: %s' % (code, msg))
        elif expect is not None and expect != 'error' and code != expect:
            self.fail(group, label, sql, 'expected %s, got %s%s' % (
                expect, code, (': ' + msg) if code != 'ok' else ''))
        elif expect is None and code != 'ok' and code not in self.documented and code not in allowed:
            self.fail(group, label, sql, 'undocumented SQLSTATE %s: %s' % (code, msg))
        if check_state and code != 'ok':
            after = self.fingerprint(reset=False)
            if after != before:
                self.fail(group, label, sql, 'failed call (%s) changed the tables' % code)
        return code

    @staticmethod
    def baseline(name, argnames, argtypes):
        """Valid arguments for the function, as SQL expressions."""
        base = [BASE_BY_NAME.get(n) or BASE_BY_TYPE.get(t, 'NULL') for n, t in zip(argnames, argtypes)]
        if name == 'le_protect':
            # the fence of one lease: lease_key, not a group's partition column
            base[argnames.index('group_name')] = 'NULL'
            base[argnames.index('partition_column')] = 'NULL'
        if name in ('le_complete_job', 'le_fail_job', '_le_lock_claimed_job'):
            base[argnames.index('schedule_key')] = JOB
        elif 'schedule_key' in argnames:
            base[argnames.index('schedule_key')] = "'sweep-sj-' || clock_timestamp()::text"
        return base

    def sweep_function(self, name, sig, argnames, argtypes, rettype, retset):
        group = sig
        base = self.baseline(name, argnames, argtypes)
        call = lambda exprs: self.call_sql(name, retset, rettype, exprs, argtypes)
        self.run_case(group, 'baseline', call(base), EXPECT_BASELINE.get(name))
        for i, (an, at) in enumerate(zip(argnames, argtypes)):
            for label, expr in EDGES.get(at, [('NULL', 'NULL')]):
                exprs = list(base)
                exprs[i] = expr
                inerr = self.input_error(at, expr)
                if inerr:
                    expect = inerr
                elif (name, an, label) in EXPECT:
                    expect = EXPECT[(name, an, label)]
                elif (name, an, label) in REFUSE:
                    expect = 'error'
                else:
                    expect = RULES.get((an, label)) if name in LEASE_API else None
                self.run_case(group, '%s = %s' % (an or '$%d' % (i + 1), label), call(exprs), expect)
        b = call(base)
        self.run_case(group, 'aborted transaction', b, expect='25P02',
                      pre=['BEGIN', 'SELECT 1/0'])
        self.run_case(group, 'read-only transaction', b, allowed={'25006'},
                      pre=['BEGIN READ ONLY'], post=['COMMIT'])
        gid = 'sweep-%d' % self.cases
        code = self.run_case(group, 'prepared transaction', b, allowed={'0A000'},
                             pre=['BEGIN'], post=["PREPARE TRANSACTION '%s'" % gid])
        if code == 'ok':
            self.q("COMMIT PREPARED '%s'" % gid)
        multi = b.replace('SELECT ', 'SELECT ', 1)
        self.run_case(group, 'three calls per statement',
                      'SELECT (%s) IS NULL FROM generate_series(1, 3)' % b.replace('SELECT * FROM', 'SELECT count(*) FROM', 1)
                      if (retset or rettype == 'record') else
                      'SELECT %s, %s FROM generate_series(1, 3)' % (b[7:], b[7:]))
        self.run_case(group, 'role without privileges', b,
                      expect=None if name in PUBLIC_FUNCTIONS else '42501',
                      pre=['BEGIN', 'SET LOCAL ROLE sweep_noperm'])
        return b

    def ascii_cases(self, funcs):
        """Invalid UTF-8 that reaches the functions: a SQL_ASCII database."""
        if not self.q("SELECT 1 FROM pg_database WHERE datname = 'sweep_ascii'"):
            self.q("CREATE DATABASE sweep_ascii ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'"
                   " TEMPLATE template0")
        main = self.conn
        self.conn = self.connect(self.args.dsn + ' dbname=sweep_ascii')
        # no conversion from SQL_ASCII: the bytes come back as they are
        self.conn.set_client_encoding('LATIN1')
        try:
            self.setup()
            bad = "convert_from('\\xc328ff'::bytea, 'SQL_ASCII')"
            for name, sig, argnames, argtypes, rettype, retset in funcs:
                argnames = list(argnames) + [''] * (len(argtypes) - len(argnames))
                base = self.baseline(name, argnames, argtypes)
                for i, t in enumerate(argtypes):
                    if t != 'text':
                        continue
                    exprs = list(base)
                    exprs[i] = bad
                    self.run_case(sig, '%s = invalid UTF-8 in a SQL_ASCII database' % argnames[i],
                                  self.call_sql(name, retset, rettype, exprs, argtypes))
            # what was stored must still be readable
            self.run_case('le_leases (SQL_ASCII database)', 'read back', 'SELECT * FROM le_leases')
        finally:
            self.conn.close()
            self.conn = main

    def standby_case(self, sig, b, expect=None):
        if not self.args.standby_dsn:
            return
        sconn = self.standby
        self.cases += 1
        code = 'ok'
        try:
            cur = sconn.cursor()
            cur.execute(b)
            if cur.description:
                cur.fetchall()
        except psycopg2.Error as e:
            code = e.pgcode or 'no-sqlstate'
            msg = (e.pgerror or '').strip().splitlines()[0] if e.pgerror else str(e)
        self.summary[sig][code] += 1
        try:
            self.q('SELECT 1', sconn)
        except psycopg2.Error:
            self.fail(sig, 'on the standby', b, 'standby connection lost: crash?')
            self.standby = self.connect(self.args.standby_dsn)
            return
        if expect is not None and code != expect:
            self.fail(sig, 'on the standby', b, 'expected %s, got %s' % (expect, code))
        elif code not in ('ok', '25006') and code not in self.documented:
            self.fail(sig, 'on the standby', b, 'undocumented SQLSTATE %s: %s' % (code, msg))

    def drop_extension_case(self, sig, b, commit):
        """Call b while another session has dropped the extension, uncommitted."""
        other = self.connect(self.args.dsn)
        other.autocommit = False
        oc = other.cursor()
        oc.execute("SET lock_timeout = '5s'")
        oc.execute('DROP EXTENSION leader_election CASCADE')
        result = {}

        def call():
            c = self.connect(self.args.dsn)
            cur = c.cursor()
            try:
                cur.execute("SET statement_timeout = '3s'")
                cur.execute(b)
                if cur.description:
                    cur.fetchall()
                result['code'] = 'ok'
            except psycopg2.Error as e:
                result['code'] = e.pgcode or 'no-sqlstate'
                result['msg'] = (e.pgerror or str(e)).strip().splitlines()[0]
            c.close()
        t = threading.Thread(target=call)
        t.start()
        t.join(0.3)
        (other.commit if commit else other.rollback)()
        other.close()
        t.join(10)
        self.cases += 1
        label = 'DROP EXTENSION %s in another session' % ('committed' if commit else 'rolled back')
        code = result.get('code', 'hung')
        self.summary[sig][code] += 1
        if not self.alive():
            self.fail(sig, label, b, 'server connection lost: crash?')
            self.reconnect()
        elif code in ('hung', 'no-sqlstate') or code.startswith('XX'):
            self.fail(sig, label, b, 'not a clean error: %s %s' % (code, result.get('msg', '')))
        if commit:
            self.q(SETUP)
            self.q('SELECT sweep_reset()')

    # ---- pg_leader -------------------------------------------------------
    DUR = ['', '0', '-1s', '1ms', '1us', 'abc', '15', '15x', '1.5s', '1h', '99999999999999999999h',
           '9223372036854775807ms']
    BADDUR = {'', 'abc', '15x', '99999999999999999999h', '15', '1us', '-1s',
              '9223372036854775807ms'}
    STR = ['', 'a', 'x' * 201, 'x' * 100000, b'\xc3\x28\xff']
    CLI = {
        # option: (subcommand, values, values that must give exit 64)
        'dbname': ('status', ['', 'host=/nonexistent', 'not a dsn =', 'x' * 100000, b'\xc3\x28\xff'], {'not a dsn ='}),
        'lease': ('run', STR, {'', 'x' * 201, 'x' * 100000, b'\xc3\x28\xff'}),
        'owner': ('run', STR, {'', 'x' * 201, 'x' * 100000, b'\xc3\x28\xff'}),
        'ttl': ('run', DUR, BADDUR | {'0'}),
        'renew': ('run', DUR, BADDUR | {'0'}),
        'retry': ('run', DUR, BADDUR | {'0'}),
        'jitter': ('run', ['', '-1', '0', '20', '100', '101', 'abc', '1e9', '99999999999999999999'],
                   {'', '-1', 'abc', '1e9', '99999999999999999999', '101'}),
        'safety-margin': ('run', DUR, BADDUR),
        'grace': ('run', DUR, BADDUR),
        'connect-timeout': ('run', DUR, BADDUR),
        'statement-timeout': ('run', DUR, BADDUR | {'1ms'}),   # below pg_leader's 100ms floor
        'no-wait': ('run', [None], set()),
        'loop': ('run', [None], set()),        # ended by SIGTERM, see cli_loop_case
        'log-format': ('run', ['', 'text', 'json', 'xml'], {'', 'xml'}),
        'verbose': ('run', [None], set()),
        'json': ('status', [None], set()),
        'token': ('release', ['', '0', '-1', '1', MAXTOK, '9223372036854775808', 'abc', '1e3'],
                  {'', 'abc', '9223372036854775808', '1e3', '0', '-1'}),
        'help': ('status', [None], set()),
        'version': ('status', [None], set()),
        'wait-timeout': ('run', DUR, BADDUR),
        'max-runtime': ('run', DUR, BADDUR),
        'timeout': ('status', DUR, BADDUR | {'0'}),
        # the heartbeat options go together: each is swept with a valid partner (HB_PARTNER)
        'heartbeat-timeout': ('run', DUR, BADDUR | {'0'}),
        'heartbeat-file': ('run', ['', '/', '/nonexistent-sweep-dir/hb', '/tmp/' + 'x' * 100000,
                                   b'/tmp/\xc3\x28\xff', '/tmp/sweep-hb'],
                           {'', '/', '/nonexistent-sweep-dir/hb', '/tmp/' + 'x' * 100000}),
        'keep-fds': ('run', [None], set()),
        'status-file': ('run', ['', '/', '/nonexistent-sweep-dir/st', '/tmp/sweep-status', b'/tmp/\xc3\x28\xff'],
                        {'', '/', '/nonexistent-sweep-dir/st'}),
        'svg': ('history', ['', '/', '/nonexistent-sweep-dir/h.svg', '/tmp/sweep-history.svg', b'/tmp/\xc3\x28\xff.svg'],
                {''}),
        'since': ('history', ['', 'abc', '1h', '10m', '2026-01-01', 'infinity', '-infinity', 'x' * 100000,
                              b'\xc3\x28\xff'], {'abc', 'infinity', '-infinity'}),
        'metadata': ('run', ['', '{}', '{"addr": "10.0.0.5:8080"}', 'null', 'not json', '[' * 100 + ']' * 100,
                             'x' * 5000, b'\xc3\x28\xff'], {'not json', 'x' * 5000}),
        'group': ('status', ['', 'sweep-nogroup', 'x' * 100000, b'\xc3\x28\xff'], set()),
        'member': ('status', ['', 'sweep-m', 'x' * 121, b'\xc3\x28\xff'], set()),
        'poll': ('watch', ['', '0', 'abc', '-1s', '1ms', '1s', '99999999999999999999h'],   # ended by SIGTERM
                 {'', '0', 'abc', '-1s', '99999999999999999999h'}),
    }
    HB_PARTNER = {'heartbeat-file': '--heartbeat-timeout=1h', 'heartbeat-timeout': '--heartbeat-file=/tmp/sweep-hb'}

    def cli_options(self):
        """Options and documented exit statuses, from pg_leader --help."""
        out = subprocess.run([self.args.pg_leader, '--help'], capture_output=True, timeout=10).stdout.decode()
        exits = out.split('Exit status', 1)[-1]
        self.exit_documented = {0, 1} | {int(n) for n in re.findall(r'\b(\d{1,3})\b', exits) if int(n) < 128}
        return sorted(set(re.findall(r'--([a-z][a-z-]+)', out)))

    def cli_case(self, opt, argv, must64, term_after=None):
        self.cases += 1
        before = self.fingerprint()
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            if term_after:
                # --loop never ends by itself: SIGTERM must stop it with 128+15
                time.sleep(term_after)
                p.terminate()
            out, err = p.communicate(timeout=20)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            rc, err = 'hung', b''
        if term_after and rc == 143:
            rc = 0
        shown = ' '.join(a if isinstance(a, str) else repr(a) for a in argv)
        if len(shown) > 300:
            shown = shown[:300] + '...'
        self.summary['pg_leader --' + opt]['exit %s' % rc] += 1
        group = 'pg_leader --' + opt
        if rc == 'hung':
            self.fail(group, 'hangs', shown, 'no exit within 30 s')
        elif rc < 0:
            self.fail(group, 'signal', shown, 'killed by signal %s: %s' % (-rc, err[-300:]))
        elif rc >= 128:
            self.fail(group, 'signal', shown, 'exit %s (signal %s) not sent by the sweep: %s'
                      % (rc, rc - 128, err[-300:]))
        elif must64 and rc != 64:
            self.fail(group, 'usage', shown, 'expected exit 64 (bad usage), got %s: %s' % (rc, err[-300:]))
        elif rc not in self.exit_documented:
            self.fail(group, 'exit', shown, 'undocumented exit status %s' % rc)
        elif rc != 0 and not err.strip():
            self.fail(group, 'message', shown, 'exit %s without a message on stderr' % rc)
        # exit 80 (--max-runtime, --heartbeat-timeout) stops a command that ran
        # under the lease: that period is rightly in the tables, but only then
        led = rc == 80 and b' command_started ' in err
        if rc != 0 and not led and self.fingerprint(reset=False) != before:
            self.fail(group, 'state', shown, 'failed pg_leader call (exit %s) changed the tables' % rc)
        if not self.alive():
            self.fail(group, 'crash', shown, 'server connection lost')
            self.reconnect()

    def sweep_cli(self):
        pl, dsn = self.args.pg_leader, self.args.dsn
        listed = self.cli_options()
        print('pg_leader exit statuses documented by --help: %s' % sorted(self.exit_documented))
        missing = [o for o in listed if o not in self.CLI]
        for o in missing:
            self.fail('pg_leader --help', 'option table', '--' + o,
                      'pg_leader --help lists --%s, which the sweep table lacks' % o)
        for opt in sorted(self.CLI):
            sub, values, must64 = self.CLI[opt]
            if opt not in listed:
                self.fail('pg_leader --help', 'option table', '--' + opt,
                          'the sweep table has --%s, pg_leader --help does not list it' % opt)
                continue
            for v in values:
                if sub == 'run':
                    argv = [pl, 'run', '-d', dsn, '-l', 'sweep-cli-%d' % self.cases, '--no-wait', '--ttl', '2s']
                elif sub == 'status':
                    argv = [pl, 'status', '-d', dsn]
                elif sub in ('history', 'watch'):
                    argv = [pl, sub, '-d', dsn, '-l', 'sweep-k']
                else:
                    argv = [pl, 'release', '-d', dsn, '-l', 'sweep-k', '--owner', 'sweep-nobody', '--token', '1']
                if opt == 'dbname':
                    argv[3] = v
                elif v is None:
                    argv.append('--' + opt)
                elif isinstance(v, bytes):
                    argv.append(b'--' + opt.encode() + b'=' + v)
                else:
                    argv.append('--%s=%s' % (opt, v))
                if opt in self.HB_PARTNER:
                    argv.append(self.HB_PARTNER[opt])
                if sub == 'run':
                    argv += ['--', 'true']
                self.cli_case(opt, argv, v in must64 if v is not None else False,
                              term_after=1.0 if opt == 'loop' or sub == 'watch' else None)
            if opt not in ('no-wait', 'loop', 'verbose', 'json', 'help', 'version'):
                self.cli_case(opt, [pl, sub, '-d', dsn, '--' + opt], True)   # missing argument
        self.cli_case('(none)', [pl], True)
        self.cli_case('(none)', [pl, 'bogus-subcommand', '-d', dsn], True)
        self.cli_case('(none)', [pl, 'status', '-d', dsn, '--bogus-option'], True)
        self.cli_case('(none)', [pl, 'run', '-d', dsn, '-l', 'sweep-cli', '--no-wait'], True)  # no command

    def extra_statements(self):
        """Hand-written calls of several functions in one statement."""
        g = 'several functions per statement'
        for sql in [
            "SELECT (le_acquire('sweep-m', 'o1', '1 hour')).fencing_token, "
            "le_release('sweep-m', 'o1', (SELECT fencing_token FROM le_leases WHERE lease_key = 'sweep-m'))",
            "SELECT (le_acquire('sweep-m', 'o' || g, '1 hour')).acquired FROM generate_series(1, 5) g",
            "SELECT le_force_release('sweep-m'), (le_acquire('sweep-m', 'o2', '1 hour')).acquired, "
            "le_force_release('sweep-m')",
            "SELECT le_renew('sweep-k', 'sweep-owner', %s, '1 hour'), le_release('sweep-k', 'sweep-owner', %s), "
            "le_renew('sweep-k', 'sweep-owner', %s, '1 hour')" % (TOK, TOK, TOK),
            "SELECT le_fence_check('sweep-k', %s), le_force_release('sweep-k'), le_fence_check('sweep-k', %s)" % (TOK, TOK),
            "SELECT le_fence_advance('sweep-res2', g) FROM generate_series(5, 1, -1) g",
            "SELECT le_protect('sweep_t', 'sweep-k'), le_unprotect('sweep_t'), le_protect('sweep_t', 'sweep-k')",
            "INSERT INTO sweep_t (note, fencing_token) SELECT 'x', %s FROM le_acquire('sweep-k', 'sweep-owner')" % TOK,
        ]:
            self.run_case(g, sql[:60], sql)

    def main(self):
        t0 = time.time()
        self.setup()
        if self.args.standby_dsn:
            self.standby = self.connect(self.args.standby_dsn)
        funcs = self.functions()
        baselines = []
        funcs = [f for f in funcs if re.search(self.args.only, f[1])]
        # The PL/pgSQL bodies that name the extension's objects run only
        # under a C entry point, which pins the search path to the
        # extension's schema by OID (src/sql_support.c); called directly
        # they find nothing (42883/42P01/42704).  The sweep reaches them,
        # with the same arguments, through the API functions.
        behind = {r[0] for r in self.q("""
            SELECT p.oid::regprocedure::text FROM pg_proc p
              JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                              AND d.deptype = 'e'
              JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'leader_election'
             WHERE p.proname LIKE '\\_le\\_%' AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'plpgsql')
               AND p.proname <> '_le_check_worker'""")}
        funcs = [f for f in funcs if f[1] not in behind]
        for name, sig, argnames, argtypes, rettype, retset in funcs:
            argnames = list(argnames) + [''] * (len(argtypes) - len(argnames))
            baselines.append((sig, self.sweep_function(name, sig, argnames, argtypes, rettype, retset)))
        self.extra_statements()
        self.ascii_cases(funcs)
        if self.args.standby_dsn:
            self.q('SELECT sweep_reset()')
            lsn = self.q('SELECT pg_current_wal_insert_lsn()')[0][0]
            for _ in range(300):
                if self.q("SELECT pg_last_wal_replay_lsn() >= '%s'" % lsn, self.standby)[0][0]:
                    break
                time.sleep(0.1)
            for sig, b in baselines:
                self.standby_case(sig, b)
            for view in ('le_leases', 'le_lease_history', 'le_jobs'):
                self.standby_case('reads on the standby', 'SELECT * FROM %s' % view, expect='ok')
        for sig, b in baselines:
            self.drop_extension_case(sig, b, commit=False)
        for sig, b in baselines:
            self.drop_extension_case(sig, b, commit=True)
        if self.args.pg_leader and not self.args.no_cli:
            self.sweep_cli()

        print('sweep summary (case outcomes per function / option):')
        for group in sorted(self.summary):
            print('  %-70s %s' % (group, ' '.join('%s=%d' % kv for kv in sorted(self.summary[group].items()))))
        for secs, group, label in sorted(self.slow, reverse=True)[:5]:
            print('slowest: %.2f s  %s  %s' % (secs, group, label))
        print('documented SQLSTATEs: %s' % ' '.join(sorted(self.documented)))
        hit = set()
        failed = 0
        for group, label, sql, why in self.failures:
            known = [i for i, (g, l, w) in enumerate(KNOWN)
                     if re.search(g, group) and re.search(l, label) and re.search(w, why)]
            hit.update(known)
            failed += not known
            print('%s [%s] %s: %s\n    case: %s' % ('KNOWN' if known else 'FAILED', group, label,
                                                   why[:400], sql[:400]))
        for i, k in enumerate(KNOWN):
            if i not in hit:
                print('KNOWN finding no longer seen (remove its entry if fixed): %r' % (k,))
        print('sweep: %d functions, %d cases, %d failures, %d known findings, %.1f s'
              % (len(funcs), self.cases, failed, len(self.failures) - failed, time.time() - t0))
        return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--dsn', required=True)
    ap.add_argument('--standby-dsn')
    ap.add_argument('--pg-leader')
    ap.add_argument('--only', default='', help='sweep only the functions whose signature matches')
    ap.add_argument('--no-cli', action='store_true', help='skip the pg_leader options')
    ap.add_argument('--docs', required=True, help='the source tree (doc/reference.md, doc/fence.md)')
    sys.exit(Sweep(ap.parse_args()).main())


if __name__ == '__main__':
    main()
