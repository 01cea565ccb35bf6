"""The report file's framing, as NVIDIA documents it: magic, file header, blocks, entries.

A ``.ncu-rep`` is ``NVR\\0``, a length-prefixed ``FileHeader`` (version 7 in every report
seen, 2019-2026), then blocks to the end of the file: each a length-prefixed
``BlockHeader`` and its payload (``PayloadSize`` bytes) of length-prefixed entries,
``NumSources`` source entries, then ``NumResults`` ``ProfileResult`` entries, then
``NumRangeResults`` range results. Every length is a little-endian uint32. A
``.ncu-repz`` is the same inside a zstd container; it is decompressed to a temporary
file first, so that memory does not grow with it.

The string table that metric names refer to grows block by block, and a result may
refer to a name that a later block defines: ``open_report`` walks every block first
(headers only, the entries' bytes are not parsed), then ``ReportFile.results`` parses
one result at a time. A file cut off is read up to the cut (the ``damage`` it names);
bytes that are no report are a ``ReportError``; a version or layout this reader has not
been checked against is ``UnknownLayout``, for which the caller falls back to
``ncu_report``. The file is read into memory once, not mapped (a mapped file rewritten by
another process kills the reader with SIGBUS), and refused where it changed while it was
read. Memory is bounded by the file's size and the caps below, each checked before the work
it bounds (a block's counts before its entries are walked); bytes after the last block that
begin with no block header (zeros, garbage) are named (``trailing``) and left out; time is
linear in the file's size.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ncuflow.errors import ReportError
from ncuflow.read.reportfile import (
    COMPRESSED_MAGIC,
    REPORT_MAGIC,
    changed_while_read,
    file_identity,
    version_in,
)
from ncuflow.read.zstdframes import zstd_content

FORMAT_VERSION = 7
# The fields of BlockHeader that NVIDIA's schema defines (1-7): a higher one is a layout
# this reader has not been checked against.
_KNOWN_BLOCK_FIELDS = frozenset(range(1, 8))
# BlockHeader field 9, NumGraphResults: the GraphResult entries of `ncu --graph-profiling graph`
# (each CUDA graph one workload). This reader turns kernel results into launches only.
GRAPH_RESULTS_FIELD = 9
GRAPH_RESULTS_WORDS = ("it holds CUDA-graph results (ncu --graph-profiling graph: each graph profiled as one "
                       "workload), which ncuflow's reader does not turn into launches")
# Caps against hostile files (real reports: a few thousand names, at most ~100,000 results), checked
# against what the block headers count before their entries are walked.
MAX_STRINGS = 2_000_000
MAX_ENTRIES = 2_000_000
# A report up to this size is read into memory; a larger one is copied to a temporary file and mapped
# (either way a copy: a mapped file that another process rewrites kills the reader with SIGBUS).
MAX_READ_BYTES = 256 << 20
_LENGTH = struct.Struct("<I")


class UnknownLayout(Exception):
    """A file version or layout this reader does not know; ``str()`` names it in one sentence."""


@dataclass
class ReportFile:
    """One report's bytes, its whole string table and where each result lies."""

    path: Path
    data: Any  # the file's bytes (a .ncu-repz: its content in our temporary file, mapped)
    string_tables: list[Any]  # each block's string table (parsed, its strings not yet Python text), in order
    result_spans: list[tuple[int, int]]  # (offset, length) of each ProfileResult entry, in file order
    damage: str | None = None  # where the file is cut off or stops making sense, None when whole
    trailing: str | None = None  # bytes after the last block that are none (zeros, garbage), None when none
    version: str | None = None  # the ncu version its block headers name (the last), None where none does
    tables_key: tuple[bytes, ...] = ()  # the string tables' bytes: equal for reports that name alike
    _closers: list[Any] = field(default_factory=list, repr=False)

    @property
    def strings(self) -> list[str]:
        """The whole string table as Python text (made at each call: ``ncuflow.read.fileaction``
        keeps it per distinct table)."""
        if len(self.string_tables) == 1:
            return list(self.string_tables[0].strings)
        return [name for table in self.string_tables for name in table.strings]

    def results(self, message_class: Any) -> Iterator[tuple[int, Any | None]]:
        """(index, parsed ProfileResult) for each result; None for one that does not parse."""
        view = memoryview(self.data)
        try:
            for index, (offset, length) in enumerate(self.result_spans):
                try:  # a result of 0 bytes (no kernel, no metric: never one ncu wrote) is damaged, unparsed
                    parsed = message_class.FromString(view[offset:offset + length]) if length else None
                except Exception:  # DecodeError, or a nesting too deep: a damaged result
                    parsed = None
                yield index, parsed
        finally:
            view.release()

    def close(self) -> None:
        for closer in reversed(self._closers):
            with contextlib.suppress(Exception):
                closer.close()
        self._closers.clear()


