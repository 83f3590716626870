#!/usr/bin/python3
"""A plain SQL candidate of the chaos run (test/chaos/chaos.py, second mode):
no client library, its own lease loop on one connection.

    sql_client.py DSN KEY OWNER TTL_SECONDS TABLE LOG

Campaigns with le_acquire waiting in the server (wait 0.5-2 s, then at once
again); while it leads it opens a transaction, writes two to five fenced
rows 50-100 ms apart inside it (the transaction stays open across them, so a
SIGSTOP or a lost lease often hits an open transaction whose COMMIT the
fence must refuse), commits, and renews with le_renew.  It stops leading
when a renewal returns NULL, when the fence refuses a write, or when its
local deadline (last acquire or renew sent + ttl - 20%) passed: a grant at
the end of a long wait can come after that deadline, and the client then
takes the lease again at once, with a fresh deadline, before it writes.
Now and then it releases with le_release.  Every grant, renewal,
acknowledged row, refusal and release is one JSON line in LOG with the
client's timestamp.
"""
import json
import os
import random
import signal
import sys
import time

import psycopg2

dsn, key, owner, ttl, table, logname = sys.argv[1:7]
ttl = float(ttl)
log = open(logname, "a", buffering=1)
rng = random.Random()
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))


def record(**event):
    """One flushed line per outcome."""
    event.update(ts=time.time(), key=key, owner=owner, pid=os.getpid())
    log.write(json.dumps(event) + "\n")


conn = None
token = None
deadline = 0.0
while True:
    try:
        if conn is None:
            conn = psycopg2.connect(dsn, connect_timeout=2, application_name="chaos-sql-client")
            conn.autocommit = True
        cur = conn.cursor()
        if token is None or time.monotonic() > deadline:
            token = None
            sent = time.monotonic()
            cur.execute("SELECT acquired, fencing_token, new_period FROM le_acquire(%s, %s, %s * interval '1s',"
                        " wait => %s * interval '1s')", (key, owner, ttl, rng.uniform(0.5, 2.0)))
            acquired, tok, new = cur.fetchone()
            if not acquired:
                continue
            token, deadline = tok, sent + ttl * 0.8
            record(event="acquired", token=token, new_period=new)
            if time.monotonic() > deadline:
                continue
        # One transaction held open across several fenced writes.
        ids = []
        cur.execute("BEGIN")
        for i in range(rng.randint(2, 5)):
            if i:
                time.sleep(rng.uniform(0.05, 0.1))
            cur.execute("INSERT INTO %s (lease_key, fencing_token, owner) VALUES (%%s, %%s, %%s) RETURNING id"
                        % table, (key, token, owner))
            ids.append(cur.fetchone()[0])
        cur.execute("COMMIT")
        for i in ids:
            record(event="ack", id=i, token=token)
        if rng.random() < 0.03:
            cur.execute("SELECT le_release(%s, %s, %s)", (key, owner, token))
            record(event="released", token=token, ok=cur.fetchone()[0])
            token = None
            time.sleep(rng.uniform(0.3, 0.6))
            continue
        sent = time.monotonic()
        cur.execute("SELECT le_renew(%s, %s, %s, %s * interval '1s')", (key, owner, token, ttl))
        if cur.fetchone()[0] is None:
            record(event="lost", token=token)
            token = None
        else:
            deadline = sent + ttl * 0.8
            record(event="renewed", token=token)
    except psycopg2.Error as e:
        state = e.pgcode
        record(event="refused" if state in ("LE001", "LE002") else ("error" if state else "conn_error"),
               sqlstate=state, token=token, error=(str(e).strip().splitlines() or [""])[0])
        try:
            conn.close()
        except Exception:
            pass
        conn = None
        if state in ("LE001", "LE002"):
            token = None
        time.sleep(0.1)
