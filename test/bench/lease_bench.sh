#!/usr/bin/env bash
# Benchmark of the lease calls; not part of the test suite.
#
#   test/bench/lease_bench.sh [SECONDS_PER_ROUND] [ROUNDS]
#
# Starts its own throwaway cluster, runs pgbench with 2 clients and prints
# ratios against baselines measured in the same run, variants alternating
# round by round so that background load hits them alike:
#   refused le_acquire (the lease is validly held by someone else: what
#     polling followers send)  vs  a plain read of the same row through
#     le_leases, and vs pg_try_advisory_xact_lock()
#   le_renew (each client its own lease; forced synchronous commit)  vs  a
#     plain UPDATE of one row per client with synchronous_commit = on
#   le_acquire + le_release of a free lease (a full ownership period: two
#     commits, history row, NOTIFY)  vs  two plain UPDATE transactions
# The extension must be installed in the PostgreSQL of PG_CONFIG.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/test/lib/prereq.sh"
. "$here/test/lib/cluster.sh"
secs=${1:-5}
rounds=${2:-3}
le_bench_cluster "synchronous_commit = on"

le_bench_psql <<'SQL'
\o /dev/null
CREATE EXTENSION leader_election;
SELECT le_acquire('held', 'the-leader', '1 hour');
SELECT le_acquire('own-' || c, 'renewer', '1 hour') FROM generate_series(1, 2) AS c;
CREATE TABLE plain_t (id int PRIMARY KEY, v bigint NOT NULL, t timestamptz) WITH (fillfactor = 50);
INSERT INTO plain_t SELECT c, 0, now() FROM generate_series(1, 4) AS c;
SQL

w() { printf '%s\n' "$2" > "$dir/$1.sql"; }
w refuse   "SELECT acquired FROM le_acquire('held', 'follower-' || :client_id, '15 seconds');"
w read     "SELECT holder, fencing_token, expires_at FROM le_leases WHERE lease_key = 'held';"
w advisory "SELECT pg_try_advisory_xact_lock(42);"
w renew    "SELECT le_renew('own-' || (:client_id + 1), 'renewer', 1, '1 hour');"
w update   "UPDATE plain_t SET v = v + 1, t = clock_timestamp() WHERE id = :client_id + 1;"
w cycle    "SELECT fencing_token AS tok FROM le_acquire('cycle-' || :client_id, 'o', '1 minute') \\gset
SELECT le_release('cycle-' || :client_id, 'o', :tok);"
w update2  "UPDATE plain_t SET v = v + 1, t = clock_timestamp() WHERE id = :client_id + 1;
UPDATE plain_t SET v = v + 1, t = clock_timestamp() WHERE id = :client_id + 3;"
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"/*.sql

variants="refuse read advisory renew update cycle update2"
declare -A tps total
declare -a r_read r_adv r_renew r_cycle
echo "pgbench: 2 clients, $rounds rounds of ${secs}s per variant"
for r in $(seq 1 "$rounds"); do
    line="  round $r:"
    for v in $variants; do
        tps[$v]=$(le_pgbench "$dir" "$port" "$secs" 2 "$dir/$v.sql")
        total[$v]=$(awk -v a="${total[$v]:-0}" -v b="${tps[$v]}" 'BEGIN { print a + b }')
        line+=$(printf ' %s %.0f' "$v" "${tps[$v]}")
    done
    echo "$line tps"
    r_read+=("$(le_ratio "${tps[refuse]}" "${tps[read]}")")
    r_adv+=("$(le_ratio "${tps[refuse]}" "${tps[advisory]}")")
    r_renew+=("$(le_ratio "${tps[renew]}" "${tps[update]}")")
    r_cycle+=("$(le_ratio "${tps[cycle]}" "${tps[update2]}")")
done

echo
echo "ratio (median of rounds / of totals)"
echo "  refused le_acquire / read of the row via le_leases:         $(le_median "${r_read[@]}") / $(le_ratio "${total[refuse]}" "${total[read]}")"
echo "  refused le_acquire / pg_try_advisory_xact_lock:             $(le_median "${r_adv[@]}") / $(le_ratio "${total[refuse]}" "${total[advisory]}")"
echo "  le_renew / UPDATE of one row (synchronous_commit = on):     $(le_median "${r_renew[@]}") / $(le_ratio "${total[renew]}" "${total[update]}")"
echo "  le_acquire + le_release / two UPDATE transactions:          $(le_median "${r_cycle[@]}") / $(le_ratio "${total[cycle]}" "${total[update2]}")"
