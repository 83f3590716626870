#!/usr/bin/python3
"""The command pg_leader runs while it leads (test/ha/run.sh).

Writes one fenced row with its token ($LE_FENCING_TOKEN) about every 100 ms
through the multi-host DSN in $HA_DSN, and appends one JSON line per
acknowledged write (committed: the INSERT returned) or refused write (with
its SQLSTATE) to $HA_WRITES.  Reconnects after any connection error; ends
when pg_leader stops it (SIGTERM).
"""
import json
import os
import time

import psycopg2

dsn = os.environ["HA_DSN"]
token = int(os.environ["LE_FENCING_TOKEN"])
key = os.environ["LE_LEASE_KEY"]
owner = os.environ["LE_OWNER_ID"]
log = open(os.environ["HA_WRITES"], "a", buffering=1)
conn = None
seq = 0


def record(**event):
    """One line per outcome, flushed at once: the checker's client-side view."""
    event.update(ts=time.time(), token=token, owner=owner, pid=os.getpid())
    log.write(json.dumps(event) + "\n")


while True:
    try:
        if conn is None:
            conn = psycopg2.connect(dsn)
            conn.autocommit = True
        seq += 1
        with conn.cursor() as cur:
            cur.execute("INSERT INTO ha_fenced (lease_key, fencing_token, owner, seq, server_port)"
                        " VALUES (%s, %s, %s, %s, inet_server_port()) RETURNING id, server_port",
                        (key, token, owner, seq))
            row_id, port = cur.fetchone()
        record(event="ack", id=row_id, seq=seq, port=port)
    except psycopg2.Error as e:
        record(event="refused" if e.pgcode else "conn_error", sqlstate=e.pgcode,
               error=str(e).strip().splitlines()[0] if str(e).strip() else "")
        try:
            if conn is not None:
                conn.close()
        except psycopg2.Error:
            pass
        conn = None
    time.sleep(0.1)
