#!/usr/bin/env bash
# Run the regression and isolation suites once against a throwaway server
# that runs under valgrind (memcheck), and summarise what valgrind reported.
#
#   PG_CONFIG=... test/valgrind.sh [PORT]
#
# Needs valgrind (apt-get install valgrind) and an installed extension
# (make install, or run test/run.sh first).  Debian's PostgreSQL is built
# without USE_VALGRIND, so palloc'd chunks are not tracked one by one:
# memcheck sees reads of freed malloc blocks, uninitialised values passed to
# system calls and writes outside malloc blocks, but not a read of a
# pfree'd chunk, nor of a deleted memory context whose blocks went back to
# PostgreSQL's context free list: the use of SPI memory after SPI_finish
# ran here without a single report.  Results of the
# suites themselves may differ under valgrind's slowness (timing-based
# steps); what matters here is valgrind's report: frames in
# leader_election.so.  Logs stay in the directory printed at the end.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/test/lib/prereq.sh"
le_ensure_packages || exit 1
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
. "$here/test/lib/cluster.sh"

port=${1:-$(( 57000 + RANDOM % 900 ))}
dir=$(mktemp -d /tmp/le-valgrind.XXXXXX)
chmod 755 "$dir"
pgxs=$(cd "$(dirname "$("$PG_CONFIG" --pgxs)")/../.." && pwd)

# Suppressions for PostgreSQL itself (uninitialised padding written to
# files and sockets, which PostgreSQL's own valgrind.supp also suppresses).
cat > "$dir/pg.supp" <<'SUPP'
{
   padding_write
   Memcheck:Param
   write(buf)
   fun:*
   ...
}
{
   padding_pwrite
   Memcheck:Param
   pwrite64(buf)
   fun:*
   ...
}
{
   padding_send
   Memcheck:Param
   socketcall.send(msg)
   fun:*
   ...
}
{
   padding_sendto
   Memcheck:Param
   sendto(msg)
   fun:*
   ...
}
{
   padding_pwritev2
   Memcheck:Param
   pwritev(vector[0])
   fun:*
   ...
}
{
   padding_epoll
   Memcheck:Param
   epoll_ctl(event)
   fun:*
   ...
}
SUPP

# The server binary, wrapped: every process of the cluster (postmaster and
# the backends it forks) runs under memcheck, one log file per pid.
cat > "$dir/postgres" <<WRAP
#!/bin/sh
exec valgrind --quiet --tool=memcheck --trace-children=yes --track-origins=no \
  --read-var-info=no --num-callers=30 --suppressions=$dir/pg.supp \
  --log-file=$dir/vg.%p.log $PG_BINDIR/postgres "\$@"
WRAP
chmod 755 "$dir/postgres"
chown -R postgres: "$dir" 2>/dev/null || true

le_as_pg "$PG_BINDIR/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
{
    echo "listen_addresses = ''"
    echo "unix_socket_directories = '$dir'"
    echo "port = $port"
    echo "max_prepared_transactions = 10"
    echo "lock_timeout = 0"
    echo "log_min_messages = warning"
    echo "autovacuum = off"
} >> "$dir/data/postgresql.conf"
le_as_pg "$PG_BINDIR/pg_ctl" -D "$dir/data" -p "$dir/postgres" -l "$dir/server.log" -t 600 -w start >/dev/null ||
    { echo "server did not start under valgrind; see $dir/server.log" >&2; exit 1; }

work=$(mktemp -d /tmp/le-valgrind-src.XXXXXX)
cp -a "$here/." "$work/"
chown -R postgres: "$work" 2>/dev/null || true
cd "$work" || exit 1
regress=$(cd "$work" && ls sql/*.sql | sed 's,sql/\(.*\)\.sql,\1,' | tr '\n' ' ')
isolation=$(cd "$work" && ls test/specs/*.spec | sed 's,test/specs/\(.*\)\.spec,\1,' | tr '\n' ' ')
le_as_pg "$PG_BINDIR/createdb" -h "$dir" -p "$port" -U postgres contrib_regression
le_as_pg "$PG_BINDIR/createdb" -h "$dir" -p "$port" -U postgres isolation_regression
le_as_pg "$pgxs/src/test/regress/pg_regress" --use-existing --host="$dir" --port="$port" --user=postgres \
    --dbname=contrib_regression --bindir="$PG_BINDIR" --inputdir=. $regress > "$dir/regress.out" 2>&1
le_as_pg "$pgxs/src/test/isolation/pg_isolation_regress" --use-existing --host="$dir" --port="$port" --user=postgres \
    --dbname=isolation_regression --bindir="$PG_BINDIR" --inputdir=test --outputdir=test/results $isolation > "$dir/isolation.out" 2>&1
cp -a "$work/regression.diffs" "$dir/regress.diffs" 2>/dev/null
cp -a "$work/test/results/regression.diffs" "$dir/isolation.diffs" 2>/dev/null
le_as_pg "$PG_BINDIR/pg_ctl" -D "$dir/data" -m fast -t 600 -w stop >/dev/null
rm -rf "$work"

echo "== suites (diffs may come from valgrind's slowness)"
tail -n 3 "$dir/regress.out" "$dir/isolation.out"
echo "== valgrind: processes with errors / all processes"
echo "$(grep -l 'ERROR SUMMARY: [1-9]\|^==[0-9]*== [A-Z]' "$dir"/vg.*.log 2>/dev/null | wc -l) / $(ls "$dir"/vg.*.log | wc -l)"
echo "== valgrind: error kinds"
grep -h '^==[0-9]*== [A-Z][a-z]' "$dir"/vg.*.log | sed 's/^==[0-9]*== //' | sort | uniq -c | sort -rn | head -20
echo "== valgrind: errors with a frame in leader_election.so"
for f in "$dir"/vg.*.log; do
    awk '/^==[0-9]+== [A-Z]/ { block = $0 "\n"; inblk = 1; next }
         inblk && /^==[0-9]+==    (at|by)/ { block = block $0 "\n"; next }
         inblk { if (block ~ /leader_election/) printf "%s\n", block; inblk = 0 }' "$f"
done | head -200
echo "logs: $dir"
