"""Files ncuflow reads, checked before a byte is read: regular files only, of bounded size.

A FIFO (which would wait for a writer forever), a device such as /dev/zero (which never
ends), a socket or a folder is refused with one paragraph; the check is made on the opened
descriptor, so a file swapped between a check and the open cannot slip through. Manifests,
sweep files, escalation sidecars (``read_small_file``) and serving logs
(``open_regular_file``) are read through here. ``deepest_nesting`` says how deep JSON text
nests before ``json`` reads it (past its limit, ``json`` recurses into the C stack).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ncuflow.errors import NcuflowError


class InputFileError(NcuflowError):
    """A file ncuflow was asked to read is missing, not a regular file, or too large."""


def file_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, for messages: "a FIFO", "a character device", ..."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "a special file"


class _NotRegular(Exception):
    """Raised by ``_open_regular``: the opened path is no regular file (its ``st_mode``)."""

    def __init__(self, mode: int) -> None:
        super().__init__(file_kind(mode))
        self.mode = mode


def _open_regular(path: Path) -> tuple[int, os.stat_result]:
    """A read-only descriptor of ``path`` and its status, checked to be a regular file.

    Opened without blocking and checked on the descriptor, so a FIFO (which would wait for a
    writer forever), a device such as /dev/zero (which never ends), a socket or a folder is
    refused (``_NotRegular``) before a byte is read, and a file swapped for one of those
    between a check and the open cannot slip through. OSError as ``os.open`` raises it.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise _NotRegular(status.st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd, status


def read_small_file(path: Path, limit: int, *, what: str, error: Callable[[str], NcuflowError]) -> str:
    """The UTF-8 text of a small regular file, checked before it is read.

    A FIFO, a device (a link to ``/dev/zero``), a socket or a folder is refused without
    blocking or reading; so is a file over ``limit`` bytes, and one that grows past it while
    read. ``error(problem)`` makes the exception raised, e.g. a ``ManifestError``.
    """
    try:
        descriptor, _ = _open_regular(path)
    except FileNotFoundError:
        raise error("the file is missing") from None
    except _NotRegular as special:
        raise error(f"it is {special}, not a regular {what} file") from None
    except OSError as failure:
        raise error(f"it cannot be read ({failure.strerror or failure})") from None
    try:
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    except OSError as failure:
        raise error(f"it cannot be read ({failure.strerror or failure})") from None
    finally:
        os.close(descriptor)
    if len(data) > limit:
        raise error(f"it is larger than {limit >> 20} MiB, far more than a {what} holds")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as failure:
        line = data[: failure.start].count(b"\n") + 1
        raise error(f"it is not UTF-8 text (byte {data[failure.start]:#04x} on line {line})") from None


def open_regular_file(path: Path, *, kind: str, max_bytes: int | None = None) -> Any:
    """Open ``path`` for reading (binary) after checking that it is a regular file (a link is
    followed) and, with ``max_bytes``, no larger than that; returns the open file.

    Checked as ``read_small_file`` checks (on the descriptor, before a byte is read); for a
    file that is streamed rather than read whole. ``kind`` names what the file should be
    ("a serving log"), for the messages.
    """
    try:
        fd, status = _open_regular(path)
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file.", "", "Check the path.") from None
    except _NotRegular as special:
        if stat.S_ISDIR(special.mode):
            raise InputFileError(f"{path} is a folder, not a regular file, so it is not read as {kind}.",
                                 "", f"Pass the files inside it ({path}/*).") from None
        why = {
            "a FIFO": "Reading a FIFO waits for a writer, possibly forever.",
            "a socket": "A socket is a connection, not a file.",
        }.get(str(special), "A device can send bytes without end (/dev/zero never ends).")
        raise InputFileError(f"{path} is {special}, not a regular file, so it is not read as {kind}.", why,
                             "Copy what it holds into a regular file first and pass that file.") from None
    except OSError as error:
        raise InputFileError(f"{path} cannot be opened as {kind}: {error.strerror or error}.", "",
                             "Check the path and its permissions.") from None
    try:
        if max_bytes is not None and status.st_size > max_bytes:
            raise InputFileError(
                f"{path} holds {status.st_size:,} bytes, more than the {max_bytes:,} bytes ncuflow "
                f"reads as {kind}.",
                "The whole file would be held in memory.",
                "Split the file, or pass only the part that is needed.")
        if hasattr(os, "O_NONBLOCK"):
            import fcntl

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def deepest_nesting(text: str) -> int:
    """How deep ``[`` and ``{`` nest in JSON text (brackets inside strings not counted)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest
