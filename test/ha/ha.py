#!/usr/bin/python3
"""leader_election on a real highly available cluster (test/run.sh ha).

Boots etcd and a 2-node Patroni cluster (synchronous_mode) on loopback, runs
three `pg_leader run --loop` candidates for one key through a multi-host
read-write DSN, each leader writing fenced rows with its token every 100 ms,
then injects in turn a planned switchover, a SIGKILL of the primary's
Patroni and postmaster, and a SIGSTOP of the primary's Patroni, postmaster
and backends (resumed later).  Afterwards it checks, from the
database's history and the clients' logs, the invariants of the project and
that no acknowledged grant, renewal or fenced write was lost, prints a
summary with leader and Patroni failover times, and exits 1 on any violation.

Environment: PG_BINDIR (PostgreSQL 15 with the extension and pg_leader
installed), HA_DIR (a scratch directory, removed by run.sh), HA_PORT_BASE.
Runs as the user PostgreSQL runs as.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import psycopg2

BIN = os.environ["PG_BINDIR"]
DIR = os.environ["HA_DIR"]


def free_base(first):
    """The first of first, first+50, ... (up to +150) whose 22 ports are all free:
    a TAP test of another suite may hold one of ours (random ports)."""
    for base in range(first, first + 200, 50):
        try:
            for port in range(base, base + 22):
                with socket.socket() as sk:
                    sk.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise SystemExit("FAIL: no free range of ports from %d" % first)


BASE = free_base(int(os.environ.get("HA_PORT_BASE", "57800")))
HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "ha"
ETCD_PORT, ETCD_PEER = BASE, BASE + 1
NODES = {
    "node1": {"rest": BASE + 10, "pg": BASE + 20},
    "node2": {"rest": BASE + 11, "pg": BASE + 21},
}
DSN = ("host=127.0.0.1,127.0.0.1 port=%d,%d dbname=postgres user=postgres "
       "target_session_attrs=read-write connect_timeout=2"
       % (NODES["node1"]["pg"], NODES["node2"]["pg"]))
# The candidates run their lease calls with synchronous_commit = local: the
# grants and renewals must still wait for the synchronous standby (the
# fenced writes use the plain DSN and the server default, on).
LEADER_DSN = DSN + " options='-c synchronous_commit=local'"
LEASE_TTL, RENEW = "4s", "1s"
# Patroni's DCS API: etcd (v2, the default) or etcd3.  Patroni 3.0.2's etcd3
# code overwrites the leader key without a compare when a primary resumes
# after its lease expired (_update_leader: a new lease, then a plain put), so
# a frozen primary takes the lock back from the promoted standby, which is
# then rewound: acknowledged writes and grants of the new timeline are lost.
# HA_DCS=etcd3 runs with it (seen once in three runs here); the v2 API
# updates the key with test-and-set.
DCS = os.environ.get("HA_DCS", "etcd")
T0 = time.time()
procs = {}           # name -> Popen of etcd, patroni nodes, candidates
faults = []          # one dict per injected fault


def log(msg):
    print("[%6.1fs] %s" % (time.time() - T0, msg), flush=True)


def node_dsn(name):
    return ("host=127.0.0.1 port=%d dbname=postgres user=postgres connect_timeout=2"
            % NODES[name]["pg"])


def rest(name, path):
    """HTTP status of a Patroni REST endpoint (0 when unreachable)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/%s" % (NODES[name]["rest"], path),
                                    timeout=1) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return 0


