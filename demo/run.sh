#!/usr/bin/env bash
# leader_election demo: three "pg_leader run --loop" candidates compete for
# the lease "nightly-billing"; whoever leads runs a job that writes invoice
# rows stamped with its fencing token into a table protected by the fence.
# Then: the leader is frozen with SIGSTOP past its ttl (a follower takes
# over with a higher token), the frozen job is resumed and its write with
# the stale token is rejected by the fence (SQLSTATE LE001), the new leader
# is killed with SIGKILL (the next one takes over).  Prints a timeline and a
# summary, then removes everything it created.
#
#   demo/run.sh          (or: make demo)
#   demo/run.sh --svg doc/history.svg
#                        also draw the lease's ownership timeline there
#                        (pg_leader history --svg)
#
# On a fresh Debian machine run it as root: it installs missing packages,
# builds and installs the extension and pg_leader, and runs the throwaway
# cluster as the postgres user in a temporary directory (Unix socket there,
# port 5499, no TCP).  Set PG_CONFIG to use another PostgreSQL installation.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
svg_out=
if [ "${1:-}" = --svg ] && [ -n "${2:-}" ]; then
    svg_out=$(realpath -m "$2")
    set -- --svg "$svg_out"
elif [ $# -gt 0 ]; then
    echo "usage: demo/run.sh [--svg FILE]" >&2
    exit 64
fi
. "$here/test/lib/prereq.sh"
le_root_or_sudo "$here/demo/run.sh" "$@"

t_begin=$(date +%s%3N)
le_ensure_packages
echo "building and installing leader_election and pg_leader ($PG_CONFIG) ..."
le_build_install "$here" >/dev/null
PGL="$PG_BINDIR/pg_leader"
KEY=nightly-billing
PORT=${LE_DEMO_PORT:-5499}
TTL=2s
TTL_MS=2000

tmp=$(mktemp -d /tmp/le-demo.XXXXXX)
chmod 755 "$tmp"
[ "$(id -u)" -eq 0 ] && chown postgres: "$tmp"
declare -A wrapper=()

cleanup() {
    local p
    for p in "${wrapper[@]}"; do
        kill -CONT -- "-$p" 2>/dev/null || true
        kill -KILL "$p" 2>/dev/null || true
    done
    for p in $(cat "$tmp/pgids" 2>/dev/null); do
        kill -KILL -- "-$p" 2>/dev/null || true
    done
    [ -f "$tmp/data/postmaster.pid" ] &&
        le_as_pg "$PG_BINDIR/pg_ctl" -D "$tmp/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT

# Timeline entries share one format: ISO time, actor, text.
iso() { date -u +%Y-%m-%dT%H:%M:%S.%3NZ; }
step() {
    printf '%s demo %s\n' "$(iso)" "$*" >> "$tmp/demo.log"
    printf '  %s\n' "$*"
}
sql() { le_as_pg "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$tmp" -p "$PORT" -d demo -c "$1"; }
now_ms() { date +%s%3N; }
# wait_until SECONDS COMMAND...: poll every 50 ms
wait_until() {
    local until=$(( $(now_ms) + $1 * 1000 )); shift
    until "$@"; do
        [ "$(now_ms)" -ge "$until" ] && return 1
        sleep 0.05
    done
}
holder() { sql "SELECT coalesce(holder, '') || ' ' || fencing_token FROM le_leases WHERE lease_key = '$KEY' AND is_valid"; }
leader_is_not() { local h; h=$(holder); [ -n "$h" ] && [ "${h%% *}" != "$1" ]; }
has_leader() { [ -n "$(holder)" ]; }
# as_pg_exec CMD...: exec CMD as the postgres user without a parent process in
# between (runuser would stay behind as a parent and stop itself with it)
as_pg_exec() {
    if [ "$(id -u)" -eq 0 ]; then
        exec setpriv --reuid=postgres --regid=postgres --init-groups "$@"
    fi
    exec "$@"
}
# child_of PID: pid of a child process of PID
child_of() {
    local d c
    c=$(cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep -m1 .) && { echo "$c"; return 0; }
    for d in /proc/[0-9]*; do
        [ "$(cut -d' ' -f4 "$d/stat" 2>/dev/null)" = "$1" ] && { echo "${d#/proc/}"; return 0; }
    done
    return 1
}
rejected_by() { grep -q "$1 .*REJECTED" "$tmp/jobs.log" 2>/dev/null; }
# gone PID: exited (or a zombie nobody reaped yet)
gone() { ! kill -0 "$1" 2>/dev/null || [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" = Z ]; }
# granted_ms TOKEN SINCE_MS: milliseconds from SINCE_MS to the server's grant of TOKEN
granted_ms() { sql "SELECT round(extract(epoch FROM acquired_at) * 1000 - $2) FROM le_lease_history WHERE lease_key = '$KEY' AND fencing_token = $1"; }

echo "starting a throwaway cluster in $tmp (socket there, port $PORT) ..."
le_as_pg "$PG_BINDIR/initdb" -D "$tmp/data" -A trust -U postgres >/dev/null
le_as_pg "$PG_BINDIR/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w \
    -o "-p $PORT -k $tmp -c listen_addresses=''" start >/dev/null
le_as_pg "$PG_BINDIR/createdb" -h "$tmp" -p "$PORT" demo
sql "CREATE EXTENSION leader_election"
sql "CREATE TABLE invoices (
         id bigserial PRIMARY KEY,
         customer text NOT NULL,
         amount numeric NOT NULL,
         fencing_token bigint NOT NULL,
         written_at timestamptz NOT NULL DEFAULT clock_timestamp())"
sql "SELECT le_protect('invoices', '$KEY')" >/dev/null
echo "created extension leader_election and table invoices, fenced by lease \"$KEY\""

# The leader's job: one fenced invoice every 200 ms, stamped with its token.
cat > "$tmp/job.sh" <<EOF
#!/bin/sh
n=0
while :; do
    n=\$((n + 1))
    if out=\$("$PG_BINDIR/psql" -X -q -h "$tmp" -p $PORT -d demo -v ON_ERROR_STOP=1 \\
            -c '\\set VERBOSITY verbose' \\
            -c "INSERT INTO invoices (customer, amount, fencing_token) VALUES ('acme', \$n, \$LE_FENCING_TOKEN)" 2>&1); then
        echo "\$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ) \$LE_OWNER_ID token=\$LE_FENCING_TOKEN write accepted" >> "$tmp/jobs.log"
    else
        echo "\$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ) \$LE_OWNER_ID token=\$LE_FENCING_TOKEN write REJECTED: \$(echo "\$out" | grep -m1 ERROR | sed 's/^ERROR: *//')" >> "$tmp/jobs.log"
    fi
    sleep 0.2
done
EOF
chmod 755 "$tmp/job.sh"

echo
echo "== run =="
t0=$(now_ms)
for c in c1 c2 c3; do
    # setsid: own session and process group, so SIGSTOP can freeze just this one
    ( as_pg_exec setsid "$PGL" run -d "host=$tmp port=$PORT dbname=demo" -l "$KEY" --owner "$c" \
        --ttl $TTL --retry 500ms --grace 500ms --loop -- "$tmp/job.sh" ) \
        < /dev/null > "$tmp/$c.log" 2>&1 &
    wrapper[$c]=$!
    disown "$!"     # no "Killed" job report when the demo kills it
done
for c in c1 c2 c3; do
    is_pg_leader() { [ "$(readlink "/proc/${wrapper[$c]}/exe" 2>/dev/null)" = "$PGL" ]; }
    wait_until 5 is_pg_leader || { echo "candidate $c did not start: $(cat "$tmp/$c.log")" >&2; exit 1; }
done
step "started candidates c1 c2 c3 (ttl $TTL, retry 500ms, --loop)"
wait_until 10 has_leader
read -r L1 T1 <<< "$(holder)"
step "leader: $L1 with token $T1"
sleep 1.5

# 1. Freeze the leader (wrapper and job) past its ttl.
# The wrapper's child is the job's supervisor, which leads the job's process group.
sup1=$(child_of "${wrapper[$L1]}")
job1=$(child_of "$sup1")
echo "$sup1" >> "$tmp/pgids"
t_freeze=$(now_ms)
kill -STOP -- "-${wrapper[$L1]}" "-$sup1"
step "SIGSTOP $L1's process groups (wrapper, and job with its supervisor): frozen holding token $T1"
wait_until 15 leader_is_not "$L1"
read -r L2 T2 <<< "$(holder)"
t_take1=$(now_ms)
step "takeover: $L2 leads with token $T2 ($(( t_take1 - t_freeze )) ms after the freeze)"
sleep 1
# 2. Resume the stale job first: its next write carries token T1.
# (the job's processes only: its supervisor would stop it at once)
for p in $(pgrep -g "$sup1"); do [ "$p" = "$sup1" ] || kill -CONT "$p"; done
step "SIGCONT $L1's job: it carries on with stale token $T1"
wait_until 5 rejected_by "$L1" || true
kill -CONT -- "-${wrapper[$L1]}"
step "SIGCONT $L1's wrapper: its local deadline has passed, it stops the job"
wait_until 5 gone "$job1" || true
sleep 1

# 3. Kill the new leader outright.
t_kill=$(now_ms)
kill -KILL "${wrapper[$L2]}"
step "SIGKILL $L2's wrapper (its job dies with it: PR_SET_PDEATHSIG)"
wait_until 15 leader_is_not "$L2"
read -r L3 T3 <<< "$(holder)"
t_take2=$(now_ms)
step "takeover: $L3 leads with token $T3 ($(( t_take2 - t_kill )) ms after the kill)"
sleep 1.5

# 4. Graceful shutdown of the leader: SIGTERM, its job stops, it releases.
t_term=$(now_ms)
kill -TERM "${wrapper[$L3]}"
step "SIGTERM $L3's wrapper: it stops its job and releases the lease"
wait_until 10 leader_is_not "$L3"
read -r L4 T4 <<< "$(holder)"
step "takeover: $L4 leads with token $T4"
sleep 1
for c in c1 c2 c3; do kill -TERM "${wrapper[$c]}" 2>/dev/null || true; done
for c in c1 c2 c3; do wait_until 10 gone "${wrapper[$c]}" || true; done
step "SIGTERM to the last candidate: it stops its job and releases"

# Timeline: demo actions, leadership events, rejected writes; times relative to t0.
echo
echo "== timeline (seconds since the candidates started) =="
{
    cat "$tmp/demo.log"
    grep -h -E " (acquired|stopped_leading|stopping_command) " "$tmp"/c?.log |
        sed -E 's/^([^ ]+) pg_leader\[[0-9]+\] ([a-z_]+) key=[^ ]+ owner=([^ ]+) (.*)$/\1 \3 \2 \4/;
                s/ expires=[^ ]+//; s/: SIGTERM to process group.*//; s/: no renewal was confirmed.*//;
                s/: le_renew returned NULL.*//; s/: got signal.*//; s/: the local deadline passed.*//'
    grep -h "REJECTED" "$tmp/jobs.log" | sed -E 's/ write REJECTED: / write REJECTED by the fence: /'
} | sort | awk -v t0="$t0" '
    { split(substr($1, 12, 12), a, ":"); s = a[1] * 3600 + a[2] * 60 + a[3];
      rel = s - (t0 / 1000) % 86400; if (rel < -43200) rel += 86400;
      $1 = ""; printf "  %+7.2fs %s\n", rel, substr($0, 2) }'

echo
echo "== summary =="
echo "  leaders (from le_lease_history):"
sql "SELECT format('    token %s  %-3s  %s  ended: %s', fencing_token, holder,
                   to_char(acquired_at, 'HH24:MI:SS.MS'), coalesce(end_reason, 'still held'))
       FROM le_lease_history WHERE lease_key = '$KEY' ORDER BY fencing_token"
echo "  takeovers (action -> the server's grant to the next leader):"
echo "    SIGSTOP of $L1 (token $T1) -> $L2 (token $T2): $(granted_ms "$T2" "$t_freeze") ms  (lease expiry: ttl $TTL_MS ms, then at most one retry)"
echo "    SIGKILL of $L2 (token $T2) -> $L3 (token $T3): $(granted_ms "$T3" "$t_kill") ms"
echo "    SIGTERM of $L3 (token $T3) -> $L4 (token $T4): $(granted_ms "$T4" "$t_term") ms  (release, follower woken in the server)"
accepted=$(sql "SELECT count(*) FROM invoices")
rejected=$(grep -c REJECTED "$tmp/jobs.log" || true)
echo "  rows accepted: $accepted ($(sql "SELECT string_agg(format('token %s: %s', fencing_token, n), ', ' ORDER BY fencing_token)
                                        FROM (SELECT fencing_token, count(*) AS n FROM invoices GROUP BY 1) s"))"
echo "  writes rejected by the fence: $rejected"
grep -h REJECTED "$tmp/jobs.log" | sed -E 's/^[^ ]+ /    /' | head -3
stale=$(sql "SELECT count(*) FROM invoices i JOIN le_lease_history h
               ON h.lease_key = '$KEY' AND h.fencing_token = i.fencing_token
            WHERE i.written_at > coalesce(h.ended_at, 'infinity')")
echo "  rows written after their token's ownership period ended: $stale"
if [ -n "$svg_out" ]; then
    le_as_pg "$PGL" history -d "host=$tmp port=$PORT dbname=demo" -l "$KEY" --svg "$tmp/history.svg"
    cp "$tmp/history.svg" "$svg_out"
    echo "  ownership timeline (pg_leader history --svg): $svg_out"
fi
echo "  demo took $(( ($(now_ms) - t_begin) / 1000 )) s"
if [ "$stale" -ne 0 ] || [ "$rejected" -lt 1 ] || [ "$T2" -le "$T1" ] || [ "$T3" -le "$T2" ] ||
   [ "$T4" -le "$T3" ]; then
    echo "DEMO FAILED: expected rising tokens, at least one rejected stale write and no late rows" >&2
    exit 1
fi
