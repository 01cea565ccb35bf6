"""The formats ``ncuflow phases`` reads, in the order detection asks them.

A server log's format is that of its first line any ``LineFormat`` claims; a JSON file's is
the first ``JsonFormat`` that claims its objects. ``--format NAME`` skips detection. A new
format is one module that defines its ``FORMAT`` and one entry here (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from ncuflow.phases.parse import bench, jsonl, llamacpp, sglang, tgi, vllm
from ncuflow.phases.parse.format import FormatOption, JsonFormat, LineFormat

LINE_FORMATS: tuple[LineFormat, ...] = (sglang.FORMAT, vllm.FORMAT, tgi.FORMAT, llamacpp.FORMAT)
JSON_FORMATS: tuple[JsonFormat, ...] = (bench.FORMAT, jsonl.FORMAT)


def _all() -> tuple[LineFormat | JsonFormat, ...]:
    return (*LINE_FORMATS, *JSON_FORMATS)


def format_names() -> tuple[str, ...]:
    return tuple(f.name for f in _all())


def format_named(name: str) -> LineFormat | JsonFormat | None:
    return next((f for f in _all() if f.name == name), None)


def format_options() -> tuple[tuple[LineFormat, FormatOption], ...]:
    """Every format's server settings (``FormatOption`` rows), with the format that needs each:
    ``phases`` offers one option per row."""
    return tuple((f, option) for f in LINE_FORMATS for option in f.options)


def help_rows(formats: tuple[LineFormat | JsonFormat, ...] | None = None) -> str:
    """The formats' rows of ``phases --help``: each format's title and its own help text
    (the list is the registry's, never written out by hand)."""
    width = 20
    rows = []
    for found in formats if formats is not None else _all():
        lines = found.help.split("\n")
        if len(found.title) > width:  # the title on a line of its own
            rows.append(f"  {found.title}")
        else:
            rows.append(f"  {found.title:<{width}}  {lines.pop(0)}")
        rows.extend(f"  {'':<{width}}  {more}" for more in lines)
    return "\n".join(rows)


def described() -> str:
    """Every format in words, for messages."""
    parts = [f.describe for f in _all()]
    return ", ".join(parts[:-1]) + " or " + parts[-1]
