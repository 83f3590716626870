#!/usr/bin/env bash
# The server-side wait of le_acquire (doc/performance.md, "Waiting in the
# server"): WAITERS sessions campaign for one key with le_acquire(...,
# wait), each in a procedure that commits after every call (wait_bench.sql).
# Figures come from le_lease_history, on the server clock, so they hold no
# client scheduling:
#   release  each holder releases after a short hold: release -> next grant
#            (p50, p99, max), and the refusals the waiters got back per
#            handover (a wait that ran out; the queue's head tries once per
#            wake, the others do not try at all);
#   expiry   each holder abandons its lease (ttl EXPIRY_TTL): expiry ->
#            next grant past expires_at (p50, p99, max);
#   mixed    MIXED handovers, each a release after a random hold or an
#            abandoned lease at random: the largest time any waiter slept
#            past the moment it could have had the lease (target < 100 ms).
# Each handover over 100 ms is listed (up to 10 per section): how the
# period ended, its holder and the next one, how long the COMMITs of its
# grant and release took, and the gap counted from the moment the lease
# could be had (the end, or the later commit the next grant waited for):
# a slow commit is not a waiter that overslept.  The checkpoints of the run
# (server log) are printed last, to compare with the times of those.
# No timing assertion: it prints the figures.  Knobs: WAITERS (100),
# HANDOVERS (1,000 per section), MIXED (2,000), EXPIRY_TTL (50ms),
# SETTING (one more server setting, e.g. "deadlock_timeout = 60s"),
# LE_BENCH_PORT.
#
#   test/bench/wait.sh           # as root or as postgres, after make install
#   test/run.sh bench-wait       # the same, after building and installing
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bench=$here/test/bench
. "$here/test/lib/prereq.sh"
. "$here/test/lib/cluster.sh"

WAITERS=${WAITERS:-100}
HANDOVERS=${HANDOVERS:-1000}
MIXED=${MIXED:-2000}
EXPIRY_TTL=${EXPIRY_TTL:-50ms}

echo "reproduce: PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config} WAITERS=$WAITERS" \
    "HANDOVERS=$HANDOVERS MIXED=$MIXED EXPIRY_TTL=$EXPIRY_TTL SETTING=\"${SETTING:-}\" test/bench/wait.sh"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)," \
    "commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"

le_bench_cluster "max_connections = $(( WAITERS + 20 ))" "max_locks_per_transaction = 128" ${SETTING:+"$SETTING"}
cp "$bench/wait_bench.sql" "$dir/"
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir/wait_bench.sql"
le_bench_psql -c "CREATE EXTENSION leader_election" -f "$dir/wait_bench.sql" >/dev/null

# run MODE COUNT KEY: WAITERS sessions campaign on KEY until COUNT grants.
run() {
    local mode=$1 count=$2 key=$3 pids=()
    for i in $(seq 1 "$WAITERS"); do
        le_bench_psql -c "CALL wait_bench_waiter('$key', 'w$i', '$mode', $count, '$EXPIRY_TTL')" >/dev/null &
        pids+=($!)
    done
    wait "${pids[@]}"
}

# report KEY LABEL: the gaps between one period's end and the next grant.
report() {
    le_bench_psql -At -F ' ' -c "SELECT * FROM wait_bench_report('$1')" | while read -r n p50 p99 max refusals ended over; do
        printf '%-8s handovers %5s  %-14s p50 %6s ms  p99 %6s ms  max %6s ms  over 100 ms %s  refusals per handover %s\n' \
            "$2" "$n" "($ended)" "$p50" "$p99" "$max" "$over" "$refusals"
    done
    le_bench_psql -At -F '|' -c "SELECT * FROM wait_bench_slow('$1')" | while IFS='|' read -r at why who next ms gc rc vis; do
        printf '         over 100 ms: %s %s by %s, next %s, after %s ms (grant commit %s ms, release commit %s ms; %s ms after visible)\n' \
            "$at" "$why" "$who" "$next" "$ms" "${gc:-none}" "${rc:-none}" "$vis"
    done
}

run release "$HANDOVERS" k_release
report k_release release
run expire "$HANDOVERS" k_expire
report k_expire expiry
run mixed "$MIXED" k_mixed
report k_mixed mixed
# Checkpoints flush data files on the disk the WAL is on: a commit may wait.
grep -h "checkpoint starting\|checkpoint complete" "$dir/server.log" | cut -c1-160 || echo "no checkpoint"
