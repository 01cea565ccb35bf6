"""The formats ``ncuflow phases`` reads, in the order detection asks them.

A server log's format is that of its first line any ``LineFormat`` claims; a JSON file's is
the first ``JsonFormat`` that claims its objects. ``--format NAME`` skips detection. A new
format is one module that defines its ``FORMAT`` and one entry here (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from ncuflow.phases.parse import bench, jsonl, sglang, vllm
from ncuflow.phases.parse.format import JsonFormat, LineFormat

LINE_FORMATS: tuple[LineFormat, ...] = (sglang.FORMAT, vllm.FORMAT)
JSON_FORMATS: tuple[JsonFormat, ...] = (bench.FORMAT, jsonl.FORMAT)


def _all() -> tuple[LineFormat | JsonFormat, ...]:
    return (*LINE_FORMATS, *JSON_FORMATS)


def format_names() -> tuple[str, ...]:
    return tuple(f.name for f in _all())


def format_named(name: str) -> LineFormat | JsonFormat | None:
    return next((f for f in _all() if f.name == name), None)


def described() -> str:
    """Every format in words, for messages."""
    parts = [f.describe for f in _all()]
    return ", ".join(parts[:-1]) + " or " + parts[-1]
