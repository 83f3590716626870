"""run(): the work runs in a child process group that is killed before the deadline.

Threaded Python cannot be interrupted safely, so the strongest mode runs
the work in a process group of its own, led by a guard (_guard.py) that
runs the work (a command it spawns, a function in a forked child) and
kills the group when run()'s process dies, however it dies.  The parent's
main thread watches the period: at kill deadline - grace the group gets
SIGTERM (and SIGCONT), at the kill deadline (local deadline - kill_margin,
100 ms by default) it gets SIGKILL, and the lease is released only after
the parent reaped the guard, as `pg_leader run` does.

Invariant: the guard is reaped before the local deadline passes, unless
the kernel takes longer than kill_margin to deliver SIGKILL, a process of
the group is in uninterruptible sleep, or the parent itself is frozen
(then the fence stops the writes); descendants that left the group
(setsid, setpgid) are out of reach.
"""

import collections
import os
import select
import signal
import subprocess
import sys
import threading
import traceback

from . import _common as c
from . import _guard
from .sync import Lease

RunResult = collections.namedtuple("RunResult", "returncode reason token")
RunResult.__doc__ = """What run() did: returncode (the child's exit status, -N when signal N killed it; None when
it is unknown: run() from a thread other than the main one while SIGCHLD is ignored, so the kernel reaped it),
reason ('exited': the work ended on its own; 'lost', 'renew_failed', 'deadline_passed': the period ended
and the work was stopped; 'signal': run() got SIGTERM, SIGHUP or SIGQUIT), token (the period's fencing token)."""

LeaseInfo = collections.namedtuple("LeaseInfo", "dsn key owner_id token expires_at")
LeaseInfo.__doc__ = "The lease as a function run by run() sees it in its child process."

def _fork_function(fn, info, args, parent):
    pid = os.fork()
    if pid:
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        return pid
    try:                            # the guard: group leader, kills the group if the parent dies
        os.setpgid(0, 0)
        _guard.arm(parent)
        work = os.fork()
        if work:
            _guard.watch(work)
    except BaseException:
        os._exit(1)
    code = 1
    try:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR2):
            signal.signal(s, signal.SIG_DFL)
        rc = fn(info, *args)
        code = rc if isinstance(rc, int) and not isinstance(rc, bool) else 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _spawn_command(argv, env):
    """Start `argv` through the guard (_guard.py); raises the OSError of a failed exec."""
    r, w = os.pipe()
    try:
        p = subprocess.Popen([sys.executable, "-I", "-S", _guard.__file__, str(os.getpid()), str(w), *argv],
                             env=env, process_group=0, close_fds=True, pass_fds=(w,))
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as f:
        answer = f.read()           # the guard closes it once the command runs
    if answer != b"0":
        p.wait()
        errno = int(answer) if answer.isdigit() else 0
        if errno:
            raise OSError(errno, os.strerror(errno), argv[0])
        raise ChildProcessError(f"the guard of {argv[0]!r} ended before starting it (status {p.returncode})")
    return p


def _spawn(target, args, lease, env):
    info = LeaseInfo(lease.dsn, lease.key, lease.owner_id, lease.token, lease.expires_at)
    if callable(target):
        return _fork_function(target, info, args, os.getpid()), None
    argv = [target, *args] if isinstance(target, str) else [*target, *args]
    child_env = dict(os.environ if env is None else env)
    child_env.update(LE_LEASE_KEY=lease.key, LE_FENCING_TOKEN=str(lease.token), LE_OWNER_ID=lease.owner_id,
                     LE_EXPIRES_AT=lease.expires_at or "", LE_DSN=lease.dsn or "")
    p = _spawn_command(argv, child_env)
    return p.pid, p


