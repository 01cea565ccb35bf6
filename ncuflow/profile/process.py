"""Process control for ncu: its own session, signals held while it starts, timeouts, the process group stopped whole."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import IO, BinaryIO

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
    command: list[str], log: IO[bytes] | int, *, env: dict[str, str] | None, kill_grace: float,
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


# ncu's own lines are short; a profiled program may write anything (1.2 GB without a newline,
# 48 million lines): a log is scanned in chunks for ncu's lines (a regular expression, at C
# speed), and of a line longer than MAX_LINE_BYTES only its head is kept across chunks.
MAX_LINE_BYTES = 64 << 10
READ_CHUNK_BYTES = 1 << 20
# What is kept of a log for judging a run: ncu's own lines up to this many bytes, and the
# program's last lines (for the error message and the causes its output names).
NCU_LINES_BYTES = 16 << 20
PROGRAM_TAIL_LINES = 200
NCU_LINE = re.compile(rb"^==[^\n]*", re.M)
_PROGRESS_LINE = ("==PROF==", "==ERROR==", "==WARNING==")


class _LineScanner:
    """ncu's lines (those starting ``==``) of a stream fed in chunks, in bounded memory."""

    def __init__(self) -> None:
        self.partial = b""

    def feed(self, chunk: bytes) -> list[str]:
        data = self.partial + chunk
        cut = data.rfind(b"\n") + 1
        self.partial = data[cut:][:MAX_LINE_BYTES]
        return [found[:MAX_LINE_BYTES].decode("utf-8", "replace").rstrip() for found in NCU_LINE.findall(data, 0, cut)]


class LogFollower:
    """Hands new complete lines ncu wrote into the growing log to a progress callback, in bounded
    memory and time (``_LineScanner``)."""

    def __init__(self, path: Path, progress: Progress | None) -> None:
        self.path = path
        self.progress = progress
        self.offset = 0
        self._scanner = _LineScanner()

    @property
    def partial(self) -> bytes:
        return self._scanner.partial

    def poll(self) -> None:
        if self.progress is None:
            return
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                while chunk := handle.read(READ_CHUNK_BYTES):
                    self.offset += len(chunk)
                    for text in self._scanner.feed(chunk):
                        if text.startswith(_PROGRESS_LINE) and self.progress is not None:
                            self.progress(text)
        except OSError:
            return


def _program_tail(handle: BinaryIO, size: int) -> list[str]:
    """The program's last lines (not ncu's), each cut at ``MAX_LINE_BYTES``, from the log's end."""
    start = max(0, size - PROGRAM_TAIL_LINES * 512)
    handle.seek(start)
    lines = handle.read().split(b"\n")
    if start > 0:
        lines = lines[1:]  # begun mid-line
    own = [line[:MAX_LINE_BYTES].decode("utf-8", "replace").rstrip("\r") for line in lines
           if line and not line.startswith(b"==")]
    return own[-PROGRAM_TAIL_LINES:]


def read_log(path: Path) -> str:
    """What judging a run needs of its ncu log, read in bounded memory: every line ncu wrote
    (``==...``, up to ``NCU_LINES_BYTES``) and the program's last ``PROGRAM_TAIL_LINES`` lines,
    each cut at ``MAX_LINE_BYTES``; "" where the log cannot be read."""
    scanner, ncu, kept = _LineScanner(), [], 0
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            while kept < NCU_LINES_BYTES and (chunk := handle.read(READ_CHUNK_BYTES)):
                for text in scanner.feed(chunk):
                    ncu.append(text)
                    kept += len(text)
            if scanner.partial.startswith(b"==") and kept < NCU_LINES_BYTES:  # a last line without newline
                ncu.append(scanner.partial.decode("utf-8", "replace").rstrip())
            program = _program_tail(handle, size)
    except OSError:
        return ""
    return "\n".join([*ncu, *program])


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
