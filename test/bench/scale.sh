#!/usr/bin/env bash
# The scale benchmark (doc/performance.md), on one throwaway cluster: how the extension
# behaves with many leases, many candidates and long runs.  Not part of the
# test suite (no timing assertion in test/run.sh); each section ends with a
# line giving the measured values, the target and PASS or FAIL.
#
#   test/bench/scale.sh          # as root or as postgres, after make install
#   test/run.sh bench-scale      # the same, after building and installing
#   SCALE_LEASES=20000 RENEWALS=50000 CANDIDATES=20 CHURN_SECONDS=20 test/bench/scale.sh  # quick
#
# Sections (SECTIONS="leases contest renewal churn" runs them all):
#
# leases   p50/p99 latency, from pgbench --log (one line per transaction, one
#          client, -M prepared, default durability), of
#            acquire  a grant of a free key: each transaction is one
#                     le_acquire of a key released before (keys f1..fP, each
#                     granted once per pass; they are released again between
#                     passes by one unmeasured statement);
#            renew    le_renew of one lease held by the caller;
#            refused  le_acquire of a random key another owner holds;
#            select   baseline: a plain SELECT of a random held key's row,
#                     what the bigger table costs any indexed read;
#          in two databases side by side, one with 1,000 rows in le_lease and
#          one with SCALE_LEASES (1,000,000); passes alternate between them
#          so that background load hits both alike.  The big one is filled
#          through le_acquire (never INSERT), in batches of 1,000 keys per
#          transaction from JOBS parallel pgbench clients, with
#          leader_election.notify = none for the loading sessions only; the
#          time it took is printed.  Then both are vacuumed, checkpointed and
#          loaded into shared buffers (pg_prewarm); shared_buffers is
#          SHARED_BUFFERS (1GB: the 1M-lease tables take ~700 MB; with 128MB
#          most reads of the big database come from the kernel's cache, which
#          the "select" baseline shows).  Target: each 1M/1k ratio <= 1.2.
# contest  CANDIDATES (200) sessions, one thread each (contest.py, psycopg2),
#          call le_acquire on one key at the same moment, ROUNDS (20) times:
#          race 1 on a key that has no row yet, then alternately on the key
#          released by the last winner and on the key left to expire (the
#          winner renews it with a 50 ms ttl).  Checks exactly one grant of a
#          new period per race with a higher token, no error of any kind
#          (deadlock 40P01, lock timeout 55P03, ...) in the results or the
#          server log; prints grants and attempts per second and the
#          multixact ids consumed (pg_control_checkpoint().next_multixact_id
#          after a CHECKPOINT, before and after).  Call durations are taken
#          by the client threads, on the same cores as the server, so they
#          include scheduling delays; the lock waits the server logged (over
#          deadlock_timeout) are printed too.
# renewal  RENEW_LEASES (1,000) leases held, RENEWALS (1,000,000) le_renew
#          calls of random ones from JOBS pgbench clients in ten rounds,
#          autovacuum on (defaults), fsync = off for this section only (the
#          question is bloat, not the disk: with flushes it would take
#          longer than the whole budget).  Prints table + index size of
#          le_lease and le_lease_history after each pass.  Target: final
#          size <= 2x the size after the first pass.
# churn    leader_election.history_retention = RETENTION (10) seconds;
#          JOBS clients cycle acquire + release over CHURN_KEYS (100) keys for
#          CHURN_SECONDS (120; autovacuum_naptime is 60 s), sampled four
#          times: history rows, oldest ended_at, size and autovacuums of
#          le_lease_history, and the rows a later grant of their lease should
#          have pruned (must be 0); then le_prune_history().  Target: no
#          overdue row, and the row count does not grow after the first
#          sample taken a whole retention after the start (last <= 1.5x it).
#
# PERF=1 (with SECTIONS including leases) adds a perf profile of the
# refusal and of the SELECT baseline at both sizes (see profile_leases).
#
# Exit status 1 when a correctness check failed (contest, overdue history
# rows) or a pgbench client aborted; latency and size targets only print.
# Other knobs: LAT_PASSES (4) passes per size, ACQ_KEYS (500) free keys per
# pass, RENEW_TX (2000) and REFUSED_TX (10000) transactions per pass, JOBS
# (2) clients for loading, renewal and churn, LE_BENCH_PORT.  5 to 7 minutes
# at the defaults on a shared 2-core machine.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bench=$here/test/bench
. "$here/test/lib/prereq.sh"
. "$here/test/lib/cluster.sh"

