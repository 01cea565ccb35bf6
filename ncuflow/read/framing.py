"""Is this report's framing whole? A cheap completeness check of an Nsight Compute report file.

The layout is NVIDIA's, documented by the message definitions an Nsight Compute install
ships (``extras/FileFormat/ProfilerReport.proto``): the signature ``NVR\\0``; a 4-byte
little-endian length and a ``FileHeader`` message of that many bytes; then, to the end of
the file, blocks: a 4-byte little-endian length, a ``BlockHeader`` message of that many
bytes, and the block's payload, whose size is the header's field 5 (``PayloadSize``). A
report that ncu finished writing ends exactly after a payload (every report of the shared
corpus does, from ncu 2019 to 2025); a copy or a write cut short ends inside a block.

``check_framing`` walks the block headers only (it seeks over the payloads), so it costs a
few reads per block whatever the report's size; on the way it adds up the results (launches)
the headers count (field 2, ``NumResults``), what ``ncuflow.read.jobs`` weighs reading by. It
says ``whole``, ``cut`` (the file ends inside a block: where, and how much is missing),
``unreadable`` (it cannot be opened or read: no permission, an I/O error; its size unknown,
never "empty") or ``unknown`` (the bytes do not follow this layout: a newer format, or not a
report; the reader decides). A file cut exactly
between two blocks is whole by its framing; ``ncu_report`` then reads the blocks it holds.
Asked to (``entries``), it also walks each whole block's payload as its length-prefixed entries
and names the first whose length runs past its block (``overrun``): a file whole by its blocks
on which ``ncu_report`` aborts its process (``reportfile.load_context`` refuses it first).

Plain standard library: the store checks its runs' reports with it (``store.inspect_run``).
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

SIGNATURE = b"NVR\x00"
PAYLOAD_SIZE_FIELD = 5  # BlockHeader.PayloadSize
NUM_RESULTS_FIELD = 2  # BlockHeader.NumResults
MAX_HEADER_BYTES = 256 * 2**20  # a header's length beyond this is not this layout
NO_SIGNATURE = "it does not start with the report signature NVR\\0"

Verdict = Literal["whole", "cut", "unknown", "unreadable"]


@dataclass(frozen=True)
class Framing:
    """What the framing of one report file says: ``verdict``, the blocks that are whole,
    the file's size, and for a cut file the byte where it ends inside which block."""

    verdict: Verdict
    blocks: int
    size: int
    detail: str = ""
    results: int = 0  # the profile results (launches) the whole blocks' headers count
    overrun: str = ""  # where entries were walked: the entry whose length runs past its block ("" none)

    @property
    def problem(self) -> str | None:
        """One clause for a file that is cut short, empty, no report at all or cannot be read (no
        permission: never "empty"); None for a whole one and for a layout this check does not
        know (the reader decides)."""
        if self.verdict == "unreadable":
            return self.detail
        if self.verdict == "cut":
            return f"it is cut short: {self.detail}"
        if self.verdict == "unknown" and self.size == 0:
            return "it is empty (0 bytes)"
        if self.verdict == "unknown" and self.detail == NO_SIGNATURE:
            return NO_SIGNATURE
        return None


