"""Real reports with hostile kernel names, for the fault suite: a report of the corpus rewritten
with each launch's names replaced (escape sequences, Markdown, 50,000 characters, 2 MB).

The file is rebuilt as ncu frames it (``ncuflow.read.reportformat``): the file header kept,
every block's entries re-serialised through NVIDIA's schema (``ncuflow.read.schema``), each
block's payload size written anew. Both readers read the result (ncuflow's and ``ncu_report``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

from ncuflow.read.schema import messages

_LENGTH = struct.Struct("<I")


def _framed(message: bytes) -> bytes:
    return _LENGTH.pack(len(message)) + message


def _renamed(entry: bytes, result_class: object, index: int, name_for: Callable[[int, str], str]) -> bytes:
    result = result_class.FromString(entry)  # type: ignore[attr-defined]
    old = result.function_name if isinstance(result.function_name, str) else result.function_name.decode()
    new = name_for(index, old)
    for field in ("function_name", "demangled_name", "mangled_name"):
        current = getattr(result, field)
        if field == "function_name" or current:
            setattr(result, field, new if isinstance(current, str) else new.encode("utf-8", "surrogateescape"))
    return bytes(result.SerializeToString())


def rename_kernels(source: Path, target: Path, name_for: Callable[[int, str], str]) -> int:
    """Write ``source`` to ``target`` with launch ``i``'s kernel names (function, demangled and
    mangled) set to ``name_for(i, old function name)``; returns the launches renamed."""
    kinds = messages()
    data = source.read_bytes()
    out = bytearray(data[:4])
    (length,) = _LENGTH.unpack_from(data, 4)
    position = 8 + length
    out += data[4:position]
    index = 0
    while position < len(data):
        (length,) = _LENGTH.unpack_from(data, position)
        header = kinds.block_header.FromString(data[position + 4:position + 4 + length])
        start = position + 4 + length
        end = start + header.payload_size
        entries, cursor, number = [], start, 0
        while cursor < end:
            (size,) = _LENGTH.unpack_from(data, cursor)
            entry = data[cursor + 4:cursor + 4 + size]
            if header.num_sources <= number < header.num_sources + header.num_results:
                entry = _renamed(entry, kinds.profile_result, index, name_for)
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