def wait_for(what, cond, timeout, interval=0.1):
    """Poll cond() until true; die after timeout seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    raise SystemExit("FAIL: timed out after %ds waiting for %s" % (timeout, what))


def sql(dsn, query, args=None, fetch=True):
    with psycopg2.connect(dsn) as conn:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(query, args)
            return cur.fetchall() if fetch and cur.description else None


def writable(name):
    """Does this node accept writes now (a probe row committed and acknowledged)?

    A commit whose wait for the synchronous standby is cut short by the
    statement timeout is committed locally only (a WARNING, not an error):
    that does not count as accepting writes."""
    try:
        with psycopg2.connect(node_dsn(name)) as conn:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SET statement_timeout = '1s'; INSERT INTO ha_probe DEFAULT VALUES")
            return not any("synchronous replication" in n for n in conn.notices)
    except psycopg2.Error:
        return False


def primary():
    for name in NODES:
        if rest(name, "primary") == 200:
            return name
    return None


def start_etcd():
    os.makedirs(DIR + "/etcd", exist_ok=True)
    out = open(DIR + "/etcd.log", "w")
    procs["etcd"] = subprocess.Popen(
        ["etcd", "--name", "ha", "--data-dir", DIR + "/etcd/data",
         "--listen-client-urls", "http://127.0.0.1:%d" % ETCD_PORT,
         "--advertise-client-urls", "http://127.0.0.1:%d" % ETCD_PORT,
         "--listen-peer-urls", "http://127.0.0.1:%d" % ETCD_PEER,
         "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % ETCD_PEER,
         "--initial-cluster", "ha=http://127.0.0.1:%d" % ETCD_PEER, "--enable-v2=true"],
        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def patroni_config(name):
    n = NODES[name]
    path = "%s/%s.yml" % (DIR, name)
    # JSON is YAML: no dependency on a YAML writer.
    conf = {
        "scope": "le-ha", "name": name,
        "log": {"dir": "%s/%s" % (DIR, name), "level": "INFO"},
        "restapi": {"listen": "127.0.0.1:%d" % n["rest"], "connect_address": "127.0.0.1:%d" % n["rest"]},
        DCS: {"hosts": ["127.0.0.1:%d" % ETCD_PORT]},
        "bootstrap": {
            "dcs": {
                "ttl": 10, "loop_wait": 1, "retry_timeout": 3,
                "maximum_lag_on_failover": 1048576,
                "synchronous_mode": True,
                "postgresql": {
                    "use_pg_rewind": True, "use_slots": True,
                    "parameters": {
                        "wal_level": "replica", "hot_standby": "on", "wal_log_hints": "on",
                        "max_wal_senders": 10, "max_replication_slots": 10,
                        "track_commit_timestamp": "on", "wal_keep_size": "128MB",
                        "shared_buffers": "32MB", "fsync": "on",
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, {"locale": "C"}],
        },
        "postgresql": {
            "listen": "127.0.0.1:%d" % n["pg"], "connect_address": "127.0.0.1:%d" % n["pg"],
            "data_dir": "%s/%s/data" % (DIR, name), "bin_dir": BIN,
            "pgpass": "%s/%s/pgpass" % (DIR, name),
            "remove_data_directory_on_rewind_failure": True,
            "remove_data_directory_on_diverged_timelines": True,
            "authentication": {
                "superuser": {"username": "postgres", "password": "ha-super"},
                "replication": {"username": "replicator", "password": "ha-repl"},
                "rewind": {"username": "postgres", "password": "ha-super"},
            },
            "parameters": {"unix_socket_directories": "%s/%s" % (DIR, name)},
            "pg_hba": ["local all all trust", "host all all 127.0.0.1/32 trust",
                       "host replication replicator 127.0.0.1/32 trust"],
        },
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
    }
    with open(path, "w") as f:
        json.dump(conf, f, indent=1)
    return path


def start_patroni(name):
    os.makedirs("%s/%s" % (DIR, name), mode=0o700, exist_ok=True)
    out = open("%s/%s/patroni.out" % (DIR, name), "a")
    procs[name] = subprocess.Popen(["patroni", patroni_config(name)], stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)


def children(ppid):
    """Pids of the processes whose parent is ppid (Linux /proc)."""
    kids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/stat" % pid) as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == ppid:
                kids.append(int(pid))
    return kids


def signal_if_alive(pid, sig):
    """Signal a process that may have exited meanwhile (a child that was ending)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def postmaster_pid(name):
    with open("%s/%s/data/postmaster.pid" % (DIR, name)) as f:
        return int(f.readline())


def start_candidate(i):
    name = "cand%d" % i
    env = dict(os.environ, HA_DSN=DSN, HA_WRITES="%s/writes-%s.jsonl" % (DIR, name))
    procs[name] = subprocess.Popen(
        [BIN + "/pg_leader", "run", "-d", LEADER_DSN, "-l", KEY, "--owner", name,
         "--ttl", LEASE_TTL, "--renew", RENEW, "--retry", "300ms", "--grace", "1s",
         "--connect-timeout", "5s", "--statement-timeout", "2s", "--loop",
         "--log-format", "json", "-v", "--", "/usr/bin/python3", HERE + "/writer.py"],
        env=env, stdout=subprocess.DEVNULL, stderr=open("%s/%s.log" % (DIR, name), "w"),
        start_new_session=True)


