#!/usr/bin/env bash
# What PostgreSQL's executor charges for a trigger of each kind, next to the
# fence, on a multi-row INSERT: the evidence behind the target "fenced 100-row
# INSERT >= 0.99 of the INSERT without trigger".  Not part of the test suite.
#
#   test/bench/trigger_floor.sh             # as root or postgres, after make install
#   ROWS=1 RUNS=10 T=4 test/bench/trigger_floor.sh
#
# One throwaway cluster (test/lib/cluster.sh).  Each run is one pgbench
# (-M prepared, 2 clients, synchronous_commit = off, T seconds) that picks
# for every transaction one of the INSERTs below at random, ROWS rows each
# (default 100), into tables of the same shape; the tables are emptied and
# checkpointed before each run.  The ratios compare mean latencies from
# pgbench's per-transaction log (the INSERT without trigger / the variant:
# 1 means as fast, below 1 slower), and each line gives the median over
# RUNS runs (default 16, of T = 3 s) with the lowest and highest run:
#
#   no trigger, again      a second table without trigger: the noise floor
#                          of the method (A/A);
#   row trigger            BEFORE INSERT FOR EACH ROW, a C function that
#                          returns the row (noop_trigger.c, built with PGXS
#                          in the scratch directory, never installed);
#   row trigger, skipped   the same with a WHEN condition false for every
#                          row, so the function is never called;
#   statement trigger      BEFORE INSERT FOR EACH STATEMENT, the same function;
#   transition table       AFTER INSERT ... REFERENCING NEW TABLE FOR EACH
#                          STATEMENT, the same function (every row is copied
#                          into the transition table, unread);
#   fence                  le_protect's trigger, the writer holding the lease.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bench=$here/test/bench
. "$here/test/lib/prereq.sh"
. "$here/test/lib/cluster.sh"

ROWS=${ROWS:-100}
RUNS=${RUNS:-16}
T=${T:-3}

le_bench_cluster
le_bench_load "$bench"
# baseline.sql made plain_t, fenced_t, trig_t (BEFORE ROW) and stmt_t
# (BEFORE STATEMENT), the last two with the no-op trigger.
tables="plain_t plain2_t trig_t when_t stmt_t trans_t fenced_t"
labels=("no trigger, again (A/A)" "row trigger (C, does nothing)" "row trigger, skipped by its WHEN"
        "statement trigger (C, does nothing)" "AFTER statement trigger with a transition table" "fence (le_protect)")
le_bench_psql -At >/dev/null <<SQL
CREATE TABLE plain2_t (id bigserial PRIMARY KEY, payload text, fencing_token bigint NOT NULL)
    WITH (autovacuum_enabled = false);
CREATE TABLE when_t   (id bigserial PRIMARY KEY, payload text, fencing_token bigint NOT NULL)
    WITH (autovacuum_enabled = false);
CREATE TABLE trans_t  (id bigserial PRIMARY KEY, payload text, fencing_token bigint NOT NULL)
    WITH (autovacuum_enabled = false);
CREATE TRIGGER noop BEFORE INSERT ON when_t FOR EACH ROW WHEN (NEW.fencing_token < 0) EXECUTE FUNCTION noop_trigger();
CREATE TRIGGER noop AFTER INSERT ON trans_t REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION noop_trigger();
SQL
files=()
for t in $tables; do
    if [ "$ROWS" -eq 1 ]; then
        echo "INSERT INTO $t (payload, fencing_token) VALUES ('x', :ftok);" >"$dir/floor_$t.pgb"
    else
        echo "INSERT INTO $t (payload, fencing_token) SELECT 'x', :ftok FROM generate_series(1, $ROWS);" >"$dir/floor_$t.pgb"
    fi
    files+=(-f "$dir/floor_$t.pgb")
done
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"/floor_*.pgb

echo "reproduce: ROWS=$ROWS RUNS=$RUNS T=$T test/bench/trigger_floor.sh"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)," \
    "commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
declare -a R
for run in $(seq "$RUNS"); do
    le_bench_psql -c "TRUNCATE plain_t, plain2_t, trig_t, when_t, stmt_t, trans_t" \
        -c "SET leader_election.fencing_token = $ftok" -c "TRUNCATE fenced_t" -c "CHECKPOINT" >/dev/null
    logs=$(mktemp -d "$dir/txlog.XXXXXX")
    [ "$(id -u)" -eq 0 ] && chown postgres: "$logs"
    out=$(cd "$logs" && le_as_pg env PGOPTIONS="-c synchronous_commit=off" "$PG_BINDIR/pgbench" -n -M prepared \
            -h "$dir" -p "$port" -U postgres -c 2 -j 2 -T "$T" -D ftok="$ftok" -l --log-prefix="$logs/tx" \
            "${files[@]}" postgres 2>&1) || true
    if grep -q 'aborted\|ERROR' <<<"$out"; then
        echo "pgbench failed" >&2; tail -5 <<<"$out" >&2; exit 1
    fi
    # log lines: client transaction latency_us script_no epoch epoch_us
    line=$(cat "$logs"/tx.* | awk '{ s[$4] += $3; n[$4]++ }
        END { printf "%.1f", s[0] / n[0]; for (i = 1; i < 7; i++) printf " %.4f", (s[0] / n[0]) / (s[i] / n[i]) }')
    rm -rf "$logs"
    echo "  run $run: INSERT without trigger $(cut -d' ' -f1 <<<"$line") µs; ratios $(cut -d' ' -f2- <<<"$line")" >&2
    R[$run]=$line
done
printf '\n%s-row INSERT, interleaved, median of %s runs of %s s (lowest – highest); ratios to the first table\n' \
    "$ROWS" "$RUNS" "$T"
printf 'without trigger, and to the second (A/A: the two differ only in name, so the second column moves the\n'
printf 'others by whatever separates them):\n'
printf '| %-50s | %s | |\n' "INSERT without trigger, mean latency" \
    "$(le_median $(for r in "${R[@]}"; do cut -d' ' -f1 <<<"$r"; done)) µs"
for i in 1 2 3 4 5 6; do
    vals=$(for r in "${R[@]}"; do cut -d' ' -f$((i + 1)) <<<"$r"; done)
    # to the second table: (plain / variant) / (plain / plain2)
    vals2=$(for r in "${R[@]}"; do awk -v i="$i" '{ printf "%.4f\n", $(i + 1) / $2 }' <<<"$r"; done)
    if [ "$i" -eq 1 ]; then
        printf '| %-50s | %s | |\n' "${labels[$((i - 1))]}" "$(le_span %.3f $vals)"
    else
        printf '| %-50s | %s | %s |\n' "${labels[$((i - 1))]}" "$(le_span %.3f $vals)" "$(le_span %.3f $vals2)"
    fi
done
