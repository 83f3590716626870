#!/usr/bin/env bash
# The benchmark (doc/performance.md): every lease operation next to its baseline,
# measured in the same run on one throwaway cluster; not part of the test
# suite (no timing assertion anywhere).
#
#   test/bench/run.sh            # as root or as postgres, after make install
#   T=3 test/bench/run.sh        # seconds per pgbench run (default 5)
#   PASSES=5 test/bench/run.sh   # runs per script, alternated (default 2)
#   ONLY=fence test/bench/run.sh # only the fenced INSERT rows (their phase
#                                # and table rows; for work on the fence)
#   PERF=1 ONLY=fence test/bench/run.sh
#                                # then perf of the one-row and 100-row INSERTs
#                                # (fence_perf; root, linux-perf; +80 s); PERF=1 on the whole
#                                # run also profiles the cycles (cycle_perf)
#   test/run.sh bench            # the same, after building and installing
#
# pgbench -M prepared, 2 clients unless said otherwise.  Every script runs
# PASSES times, variants alternating, every other pass in reverse order
# (A B C, C B A, A B C ..) so that background load on a shared machine, and
# whatever a run leaves to the next (autovacuum of the rows it inserted),
# hit them alike; a row shows the mean tps of those runs.  Only ratios mean
# anything on a loaded machine.  Rows:
#   - acquire + release over 1,000 keys: le_acquire/le_release vs the
#     statements of cirello-io/pglock (pglock_cycle.pgb), default durability
#     and fsync = off; and the same two interleaved in single pgbench runs
#     (PASSES runs of T s each, see mixed), ratio of mean latencies; all of
#     it again with leader_election.history = off (no audit rows, as
#     pglock keeps none);
#   - renew a held lease vs a single-row UPDATE of the expiry, both
#     committing synchronously, default durability and fsync = off;
#   - refused acquire vs a refused pg_try_advisory_lock, and the WAL bytes a
#     refusal writes (must be 0);
#   - fenced INSERT vs the same INSERT without trigger, synchronous_commit =
#     off, 1 row and 100 rows per transaction, and the floor of any row
#     trigger (the same INSERT with a C trigger that does nothing): measured
#     differently, interleaved in single pgbench runs (see fence_mixed);
#   - 16 clients vs 1 cycling over 1,000 keys, le_ and pglock (default
#     durability): le_'s 16/1 ratio should be at least pglock's;
#   - the cycle with leader_election.notify = all (grants notify too) and
#     none, 2 and 16 clients, next to the default (releases), and with every
#     key watched by another session (le_watch), so that every release
#     notifies: a NOTIFY makes PostgreSQL serialise notifying committers
#     cluster-wide; the other runs have no watcher, so nothing is notified.
# Rows show le_'s ratio as the median over passes of the ratios within each
# pass (the two scripts ran next to each other).
# Runtime: 24 scripts x PASSES runs x T s, 4 x PASSES interleaved cycle runs
# x T s, the fence's 2 x FENCE_PASSES runs x FENCE_T s, + ~1.5 min (9 minutes
# at PASSES=3, T=5; PERF=1 adds ~1.5 min);
# ONLY=fence: 2 x FENCE_PASSES runs x FENCE_T s + ~10 s.
#   FENCE_PASSES=8 FENCE_T=3     # the fence's runs (defaults)
#   FENCE_CLIENTS=2              # clients of the fence's runs (default 2)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bench=$here/test/bench
. "$here/test/lib/prereq.sh"
. "$here/test/lib/cluster.sh"
T=${T:-5}
PASSES=${PASSES:-2}
FENCE_PASSES=${FENCE_PASSES:-8}
FENCE_T=${FENCE_T:-3}
FENCE_CLIENTS=${FENCE_CLIENTS:-2}
ONLY=${ONLY:-}
case "$ONLY" in
    ''|fence) ;;
    *) echo "ONLY must be empty or 'fence', not '$ONLY'" >&2; exit 2 ;;
esac
PERF=${PERF:-0}
le_perf_check
start=$SECONDS
le_bench_cluster "checkpoint_timeout = 30min" "max_connections = 60"
psql() { le_bench_psql -At "$@"; }

le_bench_load "$bench"