def client_events():
    """Every pg_leader event of every candidate, and every write outcome."""
    leader, writes = [], []
    for i in range(1, 4):
        for path, into in (("%s/cand%d.log" % (DIR, i), leader),
                           ("%s/writes-cand%d.jsonl" % (DIR, i), writes)):
            if os.path.exists(path):
                for line in open(path):
                    if line.startswith("{"):
                        try:
                            into.append(json.loads(line))
                        except ValueError:
                            pass
    return leader, writes


def acked_tokens():
    leader, _ = client_events()
    return [e["token"] for e in leader if e["event"] == "acquired"]


def current_token():
    r = sql(DSN, "SELECT fencing_token, holder FROM le_leases WHERE lease_key = %s", (KEY,))
    return r[0] if r else (0, None)


def fenced_write_after(t, node=None):
    """Commit time (epoch) of the first fenced row committed after t (on node), or None."""
    r = sql(DSN, "SELECT extract(epoch FROM min(pg_xact_commit_timestamp(xmin)))::float8"
                 " FROM ha_fenced WHERE pg_xact_commit_timestamp(xmin) > to_timestamp(%s)"
                 " AND (%s IS NULL OR server_port = %s)",
            (t, node and NODES[node]["pg"], node and NODES[node]["pg"]))
    return r[0][0]


def grant_after(t):
    r = sql(DSN, "SELECT extract(epoch FROM min(acquired_at))::float8 FROM le_lease_history"
                 " WHERE lease_key = %s AND acquired_at > to_timestamp(%s)", (KEY, t))
    return r[0][0]


def wait_steady(after, what, node=None):
    """A leader writes fenced rows (committed after `after`) on a writable primary."""
    return wait_for("a leader writing fenced rows " + what,
                    lambda: _safe(lambda: fenced_write_after(after, node)), 60, 0.2)


def _safe(f):
    try:
        return f()
    except psycopg2.Error:
        return None


def wait_rejoined(name):
    """The node runs again as the synchronous standby: True, or False after 120 s."""
    try:
        wait_for("%s to rejoin as synchronous standby" % name,
                 lambda: rest(name, "replica") == 200 and rest(name, "sync") == 200, 120, 0.5)
        return True
    except SystemExit as e:
        log(str(e))
        return False


def stale_probe(fault):
    """Write with the token that was current at the fault, now superseded."""
    old = fault["token_before"]
    cur, _ = current_token()
    if cur <= old:
        fault["stale"] = "not applicable: the leader kept token %d" % old
        return
    try:
        sql(DSN, "INSERT INTO ha_fenced (lease_key, fencing_token, owner, seq)"
                 " VALUES (%s, %s, 'stale-probe', -1)", (KEY, old), fetch=False)
        fault["stale"] = "ACCEPTED (violation)"
        fault["stale_ok"] = False
    except psycopg2.Error as e:
        fault["stale"] = "token %d refused with %s (current %d)" % (old, e.pgcode, cur)
        fault["stale_ok"] = e.pgcode == "LE001"