SECTIONS=${SECTIONS:-leases contest renewal churn}
SCALE_LEASES=${SCALE_LEASES:-1000000}
SMALL_LEASES=1000
LAT_PASSES=${LAT_PASSES:-4}
ACQ_KEYS=${ACQ_KEYS:-500}
RENEW_TX=${RENEW_TX:-2000}
REFUSED_TX=${REFUSED_TX:-10000}
CANDIDATES=${CANDIDATES:-200}
ROUNDS=${ROUNDS:-20}
RENEW_LEASES=${RENEW_LEASES:-1000}
RENEWALS=${RENEWALS:-1000000}
RETENTION=${RETENTION:-10}
CHURN_KEYS=${CHURN_KEYS:-100}
CHURN_SECONDS=${CHURN_SECONDS:-120}
JOBS=${JOBS:-2}
SHARED_BUFFERS=${SHARED_BUFFERS:-1GB}
PERF=${PERF:-0}
le_perf_check
start=$SECONDS
status=0
has() { [[ " $SECTIONS " == *" $1 "* ]]; }

echo "reproduce: PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}" \
    "SECTIONS=\"$SECTIONS\" SCALE_LEASES=$SCALE_LEASES LAT_PASSES=$LAT_PASSES ACQ_KEYS=$ACQ_KEYS" \
    "RENEW_TX=$RENEW_TX REFUSED_TX=$REFUSED_TX CANDIDATES=$CANDIDATES ROUNDS=$ROUNDS" \
    "RENEW_LEASES=$RENEW_LEASES RENEWALS=$RENEWALS RETENTION=$RETENTION CHURN_KEYS=$CHURN_KEYS" \
    "CHURN_SECONDS=$CHURN_SECONDS JOBS=$JOBS SHARED_BUFFERS=$SHARED_BUFFERS PERF=$PERF test/bench/scale.sh"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)," \
    "commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"

# max_connections also sizes the lock table: a grant holds its fence lock
# until commit, so each loading transaction holds one per key it grants.
le_bench_cluster "max_connections = $(( CANDIDATES > 80 ? CANDIDATES + 20 : 100 ))" "checkpoint_timeout = 30min" \
    "shared_buffers = $SHARED_BUFFERS" \
    "log_lock_waits = on" "log_autovacuum_min_duration = 0"
cp "$bench"/scale_*.pgb "$bench"/contest.py "$dir/"
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"/scale_*.pgb "$dir"/contest.py

# q DB SQL...: run the statements on database DB, print unaligned results.
q() {
    local db=$1
    shift
    le_bench_psql -At -d "$db" "$@"
}
newdb() {
    le_bench_psql -c "CREATE DATABASE $1"
    q "$1" -c "CREATE EXTENSION leader_election"
}
# pgb DB [pgbench args...]: pgbench -M prepared on DB, output on stdout;
# exits the script when a client failed or aborted.
pgb() {
    local db=$1 out
    shift
    out=$(cd "$dir" && le_as_pg "$PG_BINDIR/pgbench" -n -M prepared -h "$dir" -p "$port" -U postgres "$@" "$db" 2>&1) || true
    if ! grep -q '^number of failed transactions: 0\|^tps = ' <<<"$out" || grep -q 'aborted\|ERROR' <<<"$out"; then
        echo "pgbench failed on $db: $*" >&2
        tail -5 <<<"$out" >&2
        exit 1
    fi
    echo "$out"
}
# fill DB PREFIX FIRST LAST OWNER: grant keys PREFIX||FIRST..LAST to OWNER
# for an hour through le_acquire, 1,000 per transaction, JOBS clients.
fill() {
    local db=$1 prefix=$2 first=$3 last=$4 owner=$5 batch=1000 per
    [ "$last" -lt "$first" ] && return 0
    per=$(( ( (last - first + 1 + batch - 1) / batch + JOBS - 1) / JOBS ))
    PGOPTIONS="-c leader_election.notify=none" pgb "$db" -c "$JOBS" -j "$JOBS" -t "$per" -D n=0 \
        -D jobs="$JOBS" -D batch="$batch" -D first="$first" -D last="$last" \
        -D prefix="$prefix" -D owner="$owner" -f "$dir/scale_fill.pgb" >/dev/null
    [ "$(q "$db" -c "SELECT count(*) FROM le_lease WHERE lease_key LIKE '$prefix%' AND holder = '$owner'")" \
        -ge $(( last - first + 1 )) ] || { echo "fill $db $prefix: rows missing" >&2; exit 1; }
}
# pct P FILE...: the P-th percentile (nearest rank) of the latencies (µs,
# third field) of pgbench transaction logs, in ms.
pct() {
    local p=$1
    shift
    cat "$@" | awk '{ print $3 }' | sort -n |
        awk -v p="$p" '{ a[NR] = $1 } END { r = int(NR * p / 100); if (r < NR * p / 100) r++; if (r < 1) r = 1; printf "%.3f", a[r] / 1000 }'
}
ratio_line() {   # name p50_1k p50_1m p99_1k p99_1m
    local r50 r99 v="target <= 1.2x  PASS"
    r50=$(le_ratio "$3" "$2"); r99=$(le_ratio "$5" "$4")
    awk -v a="$r50" -v b="$r99" 'BEGIN { exit !(a <= 1.2 && b <= 1.2) }' || v="target <= 1.2x  FAIL"
    [ "$1" = select ] && v="(baseline)"
    printf '  %-8s p50 %8s ms -> %8s ms (%sx)   p99 %8s ms -> %8s ms (%sx)   %s\n' \
        "$1" "$2" "$3" "$r50" "$4" "$5" "$r99" "$v"
}