# A session holding advisory keys 1000001..1001000 for the whole run, idle
# (not in a transaction: that would hold back the xmin horizon).
mkfifo "$dir/holder.fifo"
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir/holder.fifo"
le_as_pg "$PG_BINDIR/psql" -X -q -h "$dir" -p "$port" -U postgres -d postgres <"$dir/holder.fifo" >/dev/null 2>&1 &
exec 3>"$dir/holder.fifo"
mkfifo "$dir/watcher.fifo"
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir/watcher.fifo"
le_as_pg "$PG_BINDIR/psql" -X -q -h "$dir" -p "$port" -U postgres -d postgres <"$dir/watcher.fifo" >/dev/null 2>&1 &
exec 4>"$dir/watcher.fifo"
trap 'exec 3>&- 4>&-; le_cluster_stop "$dir"' EXIT
echo "SELECT count(pg_advisory_lock(k)) FROM generate_series(1000001, 1001000) AS k;" >&3
for _ in $(seq 100); do
    [ "$(psql -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objid > 1000000")" = 1000 ] && break
    sleep 0.1
done

# run CFG NAME CLIENTS SCRIPT [PGOPTIONS]: one pgbench run; appends its tps to TPS[CFG/NAME].
declare -A TPS
run() {
    local cfg=$1 name=$2 clients=$3 script=$4 opts=${5:-} out tps jobs=2
    [ "$clients" -lt 2 ] && jobs=1
    out=$(le_as_pg env PGOPTIONS="$opts" "$PG_BINDIR/pgbench" -n -M prepared -h "$dir" -p "$port" -U postgres \
            -c "$clients" -j "$jobs" -T "$T" -D tok="$tok" -D ftok="$ftok" -f "$dir/$script" postgres 2>&1) || true
    if grep -q 'aborted\|ERROR' <<<"$out"; then
        echo "pgbench failed: $cfg $name" >&2; tail -5 <<<"$out" >&2; exit 1
    fi
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out")
    TPS[$cfg/$name]="${TPS[$cfg/$name]:-} ${tps:-0}"
    printf '  %-8s %-14s %3s clients %10.0f tps\n' "$cfg" "$name" "$clients" "${tps:-0}" >&2
}
mean() { tr ' ' '\n' <<<"${TPS[$1]}" | awk 'NF { s += $1; n++ } END { printf "%.0f", n ? s / n : 0 }'; }
# paired A B: the median over passes of A's tps / B's tps in the same pass
# (the two ran next to each other, so a slow stretch of the machine hits
# both; the median ignores a pass that one stall hit unevenly).
paired() {
    local -a a=(${TPS[$1]}) b=(${TPS[$2]}) r=()
    local i
    for i in "${!a[@]}"; do r+=("$(le_ratio "${a[$i]}" "${b[$i]}")"); done
    le_median "${r[@]}"
}

