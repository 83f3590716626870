#!/usr/bin/env bash
# The fence per partition of a group next to the fence of one lease
# (doc/fence.md, "One table, many partitions"), in the same run: the same
# INSERT into two tables of the same shape, lease_t fenced by one lease
# (le_protect(t, key)) and group_t fenced per partition of a group of 4
# (le_protect(t, group_name => ..., partition_column => 'shard')), whose
# partitions one member holds.  Not part of the test suite (no timing
# assertion).
#
#   test/bench/group_fence.sh            # as root or as postgres, after make install
#   PASSES=8 T=3 test/bench/group_fence.sh  # interleaved runs and their seconds (defaults)
#   ICOUNT=1 test/bench/group_fence.sh   # instructions per transaction instead (callgrind,
#                                        # valgrind needed; ~6 min): N=2000 W=1000 for the
#                                        # one-row scripts, N100=300 W100=200 for the others
#
# Scripts (each pair differs only in the table and the tokens):
#   gf1_*       one row, of a random partition;
#   gf100one_*  100 rows of one random partition;
#   gf100mix_*  100 rows going round the 4 partitions (each row another
#               lease than the row before: no per-statement shortcut).
# Default: each pass is one pgbench (2 clients, synchronous_commit = off)
# per pair that picks one of the two scripts at random for every
# transaction, with pgbench's per-transaction log; a row gives both mean
# latencies and the median over passes of group / lease (1: as fast).
# ICOUNT=1: the server runs under callgrind; each script runs with one
# client W and then W + N transactions, and the difference of the two
# backends' totals over N is its instructions per transaction.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bench=$here/test/bench
. "$here/test/lib/prereq.sh"
. "$here/test/lib/cluster.sh"
PASSES=${PASSES:-8}
T=${T:-3}
N=${N:-2000}
W=${W:-1000}
N100=${N100:-300}
W100=${W100:-200}
ICOUNT=${ICOUNT:-0}
PAIRS="gf1 gf100one gf100mix"

if [ "$ICOUNT" = 0 ]; then
    le_bench_cluster "checkpoint_timeout = 30min"
else
    le_callgrind_cluster
fi
psql() { le_bench_psql -At "$@"; }
cp "$bench"/gf*.pgb "$dir/"
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"/gf*.pgb

psql >/dev/null <<'SQL'
CREATE EXTENSION leader_election;
CREATE TABLE lease_t (id bigserial PRIMARY KEY, shard integer NOT NULL, payload text,
                      fencing_token bigint NOT NULL) WITH (autovacuum_enabled = false);
