"""The guard of run()'s work: the leader of the work's process group.

run() starts its work through a guard, a process that leads a process
group of its own, runs the work (a forked function, or a command it
spawns: `python -I -S _guard.py PARENT STATUS_FD COMMAND...`) in that
group, waits for it and ends as it ended (its exit status, or the same
signal).  It asks the kernel (PR_SET_PDEATHSIG) for SIGUSR2 when run()'s
process dies, however it dies (SIGKILL included), and then kills the whole
group.  Signals sent to the group (run()'s SIGTERM, a terminal's SIGINT)
are for the work: the guard ignores them once the work runs.

Invariant: once the work runs, the guard does not outlive run()'s process
without killing the group first; only descendants that left the group
(setsid, setpgid) escape.  This file imports nothing of the package.
"""

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
_GROUP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def _kill_group(*_):
    try:
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(128 + signal.SIGKILL)


def arm(parent):
    """In the group leader: kill the group when `parent` (run()'s pid) dies, or has died already."""
    signal.signal(signal.SIGUSR2, _kill_group)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)      # an inherited SIG_IGN would hide the work's end
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGUSR2, 0, 0, 0)
    except Exception:               # pragma: no cover (not Linux)
        pass
    if os.getppid() != parent:
        _kill_group()


def watch(pid):
    """Wait for the work `pid`, then end with its exit status or by the signal that ended it."""
    for s in _GROUP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            os._exit(1)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF if code >= 0 else 1)


def main(argv):
    parent, status_fd, command = int(argv[1]), int(argv[2]), argv[3:]
    os.set_inheritable(status_fd, False)
    arm(parent)
    try:
        pid = os.posix_spawnp(command[0], command, os.environ,
                              setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGUSR2))
    except OSError as e:
        os.write(status_fd, str(e.errno or 1).encode())
        os._exit(127)
    os.write(status_fd, b"0")
    os.close(status_fd)
    watch(pid)


if __name__ == "__main__":
    main(sys.argv)
