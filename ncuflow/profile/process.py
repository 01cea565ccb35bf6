"""Process control for ncu: its own session, signals held while it starts, timeouts, the process group stopped whole."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import IO

from ncuflow.files import process_group_alive

Progress = Callable[[str], None]  # receives each new line of ncu's log
KILL_GRACE_S = 5.0


class StopSignal(BaseException):
    """Raised inside the wait when SIGTERM/SIGHUP arrives (SIGINT raises KeyboardInterrupt)."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


@contextlib.contextmanager
def terminating_signals_raise() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into an exception while ncu runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise StopSignal(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


SUPERVISOR = Path(__file__).with_name("supervise.py")
SUPERVISOR_MARGIN_S = 10.0


def supervised(command: list[str], deadline_s: float | None, kill_grace: float) -> list[str]:
    """``command`` run under the supervisor (``profile.supervise``): it dies with ncuflow, and by its deadline."""
    from ncuflow.profile.supervise import MARK

    deadline = deadline_s + kill_grace + SUPERVISOR_MARGIN_S if deadline_s is not None else 10.0 * 365 * 86400
    return [sys.executable, "-I", "-S", str(SUPERVISOR), MARK, str(os.getpid()), repr(float(deadline)),
            repr(float(kill_grace)), "--", *command]


def spawn_in_new_session(
    command: list[str], log: IO[bytes], *, env: dict[str, str] | None, kill_grace: float,
    deadline_s: float | None = None,
) -> subprocess.Popen[bytes]:
    """Start ncu, under its supervisor, as the leader of its own session, with no window where a signal orphans it.

    The supervisor (``profile.supervise``) leads the new session and process group and
    runs ncu in it; it stops the group when ncuflow dies (even by ``kill -9``) or when
    ``deadline_s`` (plus the grace and a margin) has passed, so ncu and the program it
    profiles never outlive ncuflow nor the run's timeout.

    A Ctrl-C (or SIGTERM/SIGHUP) that lands after the fork but before the caller holds
    the Popen object would leave ncu running in its own session, where no signal of
    ours reaches it. Signals are held while it starts; one that arrived meanwhile stops
    the new process group first and is then delivered to the handlers in force.
    """
    command = supervised(command, deadline_s, kill_grace)
    if threading.current_thread() is not threading.main_thread():
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
    held: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        held.append(signum)

    previous = {
        sig: signal.signal(sig, hold)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        if signal.getsignal(sig) is not signal.SIG_IGN  # an ignored signal stays ignored
    }
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if held:
            if proc is not None:
                stop_process_group(proc, kill_grace)
            signal.raise_signal(held[0])
    return proc


def stop_process_group(proc: subprocess.Popen[bytes], grace: float = KILL_GRACE_S) -> None:
    """Stop ncu and everything in its process group: SIGTERM, then SIGKILL after ``grace`` s."""
    pgid = proc.pid  # start_new_session=True makes ncu the leader of its own group
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not process_group_alive(pgid):
            break
        time.sleep(0.05)
    if process_group_alive(pgid) or proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=max(grace, 1.0))
    end = time.monotonic() + 2.0
    while process_group_alive(pgid) and time.monotonic() < end:  # reaped by init once killed
        time.sleep(0.05)


def reap_leftovers(proc: subprocess.Popen[bytes]) -> None:
    """ncu has exited: kill whatever it left running in its process group."""
    if process_group_alive(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


class LogFollower:
    """Hands new complete lines of the growing log to a progress callback."""

    def __init__(self, path: Path, progress: Progress | None) -> None:
        self.path = path
        self.progress = progress
        self.offset = 0
        self.partial = b""

    def poll(self) -> None:
        if self.progress is None:
            return
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except OSError:
            return
        self.offset += len(chunk)
        data = self.partial + chunk
        *lines, self.partial = data.split(b"\n")
        for line in lines:
            text = line.decode("utf-8", "replace").rstrip()
            if text.startswith("==PROF==") or text.startswith("==ERROR==") or text.startswith("==WARNING=="):
                self.progress(text)


def wait_for_exit(proc: subprocess.Popen[bytes], timeout: float, follower: LogFollower) -> int | None:
    """The exit status, or None when the deadline passed first."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            status = proc.wait(timeout=min(0.2, remaining))
        except subprocess.TimeoutExpired:
            follower.poll()
        else:
            follower.poll()
            return status
