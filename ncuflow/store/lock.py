"""One writer per point: an OS file lock on ``<point>/.lock`` while a run of the point is written.

Two sweeps of one file on one store, or a sweep and a ``profile`` of the same cell,
would otherwise both count the stored runs, both find a replica missing and both
profile it. Whoever profiles a point holds its lock from the moment it counts the
runs until its run is stored (or abandoned), so the second writer counts after the
first has finished and profiles only what is still missing.

The lock is ``flock(2)`` on a file of the point folder: the kernel releases it when
the holding process dies, however it dies (``kill -9`` included), so a lock of a dead
process is simply taken by the next writer. Each lock opens its own file description,
so two threads of one process (a thread pool, a Ray worker) exclude each other too;
within one thread the lock is re-entrant (``sweep`` holds it while ``orchestrate.profile``
takes it again). The file records the holder (pid, host, time) and the process group
of the ncu it runs, so that the next holder can stop what a dead holder left running
before it removes that holder's temporary folders.

The holder is named beyond its pid (``files.owner``): its host, boot id and PID
namespace, its start time, the start time of the ncu group's leader, and the folder the
lock was written for (its path and inode). The next holder kills a recorded group only
when all of them are provably its own: this place, the same folder (a lock copied with
``cp -a`` into another store names the original's live ncu), the leader still the one
recorded (its id not reused) and still an ncuflow supervisor.

Usage, for any scheduler (a sweep, a Ray task)::

    with point_lock(point_folder, wait=False) as held:
        if held is None:
            ...  # another writer has it: do another point first, come back later
        else:
            ...  # count the stored runs, profile the missing ones
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ncuflow.files import process_group_alive
from ncuflow.files.owner import place, process_start

LOCK_NAME = ".lock"
SUPERVISOR_MARK = "ncuflow-supervise"  # in the supervisor's command line (profile.supervise)


@dataclass
class PointLock:
    """A held lock of one point folder (release it with ``release``, or use ``point_lock``)."""

    point: Path
    fd: int
    thread: int
    key: tuple[int, int]
    depth: int = 1
    previous_holder: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.point / LOCK_NAME

    def record(self, **facts: Any) -> None:
        """Write the holder's facts (pid, host, time, plus e.g. ``ncu_pgid``) into the lock file."""
        data = {**_identity(self.point), "since": time.time(), **facts}
        if isinstance(facts.get("ncu_pgid"), int):
            data["ncu_start"] = process_start(facts["ncu_pgid"])
        payload = (json.dumps(data) + "\n").encode()
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, payload, 0)

    def release(self) -> None:
        self.depth -= 1
        if self.depth > 0:
            return
        with _held_guard:
            _held.pop(self.key, None)
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
        with contextlib.suppress(OSError):
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        with contextlib.suppress(OSError):
            os.close(self.fd)


_held: dict[tuple[int, int], PointLock] = {}
_held_guard = threading.Lock()


def _key(folder: Path) -> tuple[int, int]:
    """The folder's identity (device, inode): two spellings of one folder are one lock."""
    status = os.stat(folder)
    return status.st_dev, status.st_ino


def _folder_id(folder: Path) -> list[int]:
    try:
        status = os.stat(folder)
    except OSError:
        return []
    return [status.st_dev, status.st_ino]


def _identity(folder: Path) -> dict[str, Any]:
    """This process and the folder it locks, as the lock file records them."""
    pid = os.getpid()
    return {"pid": pid, **place(), "start": process_start(pid), "folder": os.path.realpath(folder),
            "folder_id": _folder_id(folder)}


def _ours_to_stop(previous: dict[str, Any], folder: Path) -> bool:
    """Whether a previous holder's record was written here, by a process of this host, boot and namespace."""
    here = _identity(folder)
    return all(previous.get(key) == here[key] for key in ("host", "boot_id", "pid_ns", "folder", "folder_id"))


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        raw = os.pread(fd, 4096, 0)
        data = json.loads(raw.decode() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def holder(point: Path) -> dict[str, Any]:
    """What the lock file says about its holder (empty when free or unreadable; for messages)."""
    try:
        fd = os.open(Path(point) / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return {}
    try:
        return _read_holder(fd)
    finally:
        os.close(fd)


def try_lock(point: Path) -> PointLock | None:
    """The point's lock if free (or already held by this thread), else None. Never waits."""
    folder = Path(point)
    folder.mkdir(parents=True, exist_ok=True)
    key = _key(folder)
    with _held_guard:
        mine = _held.get(key)
        if mine is not None and mine.thread == threading.get_ident():
            mine.depth += 1
            return mine
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        raise
    lock = PointLock(point=folder, fd=fd, thread=threading.get_ident(), key=key, previous_holder=_read_holder(fd))
    with _held_guard:
        _held[key] = lock
    stop_left_running(lock.previous_holder, folder)
    lock.record()
    return lock


def acquire(point: Path, *, timeout: float | None = None, on_wait: Callable[[dict[str, Any]], None] | None = None,
            poll: float = 0.1) -> PointLock | None:
    """Wait for the point's lock (None if ``timeout`` s passed first); ``on_wait`` is told the holder once."""
    deadline = None if timeout is None else time.monotonic() + timeout
    told = False
    while True:
        lock = try_lock(point)
        if lock is not None:
            return lock
        if on_wait is not None and not told:
            on_wait(holder(point))
            told = True
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(poll)


@contextlib.contextmanager
def point_lock(point: Path, *, wait: bool = True, timeout: float | None = None,
               on_wait: Callable[[dict[str, Any]], None] | None = None) -> Iterator[PointLock | None]:
    """Hold the point's lock for the block; yields None when ``wait`` is False and it is taken."""
    lock = acquire(point, timeout=timeout, on_wait=on_wait) if wait else try_lock(point)
    try:
        yield lock
    finally:
        if lock is not None:
            lock.release()


def _is_supervisor(pid: int) -> bool:
    try:
        return SUPERVISOR_MARK.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def stop_left_running(previous: dict[str, Any], folder: Path, wait: float = 5.0) -> bool:
    """Kill the ncu process group a dead holder recorded, if it still runs; True if one was stopped.

    The supervisor of each ncu stops the group when ncuflow dies; this is the second
    line: the new holder must not clean a temporary folder that a late process of the
    old run could still write into. Only a group recorded in this very folder by a
    process of this host, boot and PID namespace, whose leader is still the process
    recorded (same start time) and still an ncuflow supervisor, is touched: a copied
    lock, a lock of another machine or container, or a recycled process id is left alone.
    """
    pgid = previous.get("ncu_pgid")
    if not isinstance(pgid, int) or pgid <= 1 or not _ours_to_stop(previous, folder):
        return False
    start = previous.get("ncu_start")
    if not isinstance(start, int) or process_start(pgid) != start or not _is_supervisor(pgid):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    end = time.monotonic() + wait
    while process_group_alive(pgid) and time.monotonic() < end:
        time.sleep(0.05)
    return True
