"""Crafted reports: real corpus reports with a hostile block, tail or metric values, built in a test's folder.

Each helper writes a new file from a real report (never changing the original): a block that
declares millions of zero-length results, zero bytes after the last block, every metric value
of one type set to one number (1e308, -1e6), a ``.ncu-repz`` padded with a skippable zstd
frame or cut short. The framing is ncu's (``ncuflow.read.reportformat``); metric values are
rewritten through NVIDIA's schema (``analysis.report_edit``).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import zstandard

from analysis.report_edit import _rewrite
from ncuflow.read.layout import varint_bytes
from ncuflow.read.schema import messages

_LENGTH = struct.Struct("<I")
_SKIPPABLE_MAGIC = 0x184D2A50  # a zstd skippable frame (RFC 8878 3.1.2): decoders pass over it


def _block(results: int, payload: int) -> bytes:
    """A framed ``BlockHeader`` {NumResults, PayloadSize} (fields 2 and 5)."""
    header = b"\x10" + varint_bytes(results) + b"\x28" + varint_bytes(payload)
    return _LENGTH.pack(len(header)) + header


def with_empty_results(source: Path, target: Path, count: int) -> Path:
    """``source`` followed by one block declaring ``count`` zero-length results (4 bytes each)."""
    with target.open("wb") as out:
        out.write(source.read_bytes() + _block(count, 4 * count))
        out.truncate(out.tell() + 4 * count)  # each entry a 4-byte length of 0: sparse, no disk
    return target


def with_lying_block(source: Path, target: Path, count: int) -> Path:
    """``source`` followed by one block counting ``count`` results in a payload of two empty entries."""
    payload = _LENGTH.pack(0) * 2
    target.write_bytes(source.read_bytes() + _block(count, len(payload)) + payload)
    return target


def with_trailing_zeros(source: Path, target: Path, size: int) -> Path:
    """``source`` with ``size`` zero bytes after its last block (a copy padded, a disk image)."""
    with source.open("rb") as original, target.open("wb") as out:
        out.write(original.read())
        out.truncate(out.tell() + size)  # sparse: the zeros cost no disk
    return target


def compressed(source: Path, target: Path, *, padding: int = 0, cut: int | None = None) -> Path:
    """``source`` as a ``.ncu-repz`` (one zstd frame), ``padding`` bytes of skippable frame after it
    (its size inflates the file without adding content), or only its first ``cut`` bytes."""
    data = zstandard.ZstdCompressor(level=19).compress(source.read_bytes())
    if padding:
        data += _skippable(padding)
    target.write_bytes(data[:cut] if cut is not None else data)
    return target


def bomb(target: Path, content: bytes, expanded: int, padding: int = 0) -> Path:
    """A ``.ncu-repz`` whose frame expands to ``content`` and then zeros up to ``expanded`` bytes,
    ``padding`` bytes of skippable frame after it."""
    data = zstandard.ZstdCompressor(level=19).compress(content + bytes(expanded - len(content)))
    target.write_bytes(data + (_skippable(padding) if padding else b""))
    return target


def _skippable(size: int) -> bytes:
    return _LENGTH.pack(_SKIPPABLE_MAGIC) + _LENGTH.pack(size) + bytes(size)


def with_metric_values(source: Path, target: Path, value: float, kind: str = "double_value") -> int:
    """``source`` with every metric value of ``kind`` (``double_value``, ``uint64_value`` ...)
    set to ``value``; returns the launches rewritten."""
    metric_class = messages().metric_result

    def rewrite(result: Any, index: int, strings: list[str]) -> None:
        records = []
        for raw in result.metrics:
            record = metric_class.FromString(raw)
            if record.HasField("value") and record.value.WhichOneof("value") == kind:
                setattr(record.value, kind, type(getattr(record.value, kind))(value))
            records.append(record.SerializeToString())
        del result.metrics[:]
        result.metrics.extend(records)

    return _rewrite(source, target, rewrite)
