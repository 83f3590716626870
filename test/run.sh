#!/usr/bin/env bash
# The whole test suite, from scratch: installs missing Debian packages (as
# root), builds and installs the extension and client, then runs regression,
# isolation and TAP tests, each against throwaway servers it creates itself
# (as the postgres user when started as root) and removes afterwards.
#
#   test/run.sh                  everything
#   test/run.sh regress          only pg_regress (sql/)
#   test/run.sh isolation        only isolation specs (test/specs/)
#   test/run.sh tap [FILES...]   only TAP tests (test/t/), or the ones named
#   test/run.sh bench            the benchmark (test/bench/run.sh; no timing
#                                assertion, prints a table; not part of "everything")
#   test/run.sh bench-wait       the server-side wait (test/bench/wait.sh: 100
#                                waiters on one key, release and expiry handovers;
#                                no timing assertion, not part of "everything")
#   test/run.sh bench-scale      the scale benchmark (test/bench/scale.sh:
#                                1M leases, 200 candidates on one key, constant renewal,
#                                history churn; ~7 min; no timing assertion, not part of
#                                "everything"; SCALE_LEASES, RENEWALS, ... shrink it)
#   test/run.sh package          builds the Debian package (debian/), installs it
#                                into the SYSTEM PostgreSQL 15, creates the extension
#                                in a throwaway cluster, runs one le_acquire and
#                                removes the package (test/package.sh; not part of
#                                "everything"; run it before the suite, which
#                                installs from source again)
#   test/run.sh ha               Patroni + etcd cluster with failovers (test/ha/;
#                                not part of "everything"; installs patroni and
#                                etcd-server when missing)
#   test/run.sh chaos [--minutes N] [--mode cli|sql|mixed]
#                                fault-injection run (test/chaos/chaos.py; default
#                                1 minute; CHAOS_BREAK=nofence to see it fail).  Its
#                                short form is TAP test 080_chaos_short.pl, part of
#                                "everything"
#
# Ends with a line "N passed, N failed"; exits non-zero when anything failed.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/test/lib/prereq.sh"
le_root_or_sudo "$here/test/run.sh" "$@"
# The package check installs a .deb instead of building into PostgreSQL's tree.
[ "${1:-}" = package ] && exec "$here/test/package.sh"
# The HA run also needs Patroni and etcd (installed here when root).
if [ "${1:-}" = ha ]; then le_ensure_packages patroni etcd-server || exit 1; else le_ensure_packages || exit 1; fi
le_build_install "$here" || exit 1

what=${1:-all}
shift || true
start=$(date +%s)

# Servers refuse to run as root: work on a copy owned by the postgres user.
if [ "$(id -u)" -eq 0 ]; then
    work=$(mktemp -d /tmp/le-test.XXXXXX)
    cp -a "$here/." "$work/"
    chown -R postgres: "$work"
else
    work=$here
fi
log=$(mktemp /tmp/le-test-log.XXXXXX)
chmod 644 "$log"

run_target() {
    le_as_pg make -C "$work" -s PG_CONFIG="$PG_CONFIG" "$@" 2>&1 | tee -a "$log"
}

rc=0
case "$what" in
    all)
        run_target installcheck-regress || rc=1
        run_target installcheck-isolation || rc=1
        run_target installcheck-tap PROVE_FLAGS=-v || rc=1 ;;
    regress|isolation) run_target "installcheck-$what" || rc=1 ;;
    tap) run_target installcheck-tap PROVE_FLAGS=-v ${1:+PROVE_TESTS="$*"} || rc=1 ;;
    bench) PG_CONFIG="$PG_CONFIG" "$here/test/bench/run.sh" 2>&1 | tee -a "$log"
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    bench-wait) PG_CONFIG="$PG_CONFIG" "$here/test/bench/wait.sh" 2>&1 | tee -a "$log" ;;
    bench-scale) PG_CONFIG="$PG_CONFIG" "$here/test/bench/scale.sh" 2>&1 | tee -a "$log"
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    ha) le_as_pg env PG_CONFIG="$PG_CONFIG" "$work/test/ha/run.sh" 2>&1 | tee -a "$log"
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    chaos)
        minutes=1 mode=mixed
        while [ $# -gt 0 ]; do
            case "$1" in
                --minutes) minutes=$2; shift 2 ;;
                --mode) mode=$2; shift 2 ;;
                *) echo "usage: test/run.sh chaos [--minutes N] [--mode cli|sql|mixed]" >&2; exit 2 ;;
            esac
        done
        seconds=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 }')
        le_as_pg env ${CHAOS_BREAK:+CHAOS_BREAK="$CHAOS_BREAK"} ${CHAOS_SEED:+CHAOS_SEED="$CHAOS_SEED"} \
            /usr/bin/python3 "$work/test/chaos/chaos.py" --bindir "$("$PG_CONFIG" --bindir)" \
            --dir "$work/tmp_chaos" --port 58250 --seconds "$seconds" --mode "$mode" 2>&1 | tee -a "$log"
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    *) echo "usage: test/run.sh [all|regress|isolation|tap [FILES...]|bench|bench-wait|bench-scale|package|ha|chaos [--minutes N]]" >&2; exit 2 ;;
esac

# Show what failed, from the copy the tests ran in.
for d in "$work/regression.diffs" "$work/test/results/regression.diffs"; do
    [ -s "$d" ] && { echo "==== $d"; cat "$d"; }
done
if grep -q "^not ok\|Result: FAIL" "$log"; then
    for f in "$work"/tmp_check/log/regress_log_*; do
        [ -f "$f" ] && grep -q "not ok" "$f" && { echo "==== $f (tail)"; tail -n 60 "$f"; }
    done
fi

# One plain closing line: pg_regress/isolation tests and TAP assertions.
passed=$(grep -Ec '(\.\.\. ok|^ok [0-9]+)' "$log" || true)
failed=$(grep -Ec '(\.\.\. FAILED|^not ok [0-9]+)' "$log" || true)
[ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
# ha, chaos and bench are one run each, with their own report above.
[ "$rc" -eq 0 ] && [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ] && passed=1
echo "elapsed: $(( $(date +%s) - start ))s"
echo "$passed passed, $failed failed"
[ "$work" != "$here" ] && [ "$rc" -eq 0 ] && rm -rf "$work"
rm -f "$log"
exit $rc
