"""The supervisor between ncuflow and ncu: ncu and everything it starts die with ncuflow.

ncu runs in its own session (so that Ctrl-C in the terminal reaches ncuflow, which
stops ncu cleanly), where no signal sent to ncuflow or to ncuflow's process group
reaches it. Were ncuflow killed with ``kill -9``, ncu and the profiled program would
run on, a hung one forever, and could write into a run folder that the next command
has already cleaned. So ncuflow does not start ncu directly: it starts this small
process as the leader of the new session, and this process starts ncu in its group:

- it asks the kernel for SIGTERM when ncuflow dies (``PR_SET_PDEATHSIG``) and also
  checks every 0.1 s that its parent is still ncuflow (the portable fallback);
- it becomes a child subreaper (``PR_SET_CHILD_SUBREAPER``), so that programs which
  leave the process group still end up as its descendants;
- when ncuflow is gone, a stop signal arrives, or the deadline (the run's timeout plus
  a margin) passes, it sends SIGTERM to the group, waits ``grace`` seconds, then kills
  every descendant and the whole group with SIGKILL;
- ncu itself gets SIGKILL should the supervisor die (its own ``PR_SET_PDEATHSIG``);
- otherwise it exits as ncu exited (same status, or the same signal), after killing
  whatever ncu left running.

A supervisor (a process) was chosen over a record of the group that the next command
stops, because a record acts only when a next command comes, and a hung ncu would run
until then; it was chosen over ``PR_SET_PDEATHSIG`` on ncu alone, because that signal
reaches ncu but not the program ncu starts. The lock file of the point also records
this group (``store.lock``), so the next writer of the point kills it should even the
supervisor have been killed.

Run as a script (``python supervise.py ncuflow-supervise PARENT DEADLINE GRACE -- CMD...``):
standard library only, nothing of ncuflow imported, so it starts in milliseconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

MARK = "ncuflow-supervise"  # store.lock.SUPERVISOR_MARK
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.1


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _die_with_parent() -> None:  # runs in ncu's process between fork and exec
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (from /proc; empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        try:
            ppid = int(text.rsplit(")", 1)[1].split()[1])
        except (IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_everything(child: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the group, ``grace`` s for ncu to exit, then SIGKILL to every descendant and the group."""
    group = os.getpgrp()
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end and child.poll() is None:
        time.sleep(0.05)
    for pid in descendants(os.getpid()):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        child.wait(timeout=1.0)
    os.killpg(group, signal.SIGKILL)  # the supervisor goes last, with its group


def _exit_like(status: int) -> None:
    if status < 0:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
        time.sleep(1.0)
    sys.exit(status if status >= 0 else 128 - status)


def supervise(parent: int, deadline_s: float, grace: float, command: list[str]) -> None:
    stop: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.append(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() != parent:  # ncuflow died before the kernel could tell us
        sys.exit(128 + signal.SIGKILL)
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent, close_fds=True)
    except OSError as error:  # ncuflow reads this line from the log like any ncu error
        print(f"==ERROR== ncuflow could not start {command[0]}: {error.strerror or error}", flush=True)
        sys.exit(127)
    end = time.monotonic() + deadline_s
    while True:
        try:
            status = child.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            if stop or os.getppid() != parent or time.monotonic() > end:
                kill_everything(child, grace)
            continue
        break
    for pid in descendants(os.getpid()):  # what ncu left behind
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    _exit_like(status)


def main(argv: list[str]) -> None:
    if len(argv) < 6 or argv[0] != MARK or argv[4] != "--":
        sys.stderr.write(f"usage: supervise.py {MARK} PARENT_PID DEADLINE_S GRACE_S -- COMMAND...\n")
        sys.exit(2)
    supervise(int(argv[1]), float(argv[2]), float(argv[3]), argv[5:])


if __name__ == "__main__":
    main(sys.argv[1:])
