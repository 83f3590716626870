#!/usr/bin/env bash
# The cost of le_group_heartbeat (doc/performance.md, "Partition groups"):
#   one    1 member owning P partitions (P = 1, 64, 1024), heartbeating as
#          fast as one client can for SECS seconds: latency p50 and p99, and
#          server CPU time per heartbeat;
#   many   MEMBERS members of a group of 1024 partitions (converged: 64 each
#          for 16 members), each heartbeating once a second on average
#          (pgbench -R, Poisson arrivals) for SECS seconds: latency p50 and
#          p99 (without pgbench's schedule lag) and server CPU in cores;
#          and, as its baseline, the same clients at the same rate each
#          committing a one-row UPDATE; the two alternate in SLICES slices
#          (SECS / SLICES seconds each), so both see the same minutes of
#          the host.
# Server CPU is the user and system time of the postmaster and all its
# children (exited backends included, through the postmaster's cutime),
# over the run's wall time.  Heartbeats commit durably (a WAL flush each),
# as always; SETTING adds a server setting (e.g. "fsync = off" to see the
# CPU path alone).  No timing assertion: it prints the figures.  Knobs:
# SECS (20), MEMBERS (16), SETTING, ROWS ("one many": which of the two
# parts run), SLICES (1), WARMUP (3: the seconds at the start of each row
# or slice whose latencies are not counted, while each new connection
# fills its caches; the CPU counts every heartbeat), LE_BENCH_PORT.
#
#   test/bench/groups.sh           # as root or as postgres, after make install
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/test/lib/prereq.sh"
. "$here/test/lib/cluster.sh"

SECS=${SECS:-20}
MEMBERS=${MEMBERS:-16}
ROWS=${ROWS:-one many}
WARMUP=${WARMUP:-3}
SLICES=${SLICES:-1}
# The members' ttl: 15 s, or, with slices, one that outlasts a baseline
# slice (memberships that lapse in between would be joins, not heartbeats).
TTL=$(( SLICES > 1 ? SECS / SLICES + 15 : 15 ))

echo "reproduce: PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config} SECS=$SECS MEMBERS=$MEMBERS" \
    "SLICES=$SLICES SETTING=\"${SETTING:-}\" ROWS=\"$ROWS\" test/bench/groups.sh"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)," \
    "commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"

le_bench_cluster "max_connections = $(( MEMBERS + 20 ))" ${SETTING:+"$SETTING"}
le_bench_psql -c "CREATE EXTENSION leader_election" >/dev/null
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"

# Members heartbeat in rounds, each heartbeat its own transaction,
# releasing what they are asked to give up, until a round changes nothing
# (as clients do, only faster), with the ttl of the heartbeats measured
# after: a shorter ttl would bring every expiry earlier on each member's
# first measured heartbeat, which wakes waiters, a cost of the setup.
le_bench_psql >/dev/null <<'SQL'
CREATE PROCEDURE bench_converge(g text, members text[], ttl interval) LANGUAGE plpgsql AS $$
DECLARE
    rounds int := 0;
    busy boolean;
    m text;
    r record;
BEGIN
    LOOP
        rounds := rounds + 1;
        busy := false;
        FOREACH m IN ARRAY members LOOP
            FOR r IN SELECT * FROM le_group_heartbeat(g, m, ttl) LOOP
                IF r.state = 'revoke' THEN
                    PERFORM le_release(r.lease_key, m, r.fencing_token);
                    busy := true;
                ELSIF r.state = 'pending' OR (r.state = 'owned' AND r.new_period) THEN
                    busy := true;
                END IF;
            END LOOP;
            COMMIT;
        END LOOP;
        EXIT WHEN NOT busy OR rounds >= 1000;
    END LOOP;
END $$;
SQL

# The server's CPU time so far, in clock ticks: the postmaster's own and
# its reaped children's, and that of its children alive now.
server_ticks() {
    local pm total=0 pid
    pm=$(head -1 "$dir/data/postmaster.pid")
    total=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$pm/stat")
    for pid in $(pgrep -P "$pm"); do
        total=$(( total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0) ))
    done
    echo "$total"
}

