-- The waiters of test/bench/wait.sh and the report of their handovers.

-- Waits that ran out and came back refused, per key.
CREATE TABLE wait_bench_refusals (key text, at timestamptz DEFAULT clock_timestamp());

-- The COMMIT of each grant and release, by token: the server clock just
-- before it and just after it returned.  A waiter cannot have a lease
-- before the transaction it waits for (the release, or the grant of a
-- lease that lapses) is visible; a slow commit shows here, not as a sleep.
-- Kept in the waiter's memory during the run, written when it ends.
CREATE TABLE wait_bench_commits (key text, fencing_token bigint, kind text,
                                 before timestamptz, after timestamptz);

-- Campaign for key as owner until key has had total periods: le_acquire
-- with a wait, then (mode) release after a short hold, abandon the lease
-- (ttl short_ttl, not released, not renewed) or, mixed, either at random.
-- Commits after every call, so that each grant and release is visible,
-- and times those commits (wait_bench_commits).
CREATE PROCEDURE wait_bench_waiter(key text, owner text, mode text, total int, short_ttl interval)
LANGUAGE plpgsql AS $$
DECLARE
    got boolean;
    abandon boolean;
    tok bigint;
    t0 timestamptz;
    c_token bigint[] := '{}';
    c_kind text[] := '{}';
    c_before timestamptz[] := '{}';
    c_after timestamptz[] := '{}';
BEGIN
    LOOP
        EXIT WHEN (SELECT count(*) FROM le_lease_history h WHERE h.lease_key = key) >= total;
        abandon := mode = 'expire' OR (mode = 'mixed' AND random() < 0.5);
        SELECT a.acquired, a.fencing_token INTO got, tok
          FROM le_acquire(key, owner, CASE WHEN abandon THEN short_ttl ELSE '10 seconds' END,
                          wait => '60 seconds') AS a;
        IF NOT got THEN
            INSERT INTO wait_bench_refusals (key) VALUES (key);
        END IF;
        t0 := clock_timestamp();
        COMMIT;
        IF got THEN
            c_token := c_token || tok; c_kind := c_kind || 'grant'::text;
            c_before := c_before || t0; c_after := c_after || clock_timestamp();
        END IF;
        IF got AND abandon THEN
            -- let it lapse: no renewal, no release, no call until after it expired
            PERFORM pg_sleep(extract(epoch FROM short_ttl) + 0.01);
        ELSIF got THEN
            PERFORM pg_sleep(CASE WHEN mode = 'mixed' THEN random() * 0.01 ELSE 0.002 END);
            PERFORM le_release(key, owner, l.fencing_token) FROM le_leases l WHERE l.lease_key = key;
            t0 := clock_timestamp();
            COMMIT;
            c_token := c_token || tok; c_kind := c_kind || 'release'::text;
            c_before := c_before || t0; c_after := c_after || clock_timestamp();
        END IF;
    END LOOP;
    INSERT INTO wait_bench_commits
        SELECT key, t.tok, t.kind, t.b, t.a FROM unnest(c_token, c_kind, c_before, c_after) AS t(tok, kind, b, a);
END $$;

-- From each period's end (release, or the expiry in force) to the next
-- grant, on the server clock: count, p50, p99, max in ms, the refusals
-- returned per handover, the kinds of end seen, and the gaps over 100 ms.
CREATE FUNCTION wait_bench_report(k text, OUT n bigint, OUT p50 numeric, OUT p99 numeric,
                                  OUT max_ms numeric, OUT refusals numeric, OUT ended text,
                                  OUT over_100ms bigint)
LANGUAGE sql AS $$
WITH p AS (
    SELECT ended_at, end_reason, lead(acquired_at) OVER (ORDER BY fencing_token) AS next_at
      FROM le_lease_history WHERE lease_key = k),
g AS (
    SELECT extract(epoch FROM next_at - ended_at) * 1000 AS ms, end_reason
      FROM p WHERE next_at IS NOT NULL AND ended_at IS NOT NULL)
SELECT count(*),
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2),
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2),
       round(max(ms)::numeric, 2),
       round((SELECT count(*) FROM wait_bench_refusals r WHERE r.key = k)::numeric / greatest(count(*), 1), 3),
       string_agg(DISTINCT end_reason, '+'),
       count(*) FILTER (WHERE ms > 100)
  FROM g
$$;

-- The handovers of key k whose gap passed 100 ms, largest first: when the
-- period ended (UTC), its end reason, its holder, the next holder, the gap in ms, how
-- long the COMMIT of the period's grant and of its release took (NULL: no
-- release), and the gap from the moment the lease could be had (its end,
-- or later when the grant or release it waited for committed later).
CREATE FUNCTION wait_bench_slow(k text, OUT ended text, OUT end_reason text, OUT holder text,
                                OUT next_holder text, OUT ms numeric, OUT grant_commit_ms numeric,
                                OUT release_commit_ms numeric, OUT from_visible_ms numeric)
RETURNS SETOF record LANGUAGE sql AS $$
SELECT to_char(p.ended_at AT TIME ZONE 'UTC', 'HH24:MI:SS.MS'), p.end_reason, p.holder, p.next_holder,
       round(extract(epoch FROM p.next_at - p.ended_at)::numeric * 1000, 2),
       round(extract(epoch FROM g.after - g.before)::numeric * 1000, 2),
       round(extract(epoch FROM r.after - r.before)::numeric * 1000, 2),
       round(extract(epoch FROM p.next_at - greatest(p.ended_at, g.after, r.after))::numeric * 1000, 2)
  FROM (SELECT h.end_reason, h.holder, h.ended_at, h.fencing_token,
               lead(h.holder) OVER (ORDER BY h.fencing_token) AS next_holder,
               lead(h.acquired_at) OVER (ORDER BY h.fencing_token) AS next_at
          FROM le_lease_history h WHERE h.lease_key = k) p
  LEFT JOIN wait_bench_commits g ON g.key = k AND g.fencing_token = p.fencing_token AND g.kind = 'grant'
  LEFT JOIN wait_bench_commits r ON r.key = k AND r.fencing_token = p.fencing_token AND r.kind = 'release'
 WHERE p.next_at - p.ended_at > interval '100 milliseconds'
 ORDER BY p.next_at - p.ended_at DESC
 LIMIT 10
$$;
