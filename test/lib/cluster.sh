# Sourced by the benchmarks: a throwaway PostgreSQL cluster in a directory of
# its own, run as the postgres user when started as root, reachable only on a
# Unix socket in that directory.  Needs test/lib/prereq.sh sourced first
# (le_as_pg) and PG_BINDIR set.

# le_cluster_start DIR PORT [SETTING...]: initdb DIR/data and start it.
le_cluster_start() {
    local dir=$1 port=$2 setting
    shift 2
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
    le_as_pg "$PG_BINDIR/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
    {
        echo "listen_addresses = ''"
        echo "unix_socket_directories = '$dir'"
        echo "port = $port"
        for setting in "$@"; do echo "$setting"; done
    } >> "$dir/data/postgresql.conf"
    le_as_pg "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
}

# le_cluster_stop DIR: stop the cluster at once and remove DIR.
le_cluster_stop() {
    le_as_pg "$PG_BINDIR/pg_ctl" -D "$1/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$1"
}

# le_pgbench DIR PORT SECONDS CLIENTS SCRIPT [ARGS...]: run pgbench on the
# cluster and print its tps (0 when it failed).
le_pgbench() {
    local dir=$1 port=$2 secs=$3 clients=$4 script=$5 tps
    shift 5
    tps=$(le_as_pg "$PG_BINDIR/pgbench" -n -h "$dir" -p "$port" -U postgres -c "$clients" -j "$clients" \
            -T "$secs" "$@" -f "$script" postgres 2>/dev/null | sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
    echo "${tps:-0}"
}

# le_median N...: the median of the numbers given.
le_median() {
    printf '%s\n' "$@" | sort -n |
        awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# le_span FORMAT N...: "median (lowest – highest)" of the numbers given, each
# printed with the printf FORMAT (e.g. %s, %.3f).
le_span() {
    local fmt=$1
    shift
    printf "$fmt ($fmt – $fmt)" "$(le_median "$@")" "$(printf '%s\n' "$@" | LC_ALL=C sort -g | head -1)" \
        "$(printf '%s\n' "$@" | LC_ALL=C sort -g | tail -1)"
}

# le_tx_in_window T0 T1 LOG...: how many transactions of pgbench's
# per-transaction logs (-l: ... epoch epoch_us) ended between T0 and T1
# (epoch seconds).
le_tx_in_window() {
    local a=$1 b=$2
    shift 2
    cat "$@" | awk -v a="$a" -v b="$b" '{ t = $5 + $6 / 1e6 } t >= a && t <= b { n++ } END { print n + 0 }'
}

# le_perf_check: with PERF set (not 0), stop unless perf is installed and we
# run as root (perf records other users' processes).
le_perf_check() {
    [ "${PERF:-0}" != 0 ] || return 0
    command -v perf >/dev/null || { echo "PERF needs perf (apt-get install linux-perf)" >&2; exit 2; }
    [ "$(id -u)" -eq 0 ] || { echo "PERF=1 needs root (perf records other users' processes)" >&2; exit 2; }
}

# le_perf_rates DATA N [PERF_REPORT_ARG...]: "symbol<TAB>samples per 1,000
# transactions" from perf's recording DATA over N transactions, sorted by
# symbol (for join); by shared object instead with LE_PERF_SORT=dso.
le_perf_rates() {
    local data=$1 n=$2
    shift 2
    perf report -i "$data" --no-children -n --sort "${LE_PERF_SORT:-sym}" --stdio -g none "$@" 2>/dev/null |
        awk -v n="$n" '/^ *[0-9.]+%/ { c = $2; $1 = ""; $2 = ""; sub(/^ +/, ""); printf "%s\t%.2f\n", $0, 1000 * c / n }' |
        sort -t"$(printf '\t')" -k1,1
}

# le_perf_diff A B COUNT [abs]: the COUNT symbols of two le_perf_rates files
# whose rate grew most from A to B (with abs: differs most either way), as
# "symbol  rate in A  rate in B".
le_perf_diff() {
    join -t"$(printf '\t')" -a1 -a2 -e 0 -o 0,1.2,2.2 "$1" "$2" |
        awk -F'\t' -v abs="${4:-}" '{ d = $3 - $2; if (abs != "" && d < 0) d = -d; printf "%.2f\t%s\t%s\t%s\n", d, $2, $3, $1 }' |
        LC_ALL=C sort -rn | awk -F'\t' -v k="$3" 'NR <= k { printf "    %-44s %7s  %7s\n", $4, $2, $3 }'
}

# le_perf_backend OUT SECS DB PGOPTIONS PGBENCH_ARG...: one pgbench client
# (-M prepared, with PGOPTIONS) runs SECS (at least 4) s on database DB of
# the benchmark's cluster ($dir, $port) while perf samples its backend
# (cpu-clock, LE_PERF_FREQ Hz, default 999, call graphs, user space only
# with LE_PERF_USER=1, from 1 s in to 1 s before the end); writes
# le_perf_rates of the recording to OUT (by symbol) and OUT.dso (by shared
# object), per 1,000 transactions that ended in perf's window (pgbench's
# log), and prints that number and the run's total number of transactions.
# The backend is found by an application name of its own.  Needs root and
# perf; exits on any failure (call it in $(...) || exit 1).
le_perf_backend() {
    local out=$1 secs=$2 db=$3 opts=$4 app="le_perf_$BASHPID" bg pid t0 t1 n user= asu=()
    shift 4
    [ "$(id -u)" -eq 0 ] && asu=(runuser -u postgres --)   # as le_as_pg, but exec'd: $! is pgbench's
    [ "$secs" -ge 4 ] || { echo "le_perf_backend: at least 4 seconds, not $secs" >&2; exit 1; }
    [ "${LE_PERF_USER:-0}" != 0 ] && user=--all-user
    (cd "$dir" && exec "${asu[@]}" env PGOPTIONS="$opts" PGAPPNAME="$app" "$PG_BINDIR/pgbench" -n \
        -M prepared -h "$dir" -p "$port" -U postgres -c 1 -T "$secs" -l --log-prefix="$dir/perf_tx" "$@" "$db" \
        >"$dir/perf_out" 2>&1) &
    bg=$!
    sleep 1
    pid=$(le_bench_psql -At -d "$db" -c "SELECT pid FROM pg_stat_activity
        WHERE application_name = '$app' AND backend_type = 'client backend'")
    if ! [[ "$pid" =~ ^[0-9]+$ ]]; then
        echo "le_perf_backend: no backend of pgbench on $db ($*):" >&2
        wait "$bg" || true
        tail -5 "$dir/perf_out" >&2
        exit 1
    fi
    t0=$(date +%s.%N)
    perf record -e cpu-clock -F "${LE_PERF_FREQ:-999}" $user -g -p "$pid" -o "$dir/perf.data" \
        -- sleep $((secs - 2)) >/dev/null 2>"$dir/perf_err" ||
        { echo "perf record failed (exit $?) on backend $pid:" >&2; cat "$dir/perf_err" >&2; kill "$bg" 2>/dev/null; exit 1; }
    t1=$(date +%s.%N)
    wait "$bg" || true
    if grep -q 'aborted\|ERROR' "$dir/perf_out"; then
        echo "pgbench failed on $db: $*" >&2; tail -5 "$dir/perf_out" >&2; exit 1
    fi
    n=$(le_tx_in_window "$t0" "$t1" "$dir"/perf_tx.*)
    [ "$n" -gt 0 ] || { echo "no transaction in perf's window on $db: $*" >&2; exit 1; }
    le_perf_rates "$dir/perf.data" "$n" >"$out"
    LE_PERF_SORT=dso le_perf_rates "$dir/perf.data" "$n" >"$out.dso"
    [ -s "$out" ] || { echo "perf report gave nothing for $db: $*" >&2; exit 1; }
    echo "$n $(cat "$dir"/perf_tx.* | wc -l)"
    rm -f "$dir"/perf_tx.* "$dir/perf.data" "$dir/perf_out" "$dir/perf_err"
}

# le_ratio A B: A / B with three decimals.
le_ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }'
}

# le_bench_cluster [SETTING...]: a benchmark's cluster: sets PG_CONFIG,
# PG_BINDIR, dir and port (LE_BENCH_PORT, or a random one), starts the cluster with shared_buffers and
# max_wal_size sized for pgbench plus the settings given, and stops and
# removes it when the script exits.  le_bench_psql runs psql on it.
le_bench_cluster() {
    PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
    PG_BINDIR=$("$PG_CONFIG" --bindir)
    dir=$(mktemp -d /tmp/le-bench.XXXXXX)
    port=${LE_BENCH_PORT:-$(( 56000 + RANDOM % 2000 ))}
    trap 'le_cluster_stop "$dir"' EXIT
    le_cluster_start "$dir" "$port" "shared_buffers = 128MB" "max_wal_size = 2GB" "$@"
}
# le_callgrind_cluster: le_bench_cluster's cluster for counting
# instructions: the server runs under valgrind --tool=callgrind, every
# process writing its profile to $dir/cg/cg.PID as it exits, with fsync
# and autovacuum off.  Sets PG_CONFIG, PG_BINDIR, dir and port; stops the
# server when the script exits, waits for the profiles and removes dir
# (KEEP=1 keeps it, with the profiles, for callgrind_annotate).
le_callgrind_cluster() {
    command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
    PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
    PG_BINDIR=$("$PG_CONFIG" --bindir)
    dir=$(mktemp -d /tmp/le-icount.XXXXXX)
    port=${LE_BENCH_PORT:-$(( 56000 + RANDOM % 2000 ))}
    mkdir "$dir/cg"
    [ "$(id -u)" -eq 0 ] && chown -R postgres: "$dir"
    trap 'le_as_pg "$PG_BINDIR/pg_ctl" -D "$dir/data" -m fast -w -t 120 stop >/dev/null 2>&1; sleep 3
          if [ "${KEEP:-0}" != 0 ]; then echo "profiles kept in $dir/cg" >&2; else rm -rf "$dir"; fi' EXIT
    le_as_pg "$PG_BINDIR/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
    cat >> "$dir/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$dir'
port = $port
fsync = off
autovacuum = off
shared_buffers = 128MB
max_wal_size = 2GB
CONF
    # pg_ctl would give up waiting for a server this slow to start: start it here.
    le_as_pg bash -c "cd '$dir' && exec valgrind --tool=callgrind --trace-children=yes \
        --callgrind-out-file='$dir/cg/cg.%p' '$PG_BINDIR/postgres' -D '$dir/data' >'$dir/server.log' 2>&1" &
    for _ in $(seq 120); do
        le_as_pg "$PG_BINDIR/pg_isready" -q -h "$dir" -p "$port" && return 0
        sleep 1
    done
}
le_bench_psql() {
    le_as_pg "$PG_BINDIR/psql" -X -q -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"
}

# le_bench_noop_trigger BENCHDIR: builds BENCHDIR/noop_trigger.c (a C
# trigger function that does nothing) with PGXS in DIR/noop, where the
# server can read it; baseline.sql creates the function from that file.
# Never installed.
le_bench_noop_trigger() {
    mkdir -p "$dir/noop"
    cp "$1/noop_trigger.c" "$dir/noop/"
    printf 'MODULES = noop_trigger\nPG_CONFIG = %s\nPGXS := $(shell $(PG_CONFIG) --pgxs)\ninclude $(PGXS)\n' \
        "$PG_CONFIG" >"$dir/noop/Makefile"
    make -s -C "$dir/noop" PROFILE= >/dev/null   # PGXS adds $PROFILE to the compiler flags
    [ "$(id -u)" -eq 0 ] && chown -R postgres: "$dir/noop"
    return 0
}

# le_bench_load BENCHDIR: the benchmark database on le_bench_cluster's
# cluster: the scripts and baseline.sql of BENCHDIR copied where postgres
# can read them, the extension and the baselines created, keys h1..h1000
# held by another owner, lease "bench" held by "me" (its token in $tok),
# lease "fence" held by "writer" ($ftok) and protecting table fenced_t.
le_bench_load() {
    cp "$1"/*.pgb "$1"/baseline.sql "$dir/"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"/*.pgb "$dir"/baseline.sql
    le_bench_noop_trigger "$1"
    le_bench_psql -At -v noop_so="$dir/noop/noop_trigger.so" -c "CREATE EXTENSION leader_election" \
        -f "$dir/baseline.sql" >/dev/null
    le_bench_psql -At -c "SELECT count(le_acquire('h' || i, 'other', '1 hour')) FROM generate_series(1, 1000) AS i" >/dev/null
    tok=$(le_bench_psql -At -c "SELECT fencing_token FROM le_acquire('bench', 'me', '1 hour')")
    ftok=$(le_bench_psql -At -c "SELECT fencing_token FROM le_acquire('fence', 'writer', '1 hour')")
    le_bench_psql -At -c "SELECT le_protect('fenced_t', 'fence')" >/dev/null
}