def inject(kind):
    old = primary()
    other = [n for n in NODES if n != old][0]
    tok, holder = current_token()
    fault = {"kind": kind, "old_primary": old, "new_primary": other, "token_before": tok,
             "holder_before": holder, "acked_before": max(acked_tokens() or [0])}
    log("fault %s: primary %s, lease token %d held by %s" % (kind, old, tok, holder))
    # Patroni's failover time: from the fault to the first probe row the
    # other node commits, polled from a thread of its own.
    done = {}
    poller = threading.Thread(target=lambda: done.update(
        t=wait_for("%s to accept writes" % other, lambda: writable(other) and time.time(), 90, 0.1)),
        daemon=True)
    fault["t"] = time.time()
    poller.start()
    if kind == "switchover":
        subprocess.run(["patronictl", "-c", "%s/%s.yml" % (DIR, old), "switchover",
                        "--leader", old, "--candidate", other, "--force"],
                       check=True, stdout=subprocess.DEVNULL)
    elif kind == "kill":
        pm = postmaster_pid(old)
        os.kill(procs[old].pid, signal.SIGKILL)
        os.kill(pm, signal.SIGKILL)
        procs[old].wait()
    elif kind == "freeze":
        # Patroni's process group, the postmaster and every child of it:
        # each backend runs in a process group of its own (setsid), so
        # stopping the postmaster's group alone would leave the open
        # connections served (renewals would go on on the "frozen" node).
        pm = postmaster_pid(old)
        fault["frozen_group"] = os.getpgid(procs[old].pid)
        os.killpg(fault["frozen_group"], signal.SIGSTOP)
        os.kill(pm, signal.SIGSTOP)
        fault["frozen"] = [pm] + children(pm)
        for pid in fault["frozen"][1:]:
            signal_if_alive(pid, signal.SIGSTOP)
        log("  stopped Patroni (process group %d), the postmaster %d and its %d children"
            % (fault["frozen_group"], pm, len(fault["frozen"]) - 1))
    poller.join()
    if "t" not in done:
        raise SystemExit("FAIL: %s never accepted writes after the %s" % (other, kind))
    fault["t_writable"] = done["t"]
    fault["t_write"] = wait_steady(fault["t"], "on %s after %s" % (other, kind), other)
    fault["t_grant"] = grant_after(fault["t"])
    log("  %s accepts writes after %.1fs; first fenced write there after %.1fs; next grant: %s"
        % (other, fault["t_writable"] - fault["t"], fault["t_write"] - fault["t"],
           "%.1fs" % (fault["t_grant"] - fault["t"]) if fault["t_grant"] else "none"))
    # A new token everywhere: wait for one (the old holder's lease must lapse).
    if kind != "switchover":
        wait_for("a new token after the fault",
                 lambda: _safe(lambda: current_token()[0] > tok), 60, 0.2)
    stale_probe(fault)
    log("  stale write: " + fault["stale"])
    if kind == "kill":
        # No acknowledged grant or renewal lost: checked in check() from the logs.
        start_patroni(old)
    elif kind == "freeze":
        time.sleep(max(0, fault["t"] + 25 - time.time()))
        for pid in fault["frozen"]:
            signal_if_alive(pid, signal.SIGCONT)
        os.killpg(fault["frozen_group"], signal.SIGCONT)
        log("  %s resumed after %.1fs frozen" % (old, time.time() - fault["t"]))
    fault["rejoined"] = wait_rejoined(old)
    faults.append(fault)
    if fault["rejoined"]:
        log("  %s is the synchronous standby again (%.1fs after the fault)" % (old, time.time() - fault["t"]))
    time.sleep(2)
    return fault["rejoined"]


