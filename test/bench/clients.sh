#!/usr/bin/env bash
# The "more clients help" target (doc/performance.md), measured with more repetitions
# than test/bench/run.sh gives it: le_'s cycle (le_cycle.pgb) and pglock's
# (pglock_cycle.pgb) over 1,000 keys, default durability, with 1 and with 16
# clients, REPS times (default 8) in alternating order, T seconds each
# (default 9; the first 2 s of each run are not sampled).  Not part of the
# test suite.
#
#   test/bench/clients.sh              # as root or postgres, after make install
#   REPS=4 T=6 test/bench/clients.sh   # quicker (~2 min)
#   PERF=1 test/bench/clients.sh     # then a perf profile of each at 16 clients (root)
#
# Per repetition it prints each run's tps and the share of the machine's CPU
# time that was busy (all but idle, iowait and steal, from /proc/stat, over the sampled
# seconds; pgbench's own work included), then le_'s 16/1 ratio, pglock's, and
# le_'s ratio to pglock's.  The summary gives the medians over the
# repetitions with their lowest and highest: the ratio of two tps ratios of
# separate runs carries the noise of four runs (on the development machine
# one client's tps moved between 1,300 and 2,100 from run to run).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bench=$here/test/bench
. "$here/test/lib/prereq.sh"
. "$here/test/lib/cluster.sh"

REPS=${REPS:-8}
T=${T:-9}
PERF=${PERF:-0}
[ "$T" -ge 4 ] || { echo "T must be at least 4" >&2; exit 2; }
[ "$REPS" -ge 1 ] || { echo "REPS must be at least 1" >&2; exit 2; }
le_perf_check

le_bench_cluster "max_connections = 40"
le_bench_load "$bench"
echo "reproduce: REPS=$REPS T=$T test/bench/clients.sh"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)," \
    "commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"

# busy and total jiffies of all CPUs
jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
# one NAME CLIENTS: prints "tps busy%"
one() {
    local out a b
    out=$(mktemp "$dir/out.XXXXXX")
    le_as_pg "$PG_BINDIR/pgbench" -n -M prepared -h "$dir" -p "$port" -U postgres -c "$2" -j 2 -T "$T" \
        -f "$dir/$1.pgb" postgres >"$out" 2>&1 &
    sleep 2
    a=$(jiffies)
    sleep $((T - 3))
    b=$(jiffies)
    wait $! || true
    grep -q 'aborted\|ERROR' "$out" && { echo "pgbench failed: $1 -c $2" >&2; tail -5 "$out" >&2; exit 1; }
    awk -v a="$a" -v b="$b" '/^tps/ { tps = $3 } END { split(a, x, " "); split(b, y, " ");
        printf "%.0f %.0f", tps, 100 * (y[1] - x[1]) / (y[2] - x[2]) }' "$out"
    rm -f "$out"
}
declare -a RL RP RX X1 X16
for rep in $(seq "$REPS"); do
    order="le_cycle pglock_cycle"
    [ $((rep % 2)) -eq 0 ] && order="pglock_cycle le_cycle"
    declare -A tps=() busy=()
    for c in 1 16; do
        for s in $order; do
            res=$(one "$s" "$c") || exit 1   # one's exit ends only its subshell
            read -r tps[$s/$c] busy[$s/$c] <<<"$res"
        done
    done
    RL[$rep]=$(le_ratio "${tps[le_cycle/16]}" "${tps[le_cycle/1]}")
    RP[$rep]=$(le_ratio "${tps[pglock_cycle/16]}" "${tps[pglock_cycle/1]}")
    RX[$rep]=$(le_ratio "${RL[$rep]}" "${RP[$rep]}")
    printf '  rep %s: le_ %s → %s tps (CPU busy %s%% → %s%%), pglock %s → %s (%s%% → %s%%); 16/1: le_ %s, pglock %s, le_/pglock %s\n' \
        "$rep" "${tps[le_cycle/1]}" "${tps[le_cycle/16]}" "${busy[le_cycle/1]}" "${busy[le_cycle/16]}" \
        "${tps[pglock_cycle/1]}" "${tps[pglock_cycle/16]}" "${busy[pglock_cycle/1]}" "${busy[pglock_cycle/16]}" \
        "${RL[$rep]}" "${RP[$rep]}" "${RX[$rep]}"
    X1[$rep]=$(le_ratio "${tps[le_cycle/1]}" "${tps[pglock_cycle/1]}")
    X16[$rep]=$(le_ratio "${tps[le_cycle/16]}" "${tps[pglock_cycle/16]}")
