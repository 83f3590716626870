"""Timing, owner ids, errors and bounded libpq I/O shared by every mode.

The lease connections talk to libpq directly (psycopg.pq) in non-blocking
mode, so that every connect and every statement has a client-side bound:
a server-side statement_timeout cannot end every wait (a frozen backend, a
lost network), and a renewal must be abandoned before the local deadline.
Each exchange is a generator that yields (socket, want_write) and is driven
either by poll() (sync) or by the event loop (asyncio).

Invariant: the local deadline of a period is the monotonic time at which
the confirmed le_acquire/le_renew was SENT + ttl - safety margin, never
later; nothing here reads the wall clock for a decision.
"""

import json
import math
import os
import random
import re
import select
import socket
import sys
import time

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

try:
    _CLOCK = time.CLOCK_BOOTTIME     # keeps counting during a suspend
except AttributeError:               # pragma: no cover (not Linux)
    _CLOCK = time.CLOCK_MONOTONIC


def now():
    """Monotonic seconds (CLOCK_BOOTTIME on Linux) used for every deadline."""
    return time.clock_gettime(_CLOCK)


class LeaseError(Exception):
    """An error from the server or the connection; `sqlstate` when the server sent one."""

    def __init__(self, message, sqlstate=None):
        super().__init__(message)
        self.sqlstate = sqlstate


class Timeout(LeaseError):
    """A connect or statement did not finish within its bound (the connection is dropped)."""


class NotLeader(LeaseError):
    """Raised by a fenced-transaction helper when the lease is not (or no longer) held."""


class StaleToken(NotLeader):
    """lease.transaction(): the fence refused a write, its token is older than the lease's (LE001)."""


class NotHeld(NotLeader):
    """lease.transaction(): the fence refused a write, the lease is released, expired or unknown (LE002)."""


FENCE_ERRORS = {"LE001": StaleToken, "LE002": NotHeld}


def fence_error(err):
    """The library exception for a psycopg error with SQLSTATE LE001/LE002 (None for another)."""
    cls = FENCE_ERRORS.get(getattr(err, "sqlstate", None))
    return None if cls is None else cls(str(err).strip(), err.sqlstate)


class NotAcquired(TimeoutError):
    """lead()/lead_async()/run() did not get the lease within `timeout`; `holder` names who has it,
    `last_error` is the LeaseError of the last failed attempt (None when the server answered)."""

    def __init__(self, message, holder=None, last_error=None):
        super().__init__(message)
        self.holder = holder
        self.last_error = last_error


class LeadershipLost(Exception):
    """Raised by `async with lead_async(...)` when the body was cancelled because the period ended."""


# Errors after which trying again cannot help: insufficient privilege, missing extension/function,
# bad input (the key, owner or ttl).
PERMANENT_SQLSTATES = {"42501", "42883", "3F000", "22023", "22001", "22004", "0A000"}


def permanent(sqlstate):
    """True for an error that no retry can cure: PERMANENT_SQLSTATES, the extension missing (42704),
    a refused authentication or missing role (class 28), a missing database (3D000)."""
    if sqlstate is None:
        return False
    return sqlstate in PERMANENT_SQLSTATES or sqlstate in ("42704", "3D000") or sqlstate.startswith("28")


def not_acquired(lease, why):
    """The NotAcquired of a campaign that ends without the lease, with the last error in its text."""
    err = lease.last_error
    tail = f"; last error: {err}" if err is not None else ""
    return NotAcquired(f'lease "{lease.key}" {why} (held by {lease.holder}{tail})', lease.holder, err)

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def seconds(value, name="duration", wait=False):
    """A duration in seconds from a number of seconds or a string such as '500ms', '15s', '2m':
    finite and more than zero; wait=True (a timeout): zero or more, infinity allowed."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        v = float(value)
    elif isinstance(value, str):
        m = _DURATION.match(value)
        if not m:
            raise ValueError(f"{name}: {value!r} is not a duration (a number of seconds or e.g. '15s', '500ms')")
        v = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise TypeError(f"{name} must be a number of seconds or a str such as '15s', not {type(value).__name__}")
    if wait:
        if not v >= 0:
            raise ValueError(f"{name} must be zero or more, not {value!r}")
    elif not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a finite duration more than zero, not {value!r}")
    return v


def text(value, name):
    """`value` if it is a str without NUL characters (libpq would cut the text at a NUL, so that
    'a' and 'a\\x00b' would name the same lease or owner); TypeError or ValueError otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain a NUL character: {value!r}")
    return value