def _not_a_report(path: Path, why: str) -> ReportError:
    return ReportError(
        f"{path} holds no profiled launch: {why}.",
        "The file begins like an Nsight Compute report but its structure breaks off before any "
        "complete result: it is cut off (an interrupted ncu or an incomplete copy) or corrupted.",
        "Profile again and let ncu finish, or copy the complete file.",
    )


def _decompressed(path: Path, handle: IO[bytes]) -> IO[bytes]:
    """A ``.ncu-repz``'s content in an anonymous temporary file (streamed: memory stays bounded)."""
    try:
        import zstandard
    except ImportError as error:
        raise ReportError(
            f"{path} is a compressed report (zstd) and the zstandard module is not installed.",
            "ncuflow reads .ncu-repz files through the zstandard package, a dependency of ncuflow.",
            "Install it with `pip install zstandard`, or pass the uncompressed .ncu-rep.",
        ) from error
    sink = tempfile.TemporaryFile(prefix="ncuflow-repz-")  # noqa: SIM115 - returned open; the ReportFile closes it
    try:
        for chunk in zstd_content(path, handle):
            sink.write(chunk)
    except zstandard.ZstdError as error:
        sink.close()
        raise ReportError(
            f"{path} is not a readable compressed report: zstd said {error}.",
            "A .ncu-repz is an Nsight Compute report inside a zstd container; this one is cut off or corrupted.",
            "Copy the complete file again, or export the report again from Nsight Compute.",
        ) from error
    except BaseException:
        sink.close()
        raise
    sink.seek(0)
    return sink


def _map(handle: IO[bytes]) -> Any:
    """Our own temporary file (a .ncu-repz's content), mapped: nothing else writes it."""
    if os.fstat(handle.fileno()).st_size == 0:
        return b""
    return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


def _copied(handle: IO[bytes]) -> IO[bytes]:
    """The file copied in pieces into an anonymous temporary file of ours."""
    sink = tempfile.TemporaryFile(prefix="ncuflow-report-")  # noqa: SIM115 - returned open; the ReportFile closes it
    try:
        shutil.copyfileobj(handle, sink, 1 << 20)
    except BaseException:
        sink.close()
        raise
    return sink


def _snapshot(path: Path, handle: IO[bytes]) -> tuple[Any, IO[bytes] | None]:
    """A copy of the user's file that nothing else writes, and the temporary file to close (None
    where the copy is in memory): a report up to ``MAX_READ_BYTES`` read whole into memory, a
    larger one copied to our temporary file, a compressed one decompressed there; those are mapped.
    Never the user's file mapped: another process that truncates or rewrites it kills the reader
    with SIGBUS (issue 38: 4 of 40 runs). The file's identity before and after must agree, else
    it changed while it was read."""
    before = file_identity(os.fstat(handle.fileno()))
    compressed = os.pread(handle.fileno(), 4, 0) == COMPRESSED_MAGIC  # the handle left unread: one copy
    try:
        if compressed:
            sink: IO[bytes] | None = _decompressed(path, handle)
        else:
            sink = _copied(handle) if before[2] > MAX_READ_BYTES else None
    except ReportError:  # cut off or corrupted: it may have been rewritten meanwhile
        if file_identity(os.fstat(handle.fileno())) != before:
            raise changed_while_read(path) from None
        raise
    data = _map(sink) if sink is not None else handle.read()
    if file_identity(os.fstat(handle.fileno())) != before or (not compressed and len(data) != before[2]):
        if isinstance(data, mmap.mmap):
            data.close()
        if sink is not None:
            sink.close()
        raise changed_while_read(path)
    return data, sink


def _too_large_for_memory(path: Path) -> ReportError:
    return ReportError(
        f"{path} does not fit in the memory this process may use.",
        f"ncuflow reads a report of up to {MAX_READ_BYTES >> 20} MiB into memory, and maps its own copy of a "
        "larger one; the address space this process is allowed (a ulimit, a container's limit) is smaller.",
        "Read it where more memory is allowed, or profile fewer launches per report (ncu --launch-count, --kernel).",
    )