# Signals whose default action would end run() without its cleanup: they stop the work, then release.
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _killpg(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run(dsn, key, target, *args, ttl="15s", grace=None, kill_margin=0.1, env=None, **options):
    """Lead `key` and run the work in a process group that is killed before the deadline.

    `target` is a command (a string naming a program, or a list of arguments; `args` are appended;
    it gets LE_LEASE_KEY, LE_FENCING_TOKEN, LE_OWNER_ID, LE_EXPIRES_AT and LE_DSN in its environment)
    or a function, called in a forked child as target(info, *args) with a LeaseInfo (dsn, key,
    owner_id, token, expires_at); its return value (an int) is the child's exit status.  The work
    runs in a process group of its own, led by a guard process that ends as the work ends and kills
    the group if run()'s process dies (PR_SET_PDEATHSIG: SIGKILL of run()'s process included).

    run() campaigns as lead() does (options: timeout, name, owner_id, safety_margin,
    renew_every, retry, jitter, connect_timeout, statement_timeout; SIGTERM, SIGHUP or SIGQUIT
    ends the campaign, when run() is called from the main thread), starts the child once it leads,
    and renews.  Let D be the local deadline of the last confirmed renewal.  Without a newer renewal,
    the child's group gets SIGTERM at D - kill_margin - grace and SIGKILL at D - kill_margin, whatever
    it does with SIGTERM; a period that ends earlier (renewal answered NULL, permanent error) or a
    SIGTERM, SIGHUP or SIGQUIT to run() (main thread) gives the child `grace` (default min(5 s, (ttl - margin - kill_margin)/3)) but
    never beyond D - kill_margin.  The parent reaps the child, SIGKILLs what is left of its group,
    then releases the lease (compare-and-release), and returns a RunResult.  Descendants that left
    the group (setsid) are out of reach; if the whole machine or the parent is frozen, only the
    fence stops stale writes: the work must stamp its writes with the token."""
    probe = c.Timing(ttl, **{k: v for k, v in options.items() if k in ("safety_margin",)})
    kill_margin = c.seconds(kill_margin, "kill_margin")
    budget = probe.ttl - probe.margin - kill_margin
    grace = min(5.0, budget / 3) if grace is None else c.seconds(grace, "grace")
    if budget <= 0 or grace > budget / 2:
        raise ValueError(f"grace must be at most (ttl - margin - kill_margin)/2 = {max(budget, 0) / 2:.3f}s")
    stop = threading.Event()
    lease = Lease(dsn, key, ttl, renew_by=kill_margin + grace, cancel=stop, **options)
    old, old_chld = {}, None
    if threading.current_thread() is threading.main_thread():
        for sig in _STOP_SIGNALS:
            old[sig] = signal.signal(sig, lambda s, f: stop.set())
        if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:     # auto-reaping would hide the status
            old_chld = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        try:
            lease.acquire()
        except c.NotAcquired:
            if stop.is_set():
                return RunResult(None, "signal", None)
            raise
        return _supervise(lease, target, args, env, grace, kill_margin, stop)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if old_chld is not None:
            signal.signal(signal.SIGCHLD, old_chld)


def _reap(pid, flags):
    """waitpid(); (pid, 0) when the child was reaped by someone else (SIGCHLD ignored): status unknown."""
    try:
        return os.waitpid(pid, flags)
    except ChildProcessError:
        return pid, None


def _supervise(lease, target, args, env, grace, kill_margin, stop):
    try:
        pid, popen = _spawn(target, args, lease, env)
    except BaseException:           # e.g. the command does not exist: nothing runs, give the lease back
        lease.release()
        raise
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    last_deadline = lease.deadline()
    ended_at = None                 # when the period ended or run() was asked to stop
    reason = "exited"
    term_sent = kill_sent = False
    status = None
    try:
        while status is None:
            t = c.now()
            if lease.is_leader() and not stop.is_set():
                last_deadline = lease.deadline()
            elif ended_at is None:
                ended_at = t
                reason = "signal" if stop.is_set() else (lease.lost_reason or "deadline_passed")
            kill_at = last_deadline - kill_margin
            term_at = kill_at - grace
            if ended_at is not None:
                term_at = min(term_at, ended_at)
                kill_at = min(kill_at, ended_at + grace)
            if t >= term_at and not term_sent:
                _killpg(pid, signal.SIGTERM)
                _killpg(pid, signal.SIGCONT)
                term_sent = True
                if ended_at is None:
                    ended_at, reason = t, "deadline_passed"
            if t >= kill_at and not kill_sent:
                _killpg(pid, signal.SIGKILL)
                kill_sent = True
            wpid, st = _reap(pid, os.WNOHANG)
            if wpid:
                status = st if st is not None else -1
                break
            nxt = min(term_at if not term_sent else kill_at, kill_at) - c.now()
            wait = max(0.0, min(0.05, nxt)) if not kill_sent else 0.01
            if pidfd is not None:
                p = select.poll()
                p.register(pidfd, select.POLLIN)
                p.poll(wait * 1000)
            else:
                stop.wait(wait)
    finally:
        try:
            if status is None:      # an exception in the parent: the child must not outlive it
                _killpg(pid, signal.SIGKILL)
                _reap(pid, 0)
            _killpg(pid, signal.SIGKILL)        # whatever of its group is left
            if pidfd is not None:
                os.close(pidfd)
        finally:
            lease.release()     # stops the renewal threads whatever happened above
    code = None if status in (None, -1) else os.waitstatus_to_exitcode(status)
    if popen is not None:
        popen.returncode = code
    return RunResult(code, reason, lease.token)