done
# PERF=1: one more 16-client run of each cycle under perf (all CPUs,
# cpu-clock, 999 Hz, T-3 s from 2 s in; le_ first, one run each), samples
# per 1,000 transactions: in total, in this cluster's processes (the
# postmaster and its children), in their kernel time and in pgbench, then
# the symbols with the largest difference between le_ and pglock.
profile16() {
    local s n pids all pb
    echo
    echo "perf, 16 clients, samples per 1,000 transactions (all processes, T=$T s runs):"
    for s in le_cycle pglock_cycle; do
        (cd "$dir" && le_as_pg "$PG_BINDIR/pgbench" -n -M prepared -h "$dir" -p "$port" -U postgres -c 16 -j 2 \
            -T "$T" -l --log-prefix="$dir/prof_tx" -f "$dir/$s.pgb" postgres >/dev/null 2>&1) &
        sleep 2
        local t0 t1
        t0=$(date +%s.%N)
        # this cluster's server processes: the postmaster and its children
        pids=$(head -1 "$dir/data/postmaster.pid")
        pids="$pids,$(ps -o pid= --ppid "$pids" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')"
        perf record -q -a -F 999 -o "$dir/perf.$s" -- sleep $((T - 3)) >/dev/null ||
            { echo "perf record failed" >&2; exit 1; }
        t1=$(date +%s.%N)
        wait
        n=$(le_tx_in_window "$t0" "$t1" "$dir"/prof_tx.*)
        rm -f "$dir"/prof_tx.*
        [ "$n" -gt 0 ] || { echo "no transaction in perf's window" >&2; exit 1; }
        all=$(perf report -i "$dir/perf.$s" --no-children -n --sort comm --stdio 2>/dev/null |
            awk '/^ *[0-9.]+%/ { c += $2 } END { print c + 0 }')
        pb=$(perf report -i "$dir/perf.$s" --comm pgbench --no-children -n --sort comm --stdio 2>/dev/null |
            awk '/^ *[0-9.]+%/ { c += $2 } END { print c + 0 }')
        le_perf_rates "$dir/perf.$s" "$n" --pid "$pids" >"$dir/prof.$s"
        # this cluster's processes and their kernel time, from the per-symbol
        # rates ("[k]" marks kernel symbols; perf's by-dso view of a --pid
        # filter leaves the kernel out)
        awk -F'\t' -v n="$n" -v s="$s" -v all="$all" -v pb="$pb" '{ pg += $2; if ($1 ~ /^\[k\]/) k += $2 }
            END { printf "  %-13s %d transactions: %.0f samples (this cluster'"'"'s processes %.0f, of which kernel %.0f; pgbench %.0f; other %.0f)\n",
                         s, n, 1000 * all / n, pg, k, 1000 * pb / n, 1000 * all / n - pg - 1000 * pb / n }' "$dir/prof.$s"
        rm -f "$dir/perf.$s"
    done
    echo "  this cluster's processes, symbols with the largest difference (samples per 1,000 transactions, le_ vs pglock):"
    le_perf_diff "$dir/prof.le_cycle" "$dir/prof.pglock_cycle" 14 abs
}
printf '\nmedian over %s repetitions (lowest – highest):\n' "$REPS"
printf '| le_ 16 clients / 1 client | %s |\n' "$(le_span %s "${RL[@]}")"
printf '| pglock 16 clients / 1 client | %s |\n' "$(le_span %s "${RP[@]}")"
printf '| le_'"'"'s 16/1 / pglock'"'"'s 16/1 (target ≥ 1) | %s |\n' "$(le_span %s "${RX[@]}")"
printf '| le_ / pglock, 1 client | %s |\n' "$(le_span %s "${X1[@]}")"
printf '| le_ / pglock, 16 clients | %s |\n' "$(le_span %s "${X16[@]}")"
[ "$PERF" != 0 ] && profile16
exit 0