# profile_leases: with PERF set, where a refusal and the SELECT baseline
# spend the time the bigger table adds: for each, one client runs
# PERF_SECONDS (12) s on each database while perf samples its backend
# (cpu-clock, 999 Hz, from 1 s in to 1 s before the end); printed per 1,000
# transactions that ended in that window (pgbench's log), the symbols whose
# samples grew most from SMALL_LEASES to SCALE_LEASES, and the blocks of the
# lease tables and indexes each transaction touched (pg_statio).
profile_leases() {
    local op size db b0 b1 runs n ntx h0 h1 secs=${PERF_SECONDS:-12}
    echo "  perf of the backend, samples per 1,000 transactions (${secs} s per run, one client):"
    for op in refused select; do
        for size in "$SMALL_LEASES" "$SCALE_LEASES"; do
            db=s$size
            sleep 1.5   # let earlier backends' statistics reach pg_statio
            b0=$(blocks "$db")
            runs=$(le_perf_backend "$dir/prof.$op.$size" "$secs" "$db" "" -D nheld="${held[$size]}" \
                -f "$dir/scale_$op.pgb") || exit 1
            read -r n ntx <<<"$runs"
            sleep 1.5
            b1=$(blocks "$db")
            read -r h0 _ <<<"$b0"
            read -r h1 _ <<<"$b1"
            printf '    %-8s %8s leases: %s samples per 1,000 transactions; %s block hits per transaction\n' "$op" "$size" \
                "$(awk -F'\t' '{ s += $2 } END { printf "%.0f", s }' "$dir/prof.$op.$size")" \
                "$(awk -v h=$((h1 - h0)) -v n="$ntx" 'BEGIN { printf "%.2f", h / n }')"
        done
        echo "    $op, the symbols that grew most (samples per 1,000 transactions, $SMALL_LEASES -> $SCALE_LEASES leases):"
        le_perf_diff "$dir/prof.$op.$SMALL_LEASES" "$dir/prof.$op.$SCALE_LEASES" 8 | sed 's/^/  /'
    done
}

