#!/usr/bin/env bash
# The client library and pg_leader built with AddressSanitizer and
# UndefinedBehaviorSanitizer (make -C src/client SANITIZE=...), then the
# client TAP tests (test/t/10*.pl, or the files named) run against that
# build through test/run.sh.  Any sanitizer report fails the run: the
# processes abort on the first error (abort_on_error, halt_on_error) and
# every report is also written to a log directory that is printed at the
# end.  Not part of test/run.sh (it rebuilds the client twice).
#
#   test/sanitize.sh                     ASan + UBSan, test/t/10*.pl
#   SANITIZE=undefined test/sanitize.sh  another -fsanitize= list
#   DETECT_LEAKS=0 test/sanitize.sh      without LeakSanitizer (leaks at exit
#                                        make pg_leader abort, so tests that
#                                        check its exit status then fail)
#
# A test that compiles a program against the static library
# (100_client_cli.pl) calls cc from PATH: a cc wrapper that adds the same
# -fsanitize flags is put first on PATH, so that program links and runs
# sanitized too.
#
# Leaves a plain (unsanitized) client built and installed.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/test/lib/prereq.sh"
le_root_or_sudo "$here/test/sanitize.sh" "$@"
le_ensure_packages || exit 1
cd "$here" || exit 1

tests=("$@")
[ ${#tests[@]} -eq 0 ] && tests=(test/t/10*.pl)

logdir=$(mktemp -d /tmp/le-sanitize.XXXXXX)
chmod 1777 "$logdir"
export SANITIZE=${SANITIZE:-address,undefined}
export ASAN_OPTIONS="detect_leaks=${DETECT_LEAKS:-1}:abort_on_error=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:log_path=$logdir/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1:log_path=$logdir/ubsan"

mkdir "$logdir/bin"
real_cc=$(command -v cc)
san=$SANITIZE
[ "$san" = 1 ] && san=address,undefined
printf '#!/bin/sh\nexec %s -fsanitize=%s -fno-omit-frame-pointer "$@"\n' "$real_cc" "$san" >"$logdir/bin/cc"
chmod 755 "$logdir/bin" "$logdir/bin/cc"
export PATH="$logdir/bin:$PATH"

echo "building the client with -fsanitize=$san (ASAN_OPTIONS=$ASAN_OPTIONS)"
make -s -C src/client clean
test/run.sh tap "${tests[@]}"
rc=$?

reports=$(find "$logdir" -maxdepth 1 -type f | sort)
if [ -n "$reports" ]; then
    for f in $reports; do echo "==== $f"; cat "$f"; done
    echo "sanitizer reports: $(echo "$reports" | wc -l)"
    rc=1
else
    echo "sanitizer reports: 0"
fi
rm -rf "$logdir"

# Back to a plain build, installed, so later runs do not pick up the
# sanitized binaries.
unset SANITIZE
make -s -C src/client clean
le_build_install "$here" >/dev/null || rc=1
exit $rc
