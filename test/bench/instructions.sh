#!/usr/bin/env bash
# Instructions per transaction of the benchmark's scripts, counted by
# valgrind's callgrind in the server backend that runs them: unlike tps,
# the same on a loaded machine and from run to run (a few tenths of a
# percent), so it shows what a change of the C code costs or saves.  Not
# part of the test suite.
#
#   test/bench/instructions.sh        # as root or as postgres, after make install
#   N=2000 test/bench/instructions.sh # transactions counted per script (default 3000)
#   W=1000 test/bench/instructions.sh # warm-up transactions before them (default 2000)
#   CLIENTS=16 W=300 N=300 test/bench/instructions.sh  # the cycles with 1 and 16 clients (~4 min)
#   CLIENTS=16 FRESH=1 test/bench/instructions.sh      # the same with new backends, as in a tps run (~6 min)
#   KEEP=1 ... test/bench/instructions.sh             # keep the callgrind profiles
#   ONLY=renew test/bench/instructions.sh   # only le_renew and its baseline (~1 min)
#   CYCLE_OPTS='-c leader_election.history_retention=0' test/bench/instructions.sh
#                                    # only the cycles, with these PGOPTIONS (here:
#                                    # every grant prunes, a key churning past its retention)
#   ONLY=fence N=2000 W=1000 test/bench/instructions.sh
#                                    # only the one-row fenced and no-op-trigger INSERTs (~1 min)
#
# The server runs under callgrind (fsync = off, autovacuum off), with the
# extension, test/bench/baseline.sql and 1,000 keys acquired and released
# once.  Each script runs with one client, twice (W and W+N transactions,
# new connection each); the difference of the two backends' totals divided
# by N is the figure printed: connection start-up, first-call catalog
# loading and the W warm-up transactions cancel out, so the figure is that
# of a long-lived session (a pooled connection, a pg_leader campaign), whose
# per-backend caches are warm (for example the hints of where each key's
# lease row lies, which a backend finds by index the first time).
# Needs valgrind (apt-get install valgrind); ~5 min.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bench=$here/test/bench
. "$here/test/lib/prereq.sh"
. "$here/test/lib/cluster.sh"
N=${N:-3000}
W=${W:-2000}
le_callgrind_cluster
psql() { le_bench_psql -At "$@"; }
le_bench_load "$bench"
# every key of le_cycle.pgb and pglock_cycle.pgb created once, so that no
# script pays for first inserts
psql >/dev/null <<'SQL'
SELECT count(le_release('k' || i, 'x', (le_acquire('k' || i, 'x', '1 hour')).fencing_token))
  FROM generate_series(1, 1000) AS i;
SQL

