#!/usr/bin/env bash
# Model check of the lease and fence protocol (test/model/fence.pml) with
# spin: an exhaustive search of every interleaving within the model's
# bounds, for 2 clients with 2 writing sessions and for 3 clients with one,
# then each mutant, which must be caught.  Prints the states explored and
# the result of each run; exits non-zero when the model has a violation,
# when a mutant is NOT caught, or when a search was cut short.
#
#   test/model/check.sh          the checks of the test suite (seconds)
#   test/model/check.sh --full   also 3 clients with 3 writers (~12 million
#                                states, a CPU minute, ~2 GB of memory)
#
# LE_MODEL_EXTRA="-DMUTANT_..." adds spin flags to the checks of the model
# (not to the mutants): test/t/060_model_check.pl uses it to show that a
# violation makes this script fail.
#
# Needs spin and a C compiler (Debian: spin, gcc).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
model=$here/fence.pml
full=${1:-}

command -v spin >/dev/null || { echo "spin is not installed (Debian package spin)" >&2; exit 2; }
work=$(mktemp -d /tmp/le-model.XXXXXX) || exit 2
trap 'rm -rf "$work"' EXIT
cp "$model" "$work/fence.pml"
cd "$work" || exit 2

# run NAME HASHBITS SPIN_FLAGS...: generate, compile and run the verifier
# (hash table of 2^HASHBITS slots, sized to the run); sets
# $states, $errors and $violation (the first failed assertion, if any).
run() {
    local name=$1 bits=$2 out t0 t1
    shift 2
    rm -f pan pan.* fence.pml.trail
    if ! spin "$@" -a fence.pml >spin.out 2>&1; then
        echo "$name: spin failed:"; cat spin.out; exit 2
    fi
    cc -w "${opt:--O1}" -DSAFETY -DMEMLIM=2048 -o pan pan.c || { echo "$name: cc failed"; exit 2; }
    t0=$(date +%s.%N)
    out=$(./pan -m200000 -w"$bits" 2>&1)
    t1=$(date +%s.%N)
    states=$(echo "$out" | awk '/states, stored/ { print $1; exit }')
    errors=$(echo "$out" | sed -n 's/.*errors: \([0-9]*\).*/\1/p' | head -n 1)
    violation=$(echo "$out" | grep -m 1 -E '^pan:[0-9]+: ' | sed 's/^pan:[0-9]*: //')
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    if [ -z "$states" ] || [ -z "$errors" ] || echo "$out" | grep -q "max search depth too small\|out of memory"; then
        echo "$name: search incomplete"; echo "$out"; exit 2
    fi
}

rc=0

# The model as implemented: no violation anywhere.
check() {
    local name=$1 bits=$2
    # shellcheck disable=SC2086
    set -- "$@" ${LE_MODEL_EXTRA:-}
    run "$@"
    if [ "$errors" -eq 0 ]; then
        echo "ok: $name: $states states explored, no violation (${secs}s)"
    else
        echo "VIOLATION: $name: $states states explored, $errors error(s): $violation (${secs}s)"
        echo "counterexample (last steps; spin -t -p ${*:3} fence.pml for all):"
        spin "${@:3}" -t -p fence.pml | grep -E 'proc|assert' | grep -v 'monitor|init' | tail -n 60
        rc=1
    fi
}

# A mutant: spin must find the violation of the named property.
mutant() {
    local name=$1 expect=$2
    shift 2
    # caught within a few thousand states: compile time is what counts
    opt=-O0 run "$name" 18 "$@"
    if [ "$errors" -gt 0 ] && echo "$violation" | grep -qF -- "$expect"; then
        echo "ok: mutant $name caught: $violation ($states states, ${secs}s)"
    else
        echo "NOT CAUGHT: mutant $name: $states states explored, errors $errors${violation:+: $violation}"
        rc=1
    fi
}

check "2 clients, 2 writers" 20 -DNCLIENTS=2 -DNWRITERS=2
check "3 clients, 1 writer" 22 -DNCLIENTS=3 -DNWRITERS=1
if [ "$full" = "--full" ]; then
    check "3 clients, 3 writers, 2 tokens" 22 -DNCLIENTS=3 -DNWRITERS=3 -DMAXTOK=2
    check "3 clients, 3 writers" 24 -DNCLIENTS=3 -DNWRITERS=3
fi

# Each mutant breaks one rule of the implementation; the property it must
# violate is named by its assertion.
mutant "token read before the fence lock (P3)" 'lockok[me]' -DMUTANT_READ_BEFORE_LOCK
mutant "no fence lock in acquire (P3)" 'lockok[me]' -DMUTANT_NO_FENCE_LOCK
mutant "writer locks at the early check (P4)" 'wphase[0]!=2' -DMUTANT_LOCK_AT_WRITE
mutant "fence lock released before the commit record (P3)" 'lockok[me]' -DMUTANT_UNLOCK_BEFORE_COMMIT
mutant "commit-time check ignores expiry (P3)" 'lockok[me]' -DMUTANT_NO_EXPIRY_CHECK
mutant "transactional token sequence (P2)" 'newtok>maxdrawn' -DMUTANT_TX_SEQUENCE

if [ "$rc" -eq 0 ]; then echo "model check: PASS"; else echo "model check: FAIL"; fi
exit $rc