# --- leases: latency with 1,000 and with SCALE_LEASES rows ---------------------
if has leases; then
    echo
    echo "== leases: p50/p99 latency with $SMALL_LEASES and $SCALE_LEASES rows in le_lease"
    declare -A tok held
    for size in "$SMALL_LEASES" "$SCALE_LEASES"; do
        db=s$size
        newdb "$db"
        tok[$size]=$(q "$db" -c "SELECT fencing_token FROM le_acquire('bench', 'me', '1 hour')")
        q "$db" -c "SELECT count(le_release('f' || i, 'setup', (le_acquire('f' || i, 'setup', '1 hour')).fencing_token))
                    FROM generate_series(1, $ACQ_KEYS) AS i" >/dev/null
        held[$size]=$(( size - ACQ_KEYS - 1 ))
        t0=$(date +%s.%N)
        fill "$db" h 1 "${held[$size]}" other
        t1=$(date +%s.%N)
        q "$db" -c "VACUUM ANALYZE le_lease" -c "VACUUM ANALYZE le_lease_history" -c "CHECKPOINT"
        # VACUUM reads through a small ring: load the tables into shared
        # buffers (as far as they fit) as a server running for a while would.
        q "$db" -c "CREATE EXTENSION pg_prewarm" -c "SELECT sum(pg_prewarm(c)) FROM unnest(ARRAY[
                    'le_lease', 'le_lease_pkey', 'le_lease_key_unique', 'le_lease_history',
                    'le_lease_history_pkey']::regclass[]) AS c" >/dev/null
        printf '  %s: %s rows; %s granted through le_acquire in %.1f s (%.0f/s; clients: %s, 1,000 keys per transaction); le_lease %s\n' \
            "$db" "$(q "$db" -c "SELECT count(*) FROM le_lease")" "${held[$size]}" \
            "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
            "$(awk -v a="$t0" -v b="$t1" -v n="${held[$size]}" 'BEGIN { print n / (b - a) }')" "$JOBS" \
            "$(q "$db" -c "SELECT pg_size_pretty(pg_total_relation_size('le_lease')) || ' with indexes ('
                            || pg_total_relation_size('le_lease') / count(*) || ' bytes per lease), le_lease_history '
                            || pg_size_pretty(pg_total_relation_size('le_lease_history')) FROM le_lease")"
    done
    # Block accesses of the lease tables and their indexes: hits, and reads
    # that missed shared buffers.
    blocks() {
        q "$1" -F ' ' -c "SELECT sum(heap_blks_hit + idx_blks_hit), sum(heap_blks_read + idx_blks_read)
                          FROM pg_statio_user_tables WHERE relname IN ('le_lease', 'le_lease_history')"
    }
    declare -A blk0
    for size in "$SMALL_LEASES" "$SCALE_LEASES"; do blk0[$size]=$(blocks "s$size"); done
    for pass in $(seq "$LAT_PASSES"); do
        for size in "$SMALL_LEASES" "$SCALE_LEASES"; do
            db=s$size
            pgb "$db" -c 1 -t "$ACQ_KEYS" -D n=0 -f "$dir/scale_acquire.pgb" \
                --log --log-prefix="$dir/lat.$size.acquire.$pass" >/dev/null
            [ "$(q "$db" -c "SELECT count(*) FROM le_lease WHERE lease_key LIKE 'f%' AND holder = 'me'")" = "$ACQ_KEYS" ] ||
                { echo "acquire: not every free key was granted" >&2; exit 1; }
            q "$db" -c "SELECT count(le_release(l.lease_key, l.holder, l.fencing_token))
                        FROM generate_series(1, $ACQ_KEYS) AS i JOIN le_leases AS l ON l.lease_key = 'f' || i" >/dev/null
            pgb "$db" -c 1 -t "$RENEW_TX" -D tok="${tok[$size]}" -f "$dir/scale_renew.pgb" \
                --log --log-prefix="$dir/lat.$size.renew.$pass" >/dev/null
            # Alternate which of the two reads runs first: the second finds
            # more of the rows it reads in shared buffers.
            for op in $( [ $(( pass % 2 )) = 1 ] && echo refused select || echo select refused); do
                pgb "$db" -c 1 -t "$REFUSED_TX" -D nheld="${held[$size]}" -f "$dir/scale_$op.pgb" \
                    --log --log-prefix="$dir/lat.$size.$op.$pass" >/dev/null
            done
        done
    done
    echo "  one client, -M prepared, default durability; $LAT_PASSES passes per size:" \
        "$(( LAT_PASSES * ACQ_KEYS )) acquires, $(( LAT_PASSES * RENEW_TX )) renewals, $(( LAT_PASSES * REFUSED_TX )) refusals each"
    echo "  operation   latency with $SMALL_LEASES -> with $SCALE_LEASES leases (ratio)"
    for op in acquire renew refused select; do
        ratio_line "$op" \
            "$(pct 50 "$dir"/lat."$SMALL_LEASES".$op.*)" "$(pct 50 "$dir"/lat."$SCALE_LEASES".$op.*)" \
            "$(pct 99 "$dir"/lat."$SMALL_LEASES".$op.*)" "$(pct 99 "$dir"/lat."$SCALE_LEASES".$op.*)"
    done
    echo "  (select: baseline, a plain SELECT of a random held key's row in le_lease: what the bigger table"
    echo "  costs any indexed read on this machine; no target of its own)"
    for size in "$SMALL_LEASES" "$SCALE_LEASES"; do
        read -r h0 r0 <<<"${blk0[$size]}"
        read -r h1 r1 <<<"$(blocks "s$size")"
        echo "  s$size: $(( h1 - h0 )) block hits and $(( r1 - r0 )) reads outside shared buffers" \
            "(lease tables and indexes, all passes; shared_buffers $SHARED_BUFFERS)"
    done
    rm -f "$dir"/lat.*
    if [ "$PERF" != 0 ]; then
        profile_leases
    fi
