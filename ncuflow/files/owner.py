"""Who wrote a lock or a temporary file: a process named beyond its id.

A process id alone names nobody outside its own PID namespace and boot: a container that
shares a folder, an NFS client on another host, or the same host after a reboot all see
other processes under the same numbers, and a folder copied with ``cp -a`` carries the
locks and temporaries of processes that never ran there. So every lock and temporary
ncuflow writes also names the owner's *place* (host name, boot id, PID namespace) and the
owner's *start time* (clock ticks since boot, from ``/proc/<pid>/stat``), and ncuflow
acts on one (kills its process group, deletes it) only when its owner is provably a
process of this host, this boot and this PID namespace that is dead: gone, or its id now
used by a process that started at another time.

``place_token`` is a short digest of the place; ``owner_tag`` is the tag a temporary's
name carries (``<pid>.<place>.<start>``), ``tag_owner_dead`` reads it back. Plain standard
library, Linux facts read where they exist (elsewhere the place is the host name alone).
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
from pathlib import Path


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return ""


def _namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


@functools.cache
def place() -> dict[str, str]:
    """This process's host name, boot id and PID namespace (empty strings where unknown)."""
    return {"host": socket.gethostname(), "boot_id": _read("/proc/sys/kernel/random/boot_id"),
            "pid_ns": _namespace()}


@functools.cache
def place_token() -> str:
    """A 10-character digest of ``place()``: equal only for processes of one host, boot and PID namespace."""
    facts = place()
    text = "\0".join((facts["host"], facts["boot_id"], facts["pid_ns"]))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:10]


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None when it is not there (or unknown)."""
    if pid <= 0:
        return None
    stat = _read(f"/proc/{pid}/stat")
    fields = stat.rpartition(")")[2].split()  # the name in parentheses may hold spaces
    try:
        return int(fields[19])  # field 22 of stat(5); the first two fields are before the ")"
    except (IndexError, ValueError):
        return None


def owner_tag(pid: int | None = None) -> str:
    """``<pid>.<place token>.<start>``: this process (or ``pid``), as a temporary's name carries it."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}.{place_token()}.{process_start(pid) or 0}"


def owner_dead(pid: int, start: int | None) -> bool:
    """Whether the process ``pid`` that started at ``start`` (of this place) is gone.

    True when no process has that id, or the one that has it started at another time (the
    id was reused). A process we may not signal still runs. ``start`` None (not recorded)
    proves nothing about a live id, so a live id counts as the owner.
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    now = process_start(pid)
    return start is not None and now is not None and now != start


def tag_owner_dead(tag: str) -> bool:
    """Whether the owner a tag names is provably dead: of this place, and gone. Any other tag
    (another host, boot or namespace, an old tag holding only a pid, a malformed one): False."""
    parts = tag.split(".")
    if len(parts) != 3 or parts[1] != place_token() or not parts[0].isdigit() or not parts[2].isdigit():
        return False
    return owner_dead(int(parts[0]), int(parts[2]) or None)