CHECKS = [
    # name, query returning the violations (one row each, text)
    ("tokens strictly increase with each grant, never repeat",
     """SELECT format('token %s granted at %s after token %s', fencing_token, acquired_at, prev)
        FROM (SELECT fencing_token, acquired_at,
                     lag(fencing_token) OVER (ORDER BY acquired_at, fencing_token) AS prev
              FROM le_lease_history WHERE lease_key = 'ha') h
        WHERE fencing_token <= prev"""),
    ("every token the clients acknowledged was granted to them (no acknowledged grant lost)",
     """SELECT format('%s acknowledged token %s, history has %s', a.owner, a.token,
                      coalesce(h.holder, 'nothing'))
        FROM ha_acquired a LEFT JOIN le_lease_history h
             ON h.lease_key = 'ha' AND h.fencing_token = a.token
        WHERE h.holder IS DISTINCT FROM a.owner"""),
    ("tokens after each failover exceed every token acknowledged before it",
     """SELECT format('%s fault: token %s granted after it, %s acknowledged before', f.kind,
                      h.fencing_token, f.acked_before)
        FROM ha_faults f JOIN le_lease_history h
             ON h.lease_key = 'ha' AND h.acquired_at > f.t
        WHERE h.fencing_token <= f.acked_before"""),
    ("at most one valid holder: no grant before the previous holder's acknowledged expiry "
     "(no acknowledged renewal lost)",
     """SELECT format('token %s granted at %s, but %s had renewal of token %s acknowledged until %s',
                      n.fencing_token, n.acquired_at, r.owner, r.token, r.expires_at)
        FROM ha_renewed r
        JOIN le_lease_history p ON p.lease_key = 'ha' AND p.fencing_token = r.token
        JOIN LATERAL (SELECT * FROM le_lease_history n WHERE n.lease_key = 'ha'
                      AND n.fencing_token > r.token ORDER BY n.fencing_token LIMIT 1) n ON true
        WHERE n.acquired_at < r.expires_at
          AND NOT (p.end_reason = 'released' AND p.ended_at <= n.acquired_at)"""),
    ("at most one holder in the history: periods do not overlap",
     """SELECT format('token %s [%s, %s] overlaps token %s from %s', p.fencing_token, p.acquired_at,
                      p.ended_at, n.fencing_token, n.acquired_at)
        FROM le_lease_history p JOIN le_lease_history n
             ON n.lease_key = p.lease_key AND n.fencing_token > p.fencing_token
        WHERE p.lease_key = 'ha' AND (p.ended_at IS NULL OR p.ended_at > n.acquired_at)"""),
    ("no fenced row committed after the next token's grant",
     """SELECT format('row %s with token %s committed at %s, token %s granted at %s', f.id,
                      f.fencing_token, pg_xact_commit_timestamp(f.xmin), n.fencing_token, n.acquired_at)
        FROM ha_fenced f
        JOIN LATERAL (SELECT * FROM le_lease_history n WHERE n.lease_key = 'ha'
                      AND n.fencing_token > f.fencing_token ORDER BY n.fencing_token LIMIT 1) n ON true
        WHERE pg_xact_commit_timestamp(f.xmin) > n.acquired_at"""),
    ("every fenced row carries a granted token",
     """SELECT format('row %s has token %s, never granted', id, fencing_token) FROM ha_fenced f
        WHERE NOT EXISTS (SELECT FROM le_lease_history h WHERE h.lease_key = 'ha'
                          AND h.fencing_token = f.fencing_token)"""),
    ("every acknowledged fenced write is in the table (none lost in a failover)",
     """SELECT format('write %s of %s with token %s acknowledged, row missing', w.id, w.owner, w.token)
        FROM ha_acked_writes w WHERE NOT EXISTS (SELECT FROM ha_fenced f WHERE f.id = w.id)"""),
    ("stale writes of an old leader are rejected on the new primary (LE001)",
     """SELECT format('%s fault: %s', kind, stale) FROM ha_faults WHERE NOT stale_ok"""),
    ("the old primary rejoined as synchronous standby after each fault",
     """SELECT format('%s fault: the old primary did not rejoin within 120 s', kind)
        FROM ha_faults WHERE NOT rejoined"""),
]


def check():
    leader, writes = client_events()
    with psycopg2.connect(DSN) as conn:
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("""CREATE TEMP TABLE ha_acquired (owner text, token bigint);
                       CREATE TEMP TABLE ha_renewed (owner text, token bigint, expires_at timestamptz);
                       CREATE TEMP TABLE ha_acked_writes (owner text, token bigint, id bigint);
                       CREATE TEMP TABLE ha_faults (kind text, t timestamptz, acked_before bigint,
                                                    stale text, stale_ok bool, rejoined bool)""")
        for e in leader:
            if e["event"] == "acquired":
                cur.execute("INSERT INTO ha_acquired VALUES (%s, %s)", (e["owner"], e["token"]))
            if e["event"] in ("acquired", "renewed") and e.get("expires_at"):
                cur.execute("INSERT INTO ha_renewed VALUES (%s, %s, %s)",
                            (e["owner"], e["token"], e["expires_at"]))
        for w in writes:
            if w["event"] == "ack":
                cur.execute("INSERT INTO ha_acked_writes VALUES (%s, %s, %s)",
                            (w["owner"], w["token"], w["id"]))
        for f in faults:
            cur.execute("INSERT INTO ha_faults VALUES (%s, to_timestamp(%s), %s, %s, %s, %s)",
                        (f["kind"], f["t"], f["acked_before"], f["stale"], f.get("stale_ok", True),
                         f["rejoined"]))
        results = []
        for name, q in CHECKS:
            cur.execute(q)
            rows = [r[0] for r in cur.fetchall()]
            results.append((name, rows))
        cur.execute("SELECT count(*), count(DISTINCT fencing_token) FROM ha_fenced")
        nrows, ntok = cur.fetchone()
        cur.execute("SELECT count(*), min(fencing_token), max(fencing_token)"
                    " FROM le_lease_history WHERE lease_key = 'ha'")
        ngrants, tmin, tmax = cur.fetchone()
    stats = {
        "grants": ngrants, "tokens": "%s .. %s" % (tmin, tmax), "fenced rows": nrows,
        "tokens that wrote": ntok,
        "acknowledged grants": sum(1 for e in leader if e["event"] == "acquired"),
        "acknowledged renewals": sum(1 for e in leader if e["event"] == "renewed"),
        "acknowledged writes": sum(1 for w in writes if w["event"] == "ack"),
        "refused writes (LE001/LE002)": sum(1 for w in writes if w["event"] == "refused"),
        "connection errors of writers": sum(1 for w in writes if w["event"] == "conn_error"),
    }
    return results, stats