@contextlib.contextmanager
def open_report(path: Path, messages: Any) -> Iterator[ReportFile]:
    """The report at ``path`` (already checked to be a regular file), its blocks walked.

    ``messages``: the schema's message classes (``ncuflow.read.schema.messages()``).
    """
    report = ReportFile(path, b"", [], [])
    try:
        with path.open("rb") as handle:
            report.data, sink = _snapshot(path, handle)
        if sink is not None:
            report._closers.append(sink)
        if isinstance(report.data, mmap.mmap):
            report._closers.append(report.data)
    except MemoryError:
        report.close()
        raise _too_large_for_memory(path) from None
    except OSError as error:
        report.close()
        if error.errno == errno.ENOMEM:  # mapping our copy of a large one
            raise _too_large_for_memory(path) from None
        raise ReportError(
            f"{path} cannot be read: {error.strerror or error}.",
            "ncuflow needs read access to the report file (and, for a .ncu-repz, room in the temporary folder).",
            "Check the file's permissions, and the free space of the temporary folder.",
        ) from error
    except BaseException:
        report.close()
        raise
    try:
        _walk(report, messages)
        yield report
    finally:
        report.close()


def _walk(report: ReportFile, messages: Any) -> None:
    """Read the file header and every block header; note where each result lies."""
    data, path = report.data, report.path
    size = len(data)
    if data[:4] != REPORT_MAGIC:
        raise ReportError(
            f"{path} is not an Nsight Compute report: it does not start with the report signature "
            f"(it starts with {bytes(data[:8])!r}).",
            "Reports written by ncu begin with the bytes 'NVR\\0' (a .ncu-repz: a zstd container of them).",
            "Pass the .ncu-rep file that `ncu -o` wrote.",
        )
    header, position = _message_at(data, 4, messages.file_header)
    if header is None:
        raise _not_a_report(path, "its file header is cut off or corrupted")
    if header.version != FORMAT_VERSION:
        raise UnknownLayout(f"its file header says format version {header.version}, and ncuflow's reader "
                            f"knows version {FORMAT_VERSION} only")
    entries = names = 0
    while position < size and report.damage is None:
        if position + 4 <= size and _LENGTH.unpack_from(data, position)[0] == 0:
            report.trailing = _trailing(data, position)  # ncu writes no empty block header
            break
        block, after_header = _message_at(data, position, messages.block_header)
        if block is None:
            report.damage = f"the block at byte {position} is cut off or corrupted"
            break
        _check_block_layout(block)
        if block.session_details:  # where ncu names its version
            report.version = version_in(block.session_details, 0, len(block.session_details)) or report.version
        strings = _strings_of(block, messages, report)
        if strings is None:
            report.damage = f"the block at byte {position} is cut off or corrupted"
            break
        names += len(strings)
        if names > MAX_STRINGS:
            raise ReportError(
                f"{path} is not a report ncuflow reads: its string table holds more than {MAX_STRINGS:,} names.",
                "Reports that ncu writes name a few thousand metrics; this file's structure is not one ncu wrote.",
                "Pass a report that ncu wrote (check the file's origin).",
            )
        payload_end = after_header + block.payload_size
        if payload_end > size:
            report.damage = f"the file ends inside the block at byte {position}"
        counts = (block.num_sources, block.num_results)
        entries += _checked_counts(path, block, entries)
        if 4 * sum(counts) > block.payload_size:  # each entry is at least its 4-byte length: corrupted
            report.damage = (f"the block at byte {position} is corrupted: it counts {sum(counts):,} entries, "
                             f"more than its {block.payload_size:,} bytes of payload can hold")
            break
        walked = _note_entries(report, after_header, min(payload_end, size), counts)
        if report.damage is None and walked != sum(counts):
            raise UnknownLayout(f"the block at byte {position} holds {walked} entries where its header counts "
                                f"{sum(counts)} sources and results")
        position = payload_end


def _checked_counts(path: Path, block: Any, entries: int) -> int:
    """The entries a block's header counts, checked before any is walked: within ``MAX_ENTRIES``
    with those before it."""
    declared = block.num_sources + block.num_results
    if entries + declared > MAX_ENTRIES:
        raise ReportError(
            f"{path} is not a report ncuflow reads: its blocks count more than {MAX_ENTRIES:,} entries.",
            "Reports that ncu writes hold at most about a hundred thousand results.",
            "Pass a report that ncu wrote (check the file's origin).",
        )
    return int(declared)