# total Ir of the backend that ran the last pgbench (its file is written when it exits)
last_total() {
    local f
    sleep 1
    f=$(ls -t "$dir"/cg/cg.* | head -1)
    sed -n 's/^\(summary\|totals\): *\([0-9]*\).*/\2/p' "$f" | head -1
}
# The INSERT targets emptied: each of count's two runs starts from the same
# state (else the second finds the tables, and their indexes, bigger: the
# same 100-row INSERT counted 1,226 k and 1,394 k in two pairs of one run).
empty_tables() {
    psql -c "TRUNCATE plain_t, trig_t, stmt_t" -c "SET leader_election.fencing_token = $ftok" \
        -c "TRUNCATE fenced_t" >/dev/null
}
count() {   # script [PGOPTIONS]: instructions per transaction
    local a b
    empty_tables
    le_as_pg env PGOPTIONS="${2:-}" "$PG_BINDIR/pgbench" -n -M prepared -h "$dir" -p "$port" -U postgres \
        -c 1 -t "$W" -D tok="$tok" -D ftok="$ftok" -f "$dir/$1" postgres >/dev/null 2>&1
    a=$(last_total)
    empty_tables
    le_as_pg env PGOPTIONS="${2:-}" "$PG_BINDIR/pgbench" -n -M prepared -h "$dir" -p "$port" -U postgres \
        -c 1 -t $((W + N)) -D tok="$tok" -D ftok="$ftok" -f "$dir/$1" postgres >/dev/null 2>&1
    b=$(last_total)
    awk -v a="$a" -v b="$b" -v n="$N" 'BEGIN { printf "%.0f", (b - a) / n }'
}
# CLIENTS=16: instead of the rows below, the cycles' instructions per
# transaction in each backend with 1 and with CLIENTS clients, every backend
# running the same W and W + N transactions (W=N=300 suit it: the server
# under valgrind serves 16 backends slowly), so that what differs is what
# the other backends' concurrent changes cost.  Sums the totals of all the
# backends that ran the script (their profiles name PostgresMain), waiting
# until each has written its profile.
backends_total() {   # marker n: total Ir of the n backends whose profiles were written after marker
    local f n s t i
    for i in $(seq 120); do
        n=0; s=0
        for f in $(find "$dir/cg" -name 'cg.*' -newer "$1"); do
            grep -q 'PostgresMain' "$f" || continue
            t=$(sed -n 's/^\(summary\|totals\): *\([0-9]*\).*/\2/p' "$f" | head -1)
            [ -n "$t" ] || continue
            n=$((n + 1)); s=$((s + t))
        done
        [ "$n" -ge "$2" ] && break
        sleep 1
    done
    [ "$n" -eq "$2" ] || { echo "expected $2 backend profiles after $1, found $n" >&2; exit 1; }
    echo "$s"
}
count_clients() {   # script clients: instructions per transaction per backend
    local a b
    sleep 3   # backends of earlier sessions write their profiles as they exit
    touch "$dir/mark.$1.$2.a"; sleep 1
    le_as_pg "$PG_BINDIR/pgbench" -n -M prepared -h "$dir" -p "$port" -U postgres -c "$2" -j 2 -t "$W" \
        -f "$dir/$1" postgres >/dev/null 2>&1
    # one backend per client and one for pgbench's set-up connection (the
    # same in both runs, so it cancels out)
    a=$(backends_total "$dir/mark.$1.$2.a" $(($2 + 1))) || exit 1
    touch "$dir/mark.$1.$2.b"; sleep 1
    le_as_pg "$PG_BINDIR/pgbench" -n -M prepared -h "$dir" -p "$port" -U postgres -c "$2" -j 2 -t $((W + N)) \
        -f "$dir/$1" postgres >/dev/null 2>&1
    b=$(backends_total "$dir/mark.$1.$2.b" $(($2 + 1))) || exit 1
    awk -v a="$a" -v b="$b" -v n="$N" -v c="$2" 'BEGIN { printf "%.0f", (b - a) / (n * c) }'
}
# CLIENTS=16 FRESH=1: the backends of a tps run instead (test/bench/clients.sh):
# new ones, each running FRESH_ONE=12000 cycles with one client and
# FRESH_MANY=1700 each with CLIENTS, on a history of HISTORY=200 ended
# periods per key.  The defaults are a 9-s run of clients.sh on a machine
# that does ~3,000 cycles/s with 16 clients and the history its repetitions
# leave there; on a quicker one give its own figures (at ~9,300 cycles/s:
# FRESH_ONE=20000 FRESH_MANY=5200 HISTORY=700).  The history rows are put
# there by hand (tokens below any real one, ended a day ago or, for a
# younger lease row, when it was made: none due, none before its row),
# with the lease rows' history_min_ended_at set to their oldest end, as the
# lease calls keep it.  LEASE_AGE='8 days' makes the lease rows that old
# first (older than the default retention, as for a long-lived key: before
# le_lease.history_min_ended_at the extension then scanned the history at
# each backend's first grant of a key).  Each backend's start-up and first cycle (about 46 M
# instructions) are left out: the same clients run one cycle each first,
# and the figure is the difference of the two runs' totals per further
# cycle.  What differs from the warm counts above is each backend's first
# use of each key: a backend running n cycles over the 1,000 keys meets
# about 1000 (1 - e^(-n/1000)) of them for the first time.
# FRESH_SCRIPTS=le_cycle.pgb counts le_'s cycle only.  ~6 min.
count_fresh() {   # script clients cycles: instructions per cycle of new backends, start-up left out
    local a b
    touch "$dir/mark.$1.$2.f1"; sleep 1
    le_as_pg "$PG_BINDIR/pgbench" -n -M prepared -h "$dir" -p "$port" -U postgres -c "$2" -j 2 -t 1 \
        -f "$dir/$1" postgres >/dev/null 2>&1
    # one backend per client and one for pgbench's set-up connection
    a=$(backends_total "$dir/mark.$1.$2.f1" $(($2 + 1))) || exit 1
    touch "$dir/mark.$1.$2.fn"; sleep 1
    le_as_pg "$PG_BINDIR/pgbench" -n -M prepared -h "$dir" -p "$port" -U postgres -c "$2" -j 2 -t "$3" \
        -f "$dir/$1" postgres >/dev/null 2>&1
    b=$(backends_total "$dir/mark.$1.$2.fn" $(($2 + 1))) || exit 1
    awk -v a="$a" -v b="$b" -v n="$3" -v c="$2" 'BEGIN { printf "%.0f", (b - a) / ((n - 1) * c) }'
}
if [ -n "${CLIENTS:-}" ] && [ "${FRESH:-0}" != 0 ]; then
    [ -z "${LEASE_AGE:-}" ] || psql -v age="$LEASE_AGE" >/dev/null <<'SQL'