CREATE TABLE group_t (LIKE lease_t INCLUDING ALL) WITH (autovacuum_enabled = false);
SELECT le_group_create('bench', 4);
SELECT le_protect('lease_t', 'fence');
SELECT le_protect('group_t', group_name => 'bench', partition_column => 'shard');
SQL
ftok=$(psql -c "SELECT fencing_token FROM le_acquire('fence', 'writer', '1 hour')")
tokens=$(psql -c "SELECT string_agg(fencing_token::text, ' ' ORDER BY partition)
                    FROM le_group_heartbeat('bench', 'writer', '1 hour') WHERE state = 'owned'")
read -r t0 t1 t2 t3 <<<"$tokens"
[ -n "${t3:-}" ] || { echo "the member does not own the 4 partitions: $tokens" >&2; exit 1; }
defs=(-D ftok="$ftok" -D t0="$t0" -D t1="$t1" -D t2="$t2" -D t3="$t3")

# Both tables emptied (group_t's fence taken off for it and put back in the
# same transaction) and, for the timed runs, a checkpoint.
reset_tables() {
    psql -c "SET leader_election.fencing_token = $ftok" -c "TRUNCATE lease_t" >/dev/null
    psql >/dev/null <<'SQL'
BEGIN;
SELECT le_unprotect('group_t');
TRUNCATE group_t;
SELECT le_protect('group_t', group_name => 'bench', partition_column => 'shard');
COMMIT;
SQL
    [ "$ICOUNT" = 0 ] && psql -c "CHECKPOINT" >/dev/null
    return 0
}

if [ "$ICOUNT" != 0 ]; then
    last_total() {
        local f
        sleep 1
        f=$(ls -t "$dir"/cg/cg.* | head -1)
        sed -n 's/^\(summary\|totals\): *\([0-9]*\).*/\2/p' "$f" | head -1
    }
    one_run() {   # script transactions
        local out
        out=$(le_as_pg "$PG_BINDIR/pgbench" -n -M prepared -h "$dir" -p "$port" -U postgres \
            -c 1 -t "$2" "${defs[@]}" -f "$dir/$1" postgres 2>&1) || true
        if grep -q 'aborted\|ERROR' <<<"$out"; then
            echo "pgbench failed: $1" >&2; tail -5 <<<"$out" >&2; exit 1
        fi
    }
    count() {   # script W N: instructions per transaction
        local a b
        reset_tables
        one_run "$1" "$2"
        a=$(last_total)
        reset_tables
        one_run "$1" $(($2 + $3))
        b=$(last_total)
        awk -v a="$a" -v b="$b" -v n="$3" 'BEGIN { printf "%.0f", (b - a) / n }'
    }
    echo "instructions per transaction (callgrind, one client; W=$W N=$N for one row, W=$W100 N=$N100 for 100)"
    echo "| INSERT | one lease | per partition | ratio | difference |"
    echo "| --- | --- | --- | --- | --- |"
    for p in $PAIRS; do
        w=$W n=$N
        [ "$p" = gf1 ] || { w=$W100; n=$N100; }
        l=$(count "${p}_lease.pgb" "$w" "$n")
        g=$(count "${p}_group.pgb" "$w" "$n")
        printf '| %s | %s | %s | %s | %s |\n' "$p" "$l" "$g" "$(le_ratio "$g" "$l")" "$((g - l))"
    done
    exit 0
fi

declare -A LAT
# mixed PAIR: one pgbench run picking the pair's lease or group script at
# random for every transaction; appends each one's mean latency (µs).
mixed() {
    local p=$1 logs out means
    logs=$(mktemp -d "$dir/txlog.XXXXXX")
    [ "$(id -u)" -eq 0 ] && chown postgres: "$logs"
    out=$(cd "$logs" && le_as_pg env PGOPTIONS="-c synchronous_commit=off" "$PG_BINDIR/pgbench" -n -M prepared \
            -h "$dir" -p "$port" -U postgres -c 2 -j 2 -T "$T" "${defs[@]}" -l --log-prefix="$logs/tx" \
            -f "$dir/${p}_lease.pgb" -f "$dir/${p}_group.pgb" postgres 2>&1) || true
    if grep -q 'aborted\|ERROR' <<<"$out"; then
        echo "pgbench failed: $p" >&2; tail -5 <<<"$out" >&2; exit 1
    fi
    # log lines: client transaction latency_us script_no epoch epoch_us
    means=$(cat "$logs"/tx.* | awk '{ s[$4] += $3; n[$4]++ }
        END { printf "%.2f %.2f", n[0] ? s[0] / n[0] : 0, n[1] ? s[1] / n[1] : 0 }')
    rm -rf "$logs"
    read -r l g <<<"$means"
    LAT[$p/l]="${LAT[$p/l]:-} $l"
    LAT[$p/g]="${LAT[$p/g]:-} $g"
    printf '  %-9s mean latency (us), one lease / per partition: %s %s\n' "$p" "$l" "$g" >&2
}
lat_mean() { tr ' ' '\n' <<<"${LAT[$1]}" | awk 'NF { s += $1; n++ } END { printf "%.1f", s / n }'; }
echo "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $PASSES passes of ${T} s per pair" >&2
for pass in $(seq "$PASSES"); do
    for p in $PAIRS; do
        reset_tables
        mixed "$p"
    done
done
echo "| INSERT, \`synchronous_commit = off\`, interleaved | one lease | per partition | per partition / one lease (median, lowest – highest) |"
echo "| --- | --- | --- | --- |"
for p in $PAIRS; do
    ls=(${LAT[$p/l]}) gs=(${LAT[$p/g]}) rs=()
    for i in "${!ls[@]}"; do rs+=("$(le_ratio "${gs[$i]}" "${ls[$i]}")"); done
    printf '| %s | %s µs | %s µs | %s |\n' "$p" "$(lat_mean "$p/l")" "$(lat_mean "$p/g")" "$(le_span %s "${rs[@]}")"
done