# Each phase: (name clients script [PGOPTIONS]) lines, run PASSES times alternated
# (odd passes in order, even passes in reverse).
phase() {
    local cfg=$1 spec=$2 pass name clients script opts
    psql -c "CHECKPOINT" >/dev/null
    # One uncounted second of every script first: after the checkpoint the
    # first change of each page writes a full-page image, which would fall
    # on whichever script runs first (le_cycle ran at 0.6 of its later
    # passes right after it).
    while read -r name clients script opts; do
        [ -n "$name" ] && le_as_pg env PGOPTIONS="${opts:-}" "$PG_BINDIR/pgbench" -n -M prepared -h "$dir" -p "$port" \
            -U postgres -c "$clients" -j 1 -T 1 -D tok="$tok" -D ftok="$ftok" -f "$dir/$script" postgres >/dev/null 2>&1
    done <<<"$spec"
    for pass in $(seq "$PASSES"); do
        while read -r name clients script opts; do
            [ -n "$name" ] && run "$cfg" "$name" "$clients" "$script" "${opts:-}"
        done <<<"$([ $((pass % 2)) -eq 1 ] && echo "$spec" || tac <<<"$spec")"
    done
}
LEASE_OPS="le_cycle 2 le_cycle.pgb
pglock_cycle 2 pglock_cycle.pgb
le_cycle_nh 2 le_cycle.pgb -c leader_election.history=off
le_renew 2 le_renew.pgb
raw_update 2 raw_update.pgb
le_refused 2 le_refused.pgb
adv_refused 2 adv_refused.pgb"
CLIENT_OPS="le_c1 1 le_cycle.pgb
pglock_c1 1 pglock_cycle.pgb
le_c16 16 le_cycle.pgb
pglock_c16 16 pglock_cycle.pgb
le_none_cycle 2 le_cycle.pgb -c leader_election.notify=none
le_none_c16 16 le_cycle.pgb -c leader_election.notify=none"
# Runs while another session watches every key (le_watch): every release
# then sends its NOTIFY, as it does when pg_leader followers wait for it.
WATCHED_OPS="le_w_cycle 2 le_cycle.pgb
le_w_c16 16 le_cycle.pgb
le_all_cycle 2 le_cycle.pgb -c leader_election.notify=all
le_all_c16 16 le_cycle.pgb -c leader_election.notify=all"
# The fenced INSERTs: each run is one pgbench (2 clients) that picks the
# plain, the fenced or the floor's script (trig_t: a C trigger that does
# nothing) at random for every transaction and logs each transaction's
# latency (-l); the rows compare the scripts' mean latencies within each
# run.  Interleaved at the transaction, they meet the same machine: as
# separate 5-second runs, the plain INSERT alone moved between 18,000 and
# 30,000 tps from run to run, far more than the fence's cost.  The latency
# ratio is the stricter measure: tps also pays pgbench's own time per
# transaction, the same for all.  Before each run the tables are emptied and
# a checkpoint is taken, so that every run starts from the same state
# (otherwise they grow by millions of rows).
declare -A LAT
# mixed NAME SECONDS CLIENTS PGOPTIONS SCRIPT...: one pgbench run that picks
# one of the scripts at random for every transaction, with its
# per-transaction log; appends each script's mean latency (µs) to
# LAT[NAME/0], LAT[NAME/1], ... in the order given.
mixed() {
    local name=$1 secs=$2 clients=$3 opts=$4 logs out means m i=0 jobs=2 script
    shift 4
    local -a files=()
    for script in "$@"; do files+=(-f "$dir/$script"); done
    [ "$clients" -lt 2 ] && jobs=1
    logs=$(mktemp -d "$dir/txlog.XXXXXX")
    [ "$(id -u)" -eq 0 ] && chown postgres: "$logs"
    out=$(cd "$logs" && le_as_pg env PGOPTIONS="$opts" "$PG_BINDIR/pgbench" -n -M prepared -h "$dir" -p "$port" \
            -U postgres -c "$clients" -j "$jobs" -T "$secs" -D tok="$tok" -D ftok="$ftok" -l --log-prefix="$logs/tx" \
            "${files[@]}" postgres 2>&1) || true
    if grep -q 'aborted\|ERROR' <<<"$out"; then
        echo "pgbench failed: $name" >&2; tail -5 <<<"$out" >&2; exit 1
    fi
    # log lines: client transaction latency_us script_no epoch epoch_us
    means=$(cat "$logs"/tx.* | awk -v k=$# '{ s[$4] += $3; n[$4]++ }
        END { for (i = 0; i < k; i++) printf "%.2f ", n[i] ? s[i] / n[i] : 0 }')
    rm -rf "$logs"
    for m in $means; do
        LAT[$name/$i]="${LAT[$name/$i]:-} $m"
        i=$((i + 1))
    done
    printf '  %-8s mean latency (us) of %s: %s\n' "$name" "$*" "$means" >&2
}
# fence_reset: empty the INSERTs' tables and take a checkpoint.
fence_reset() {
    psql -c "TRUNCATE plain_t, trig_t" -c "SET leader_election.fencing_token = $ftok" \
        -c "TRUNCATE fenced_t" -c "CHECKPOINT" >/dev/null
}
fence_mixed() {   # name base_script le_script floor_script
    fence_reset
    mixed "$1" "$FENCE_T" "$FENCE_CLIENTS" "-c synchronous_commit=off" "$2" "$3" "$4"
}
# The cycle interleaved with pglock's in the same way (PASSES runs of T s):
# with flushes, both wait for the disk, whose flush latency moves by half
# within a run; interleaved, they meet the same flushes.
cycle_mixed() {   # name [PGOPTIONS]
    local pass
    for pass in $(seq "$PASSES"); do mixed "$1" "$T" 2 "${2:-}" le_cycle.pgb pglock_cycle.pgb; done
}
fence_phase() {
    local pass
    for pass in $(seq "$FENCE_PASSES"); do
        fence_mixed ins ins_plain.pgb ins_fenced.pgb ins_trig.pgb
        fence_mixed ins100 ins100_plain.pgb ins100_fenced.pgb ins100_trig.pgb
    done
}

echo "pgbench -M prepared, T=${T}s per run, every script ${PASSES} times (alternated); $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
row() {   # label cfg le base target
    local l b
    l=$(mean "$2/$3"); b=$(mean "$2/$4")
    printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$b" "$l" "$(paired "$2/$3" "$2/$4")" "$5" "$6"
}
lat_mean() { tr ' ' '\n' <<<"${LAT[$1]}" | awk 'NF { s += $1; n++ } END { printf "%.1f", s / n }'; }
lat_paired() {   # A B: median over runs of B's mean latency / A's (A as fast as B: 1)
    local -a as=(${LAT[$1]}) bs=(${LAT[$2]}) rs=()
    local i
    for i in "${!as[@]}"; do rs+=("$(le_ratio "${bs[$i]}" "${as[$i]}")"); done
    le_median "${rs[@]}"
}
lat_row() {   # label name target
    printf '| %s | %s µs | %s µs | %s | %s | %s |\n' "$1" "$(lat_mean "$2/0")" "$(lat_mean "$2/1")" \
        "$(lat_paired "$2/1" "$2/0")" "$3" "INSERT without trigger, interleaved; ratio of mean latencies"
    printf '| %s | %s µs | %s µs | %s | %s | %s |\n' "… a C trigger that does nothing, instead of the fence" \
        "$(lat_mean "$2/0")" "$(lat_mean "$2/2")" "$(lat_paired "$2/2" "$2/0")" "–" \
        "the floor of any row trigger"
}
cycle_row() {   # label name target
    printf '| %s | %s µs | %s µs | %s | %s | %s |\n' "$1" "$(lat_mean "$2/1")" "$(lat_mean "$2/0")" \
        "$(lat_paired "$2/0" "$2/1")" "$3" "pglock's cycle, interleaved; ratio of mean latencies"
}
fence_rows() {
    lat_row "fenced INSERT, 1 row, \`synchronous_commit = off\`" ins "≥ 0.95"
    lat_row "fenced INSERT, 100 rows, \`synchronous_commit = off\`" ins100 "≥ 0.99"
}
# perf_pair WHAT BASE LE PGOPTIONS BEFORE: one client runs the script BASE,
# then LE, for PERF_SECONDS (12) s each (the command BEFORE run before each),
# while perf samples its backend (le_perf_backend, LE_PERF_* as set by the
# caller); printed per 1,000 transactions: each run's samples, the shared
# objects, and the symbols (self time) whose samples grew most from BASE to
# LE.  The totals of two separate runs on a shared machine differ by more
# than a few microseconds per transaction, so read the symbols, not the
# totals; test/bench/instructions.sh counts exactly.
perf_pair() {
    local what=$1 base=$2 le=$3 opts=$4 before=$5 s runs n secs=${PERF_SECONDS:-12}
    echo
    echo "perf of the backend ($what), one client, \`fsync = $(psql -c 'SHOW fsync')\`, ${secs} s each:"
    for s in "$base" "$le"; do
        $before
        runs=$(le_perf_backend "$dir/prof.$s" "$secs" postgres "$opts" -D tok="$tok" -D ftok="$ftok" \
            -f "$dir/$s.pgb") || exit 1
        read -r n _ <<<"$runs"
        printf '  %-12s %6s transactions in the window, %s samples per 1,000\n' "$s" "$n" \
            "$(awk -F'\t' '{ s += $2 } END { printf "%.0f", s }' "$dir/prof.$s")"
    done
    echo "  shared objects, $base -> $le (samples per 1,000 transactions):"
    le_perf_diff "$dir/prof.$base.dso" "$dir/prof.$le.dso" 8 abs
    echo "  the symbols that grew most, $base -> $le:"
    le_perf_diff "$dir/prof.$base" "$dir/prof.$le" 24
}
# fence_perf (PERF=1): where the fence's time goes: the plain and the fenced
# one-row INSERT, synchronous_commit = off, user-space code only, 9,999 Hz
# (a sample per 0.1 ms of CPU), tables emptied and checkpointed before each;
# then the 100-row INSERT, plain against a C row trigger that does nothing
# (what any row trigger costs), and that against the fence (what the fence
# adds to it).  What is in leader_election.so is the fence's own code.
fence_perf() {
    local what="user-space code, \`synchronous_commit = off\`"
    LE_PERF_FREQ=9999 LE_PERF_USER=1 perf_pair "$what, one-row INSERT" \
        ins_plain ins_fenced "-c synchronous_commit=off" fence_reset
    LE_PERF_FREQ=9999 LE_PERF_USER=1 perf_pair "$what, 100-row INSERT, no trigger -> a no-op row trigger" \
        ins100_plain ins100_trig "-c synchronous_commit=off" fence_reset
    LE_PERF_FREQ=9999 LE_PERF_USER=1 perf_pair "$what, 100-row INSERT, a no-op row trigger -> the fence" \
        ins100_trig ins100_fenced "-c synchronous_commit=off" fence_reset
}
# cycle_perf (PERF=1, whole run, while fsync is off): pglock's cycle and
# le_'s, user and kernel code, 9,999 Hz: what le_'s CPU goes to that
# pglock's does not (the history, the WAL written).
cycle_perf() {
    LE_PERF_FREQ=9999 perf_pair "user and kernel code, acquire + release over 1,000 keys" \
        pglock_cycle le_cycle "" true
}
table_head() {
    echo
    echo "| operation | baseline (tps) | le_ (tps) | le_ / baseline (tps; for latencies baseline / le_) | target | baseline is |"
    echo "| --- | --- | --- | --- | --- | --- |"
}

if [ "$ONLY" = fence ]; then
    fence_phase
    table_head
    fence_rows
    [ "$PERF" != 0 ] && fence_perf
    echo "elapsed: $(( SECONDS - start ))s"
    exit 0
fi

phase default "$LEASE_OPS
$CLIENT_OPS"
cycle_mixed cycle_mix
cycle_mixed cycle_mix_nh "-c leader_election.history=off"
# A second idle session watches k1..k1000 for the WATCHED_OPS runs.
echo "SELECT count(le_watch('k' || i)) FROM generate_series(1, 1000) AS i;" >&4
for _ in $(seq 100); do
    [ "$(psql -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 19543")" = 1000 ] && break
    sleep 0.1
done
phase default "$WATCHED_OPS"
echo "SELECT pg_advisory_unlock_all();" >&4
fence_phase

# WAL written by refusals (pgbench -t: a fixed number of transactions), with
# autovacuum off meanwhile (the WAL position is the cluster's) and le_lease
# vacuumed first: a read in PostgreSQL prunes the page it reads when other
# transactions left dead row versions there, and writes that (Heap2/PRUNE,
# with a full-page image after a checkpoint).  Three runs
# counted 3,104 to 9,297 bytes of such records during the refusals
# (pg_waldump --stats), none of the refusals' own.  What was written, if
# anything, is listed by resource manager on stderr.
wal_of() {
    local script=$1 w0 w1 bytes
    w0=$(psql -c "SELECT pg_current_wal_insert_lsn()")
    le_as_pg "$PG_BINDIR/pgbench" -n -M prepared -h "$dir" -p "$port" -U postgres -c 2 -j 2 -t 1000 \
        -f "$dir/$script" postgres >/dev/null 2>&1
    w1=$(psql -c "SELECT pg_current_wal_insert_lsn()")
    bytes=$(psql -c "SELECT pg_wal_lsn_diff('$w1', '$w0')::bigint")
    if [ "$bytes" != 0 ]; then
        echo "  WAL written during $script:" >&2
        le_as_pg "$PG_BINDIR/pg_waldump" -p "$dir/data/pg_wal" -s "$w0" -e "$w1" --stats=record 2>&1 | sed 's/^/    /' >&2
    fi
    echo "$bytes"
}
psql -c "ALTER SYSTEM SET autovacuum = off" -c "SELECT pg_reload_conf()" >/dev/null
sleep 1
psql -c "VACUUM le_lease" >/dev/null
wal_le=$(wal_of le_refused.pgb)
wal_adv=$(wal_of adv_refused.pgb)
psql -c "ALTER SYSTEM RESET autovacuum" -c "SELECT pg_reload_conf()" >/dev/null

psql -c "ALTER SYSTEM SET fsync = off" -c "SELECT pg_reload_conf()" >/dev/null
sleep 1
[ "$(psql -c 'SHOW fsync')" = off ] || { echo "fsync did not switch off" >&2; exit 1; }
phase fsyncoff "$LEASE_OPS"
cycle_mixed cycle_mix_off
cycle_mixed cycle_mix_off_nh "-c leader_election.history=off"

# --- report ------------------------------------------------------------------
scale() {   # label cfg name1 name16
    local a b
    a=$(mean "$2/$3"); b=$(mean "$2/$4")
    printf '%s %s %s' "$a" "$b" "$(le_ratio "$b" "$a")"
}
table_head
row "acquire + release, 1,000 keys, default durability" default le_cycle pglock_cycle "≥ 1.0" "pglock's cycle"
row "acquire + release, 1,000 keys, \`fsync = off\`" fsyncoff le_cycle pglock_cycle "≥ 1.0" "pglock's cycle"
cycle_row "acquire + release, 1,000 keys, default durability, interleaved" cycle_mix "≥ 1.0"
cycle_row "acquire + release, 1,000 keys, \`fsync = off\`, interleaved" cycle_mix_off "≥ 1.0"
row "acquire + release, 1,000 keys, \`history = off\`, default durability" default le_cycle_nh pglock_cycle "–" "pglock's cycle"
row "acquire + release, 1,000 keys, \`history = off\`, \`fsync = off\`" fsyncoff le_cycle_nh pglock_cycle "–" "pglock's cycle"
cycle_row "acquire + release, 1,000 keys, \`history = off\`, default durability, interleaved" cycle_mix_nh "–"
cycle_row "acquire + release, 1,000 keys, \`history = off\`, \`fsync = off\`, interleaved" cycle_mix_off_nh "–"
row "renew a held lease, default durability" default le_renew raw_update "–" "single-row UPDATE"
row "renew a held lease, \`fsync = off\`" fsyncoff le_renew raw_update "≥ 0.9" "single-row UPDATE"
row "refused acquire, default durability" default le_refused adv_refused "≥ 0.6" "refused pg_try_advisory_lock"
row "refused acquire, \`fsync = off\`" fsyncoff le_refused adv_refused "≥ 0.6" "refused pg_try_advisory_lock"
fence_rows
row "acquire + release, 2 clients, every key watched, \`notify = all\`" default le_all_cycle pglock_cycle "–" "pglock's cycle"
row "acquire + release, 2 clients, \`leader_election.notify = none\`" default le_none_cycle pglock_cycle "–" "pglock's cycle"
row "acquire + release, 16 clients, default (\`notify = releases\`, nobody watching)" default le_c16 pglock_c16 "–" "pglock's cycle, 16 clients"
row "acquire + release, 16 clients, every key watched, \`notify = all\`" default le_all_c16 pglock_c16 "–" "pglock's cycle, 16 clients"
row "acquire + release, 16 clients, \`notify = none\`" default le_none_c16 pglock_c16 "–" "pglock's cycle, 16 clients"
row "acquire + release, 2 clients, every key watched (each release notifies)" default le_w_cycle pglock_cycle "–" "pglock's cycle"
row "acquire + release, 16 clients, every key watched (each release notifies)" default le_w_c16 pglock_c16 "–" "pglock's cycle, 16 clients"
read -r l1 l16 lr <<<"$(scale x default le_c1 le_c16)"
read -r p1 p16 pr <<<"$(scale x default pglock_c1 pglock_c16)"
printf '| cycle, 16 clients / 1 client, default durability | pglock %s → %s (%s×) | %s → %s (%s×) | %s | ≥ pglock'"'"'s | pglock |\n' \
    "$p1" "$p16" "$pr" "$l1" "$l16" "$lr" "$(le_ratio "$lr" "$pr")"
echo
echo "WAL written by 2,000 refusals: le_acquire $wal_le bytes, pg_try_advisory_lock $wal_adv bytes (target 0)"
if [ "$PERF" != 0 ]; then
    cycle_perf
    # the fence's rows ran with default durability, before the fsync = off phase
    psql -c "ALTER SYSTEM RESET fsync" -c "SELECT pg_reload_conf()" >/dev/null
    sleep 1
    fence_perf
fi
echo "elapsed: $(( SECONDS - start ))s"