UPDATE le_lease SET created_at = created_at - :'age'::interval WHERE lease_key ~ '^k[0-9]+$';
SQL
    psql -v n="${HISTORY:-200}" >/dev/null <<'SQL'
INSERT INTO le_lease_history (lease_id, lease_key, holder, holder_role, fencing_token, acquired_at, ended_at, end_reason)
SELECT l.lease_id, l.lease_key, 'earlier', 'postgres', -g, e.at, e.at, 'released'
  FROM le_lease AS l, generate_series(1, :n) AS g,
       LATERAL (SELECT greatest(l.created_at, now() - interval '1 day') AS at) AS e
 WHERE l.lease_key ~ '^k[0-9]+$';
-- as the lease calls keep it: no ended period lies before the bound
UPDATE le_lease AS l SET history_min_ended_at = h.m
  FROM (SELECT lease_id, min(ended_at) AS m FROM le_lease_history GROUP BY lease_id) AS h
 WHERE h.lease_id = l.lease_id AND l.lease_key ~ '^k[0-9]+$';
SQL
    sleep 3   # the profiles of those sessions' backends are written as they exit
    echo "| cycle, new backends (history ${HISTORY:-200} periods per key${LEASE_AGE:+, lease rows $LEASE_AGE old}) | 1 client × ${FRESH_ONE:-12000} | $CLIENTS clients × ${FRESH_MANY:-1700} | ratio |"
    echo "| --- | --- | --- | --- |"
    for s in ${FRESH_SCRIPTS:-le_cycle.pgb pglock_cycle.pgb}; do
        one=$(count_fresh "$s" 1 "${FRESH_ONE:-12000}") || exit 1
        many=$(count_fresh "$s" "$CLIENTS" "${FRESH_MANY:-1700}") || exit 1
        printf '| %s | %s | %s | %s |\n' "$s" "$one" "$many" "$(le_ratio "$many" "$one")"
    done
    exit 0
fi
if [ -n "${CLIENTS:-}" ]; then
    echo "| cycle | 1 client | $CLIENTS clients | ratio |"
    echo "| --- | --- | --- | --- |"
    for s in le_cycle.pgb pglock_cycle.pgb; do
        one=$(count_clients "$s" 1) || exit 1
        many=$(count_clients "$s" "$CLIENTS") || exit 1
        printf '| %s | %s | %s | %s |\n' "$s" "$one" "$many" "$(le_ratio "$many" "$one")"
    done
    exit 0
fi
echo "| operation | le_ instructions per transaction (server backend) | baseline | le_ / baseline (lower is cheaper) |"
echo "| --- | --- | --- | --- |"
pair() {   # label le_script base_script [PGOPTIONS]
    local l b
    l=$(count "$2" "${4:-}"); b=$(count "$3" "${4:-}")
    printf '| %s | %s | %s | %s |\n' "$1" "$l" "$b" "$(le_ratio "$l" "$b")"
}
fenced_one_row() { pair "fenced INSERT, 1 row, vs without trigger" ins_fenced.pgb ins_plain.pgb "-c synchronous_commit=off"; }
noop_one_row() {
    pair "INSERT, 1 row, with a C trigger that does nothing (the floor of any row trigger), vs without" \
        ins_trig.pgb ins_plain.pgb "-c synchronous_commit=off"
}
if [ "${ONLY:-}" = fence ]; then
    fenced_one_row
    noop_one_row
    exit 0
fi
if [ "${ONLY:-}" = renew ]; then
    pair "renew vs single-row UPDATE" le_renew.pgb raw_update.pgb
    exit 0
fi
if [ -n "${CYCLE_OPTS:-}" ]; then
    pair "acquire + release (le_cycle) vs pglock's cycle, PGOPTIONS $CYCLE_OPTS" le_cycle.pgb pglock_cycle.pgb "$CYCLE_OPTS"
    exit 0
fi
pair "acquire + release (le_cycle) vs pglock's cycle" le_cycle.pgb pglock_cycle.pgb
pair "renew vs single-row UPDATE" le_renew.pgb raw_update.pgb
pair "refused acquire vs refused pg_try_advisory_lock" le_refused.pgb adv_refused.pgb
fenced_one_row
pair "fenced INSERT, 100 rows, vs without trigger" ins100_fenced.pgb ins100_plain.pgb "-c synchronous_commit=off"
noop_one_row
pair "INSERT, 100 rows, with a C trigger that does nothing, vs without" ins100_trig.pgb ins100_plain.pgb "-c synchronous_commit=off"
pair "INSERT, 100 rows, with a C statement trigger that does nothing, vs without" ins100_stmt.pgb ins100_plain.pgb "-c synchronous_commit=off"