fi

# --- contest: CANDIDATES sessions on one key -----------------------------------
if has contest; then
    echo
    echo "== contest: $CANDIDATES candidates call le_acquire on one key at once, $ROUNDS rounds"
    newdb contest
    mx() { q contest -c "CHECKPOINT" -c "SELECT next_multixact_id::text::bigint FROM pg_control_checkpoint()"; }
    xid() { q contest -c "SELECT pg_current_xact_id()::text::bigint"; }
    logpos=$(stat -c %s "$dir/server.log")
    mx0=$(mx); x0=$(xid)
    set +e
    summary=$(le_as_pg /usr/bin/python3 "$dir/contest.py" --host "$dir" --port "$port" --dbname contest \
        --candidates "$CANDIDATES" --rounds "$ROUNDS")
    crc=$?
    set -e
    mx1=$(mx); x1=$(xid)
    logerr=$(tail -c +"$(( logpos + 1 ))" "$dir/server.log" | grep -c 'ERROR\|FATAL\|deadlock' || true)
    deadlocks=$(tail -c +"$(( logpos + 1 ))" "$dir/server.log" | grep -c 'deadlock' || true)
    echo "$summary" | sed 's/^/  /'
    v=PASS
    { [ "$crc" -ne 0 ] || [ "$logerr" -ne 0 ]; } && v=FAIL
    echo "  server log: $deadlocks deadlocks, $logerr ERROR/FATAL lines during the races; lock waits over" \
        "deadlock_timeout (1 s): $(tail -c +"$(( logpos + 1 ))" "$dir/server.log" |
            sed -n 's/.*still waiting for \([A-Za-z]*\) on \([a-z]*\).*/\1 on \2/p' | sort | uniq -c |
            awk '{ printf "%s%s %s %s %s", (NR > 1 ? ", " : ""), $1, $2, $3, $4 } END { if (!NR) printf "none" }')"
    echo "  multixact ids consumed: $(( mx1 - mx0 )) ($mx0 -> $mx1); transaction ids: $(( x1 - x0 - 1 ))" \
        "(includes the setup between races)"
    echo "  contest: exactly one winner per race, no error, no deadlock: $v"
    [ "$v" = PASS ] || status=1
fi

