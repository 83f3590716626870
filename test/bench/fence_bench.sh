#!/usr/bin/env bash
# Benchmark of the fence (issue 3, "Speed"); not part of the test suite.
#
#   test/bench/fence_bench.sh [SECONDS_PER_ROUND] [ROUNDS]
#
# Starts its own throwaway cluster (as the postgres user when run as root;
# own socket directory and port), installs nothing, and runs pgbench with
# synchronous_commit = off and 2 clients.  Variants run in alternating
# rounds so that background load hits them alike; it prints the total
# transactions per second of each and these ratios:
#   fenced INSERT (le_protect) / the same INSERT without trigger   target >= 0.9
#   PL/pgSQL "SELECT ... FOR SHARE" trigger / INSERT without trigger (baseline)
#   le_schedule_job / le_fence_check + INSERT ... ON CONFLICT DO NOTHING
# and, as an estimate that background load cannot skew, the fenced / plain
# INSERT ratio with both running at the same time.
# The extension must be installed in the PostgreSQL of PG_CONFIG (make
# install, or test/run.sh which installs it).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/test/lib/prereq.sh"
. "$here/test/lib/cluster.sh"
secs=${1:-5}
rounds=${2:-3}
le_bench_cluster "synchronous_commit = off"

psql() { le_bench_psql "$@"; }

psql <<'SQL'
CREATE EXTENSION leader_election;
SELECT fencing_token FROM le_acquire('bench', 'bench-leader', '50 minutes') \gset
CREATE TABLE plain_t  (id bigserial PRIMARY KEY, payload text, fencing_token bigint NOT NULL);
CREATE TABLE fenced_t (id bigserial PRIMARY KEY, payload text, fencing_token bigint NOT NULL);
CREATE TABLE share_t  (id bigserial PRIMARY KEY, payload text, fencing_token bigint NOT NULL);
SELECT le_protect('fenced_t', 'bench') \gset
-- The baseline the issue names: a PL/pgSQL trigger locking the lease row.
CREATE FUNCTION share_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE cur bigint;
BEGIN
    SELECT fencing_token INTO cur FROM le_lease
     WHERE lease_key = TG_ARGV[0] AND holder IS NOT NULL AND expires_at > clock_timestamp()
       FOR SHARE;
    IF cur IS DISTINCT FROM NEW.fencing_token THEN
        RAISE EXCEPTION 'stale token' USING ERRCODE = 'LE001';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER share_fence BEFORE INSERT ON share_t FOR EACH ROW EXECUTE FUNCTION share_fence('bench');
-- The hand-written pattern for users' own tables.
CREATE TABLE my_jobs (schedule_key text PRIMARY KEY, job_type text, scheduled_for timestamptz,
                      payload jsonb, fencing_token bigint);
SQL
token=$(psql -At -c "SELECT fencing_token FROM le_leases WHERE lease_key = 'bench'")

w() { printf '%s\n' "$2" > "$dir/$1.sql"; }
w plain  'INSERT INTO plain_t (payload, fencing_token) VALUES ('"'"'x'"'"', :token);'
w fenced 'INSERT INTO fenced_t (payload, fencing_token) VALUES ('"'"'x'"'"', :token);'
w share  'INSERT INTO share_t (payload, fencing_token) VALUES ('"'"'x'"'"', :token);'
w sched  '\set k random(1, 1000000000000)
SELECT le_schedule_job('"'"'bench'"'"', :token, '"'"'s'"'"' || :k, '"'"'bench'"'"', now(), '"'"'{}'"'"');'
w hand   '\set k random(1, 1000000000000)
BEGIN;
SELECT le_fence_check('"'"'bench'"'"', :token);
INSERT INTO my_jobs VALUES ('"'"'h'"'"' || :k, '"'"'bench'"'"', now(), '"'"'{}'"'"', :token) ON CONFLICT (schedule_key) DO NOTHING;
COMMIT;'
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"/*.sql

variants=${VARIANTS:-"plain fenced share sched hand"}
declare -A total tps
ratios_fenced=() ratios_share=() ratios_sched=()
echo "pgbench: 2 clients, synchronous_commit=off, $rounds rounds of ${secs}s per variant, token $token"
for r in $(seq 1 "$rounds"); do
    line="  round $r:"
    for v in $variants; do
        tps[$v]=$(le_pgbench "$dir" "$port" "$secs" 2 "$dir/$v.sql" -D token="$token")
        total[$v]=$(awk -v a="${total[$v]:-0}" -v b="${tps[$v]}" 'BEGIN { print a + b }')
        line+=$(printf ' %s %.0f' "$v" "${tps[$v]}")
    done
    echo "$line tps"
    ratios_fenced+=("$(le_ratio "${tps[fenced]:-0}" "${tps[plain]:-0}")")
    ratios_share+=("$(le_ratio "${tps[share]:-0}" "${tps[plain]:-0}")")
    ratios_sched+=("$(le_ratio "${tps[sched]:-0}" "${tps[hand]:-0}")")
done

# A second estimate that background load cannot skew: the plain and the
# fenced INSERT run at the same time (2 clients each), so both see the same
# load and compete for the same CPUs; their tps ratio is their cost ratio.
paired=()
for r in $(seq 1 "$rounds"); do
    le_as_pg "$PG_BINDIR/pgbench" -n -h "$dir" -p "$port" -U postgres -c 2 -j 2 -T "$secs" \
        -D token="$token" -f "$dir/plain.sql" postgres > "$dir/paired_plain.out" 2>/dev/null &
    le_as_pg "$PG_BINDIR/pgbench" -n -h "$dir" -p "$port" -U postgres -c 2 -j 2 -T "$secs" \
        -D token="$token" -f "$dir/fenced.sql" postgres > "$dir/paired_fenced.out" 2>/dev/null
    wait
    tp=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$dir/paired_plain.out")
    tf=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$dir/paired_fenced.out")
    printf '  paired round %d: plain %.0f fenced %.0f tps\n' "$r" "${tp:-0}" "${tf:-0}"
    paired+=("$(le_ratio "${tf:-0}" "${tp:-0}")")
done

# Background load on a shared machine hits single rounds: report the median
# of the per-round ratios, and the ratio of the totals.

ratio() { le_ratio "${total[$1]:-0}" "${total[$2]:-0}"; }
echo
echo "ratio (median of rounds / of totals)"
echo "  fenced INSERT / INSERT without trigger:              $(le_median "${ratios_fenced[@]}") / $(ratio fenced plain)   (target >= 0.9)"
echo "  PL/pgSQL FOR SHARE trigger / INSERT without trigger: $(le_median "${ratios_share[@]}") / $(ratio share plain)"
echo "  le_schedule_job / le_fence_check + INSERT ON CONFLICT: $(le_median "${ratios_sched[@]}") / $(ratio sched hand)"
echo "  fenced / plain INSERT run at the same time (median):  $(le_median "${paired[@]}")"
