"""History checks shared by the randomized schedule (le_random.py) and the
fault-injection run (test/chaos/chaos.py): one implementation per invariant.

Every function takes a psycopg2 cursor of a superuser connection, a SQL
prefix WRITES that defines the CTE "w(src, lease_key, token, x, cts)" of the
committed protected writes (cts: pg_xact_commit_timestamp of the writing
transaction; needs track_commit_timestamp = on) where it reads writes, and
KEYS, a LIKE pattern of the lease keys the run used.  Each returns the rows
that violate its invariant (an empty list when it holds); nothing here
changes the database.  The WRITES prefix must not contain a bare "%": the
pattern travels as a query parameter.
"""
import re

# Lines of the server log that mean a backend crashed or data was damaged.
LOG_CRASH_PATTERNS = [
    r'terminated by signal',
    r'was terminated by',
    r'terminating any other active server processes',
    r'could not read block',
    r'server process .* exited with exit code [1-9]',
    r'PANIC:',
    r'TRAP:',
]


def _q(cur, sql, args=None):
    cur.execute(sql, args)
    return cur.fetchall()


def write_after_newer_grant(cur, writes, keys):
    """A: writes whose commit timestamp is later than the grant (acquired_at)
    of a higher token of their key.  Zero tolerance."""
    return _q(cur, writes + """
SELECT w.src, w.lease_key, w.token, w.cts, n.fencing_token, n.holder, n.acquired_at
  FROM w JOIN le_lease_history AS n
    ON n.lease_key = w.lease_key AND n.fencing_token > w.token AND n.acquired_at < w.cts
 WHERE w.lease_key LIKE %s
 ORDER BY w.cts""", (keys,))


def writes_against_own_period(cur, writes, keys, late_ms):
    """B: the writes that committed after their own period ended (released
    periods: zero tolerance; expired ones: more than late_ms after the
    expiry, see le_random.py for why), before it began, or with a token of
    no committed period.  Returns a dict of those three lists, the maximum
    lateness seen (ms) and the number of writes late within the tolerance."""
    rows = _q(cur, writes + """
, p AS (
  SELECT w.*, h.acquired_at, h.end_reason,
         COALESCE(h.ended_at, CASE WHEN l.fencing_token = w.token THEN l.expires_at END) AS period_end,
         h.history_id IS NOT NULL AS has_period
    FROM w LEFT JOIN le_lease_history AS h ON h.lease_key = w.lease_key AND h.fencing_token = w.token
           LEFT JOIN le_lease AS l ON l.lease_key = w.lease_key
   WHERE w.lease_key LIKE %s
)
SELECT src, lease_key, token, cts, acquired_at, period_end, end_reason, has_period,
       extract(epoch FROM cts - period_end) * 1000 AS late_ms
  FROM p""", (keys,))
    late_all = [r for r in rows if r[5] is not None and r[8] > 0]
    return {
        'late': [r for r in late_all if r[6] in ('released', 'force_released') or r[8] > late_ms],
        'early': [r for r in rows if r[7] and r[3] < r[4]],
        'orphans': [r for r in rows if not r[7]],
        'max_late_ms': max([float(r[8]) for r in late_all], default=0.0),
        'late_tolerated': len([r for r in late_all
                               if r[6] not in ('released', 'force_released') and r[8] <= late_ms]),
        'writes': len(rows),
    }


def tokens_rise_periods_disjoint(cur, keys):
    """D: per key, in grant order, each token is higher than the one before
    and the earlier period ended no later than the next one began (at most
    one valid holder at any instant).  Also catches a token issued twice."""
    return _q(cur, """
WITH h AS (
  SELECT h.*, lag(fencing_token) OVER w AS prev_token, lag(ended_at) OVER w AS prev_end,
         lag(history_id) OVER w AS prev_id
    FROM le_lease_history AS h WHERE lease_key LIKE %s
  WINDOW w AS (PARTITION BY lease_key ORDER BY acquired_at, history_id)
)
SELECT lease_key, prev_token, fencing_token, prev_end, acquired_at FROM h
 WHERE prev_id IS NOT NULL AND (fencing_token <= prev_token OR prev_end IS NULL OR prev_end > acquired_at)""",
              (keys,))


def lease_row_behind_history(cur, keys):
    """D: lease rows whose token is lower than the highest token granted."""
    return _q(cur, """
SELECT l.lease_key, l.fencing_token, max(h.fencing_token) FROM le_lease AS l
  JOIN le_lease_history AS h USING (lease_key) WHERE l.lease_key LIKE %s
 GROUP BY 1, 2 HAVING l.fencing_token < max(h.fencing_token)""", (keys,))


def crash_lines(server_log):
    """E: the lines of the server log that show a crash (or that it cannot
    be read)."""
    hits = []
    try:
        with open(server_log, errors='replace') as f:
            for line in f:
                if any(re.search(p, line) for p in LOG_CRASH_PATTERNS):
                    hits.append((line.rstrip()[:200],))
    except OSError as e:
        hits.append(('cannot read server log: %s' % e,))
    return hits


def token_given_twice(cur, obs):
    """C: (key, token) pairs that clients were granted under two owner ids.
    OBS names a table (lease_key, fencing_token, owner_id, ctx, acquired) of
    every grant a client saw, including grants whose transaction rolled
    back; owner ids are unique per process, so two of them mean the token
    was issued twice."""
    return _q(cur, """
SELECT lease_key, fencing_token, array_agg(DISTINCT owner_id), array_agg(DISTINCT ctx)
  FROM %s WHERE acquired GROUP BY 1, 2 HAVING count(DISTINCT owner_id) > 1 ORDER BY 1, 2""" % obs)


def token_of_other_period(cur, obs):
    """C: grants seen by a client whose token belongs to a committed period
    of another owner."""
    return _q(cur, """
SELECT o.lease_key, o.fencing_token, o.owner_id, o.ctx, h.holder
  FROM %s AS o JOIN le_lease_history AS h
    ON h.lease_key = o.lease_key AND h.fencing_token = o.fencing_token
 WHERE o.acquired AND h.holder <> o.owner_id""" % obs)
