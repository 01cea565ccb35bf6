"""Real reports rewritten: each launch's kernel names replaced (escape sequences, Markdown,
50,000 characters, 2 MB: the fault suite), a metric's record replaced (a per-PC list made huge),
metrics dropped (a smaller collection of the same
launches: the tier-2 merge tests, and the benchmark's launches carrying fewer metrics), a length
field pointed past the file.

The file is rebuilt as ncu frames it (``ncuflow.read.reportformat``): the file header kept,
every block's entries re-serialised through NVIDIA's schema (``ncuflow.read.schema``: string
tables and a result's metric records as bytes, parsed here where an edit needs them), each
block's payload size written anew. Both readers read the result (ncuflow's and ``ncu_report``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ncuflow.read.layout import record_ids, text_of
from ncuflow.read.schema import messages

_LENGTH = struct.Struct("<I")


def _framed(message: bytes) -> bytes:
    return _LENGTH.pack(len(message)) + message


def _rewrite(source: Path, target: Path, edit: Callable[[Any, int, list[str]], None]) -> int:
    """``source`` rebuilt into ``target`` with ``edit(result, index, strings)`` applied to each
    parsed ProfileResult (``strings``: the string table so far); returns the results edited."""
    kinds = messages()
    data = source.read_bytes()
    out = bytearray(data[:4])
    (length,) = _LENGTH.unpack_from(data, 4)
    position = 8 + length
    out += data[4:position]
    index, strings = 0, []
    while position < len(data):
        (length,) = _LENGTH.unpack_from(data, position)
        header = kinds.block_header.FromString(data[position + 4:position + 4 + length])
        if header.string_table:  # the table's bytes, parsed as the reader parses them
            strings.extend(kinds.string_table.FromString(header.string_table).strings)
        start = position + 4 + length
        end = start + header.payload_size
        entries, cursor, number = [], start, 0
        while cursor < end:
            (size,) = _LENGTH.unpack_from(data, cursor)
            entry = data[cursor + 4:cursor + 4 + size]
            if header.num_sources <= number < header.num_sources + header.num_results:
                result = kinds.profile_result.FromString(entry)
                edit(result, index, strings)
                entry = bytes(result.SerializeToString())
                index += 1
            entries.append(_framed(entry))
            cursor += 4 + size
            number += 1
        payload = b"".join(entries)
        header.payload_size = len(payload)
        out += _framed(header.SerializeToString()) + payload
        position = end
    target.write_bytes(bytes(out))
    return index


def rename_kernels(source: Path, target: Path, name_for: Callable[[int, str], str], mangled: str | None = None) -> int:
    """Write ``source`` to ``target`` with launch ``i``'s kernel names (function, demangled and
    mangled) set to ``name_for(i, old function name)`` (the mangled one to ``mangled`` where
    given); returns the launches renamed."""

    def rename(result: Any, index: int, strings: list[str]) -> None:
        old = result.function_name if isinstance(result.function_name, str) else result.function_name.decode()
        new = name_for(index, old)
        for field in ("function_name", "demangled_name", "mangled_name"):
            current = getattr(result, field)
            value = mangled if field == "mangled_name" and mangled is not None else new
            if field == "function_name" or current:
                setattr(result, field, value if isinstance(current, str) else value.encode("utf-8", "surrogateescape"))

    return _rewrite(source, target, rename)


def drop_metrics(source: Path, target: Path, drop: Callable[[str], bool]) -> int:
    """Write ``source`` to ``target`` without the metrics whose name ``drop`` selects (what a
    smaller collection of the same launches on the same GPU would hold); returns the launches."""

    metric_class = messages().metric_result

    def keep_only(result: Any, index: int, strings: list[str]) -> None:
        # the schema keeps a result's metric records as bytes: their name ids as the reader finds them
        ids = record_ids(result.metrics, lambda record: metric_class.FromString(record).name_id)
        kept = [record for record, name_id in zip(result.metrics, ids, strict=True)
                if not (0 <= name_id < len(strings) and drop(text_of(strings[name_id])))]
        del result.metrics[:]
        result.metrics.extend(kept)

    return _rewrite(source, target, keep_only)


def metric_replaced(source: Path, target: Path, name: str, make: Callable[[int, bytes], bytes]) -> int:
    """Write ``source`` to ``target`` with each launch's record of metric ``name`` replaced by
    ``make(launch index, the record)`` (a per-PC list made huge: the source view's fault cases);
    returns the records replaced."""
    metric_class = messages().metric_result
    replaced = 0

    def replace(result: Any, index: int, strings: list[str]) -> None:
        nonlocal replaced
        ids = record_ids(result.metrics, lambda record: metric_class.FromString(record).name_id)
        records = list(result.metrics)
        for position, name_id in enumerate(ids):
            if 0 <= name_id < len(strings) and text_of(strings[name_id]) == name:
                records[position] = make(index, records[position])
                replaced += 1
        del result.metrics[:]
        result.metrics.extend(records)

    _rewrite(source, target, replace)
    return replaced


def entry_length_set(source: Path, target: Path, block: int, entry: int, length: int) -> int:
    """Write ``source`` to ``target`` with the length of entry ``entry`` of block ``block`` (from 0)
    set to ``length`` (a length field pointing past the file, what makes ``ncu_report`` abort);
    returns the byte where that length lies."""
    kinds = messages()
    data = bytearray(source.read_bytes())
    (header_length,) = _LENGTH.unpack_from(data, 4)
    position, number = 8 + header_length, 0
    while position < len(data):
        (length_here,) = _LENGTH.unpack_from(data, position)
        header = kinds.block_header.FromString(bytes(data[position + 4:position + 4 + length_here]))
        cursor = position + 4 + length_here
        if number == block:
            for _ in range(entry):
                (size,) = _LENGTH.unpack_from(data, cursor)
                cursor += 4 + size
            _LENGTH.pack_into(data, cursor, length)
            target.write_bytes(bytes(data))
            return cursor
        position = cursor + header.payload_size
        number += 1
    raise ValueError(f"{source} has no block {block}")


def metric_scaled(source: Path, target: Path, name: Callable[[str], bool], factor: float,
                  kernel: Callable[[int, str], bool]) -> int:
    """Write ``source`` to ``target`` with every metric whose name ``name`` selects multiplied by
    ``factor`` in the launches ``kernel(launch index, function name)`` selects (a kernel made to
    move 2 % more DRAM bytes: the gate's detection tests); whole numbers stay whole; returns the
    records scaled."""
    metric_class = messages().metric_result
    scaled = 0

    def scale(result: Any, index: int, strings: list[str]) -> None:
        nonlocal scaled
        function = result.function_name if isinstance(result.function_name, str) else result.function_name.decode()
        if not kernel(index, function):
            return
        ids = record_ids(result.metrics, lambda record: metric_class.FromString(record).name_id)
        records = list(result.metrics)
        for position, name_id in enumerate(ids):
            if not (0 <= name_id < len(strings) and name(text_of(strings[name_id]))):
                continue
            record = metric_class.FromString(records[position])
            kind = record.value.WhichOneof("value")
            if kind not in ("float_value", "double_value", "uint32_value", "uint64_value"):
                continue
            value = getattr(record.value, kind)
            # a count stays a whole number (ncu stores some as doubles; the reader checks they are whole)
            setattr(record.value, kind, round(value * factor) if float(value).is_integer() else value * factor)
            records[position] = bytes(record.SerializeToString())
            scaled += 1
        del result.metrics[:]
        result.metrics.extend(records)

    _rewrite(source, target, scale)
    return scaled
