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
#   test/run.sh groups-fault [--minutes N] [--seed S]
#                                fault-injection run of partition groups (test/chaos/
#                                groups_fault.py; default 1 minute; GROUPS_BREAK=early-grant
#                                builds a server that grants a partition before its
#                                release, into a separate installation, to see it fail).
#                                Its short form is TAP test 148_groups_fault_short.pl
#   test/run.sh conformance [run.py options]
#                                the client conformance suite in full (test/conformance/
#                                run.py through test/t/142_conformance.pl; default
#                                --reps 20, every available client; ~1-2 min per client).
#                                Its --quick form is part of "everything"
#
# Ends with a line "N passed, N failed"; exits non-zero when anything failed.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/test/lib/prereq.sh"
le_root_or_sudo "$here/test/run.sh" "$@"
# The package check installs a .deb instead of building into PostgreSQL's tree.
[ "${1:-}" = package ] && exec "$here/test/package.sh"
# The HA run also needs Patroni and etcd (installed here when root).
case "${1:-all}" in
    ha) le_ensure_packages patroni etcd-server || exit 1 ;;
    all|tap) le_ensure_packages $LE_SUITE_PACKAGES || exit 1 ;;
    *) le_ensure_packages || exit 1 ;;
esac
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

# TAP files run three at a time (most of their time is spent waiting for
# leases to expire), the longest first so that no slot idles at the end;
# the few whose checks measure a client against a short ttl on a slow link,
# and one that keeps both cores busy taking and freeing 200,000 locks, run
# alone afterwards (tap_files alone|parallel).
tap_jobs=${LE_TAP_JOBS:-3}
tap_long="080_chaos_short 148_groups_fault_short 050_random_schedule 070_sweep 018_stalled_holder
          010_crash_restart 115_client_sanitizers 060_model_check 035_fence_rewrite_race"