def main():
    log("etcd on 127.0.0.1:%d (Patroni DCS %s), Patroni nodes %s" % (ETCD_PORT, DCS, ", ".join(
        "%s (REST %d, PostgreSQL %d)" % (n, v["rest"], v["pg"]) for n, v in NODES.items())))
    start_etcd()
    wait_for("etcd", lambda: _ok_url("http://127.0.0.1:%d/health" % ETCD_PORT), 30)
    start_patroni("node1")
    wait_for("node1 to bootstrap as primary", lambda: rest("node1", "primary") == 200, 90, 0.5)
    start_patroni("node2")
    wait_for("node2 to be the synchronous standby", lambda: rest("node2", "sync") == 200, 120, 0.5)
    log("cluster up: node1 primary, node2 synchronous standby (%.1fs)" % (time.time() - T0))
    sql(node_dsn("node1"), """
        CREATE EXTENSION leader_election;
        CREATE TABLE ha_probe (id bigserial PRIMARY KEY, at timestamptz DEFAULT clock_timestamp());
        CREATE TABLE ha_fenced (id bigserial PRIMARY KEY, lease_key text NOT NULL,
                                fencing_token bigint NOT NULL, owner text NOT NULL, seq int,
                                server_port int,
                                written_at timestamptz DEFAULT clock_timestamp());
        """, fetch=False)
    # HA_BREAK=nofence: leave the table unprotected, to see the checker fail.
    if os.environ.get("HA_BREAK") != "nofence":
        sql(node_dsn("node1"), "SELECT le_protect('ha_fenced', 'ha')")
    else:
        log("HA_BREAK=nofence: ha_fenced is NOT protected; the run must fail")
    for i in range(1, 4):
        start_candidate(i)
    wait_steady(time.time(), "at the start")
    time.sleep(3)
    for kind in ("switchover", "kill", "freeze"):
        if not inject(kind):
            break
    time.sleep(2)
    for i in range(1, 4):
        procs["cand%d" % i].send_signal(signal.SIGTERM)
    for i in range(1, 4):
        procs["cand%d" % i].wait(timeout=30)
    results, stats = check()

    print("\n==== HA run summary (%.0fs) ====" % (time.time() - T0))
    print("faults (times from the fault):")
    print("  %-10s %-22s %-16s %-18s %s" % ("fault", "primary", "Patroni: writable",
                                             "leader: next grant", "leader: first fenced write on new primary"))
    for f in faults:
        print("  %-10s %-22s %-16s %-18s %.1fs" % (
            f["kind"], "%s -> %s" % (f["old_primary"], f["new_primary"]),
            "%.1fs" % (f["t_writable"] - f["t"]),
            "%.1fs" % (f["t_grant"] - f["t"]) if f["t_grant"] else "none (kept)",
            f["t_write"] - f["t"]))
    print("operations:")
    for k, v in stats.items():
        print("  %-32s %s" % (k, v))
    print("invariants (violations):")
    bad = 0
    for name, rows in results:
        print("  %3d  %s" % (len(rows), name))
        for r in rows[:5]:
            print("         " + r)
        bad += len(rows)
    print("RESULT: %s" % ("PASS" if bad == 0 else "FAIL (%d violations)" % bad))
    return 0 if bad == 0 else 1


def _ok_url(url):
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except Exception:
        return False


def teardown():
    for name in list(procs):
        p = procs[name]
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGCONT)
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
    for name in NODES:
        try:
            pm = postmaster_pid(name)
            for pid in [pm] + children(pm):
                os.kill(pid, signal.SIGCONT)
            subprocess.run([BIN + "/pg_ctl", "-D", "%s/%s/data" % (DIR, name), "-m", "immediate",
                            "stop"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    except SystemExit as e:
        print(e, flush=True)
        rc = 1
    finally:
        teardown()
    sys.exit(rc)
