#!/usr/bin/env bash
# leader_election on a Patroni + etcd cluster on loopback (see ha.py): run by
# "test/run.sh ha" as the user PostgreSQL runs as, with PG_CONFIG set to the
# installation that has the extension and pg_leader.  Everything lives in a
# scratch directory that is removed at the end (its logs are kept when the
# run fails, or when HA_KEEP is set).  Ports: HA_PORT_BASE (default 57800) .. +21, or the next free range of 50.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PG_BINDIR=$("${PG_CONFIG:?set PG_CONFIG}" --bindir)
for tool in etcd patroni patronictl /usr/bin/python3; do
    command -v "$tool" >/dev/null || { echo "test/ha: $tool is missing (apt-get install patroni etcd-server)" >&2; exit 1; }
done
HA_DIR=$(mktemp -d /tmp/le-ha.XXXXXX)
export PG_BINDIR HA_DIR HA_PORT_BASE=${HA_PORT_BASE:-57800}
/usr/bin/python3 "$here/ha.py"
rc=$?
if [ "$rc" -eq 0 ] && [ -z "${HA_KEEP:-}" ]; then
    rm -rf "$HA_DIR"
else
    echo "test/ha: logs kept in $HA_DIR (etcd.log, node*/ Patroni and PostgreSQL logs, cand*.log, writes-*.jsonl)"
fi
exit $rc
