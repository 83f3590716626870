#!/usr/bin/env bash
# test/run.sh package: builds the Debian package from a clean copy of this
# tree (debian/, pg_buildext), installs it into the system's PostgreSQL 15
# with apt-get, creates a throwaway cluster as the postgres user, runs
# CREATE EXTENSION, one le_acquire and pg_leader --version, and removes the
# package again.  It uses the SYSTEM PostgreSQL: run it before test/run.sh
# (as .ci/run does), which installs the extension from source again.
# Root only (apt-get).  Also checks META.json (test/check_meta.py).
#
# Ends with a line "N passed, N failed"; exits non-zero when anything failed.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/test/lib/prereq.sh"
[ "$(id -u)" -eq 0 ] || { echo "test/package.sh: run as root (it installs a package)" >&2; exit 1; }
le_ensure_packages debhelper dpkg-dev postgresql-server-dev-all || exit 1
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config    # the package is for Debian's PostgreSQL 15
bindir=$("$PG_CONFIG" --bindir)

pass=0 fail=0
check() {   # check NAME COMMAND...: runs COMMAND, counts and prints the result
    local name=$1; shift
    if "$@"; then echo "ok - $name"; pass=$((pass + 1)); else echo "not ok - $name"; fail=$((fail + 1)); fi
}

work=$(mktemp -d /tmp/le-package.XXXXXX)
chmod 755 "$work"
pkg=postgresql-15-leader-election
cleanup() {
    [ -n "${port:-}" ] && runuser -u postgres -- "$bindir/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" &&
        DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "$pkg" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT

check "META.json follows the PGXN META spec and the control file" python3 "$here/test/check_meta.py" "$here"

# A clean copy: the files git knows (committed or not), none of the build products.
mkdir "$work/src"
if git -C "$here" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$here" ls-files -co --exclude-standard -z | (cd "$here" && tar --null -cf - -T -) | tar -xf - -C "$work/src"
else
    cp -a "$here/." "$work/src/" && make -C "$work/src" -s clean >/dev/null 2>&1
fi
# The version the control file installs, which pg_leader --version names too.
extversion=$(sed -n "s/^default_version *= *'\\(.*\\)'/\\1/p" "$work/src/leader_election.control")
version=$(dpkg-parsechangelog -l "$work/src/debian/changelog" -S Version)
deb="$work/${pkg}_${version}_$(dpkg --print-architecture).deb"
(cd "$work/src" && dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1
check "dpkg-buildpackage builds $(basename "$deb")" test -s "$deb" || tail -30 "$work/build.log"

if [ -s "$deb" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >"$work/install.log" 2>&1
    check "apt-get install ./$(basename "$deb")" sh -c "dpkg-query -W $pkg >/dev/null" || cat "$work/install.log"
    check "the package installs leader_election.control and pg_leader" \
        test -f "$("$PG_CONFIG" --sharedir)/extension/leader_election.control" -a -x "$bindir/pg_leader"
    check "pg_leader --version names version $extversion" sh -c "'$bindir/pg_leader' --version | grep -qF -- '$extversion'"

    # A clean cluster directory owned by postgres, its socket there, a random port.
    mkdir "$work/data" && chown postgres: "$work/data" && chmod 700 "$work/data"
    port=$(( 20000 + RANDOM % 40000 ))
    runuser -u postgres -- "$bindir/initdb" -D "$work/data" -A trust >"$work/initdb.log" 2>&1 &&
        runuser -u postgres -- "$bindir/pg_ctl" -D "$work/data" -l "$work/data/server.log" -w \
            -o "-p $port -k $work/data -c listen_addresses=''" start >/dev/null
    check "a throwaway cluster starts on port $port" runuser -u postgres -- "$bindir/pg_isready" -q -h "$work/data" -p "$port"
    psql() { runuser -u postgres -- "$bindir/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$work/data" -p "$port" -d postgres "$@"; }
    check "CREATE EXTENSION leader_election" psql -c "CREATE EXTENSION leader_election"
    got=$(psql -c "SELECT acquired, fencing_token > 0 FROM le_acquire('package-check', 'owner-1', '10 seconds')")
    check "one le_acquire grants the lease with a token (got: $got)" test "$got" = "t|t"
    check "the installed version is $extversion" test "$(psql -c "SELECT extversion FROM pg_extension WHERE extname = 'leader_election'")" = "$extversion"
    runuser -u postgres -- "$bindir/pg_ctl" -D "$work/data" -w stop >/dev/null && port=
fi

DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "$pkg" >/dev/null 2>&1
check "apt-get purge removes the package and its files" \
    sh -c "! dpkg-query -W -f='\${Status}' $pkg 2>/dev/null | grep -q 'install ok installed' && test ! -e '$("$PG_CONFIG" --pkglibdir)/leader_election.so'"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
