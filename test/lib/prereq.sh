# Sourced by test/run.sh and the demo: makes sure the Debian packages the
# project needs are installed (installing them when run as root) and sets
# PG_CONFIG.  Works on a fresh Debian 12 machine with or without PostgreSQL.

LE_PACKAGES="make gcc gdb postgresql-15 postgresql-server-dev-15 libpq-dev libipc-run-perl pgbouncer python3-psycopg2 python3-psycopg python3-venv python3-setuptools python3-wheel spin faketime"

le_ensure_packages() {   # [EXTRA_PACKAGE...]: also needed by this run
    local missing=() p
    for p in $LE_PACKAGES "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "missing Debian packages: ${missing[*]}" >&2
            echo "run this as root (or: sudo apt-get install ${missing[*]})" >&2
            return 1
        fi
        echo "installing Debian packages: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
    PG_BINDIR=$("$PG_CONFIG" --bindir)
    export PG_CONFIG PG_BINDIR
}

# Build and install the extension and client from the tree in $1.
le_build_install() {
    make -C "$1" -s PG_CONFIG="$PG_CONFIG"
    if [ "$(id -u)" -eq 0 ]; then
        make -C "$1" -s PG_CONFIG="$PG_CONFIG" install
    else
        make -C "$1" -s PG_CONFIG="$PG_CONFIG" install || {
            echo "make install failed: run as root, or make $("$PG_CONFIG" --pkglibdir) writable" >&2
            return 1
        }
    fi
}

# le_root_or_sudo SCRIPT ARGS...: the scripts print and document their
# commands without sudo (root on a fresh machine has no sudo).  Run as
# another user, they need root to install packages and the extension unless
# PostgreSQL's directories are writable (a private installation): re-run
# the script through sudo when it is there, or say what to do.
le_root_or_sudo() {
    local pgc=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config} libdir
    [ "$(id -u)" -eq 0 ] && return 0
    libdir=$("$pgc" --pkglibdir 2>/dev/null) || libdir=
    [ -n "$libdir" ] && [ -w "$libdir" ] && [ -w "$("$pgc" --sharedir)/extension" ] && return 0
    if command -v sudo >/dev/null 2>&1; then
        echo "not root: running again through sudo" >&2
        exec sudo ${PG_CONFIG:+PG_CONFIG="$PG_CONFIG"} "$@"
    fi
    echo "$1: run this as root (it installs Debian packages and the extension)," >&2
    echo "or set PG_CONFIG to a PostgreSQL installation whose directories you can write" >&2
    exit 1
}

# Runs a command as the unprivileged user PostgreSQL servers run as.
le_as_pg() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}