def make_owner_id(name=None):
    """A new owner id: NAME (or the program's name), host, pid and 48 random bits.

    Every call returns a different id, so two leases in one process, or two
    processes given the same name, are always different owners."""
    base = text(name, "name") if name else os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "python") or "python"
    host = socket.gethostname().split(".")[0] or "host"
    oid = f"{base}-{host}-{os.getpid()}-{random.getrandbits(48):012x}"
    encoded = oid.encode()
    if len(encoded) > 200:          # keep the unique tail: pid and random bits
        tail = f"-{host}-{os.getpid()}-{random.getrandbits(48):012x}".encode()[-120:]
        oid = (encoded[: 200 - len(tail)] + tail).decode("utf-8", "ignore")
    return oid


class Timing:
    """The schedule of one lease, from ttl and the optional overrides (all in seconds).

    safety_margin: default ttl/10, at least 50 ms, at most ttl/4.
    renew_by: renewals aim to be confirmed this long before the deadline (run() sets it to its kill
    margin + grace).  renew_every: default a third of ttl - margin - renew_by; at most half.
    retry: the campaign interval, randomised by +-jitter (a fraction, default 0.2)."""

    def __init__(self, ttl, safety_margin=None, renew_every=None, retry=2.0, jitter=0.2,
                 connect_timeout=5.0, statement_timeout=5.0, renew_by=0.0):
        self.ttl = seconds(ttl, "ttl")
        if self.ttl < 0.1:
            raise ValueError("ttl must be at least 100ms")
        m = safety_margin if safety_margin is not None else min(max(self.ttl / 10, 0.05), self.ttl / 4)
        self.margin = seconds(m, "safety_margin")
        if self.margin >= self.ttl / 2:
            raise ValueError("safety_margin must be less than ttl/2")
        self.renew_by = float(renew_by)
        usable = self.ttl - self.margin - self.renew_by
        if usable <= 0:
            raise ValueError("ttl leaves no time after the safety margin and renew_by")
        self.renew_every = seconds(renew_every, "renew_every") if renew_every is not None else usable / 3
        if self.renew_every > usable / 2:
            raise ValueError(f"renew_every must be at most (ttl - margin - renew_by)/2 = {usable / 2:.3f}s,"
                             " so that a failed renewal can be retried before the deadline")
        self.retry = seconds(retry, "retry")
        if not 0 <= jitter < 1:
            raise ValueError("jitter must be a fraction in [0, 1)")
        self.jitter = jitter
        self.connect_timeout = seconds(connect_timeout, "connect_timeout")
        self.statement_timeout = seconds(statement_timeout, "statement_timeout")

    def retry_delay(self):
        """One campaign interval with its jitter."""
        return self.retry * (1 + random.uniform(-self.jitter, self.jitter))

    def ttl_sql(self):
        return f"{int(round(self.ttl * 1000))} milliseconds"

    def server_wait(self, end=None):
        """How long one le_acquire may wait in the server (extension 1.1): at most the retry
        interval, a quarter of the ttl (the period is counted from the moment the call was sent, so
        a grant late in the wait shortens it by up to this), half the statement timeout, 1 s, and
        the time left before `end` (now() based; None: no end)."""
        w = min(self.retry, self.ttl / 4, self.statement_timeout / 2, 1.0)
        if end is not None:
            w = min(w, end - now())
        return max(w, 0.0)

    def first_connect_bound(self, deadline):
        """The time the renewal connection made when a period begins may take: all of it before
        deadline - renew_by (at most the connect timeout).  Made then, not at the first renewal, so
        that a renewal needs one round trip, not a connect squeezed into half the time left."""
        return max(min(self.connect_timeout, deadline - self.renew_by - now()), 0.0)

    def attempt_bound(self, deadline, rtt):
        """The time one renewal attempt may take: at most the statement timeout and half the time
        left before the deadline - renew_by, but never less than twice the last round trip."""
        left = deadline - self.renew_by - now()
        return max(min(self.statement_timeout, left / 2), 2 * rtt, 0.0)


# --- bounded libpq exchanges -------------------------------------------------