class _Unknown(Exception):
    """The bytes do not follow the documented layout."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise _Unknown
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _header_numbers(header: bytes) -> dict[int, int]:
    """The varint fields of a ``BlockHeader`` message (field number -> value), from its top-level fields."""
    at, found = 0, {}
    while at < len(header):
        key, at = _varint(header, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            found[field], at = _varint(header, at)
        elif wire == 2:
            length, at = _varint(header, at)
            at += length
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
        else:  # groups (3, 4) and undefined types do not occur in these messages
            raise _Unknown
    if at != len(header) or PAYLOAD_SIZE_FIELD not in found:
        raise _Unknown
    return found


def payload_size(header: bytes) -> int:
    """Field 5 (``PayloadSize``) of a ``BlockHeader`` message, read from its top-level fields."""
    return _header_numbers(header)[PAYLOAD_SIZE_FIELD]


def _length(handle: BinaryIO) -> int | None:
    """A 4-byte little-endian length, or None where the file ends before its 4 bytes."""
    raw = handle.read(4)
    return None if len(raw) < 4 else int(struct.unpack("<I", raw)[0])


def check_framing(path: Path, *, entries: bool = False) -> Framing:
    """Walk the framing of the report at ``path`` (a regular file; anything else is ``unknown``);
    ``entries``: also each whole block's entries (their 4-byte lengths, a read each), stopping at the
    first whose length runs past its block (``overrun``)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:  # no permission: it cannot be read (never "empty"); gone: not this check's to say
        verdict: Verdict = "unreadable" if error.errno in (errno.EACCES, errno.EPERM) else "unknown"
        return Framing(verdict, 0, 0, f"it cannot be read ({error.strerror or error})")
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode):
            return Framing("unknown", 0, 0, "it is not a regular file")
        try:
            return _walk(handle, status.st_size, entries)
        except OSError as error:
            return Framing("unreadable", 0, status.st_size, f"it cannot be read ({error.strerror or error})")


def _walk(handle: BinaryIO, size: int, entries: bool = False) -> Framing:
    if handle.read(4) != SIGNATURE:
        return Framing("unknown", 0, size, NO_SIGNATURE)
    header = _length(handle)
    if header is None or 8 + header > size:
        return Framing("cut", 0, size, f"the file ({size} bytes) ends inside its file header")
    at, blocks, results = 8 + header, 0, 0
    handle.seek(at)
    try:
        while at < size:
            length = _length(handle)
            if length is None:
                return _cut(blocks, size, at, f"inside the length of block {blocks + 1}")
            if length > MAX_HEADER_BYTES:
                raise _Unknown
            if at + 4 + length > size:
                return _cut(blocks, size, at, f"inside the header of block {blocks + 1} "
                                               f"({at + 4 + length - size} bytes missing)")
            numbers = _header_numbers(handle.read(length))
            payload = numbers[PAYLOAD_SIZE_FIELD]
            end = at + 4 + length + payload
            if end > size:
                return _cut(blocks, size, at, f"inside the payload of block {blocks + 1} "
                                               f"({end - size} of its {payload} bytes missing)")
            overrun = _entry_overrun(handle, at + 4 + length, end, blocks + 1) if entries else None
            if overrun is not None:
                return Framing("whole", blocks, size, results=results, overrun=overrun)
            handle.seek(end)
            at, blocks, results = end, blocks + 1, results + numbers.get(NUM_RESULTS_FIELD, 0)
    except _Unknown:
        return Framing("unknown", blocks, size, f"block {blocks + 1} does not follow the documented layout", results)
    return Framing("whole", blocks, size, results=results)


def _entry_overrun(handle: BinaryIO, start: int, end: int, block: int) -> str | None:
    """Walk one payload (``start`` to ``end``) as its length-prefixed entries; where one runs past
    the payload, which entry and by how much (None where they fill it exactly)."""
    at = start
    while at < end:
        handle.seek(at)
        length = _length(handle) if at + 4 <= end else None
        if length is None:
            return f"block {block}'s payload ends inside the length of its entry at byte {at}"
        if at + 4 + length > end:
            return (f"the entry at byte {at} of block {block} is {length:,} bytes long, past its block's end "
                    f"at byte {end}")
        at += 4 + length
    return None


def _cut(blocks: int, size: int, at: int, where: str) -> Framing:
    return Framing("cut", blocks, size, f"the file ({size} bytes) ends {where}, which starts at byte {at}; "
                                        f"the {blocks} blocks before it are whole")


def framing_problem(path: Path) -> str | None:
    """Is this report's framing whole? None when it is (or when the layout is not one this
    check knows: the reader decides); else one clause saying where the file is cut (or that
    it is empty, or no report)."""
    return check_framing(path).problem
