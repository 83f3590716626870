#!/usr/bin/python3
"""Many candidates on one lease key at the same moment (test/bench/scale.sh).

Opens --candidates connections, one thread each.  Every race, all threads
wait on a barrier, then call le_acquire(key, 'cand<i>', '1 minute') at once.
Race 1 runs on a key that has no row yet; afterwards the previous winner's
lease is alternately released (le_release) and left to expire (le_renew with
a 50 ms ttl, then a wait until it has lapsed), so every race starts from a
free or an expired lease.

Checks, per race: exactly one candidate got acquired = true, and with
new_period = true; its token is higher than the previous race's; nobody
got an error (any SQLSTATE: 40P01 deadlock, 55P03 lock timeout, ...).
Prints one line per failed race, then a summary; exit status 1 when any
check failed.
"""
import argparse
import collections
import sys
import threading
import time

import psycopg2

KEY = 'contested'


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--host', required=True)
    ap.add_argument('--port', type=int, required=True)
    ap.add_argument('--dbname', required=True)
    ap.add_argument('--candidates', type=int, default=200)
    ap.add_argument('--rounds', type=int, default=20)
    args = ap.parse_args()
    n = args.candidates

    def connect():
        c = psycopg2.connect(host=args.host, port=args.port, user='postgres', dbname=args.dbname)
        c.autocommit = True
        return c

    t = time.monotonic()
    conns = [connect() for _ in range(n)]
    connect_s = time.monotonic() - t
    admin = connect().cursor()

    go = threading.Barrier(n + 1)
    done = threading.Barrier(n + 1)
    results = [None] * n
    stop = threading.Event()

    def candidate(i):
        cur = conns[i].cursor()
        while True:
            go.wait()
            if stop.is_set():
                return
            t0 = time.monotonic()
            try:
                cur.execute("SELECT acquired, new_period, fencing_token FROM le_acquire(%s, %s, '1 minute')",
                            (KEY, 'cand%d' % i))
                acquired, new_period, token = cur.fetchone()
                results[i] = ('ok', acquired, new_period, token, time.monotonic() - t0)
            except psycopg2.Error as e:
                results[i] = ('error', e.pgcode, str(e).strip().splitlines()[0], None, time.monotonic() - t0)
            done.wait()

    threads = [threading.Thread(target=candidate, args=(i,), daemon=True) for i in range(n)]
    for th in threads:
        th.start()

    errors = collections.Counter()
    bad_rounds = 0
    kinds = collections.Counter()
    busy = 0.0              # sum of the races' durations (barrier to last answer)
    slowest = 0.0           # longest single le_acquire call
    last_token = 0
    kind = 'new key'
    xids = 0                # transaction ids the candidates took
    wal = 0                 # WAL bytes written during the races
    calls = []              # every call's duration
    for r in range(1, args.rounds + 1):
        admin.execute('SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_insert_lsn()')
        x0, l0 = admin.fetchone()
        go.wait()
        t0 = time.monotonic()
        done.wait()
        elapsed = time.monotonic() - t0
        admin.execute('SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint - %s,'
                      ' pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)::bigint', (x0, l0))
        dx, dw = admin.fetchone()
        xids += dx
        wal += dw
        calls.extend(res[4] for res in results)
        busy += elapsed
        kinds[kind] += 1
        winners = [i for i, res in enumerate(results) if res[0] == 'ok' and res[1]]
        errs = [res for res in results if res[0] == 'error']
        for e in errs:
            errors['%s %s' % (e[1], e[2])] += 1
        slowest = max(slowest, max(res[4] for res in results))
        problems = []
        if len(winners) != 1:
            problems.append('%d winners' % len(winners))
        for w in winners:
            _, _, new_period, token, _ = results[w]
            if not new_period:
                problems.append('cand%d: new_period %s' % (w, new_period))
            if token is None or token <= last_token:
                problems.append('cand%d: token %s not above %s' % (w, token, last_token))
        if errs:
            problems.append('%d errors' % len(errs))
        if problems:
            bad_rounds += 1
            print('race %d (%s, %.3f s): %s' % (r, kind, elapsed, '; '.join(problems)))
        if len(winners) == 1:
            w = winners[0]
            last_token = results[w][3]
            # Set up the next race: released after an odd race, expired after an even one.
            if r % 2 == 1:
                admin.execute('SELECT le_release(%s, %s, %s)', (KEY, 'cand%d' % w, last_token))
                kind = 'released'
            else:
                admin.execute("SELECT le_renew(%s, %s, %s, '50 milliseconds')", (KEY, 'cand%d' % w, last_token))
                time.sleep(0.1)
                kind = 'expired'
            if not admin.fetchone()[0]:
                print('race %d: the winner could not release or renew its lease' % r)
                bad_rounds += 1
        else:
            admin.execute('SELECT le_force_release(%s)', (KEY,))
            kind = 'released'
    stop.set()
    go.wait()

    attempts = n * args.rounds
    print('%d races (%s): %d with exactly one new period and no error, %d failed'
          % (args.rounds, ', '.join('%d %s' % (c, k) for k, c in kinds.items()),
             args.rounds - bad_rounds, bad_rounds))
    for what, count in sorted(errors.items()):
        print('error %s: %d' % (what, count))
    calls.sort()
    print('%d attempts in %.2f s of races (mean race %.3f s): %.1f grants/s, %.0f attempts/s'
          % (attempts, busy, busy / args.rounds, args.rounds / busy, attempts / busy))
    print('le_acquire call: median %.3f s, p99 %.3f s, slowest %.3f s (leader_election.lock_timeout: 2 s)'
          % (calls[len(calls) // 2], calls[min(len(calls) - 1, int(len(calls) * 0.99))], slowest))
    print('per race: %.1f transaction ids taken by candidates (1 is the grant), %.0f WAL bytes; '
          '%d connections opened in %.1f s' % (xids / args.rounds, wal / args.rounds, n, connect_s))
    return 1 if bad_rounds or errors else 0


if __name__ == '__main__':
    sys.exit(main())