def _verbose_errors(pgconn):
    """PQsetErrorVerbosity(VERBOSE), so that a server's refusal to connect shows its SQLSTATE."""
    global _LIBPQ
    try:
        if _LIBPQ is None:
            import ctypes
            import ctypes.util
            _LIBPQ = ctypes.CDLL(ctypes.util.find_library("pq") or "libpq.so.5")
            _LIBPQ.PQsetErrorVerbosity.argtypes = [ctypes.c_void_p, ctypes.c_int]
        _LIBPQ.PQsetErrorVerbosity(pgconn.pgconn_ptr, 2)
    except Exception:               # pragma: no cover (no libpq by that name): messages without SQLSTATE
        _LIBPQ = False


_LIBPQ = None
_CONNECT_SQLSTATE = re.compile(r"(?:FATAL|ERROR):\s+([0-9A-Z]{5}):\s")


def connect_error(pgconn):
    """The LeaseError of a failed connect: libpq's message, with the server's SQLSTATE if it sent one."""
    msg = pgconn.error_message.decode(errors="replace")
    m = _CONNECT_SQLSTATE.search(msg)
    msg = "\n".join(line for line in msg.strip().splitlines() if not line.startswith("LOCATION:"))
    return LeaseError(f"connection failed: {msg}", m.group(1) if m else None)


def _connect_gen(conninfo):
    pgconn = pq.PGconn.connect_start(conninfo.encode())
    if pgconn.status == pq.ConnStatus.BAD:
        err = connect_error(pgconn)
        pgconn.finish()
        raise err
    try:
        if _LIBPQ is not False:
            _verbose_errors(pgconn)
        while True:
            st = pgconn.connect_poll()
            if st == pq.PollingStatus.OK:
                if _LIBPQ:
                    _LIBPQ.PQsetErrorVerbosity(pgconn.pgconn_ptr, 1)     # statements: messages as usual
                break
            if st == pq.PollingStatus.FAILED:
                raise connect_error(pgconn)
            yield pgconn.socket, st == pq.PollingStatus.WRITING
        pgconn.nonblocking = 1
    except BaseException:
        pgconn.finish()
        raise
    return pgconn


def _query_gen(pgconn, sql, params=()):
    values = [None if p is None else str(p).encode() for p in params]
    if any(v is not None and b"\x00" in v for v in values):      # libpq would cut it short
        raise ValueError("a statement parameter contains a NUL character")
    pgconn.send_query_params(sql.encode(), values)
    while pgconn.flush():
        yield pgconn.socket, True
        pgconn.consume_input()
    result = None
    while True:
        pgconn.consume_input()
        while not pgconn.is_busy():
            r = pgconn.get_result()
            if r is None:
                if result is None:
                    raise LeaseError("no result")
                if result.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
                    sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
                    raise LeaseError(result.error_message.decode(errors="replace").strip(),
                                     sqlstate.decode() if sqlstate else None)
                return result
            result = r
        if pgconn.status == pq.ConnStatus.BAD:
            raise LeaseError("connection lost: " + pgconn.error_message.decode(errors="replace").strip())
        yield pgconn.socket, False


def drive(gen, deadline, stop=None):
    """Run an exchange to its end with poll(), in slices of at most 250 ms, until `deadline` (now())
    or until the threading.Event `stop` is set (Timeout either way)."""
    try:
        want = next(gen)
        while True:
            left = deadline - now()
            if left <= 0:
                raise Timeout("timed out")
            if stop is not None and stop.is_set():
                raise Timeout("stopped")
            fd, write = want
            p = select.poll()
            p.register(fd, (select.POLLOUT if write else select.POLLIN) | select.POLLERR | select.POLLHUP)
            p.poll(min(left, 0.25) * 1000)
            want = gen.send(None)
    except StopIteration as stop:
        return stop.value
    except psycopg.Error as e:          # libpq calls (consume_input, flush) on a broken connection
        raise LeaseError(f"connection lost: {e}") from e
    finally:
        gen.close()


async def drive_async(gen, deadline):
    """The same as drive(), driven by the running event loop."""
    import asyncio
    loop = asyncio.get_running_loop()
    try:
        want = next(gen)
        while True:
            left = deadline - now()
            if left <= 0:
                raise Timeout("timed out")
            fd, write = want
            fut = loop.create_future()
            cb = (lambda: fut.done() or fut.set_result(None))
            (loop.add_writer if write else loop.add_reader)(fd, cb)
            try:
                await asyncio.wait_for(asyncio.shield(fut), min(left, 0.25))
            except asyncio.TimeoutError:
                pass
            finally:
                (loop.remove_writer if write else loop.remove_reader)(fd)
            want = gen.send(None)
    except StopIteration as stop:
        return stop.value
    except psycopg.Error as e:
        raise LeaseError(f"connection lost: {e}") from e
    finally:
        gen.close()