tap_alone="117_client_signal_timing 130_client_slow_renewal 149_rejoin_after_release"
tap_files() {
    local f n list=""
    if [ "$1" = alone ]; then
        for n in $tap_alone; do [ -f "$work/test/t/$n.pl" ] && list="$list test/t/$n.pl"; done
        echo $list
        return
    fi
    for n in $tap_long; do [ -f "$work/test/t/$n.pl" ] && list="$list test/t/$n.pl"; done
    for f in "$work"/test/t/*.pl; do
        n=$(basename "$f" .pl)
        case " $tap_long $tap_alone " in *" $n "*) ;; *) list="$list test/t/$n.pl" ;; esac
    done
    echo $list
}

run_target() {
    le_as_pg make -C "$work" -s PG_CONFIG="$PG_CONFIG" "$@" 2>&1 | tee -a "$log"
}

# le_break_install DIR CPPFLAGS: a copy of PG_CONFIG's PostgreSQL in DIR
# (the layout PREFIX/lib/postgresql/15, PREFIX/share/postgresql/15,
# PREFIX/include/postgresql: PostgreSQL finds its files relative to its
# binaries) with the extension and client built from a copy of the tree
# with CPPFLAGS (a deliberately broken server for a self-test); prints its
# bindir.  PG_CONFIG's own installation is left as it is.
le_break_install() {
    local dir=$1 flags=$2 bin prefix ver pgc
    bin=$("$PG_CONFIG" --bindir)
    ver=$(basename "$(dirname "$bin")")
    prefix=$(cd "$bin/../../../.." && pwd)
    for d in "lib/postgresql/$ver" "share/postgresql/$ver" include/postgresql; do
        [ -d "$prefix/$d" ] || { echo "le_break_install: no $prefix/$d (not a Debian layout)" >&2; return 1; }
    done
    rm -rf "$dir"
    mkdir -p "$dir/usr/lib/postgresql" "$dir/usr/share/postgresql" "$dir/usr/include" "$dir/src" >&2
    cp -a "$prefix/lib/postgresql/$ver" "$dir/usr/lib/postgresql/" &&
        cp -a "$prefix/share/postgresql/$ver" "$dir/usr/share/postgresql/" &&
        cp -a "$prefix/include/postgresql" "$dir/usr/include/" &&
        cp -a "$here/." "$dir/src/" || return 1
    pgc=$dir/usr/lib/postgresql/$ver/bin/pg_config
    mkdir -p "$("$pgc" --libdir)"
    { make -C "$dir/src" -s PG_CONFIG="$PG_CONFIG" clean &&
        make -C "$dir/src" -s PG_CONFIG="$pgc" COPT="$flags" &&
        make -C "$dir/src" -s PG_CONFIG="$pgc" COPT="$flags" install; } >&2 || return 1
    chmod -R a+rX "$dir"
    "$pgc" --bindir
}

rc=0
case "$what" in
    all)
        # pg_regress and the isolation tester each start a temporary server
        # of their own: they run side by side, and the output of pg_regress
        # follows the isolation tester's.
        rlog=$(mktemp /tmp/le-test-regress.XXXXXX)
        le_as_pg make -C "$work" -s PG_CONFIG="$PG_CONFIG" installcheck-regress >"$rlog" 2>&1 &
        rpid=$!
        run_target installcheck-isolation || rc=1
        wait "$rpid" || rc=1
        tee -a "$log" <"$rlog"
        rm -f "$rlog"
        run_target installcheck-tap PROVE_FLAGS="-v --timer -j$tap_jobs" PROVE_TESTS="$(tap_files parallel)" || rc=1
        run_target installcheck-tap PROVE_FLAGS="-v --timer" PROVE_TESTS="$(tap_files alone)" || rc=1 ;;
    regress|isolation) run_target "installcheck-$what" || rc=1 ;;
    tap) if [ $# -gt 0 ]; then
             run_target installcheck-tap PROVE_FLAGS="-v --timer -j$tap_jobs" PROVE_TESTS="$*" || rc=1
         else
             run_target installcheck-tap PROVE_FLAGS="-v --timer -j$tap_jobs" PROVE_TESTS="$(tap_files parallel)" || rc=1
             run_target installcheck-tap PROVE_FLAGS="-v --timer" PROVE_TESTS="$(tap_files alone)" || rc=1
         fi ;;
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
    groups-fault)
        minutes=1 seed=${GROUPS_SEED:-}
        while [ $# -gt 0 ]; do
            case "$1" in
                --minutes) minutes=$2; shift 2 ;;
                --seed) seed=$2; shift 2 ;;
                *) echo "usage: test/run.sh groups-fault [--minutes N] [--seed S]" >&2; exit 2 ;;
            esac
        done
        seconds=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 }')
        bindir=$("$PG_CONFIG" --bindir)
        if [ -n "${GROUPS_BREAK:-}" ]; then
            [ "$GROUPS_BREAK" = early-grant ] || { echo "GROUPS_BREAK: only early-grant" >&2; exit 2; }
            bindir=$(le_break_install "$work/tmp_groups_break" -DLE_BREAK_EARLY_GRANT) || exit 1
        fi
        le_as_pg env ${GROUPS_BREAK:+GROUPS_BREAK="$GROUPS_BREAK"} \
            /usr/bin/python3 "$work/test/chaos/groups_fault.py" --bindir "$bindir" ${seed:+--seed "$seed"} \
            --dir "$work/tmp_groups_fault" --port 58260 --seconds "$seconds" 2>&1 | tee -a "$log"
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    conformance)
        le_as_pg env LE_CONFORMANCE_ARGS="${*:---reps 20}" make -C "$work" -s PG_CONFIG="$PG_CONFIG" \
            installcheck-tap PROVE_FLAGS=-v PROVE_TESTS=test/t/142_conformance.pl 2>&1 | tee -a "$log"
        [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    *) echo "usage: test/run.sh [all|regress|isolation|tap [FILES...]|bench|bench-wait|bench-scale|package|ha|chaos [--minutes N]|groups-fault [--minutes N] [--seed S]|conformance [OPTIONS]]" >&2; exit 2 ;;
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
