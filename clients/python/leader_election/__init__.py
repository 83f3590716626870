"""Fenced leader election for Python on PostgreSQL's leader_election extension (psycopg 3).

Three modes, with different guarantees (clients/python/README.md):
- lead(): threads; is_leader() and `lost` are advisory, the fence is the guarantee;
- lead_async(): asyncio; the body's task is cancelled before the local deadline;
- run(): the work runs in a process group that is killed (SIGTERM, then SIGKILL) before it, and
  with run()'s process (the exact conditions: leader_election.run).

Invariant: no mode reports a period as held after its local deadline, the
send time of its last confirmed acquire/renew + ttl - safety margin.
"""

from ._common import (LeadershipLost, LeaseError, NotAcquired, NotHeld, NotLeader, StaleToken, Timeout,
                      make_owner_id, now, seconds)
from .aio import AsyncLease, lead_async
from .run import LeaseInfo, RunResult, run
from .sync import Lease, lead

__version__ = "1.0.0"
__all__ = ["lead", "lead_async", "run", "Lease", "AsyncLease", "LeaseInfo", "RunResult", "LeaseError",
           "Timeout", "NotLeader", "StaleToken", "NotHeld", "NotAcquired", "LeadershipLost", "make_owner_id", "now", "seconds"]
