#!/usr/bin/python3
"""The command each `pg_leader run --loop` candidate runs while it leads
(test/chaos/chaos.py).

Writes fenced rows with its token ($LE_FENCING_TOKEN) into $CHAOS_TABLE
through $LE_DSN: transactions of one to three INSERTs 20-40 ms apart (so that
a SIGSTOP often lands inside one), one every 50-100 ms.  After each COMMIT
returns it appends one JSON line per row to $CHAOS_LOG with the client's
timestamp ("ack": the writer believes it committed).  A refusal by the fence
(LE001/LE002) is logged and ends the command, as a real leader's job must
stop; connection errors (server restarts, terminated backends) are logged
and retried.  SIGTERM is logged ("stop") and ends it at once.

As an instance of `pg_leader group run` (test/chaos/groups_fault.py) it
also fills the table's partition column "part" with $LE_PARTITION, and
$CHAOS_PAUSE ("MIN,MAX" seconds, default 0.05,0.1) sets the pause between
transactions.
"""
import json
import os
import random
import signal
import time

import psycopg2

dsn = os.environ["LE_DSN"]
token = int(os.environ["LE_FENCING_TOKEN"])
key = os.environ["LE_LEASE_KEY"]
owner = os.environ["LE_OWNER_ID"]
table = os.environ["CHAOS_TABLE"]
log = open(os.environ["CHAOS_LOG"], "a", buffering=1)
part = os.environ.get("LE_PARTITION")
pause = [float(x) for x in os.environ.get("CHAOS_PAUSE", "0.05,0.1").split(",")]
rng = random.Random()


def record(**event):
    """One flushed line per outcome: the client's view for the checker."""
    event.update(ts=time.time(), key=key, token=token, owner=owner, pid=os.getpid())
    log.write(json.dumps(event) + "\n")


def stop(signum, frame):
    record(event="stop")
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
if part is None:
    insert = ("INSERT INTO %s (lease_key, fencing_token, owner) VALUES (%%s, %%s, %%s) RETURNING id" % table,
              (key, token, owner))
else:
    insert = ("INSERT INTO %s (lease_key, fencing_token, owner, part) VALUES (%%s, %%s, %%s, %%s) RETURNING id"
              % table, (key, token, owner, int(part)))
conn = None
while True:
    try:
        if conn is None:
            conn = psycopg2.connect(dsn, connect_timeout=2, application_name="chaos-writer")
        ids = []
        with conn.cursor() as cur:
            for i in range(rng.randint(1, 3)):
                if i:
                    time.sleep(rng.uniform(0.02, 0.04))
                cur.execute(*insert)
                ids.append(cur.fetchone()[0])
        conn.commit()
        for i in ids:
            record(event="ack", id=i)
    except psycopg2.Error as e:
        state = e.pgcode
        record(event="refused" if state else "conn_error", sqlstate=state,
               error=(str(e).strip().splitlines() or [""])[0])
        try:
            conn.close()
        except Exception:
            pass
        conn = None
        if state in ("LE001", "LE002"):
            raise SystemExit(3)
        time.sleep(0.1)
        continue
    time.sleep(rng.uniform(*pause))