def lease_conninfo(dsn, purpose, connect_timeout):
    """The DSN with a fallback application name and libpq's connect_timeout (whole seconds, >= 2)."""
    extra = {"fallback_application_name": f"leader_election {purpose}"}
    if "connect_timeout" not in conninfo_to_dict(dsn or ""):
        extra["connect_timeout"] = max(2, int(connect_timeout + 0.999))
    return make_conninfo(dsn or "", **extra)


SCHEMA_SQL = ("SELECT n.nspname FROM pg_catalog.pg_extension x JOIN pg_catalog.pg_namespace n"
              " ON n.oid = x.extnamespace WHERE x.extname = 'leader_election'")


def quote_ident(name):
    return '"' + name.replace('"', '""') + '"'


class Statements:
    """The lease statements, qualified with the extension's schema (no search_path lookup)."""

    def __init__(self, schema):
        q = quote_ident(schema)
        self.acquire = (f"SELECT acquired, fencing_token, holder, expires_at, new_period"
                        f" FROM {q}.le_acquire($1, $2, $3::pg_catalog.interval)")
        self.renew = f"SELECT {q}.le_renew($1, $2, $3::pg_catalog.int8, $4::pg_catalog.interval)"
        self.release = f"SELECT {q}.le_release($1, $2, $3::pg_catalog.int8)"
        self.acquire_wait = (f"SELECT acquired, fencing_token, holder, expires_at, new_period"
                             f" FROM {q}.le_acquire($1, $2, $3::pg_catalog.interval, $4::pg_catalog.interval,"
                             f" $5::pg_catalog.jsonb)")
        self.signature_wait = f"{q}.le_acquire(text,text,interval,interval,jsonb)"
        self.set_metadata = f"SELECT {q}.le_set_metadata($1, $2, $3::pg_catalog.int8, $4::pg_catalog.jsonb)"
        self.watch = f"SELECT {q}.le_watch($1)"
        self.unwatch = f"SELECT {q}.le_unwatch($1)"


LISTEN_SQL = "LISTEN leader_election"

# Does the server have the 1.1 le_acquire (a wait in the server, metadata)?  Asked once per connection.
HAS_WAIT_SQL = "SELECT pg_catalog.to_regprocedure($1) IS NOT NULL"


def wait_sql(wait):
    return f"{int(wait * 1000)} milliseconds"


def metadata_text(metadata):
    """The JSON text of lead()'s or set_metadata()'s `metadata`: a str is sent as it is (the server
    parses it: 22P02 when it is not JSON), None stays None, anything else goes through json.dumps."""
    if metadata is None or isinstance(metadata, str):
        return metadata
    return json.dumps(metadata)


def no_metadata_error():
    return LeaseError("metadata needs extension leader_election 1.1 (le_acquire with metadata):"
                      " ALTER EXTENSION leader_election UPDATE", "42883")


def released_heard(pgconn, key):
    """Read what arrived on a campaign connection: True when a notification says that `key` was
    released.  Payloads are unauthenticated hints: they only make the next le_acquire come early."""
    heard = False
    pgconn.consume_input()
    while True:
        n = pgconn.notifies()
        if n is None:
            return heard
        try:
            msg = json.loads(n.extra.decode())
            heard = heard or (isinstance(msg, dict) and msg.get("lease_key") == key
                              and msg.get("event") in ("released", "force_released"))
        except (ValueError, UnicodeDecodeError):
            pass


def schema_from(result):
    if result.ntuples != 1:
        raise LeaseError('extension "leader_election" is not installed in this database', "42704")
    return result.get_value(0, 0).decode()


def value(result, col, row=0):
    v = result.get_value(row, col)
    return None if v is None else v.decode()


def cancel_request(pgconn):
    """Ask the server to cancel the statement running on `pgconn` (PQcancel, in a daemon thread: it
    connects anew and may hang on a lost network), so that an acquire given up on the client side
    does not go on to be granted.  Call it before closing the connection."""
    import threading
    try:
        cancel = pgconn.get_cancel()
    except Exception:
        return None
    t = threading.Thread(target=lambda: _cancel_quietly(cancel), name="leader_election cancel", daemon=True)
    t.start()
    return t


def _cancel_quietly(cancel):
    try:
        cancel.cancel()
    except Exception:
        pass


def close_quietly(pgconn):
    if pgconn is not None:
        try:
            pgconn.finish()
        except Exception:
            pass