def _trailing(data: Any, position: int) -> str:
    """What the bytes from ``position`` to the end are, where a block header should begin and
    none does (a 0 length): zeros (a padded copy, a preallocated file) or garbage."""
    size = len(data)
    step = 1 << 20
    zeros = all(data[at:at + step].count(0) == min(step, size - at) for at in range(position, size, step))
    kind = "zeros" if zeros else "garbage"
    return f"its last {size - position:,} bytes, from byte {position:,}, are {kind}, no block ncu writes: left out"


# String tables parsed lately, by their bytes: the reports of one collection on one chip carry the
# same table, parsed once (and their names made Python text once: ``ncuflow.read.fileaction``).
_PARSED_TABLES: dict[bytes, Any] = {}
_TABLES_KEPT = 4
KEPT_TABLE_BYTES = 4 << 20  # ncu's tables: ~130 KB for a full set; a larger one is parsed, not kept


def _strings_of(block: Any, messages: Any, report: ReportFile) -> Any:
    """A block's string table (a repeated field, its names still upb's), noted in the report; None
    where it does not parse (the block is corrupted, as a header that does not parse)."""
    raw = block.string_table
    if not raw:
        return ()
    table = _PARSED_TABLES.pop(raw, None)
    if table is None:
        try:
            table = messages.string_table.FromString(raw)
        except Exception:  # DecodeError
            return None
        while len(_PARSED_TABLES) >= _TABLES_KEPT:
            del _PARSED_TABLES[next(iter(_PARSED_TABLES))]  # the least recently used
    if len(raw) <= KEPT_TABLE_BYTES:
        _PARSED_TABLES[raw] = table
    report.string_tables.append(table)
    report.tables_key += (raw,)
    return table.strings


def _check_block_layout(block: Any) -> None:
    from google.protobuf import unknown_fields

    # A field NVIDIA's schema does not define is a layout this reader was not checked
    # against, unless it is a zero (ncu 2026.2 writes field 10 = 0 in every block header).
    unknown = sorted(item.field_number for item in unknown_fields.UnknownFieldSet(block)
                     if item.field_number not in _KNOWN_BLOCK_FIELDS and item.data != 0)
    if GRAPH_RESULTS_FIELD in unknown:  # ncu 2026's NumGraphResults: CUDA graphs profiled as one workload each
        raise UnknownLayout(GRAPH_RESULTS_WORDS)
    if unknown:
        raise UnknownLayout(f"a block header carries field {unknown[0]}, which NVIDIA's schema of format "
                            f"version {FORMAT_VERSION} does not define")
    if block.num_range_results:
        raise UnknownLayout(f"it holds {block.num_range_results} range results (range or application-range "
                            "replay), which ncuflow's reader does not turn into launches")


def _note_entries(report: ReportFile, start: int, end: int, counts: tuple[int, int]) -> int:
    """Walk one payload's entries, noting the results' spans; returns the entries walked."""
    data = report.data
    sources, results = counts
    position, index = start, 0
    while position < end:
        if position + 4 > end:
            report.damage = report.damage or f"the entry at byte {position} is cut off"
            break
        (length,) = _LENGTH.unpack_from(data, position)
        position += 4
        if position + length > end:
            report.damage = report.damage or f"the entry at byte {position - 4} is cut off"
            if sources <= index < sources + results:
                report.result_spans.append((position, end - position))  # what is left of it: damaged
            break
        if sources <= index < sources + results:
            report.result_spans.append((position, length))
        position += length
        index += 1
        if index > sources + results:
            break  # more entries than the header counts: a layout not checked (the caller says so)
    return index


def _message_at(data: Any, position: int, message_class: Any) -> tuple[Any | None, int]:
    """The length-prefixed message at ``position`` and the position after it; None if it is
    cut off or does not parse."""
    if position + 4 > len(data):
        return None, position
    (length,) = _LENGTH.unpack_from(data, position)
    start, end = position + 4, position + 4 + length
    if end > len(data):
        return None, position
    view = memoryview(data)[start:end]
    try:
        return message_class.FromString(view), end
    except Exception:  # DecodeError, or nested too deep
        return None, position
    finally:
        view.release()