# measure ID CLIENTS SCRIPT [PGBENCH_ARG...]: run the script for SECS
# seconds and add to the figures kept under ID: the latencies (ms, schedule
# lag taken out, the first WARMUP seconds left out), the calls, the server
# CPU ticks and the wall time.
measure() {
    local id=$1 clients=$2 script=$3 t0 t1 c0 c1 start
    shift 3
    rm -f "$dir"/pgbench_log.*
    sleep 0.5
    c0=$(server_ticks)
    t0=$(date +%s.%N)
    (cd "$dir" && le_as_pg "$PG_BINDIR/pgbench" -n -h "$dir" -p "$port" -U postgres -c "$clients" -j "$clients" \
        -T "$SECS" -l "$@" -f "$script" postgres >/dev/null 2>"$dir/pgbench.err") ||
        { cat "$dir/pgbench.err" >&2; exit 1; }
    t1=$(date +%s.%N)
    sleep 0.5           # the postmaster reaps the exited backends
    c1=$(server_ticks)
    start=$(cat "$dir"/pgbench_log.* | awk 'NR == 1 || $5 < m { m = $5 } END { print m }')
    cat "$dir"/pgbench_log.* | awk -v from=$(( start + WARMUP )) \
        '$5 >= from { print ($3 - ($7 == "" ? 0 : $7)) / 1000 }' >>"$dir/$id.lat"
    echo "$(cat "$dir"/pgbench_log.* | wc -l) $(( c1 - c0 )) $(echo "$t1 - $t0 - 0.5" | bc -l)" >>"$dir/$id.sum"
}

# report ID LABEL: print the figures kept under ID: latency percentiles
# and server CPU per call and in cores.
report() {
    local id=$1 label=$2
    sort -g "$dir/$id.lat" |
        awk -v label="$label" -v hz="$(getconf CLK_TCK)" \
            -v sums="$(awk '{ n += $1; t += $2; w += $3 } END { print n, t, w }' "$dir/$id.sum")" '
            { a[NR] = $1 }
            END {
                split(sums, s, " ")
                cpu = s[2] / hz
                n = NR
                printf "%-32s %7d calls  p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms  server CPU %.3f ms/call, %.3f cores\n",
                    label, n, a[int(n * 0.50) + 1], a[int(n * 0.99) + 1], a[n], 1000 * cpu / s[1], cpu / s[3]
            }'
}

for p in $(case " $ROWS " in *" one "*) echo 1 64 1024 ;; esac); do
    le_bench_psql -c "SELECT le_group_create('one$p', $p)" -c "CALL bench_converge('one$p', ARRAY['m'], '1 minute')" >/dev/null
    echo "SELECT count(*) FROM le_group_heartbeat('one$p', 'm', '1 minute');" >"$dir/one$p.pgb"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir/one$p.pgb"
    measure "one$p" 1 "$dir/one$p.pgb"
    report "one$p" "one member, $p partitions"
done

case " $ROWS " in *" many "*) ;; *) exit 0 ;; esac
members=$(seq -s, -f "'m%g'" 1 "$MEMBERS")
le_bench_psql -c "SELECT le_group_create('many', 1024)" \
    -c "CALL bench_converge('many', ARRAY[$members], '$TTL seconds')" >/dev/null
le_bench_psql -At -c "SELECT 'converged: ' || count(*) || ' members, ' || min(partitions_held) || ' to '
                             || max(partitions_held) || ' partitions each'
                        FROM le_group_members WHERE group_name = 'many' AND is_valid"
# pgbench numbers its clients from 0: member m(client_id + 1).
echo "SELECT count(*) FROM le_group_heartbeat('many', 'm' || (:client_id + 1), '$TTL seconds');" >"$dir/many.pgb"
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir/many.pgb"

# The baseline: the same clients at the same rate, each committing a
# one-row UPDATE durably (the fixed cost of a transaction and its WAL flush
# on this machine at this moment, which no heartbeat can beat).  The two
# alternate in SLICES slices of SECS / SLICES seconds each, so that both
# see the same minutes of the host.
le_bench_psql -c "CREATE TABLE bench_base (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)" \
    -c "INSERT INTO bench_base (id) SELECT generate_series(0, $MEMBERS - 1)" >/dev/null
echo "UPDATE bench_base SET n = n + 1 WHERE id = :client_id;" >"$dir/base.pgb"
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir/base.pgb"
# Scans of the group index: one per heartbeat that read the whole group,
# one for the memberships plus one per run of its partitions for a settled one.
group_scans() {
    sleep 1         # the backends' statistics reach the server
    le_bench_psql -At -c "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'le_lease_group'"
}
total=$SECS
SECS=$(( total / SLICES ))
scans0=$(group_scans)
for slice in $(seq 1 "$SLICES"); do
    measure many "$MEMBERS" "$dir/many.pgb" -R "$MEMBERS"
    measure base "$MEMBERS" "$dir/base.pgb" -R "$MEMBERS"
done
report many "1024 partitions x $MEMBERS members"
echo "group index scans per heartbeat: $(awk -v s="$(( $(group_scans) - scans0 ))" '{ n += $1 } END { printf "%.2f", s / n }' "$dir/many.sum")" \
    "(1: it read the whole group; 2 or more: settled, the memberships and its own partitions)"
le_bench_psql -At -c "SELECT 'after: ' || count(*) FILTER (WHERE state = 'owned') || ' owned, '
                             || count(*) FILTER (WHERE state <> 'owned') || ' not'
                        FROM le_group_assignment('many')"
report base "baseline: 1-row UPDATE x $MEMBERS"