# --- renewal: constant renewal of RENEW_LEASES leases --------------------------
if has renewal; then
    echo
    echo "== renewal: $RENEWALS renewals of $RENEW_LEASES leases, clients: $JOBS, autovacuum on, fsync = off"
    le_bench_psql -c "ALTER SYSTEM SET fsync = off" -c "SELECT pg_reload_conf()" >/dev/null
    sleep 1
    newdb renewal
    q renewal -c "SELECT count(le_acquire('r' || i, 'me', '1 hour')) FROM generate_series(1, $RENEW_LEASES) AS i" >/dev/null
    # Tokens come from le_token_seq in grant order: r<i> has token i + off.
    offs=$(q renewal -c "SELECT count(DISTINCT fencing_token - substr(lease_key, 2)::bigint) || ' ' || min(fencing_token - substr(lease_key, 2)::bigint)
                         FROM le_lease WHERE lease_key LIKE 'r%'")
    [ "${offs%% *}" = 1 ] || { echo "renewal: tokens not in key order ($offs)" >&2; exit 1; }
    off=${offs#* }
    size() {
        q renewal -c "SELECT pg_relation_size('le_lease') + pg_indexes_size('le_lease'),
                             pg_relation_size('le_lease_history') + pg_indexes_size('le_lease_history')" | tr '|' ' '
    }
    per=$(( RENEWALS / 10 / JOBS ))
    t0=$SECONDS
    echo "  after renewals   le_lease (table + indexes)   le_lease_history   autovacuums  HOT updates"
    for step in $(seq 10); do
        pgb renewal -c "$JOBS" -j "$JOBS" -t "$per" -D nleases="$RENEW_LEASES" -D off="$off" \
            -f "$dir/scale_renew_many.pgb" >/dev/null
        read -r lsz hsz <<<"$(size)"
        [ "$step" = 1 ] && first=$lsz
        printf '  %14s %14s bytes %18s bytes %12s  %s\n' "$(( step * per * JOBS ))" "$lsz" "$hsz" \
            "$(q renewal -c "SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'le_lease'")" \
            "$(q renewal -c "SELECT n_tup_hot_upd || '/' || n_tup_upd FROM pg_stat_user_tables WHERE relname = 'le_lease'")"
    done
    r=$(le_ratio "$lsz" "$first")
    v=PASS
    awk -v r="$r" 'BEGIN { exit !(r <= 2) }' || v=FAIL
    echo "  renewal: $(( 10 * per * JOBS )) renewals in $(( SECONDS - t0 )) s; le_lease $first -> $lsz bytes ($r x), target <= 2x  $v"
    le_bench_psql -c "ALTER SYSTEM RESET fsync" -c "SELECT pg_reload_conf()" >/dev/null
fi

# --- churn: history under constant acquire/release ---------------------------------
if has churn; then
    echo
    echo "== churn: acquire + release over $CHURN_KEYS keys for $CHURN_SECONDS s, clients: $JOBS," \
        "leader_election.history_retention = ${RETENTION}s"
    newdb churn
    le_bench_psql -c "ALTER DATABASE churn SET leader_election.history_retention = $RETENTION"
    # Rows whose period ended more than the retention before a later grant
    # of the same lease: that grant should have deleted them.
    sample() {
        q churn -F ' ' -c "SELECT count(*),
                    coalesce(round(extract(epoch FROM now() - min(h.ended_at))::numeric, 1), 0),
                    pg_relation_size('le_lease_history') + pg_indexes_size('le_lease_history'),
                    (SELECT count(*) FROM le_lease_history AS o
                      WHERE o.ended_at IS NOT NULL AND EXISTS (
                            SELECT FROM le_lease_history AS g WHERE g.lease_id = o.lease_id
                               AND g.acquired_at > o.ended_at + make_interval(secs => $RETENTION))),
                    (SELECT sum(transitions) FROM le_lease),
                    (SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'le_lease_history')
               FROM le_lease_history AS h"
    }
    echo "  after   grants  history rows  oldest ended_at  history size (autovacuums)  overdue rows"
    chunk=$(( CHURN_SECONDS / 4 ))
    for s in 1 2 3 4; do
        pgb churn -c "$JOBS" -j "$JOBS" -T "$chunk" -D nkeys="$CHURN_KEYS" -f "$dir/scale_churn.pgb" >/dev/null
        read -r rows oldest hsize overdue grants avac <<<"$(sample)"
        # Reference: the first sample taken once a whole retention has passed.
        [ -z "${rows1:-}" ] && [ $(( s * chunk )) -ge "$RETENTION" ] && rows1=$rows
        printf '  %4s s %8s %13s %14s s %10s bytes (%s) %13s\n' "$(( s * chunk ))" "$grants" "$rows" "$oldest" "$hsize" \
            "$avac" "$overdue"
        overdue_total=$(( ${overdue_total:-0} + overdue ))
    done
    rows1=${rows1:-$rows}
    # One transaction: now() (its start) is before the prune's cutoff time.
    read -r pruned rows_p oldest_p <<<"$(q churn -F ' ' -1 -c "SELECT le_prune_history()" \
        -c "SELECT count(*), coalesce(round(extract(epoch FROM now() - min(ended_at))::numeric, 1), 0) FROM le_lease_history" |
        tr '\n' ' ')"
    echo "  le_prune_history() deleted $pruned rows: $rows_p left, oldest ended $oldest_p s ago"
    v=PASS
    { [ "$overdue_total" -ne 0 ] || ! awk -v a="$rows" -v b="$rows1" 'BEGIN { exit !(a <= 1.5 * b) }' ||
      ! awk -v o="$oldest_p" -v r="$RETENTION" 'BEGIN { exit !(o <= r) }'; } && v=FAIL
    [ "$overdue_total" -eq 0 ] || status=1
    echo "  churn: history rows $rows1 -> $rows (target <= 1.5x), overdue rows $overdue_total (target 0)," \
        "oldest after le_prune_history ${oldest_p}s (target <= ${RETENTION}s)  $v"
fi

echo
echo "elapsed: $(( SECONDS - start ))s"
exit $status
