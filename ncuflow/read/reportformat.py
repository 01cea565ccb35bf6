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
``ncu_report``. Memory is bounded by the file's size (mapped, not copied) and the caps
below; time is linear in the file's size.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ncuflow.errors import ReportError
from ncuflow.read.reportfile import COMPRESSED_MAGIC, REPORT_MAGIC, version_in

FORMAT_VERSION = 7
# The fields of BlockHeader that NVIDIA's schema defines (1-7): a higher one is a layout
# this reader has not been checked against.
_KNOWN_BLOCK_FIELDS = frozenset(range(1, 8))
# BlockHeader field 9, NumGraphResults: the GraphResult entries of `ncu --graph-profiling graph`
# (each CUDA graph one workload). This reader turns kernel results into launches only.
GRAPH_RESULTS_FIELD = 9
GRAPH_RESULTS_WORDS = ("it holds CUDA-graph results (ncu --graph-profiling graph: each graph profiled as one "
                       "workload), which ncuflow's reader does not turn into launches")
# Caps against hostile files (real reports: a few thousand names, at most ~100,000 results).
MAX_STRINGS = 2_000_000
MAX_ENTRIES = 20_000_000
MAX_EXPANSION = 100  # a .ncu-repz expands a few times; more than this is no report
_LENGTH = struct.Struct("<I")


class UnknownLayout(Exception):
    """A file version or layout this reader does not know; ``str()`` names it in one sentence."""


@dataclass
class ReportFile:
    """One report's bytes, its whole string table and where each result lies."""

    path: Path
    data: Any  # the mapped file (mmap), or bytes
    string_tables: list[Any]  # each block's string table (parsed, its strings not yet Python text), in order
    result_spans: list[tuple[int, int]]  # (offset, length) of each ProfileResult entry, in file order
    damage: str | None = None  # where the file is cut off or stops making sense, None when whole
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
                try:
                    parsed = message_class.FromString(view[offset:offset + length])
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
    limit = MAX_EXPANSION * os.fstat(handle.fileno()).st_size + (64 << 20)
    sink = tempfile.TemporaryFile(prefix="ncuflow-repz-")  # noqa: SIM115 - returned open; the ReportFile closes it
    written = 0
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(handle, read_across_frames=True)
        while chunk := reader.read(1 << 20):
            written += len(chunk)
            if written > limit:
                sink.close()
                raise ReportError(
                    f"{path} is not a compressed report ncuflow reads: it expands to more than "
                    f"{MAX_EXPANSION} times its size.",
                    "A .ncu-repz is an Nsight Compute report inside a zstd container; reports compress "
                    "a few times, and this file would fill the temporary folder.",
                    "Pass a report that ncu wrote (check the file's origin).",
                )
            sink.write(chunk)
    except zstandard.ZstdError as error:
        sink.close()
        raise ReportError(
            f"{path} is not a readable compressed report: zstd said {error}.",
            "A .ncu-repz is an Nsight Compute report inside a zstd container; this one is cut off or corrupted.",
            "Copy the complete file again, or export the report again from Nsight Compute.",
        ) from error
    except OSError:
        sink.close()
        raise
    sink.seek(0)
    return sink


def _map(handle: IO[bytes]) -> Any:
    if os.fstat(handle.fileno()).st_size == 0:
        return b""
    return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


@contextlib.contextmanager
def open_report(path: Path, messages: Any) -> Iterator[ReportFile]:
    """The report at ``path`` (already checked to be a regular file), its blocks walked.

    ``messages``: the schema's message classes (``ncuflow.read.schema.messages()``).
    """
    report = ReportFile(path, b"", [], [])
    try:
        handle: IO[bytes] = path.open("rb")
        report._closers.append(handle)
        if handle.read(4) == COMPRESSED_MAGIC:
            handle.seek(0)
            handle = _decompressed(path, handle)
            report._closers.append(handle)
        report.data = _map(handle)
        if isinstance(report.data, mmap.mmap):
            report._closers.append(report.data)
    except OSError as error:
        report.close()
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
        walked = _note_entries(report, after_header, min(payload_end, size), counts)
        if report.damage is None and walked != sum(counts):
            raise UnknownLayout(f"the block at byte {position} holds {walked} entries where its header counts "
                                f"{sum(counts)} sources and results")
        entries += walked
        if entries > MAX_ENTRIES:
            raise ReportError(
                f"{path} is not a report ncuflow reads: it holds more than {MAX_ENTRIES:,} entries.",
                "Reports that ncu writes hold at most about a hundred thousand results.",
                "Pass a report that ncu wrote (check the file's origin).",
            )
        position = payload_end


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
