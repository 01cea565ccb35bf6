"""ncuflow's own outputs, recognised by what it wrote into them, never by a name or a format.

An output replaces only an earlier output of the same kind (``files.guard_output``); this is
how each kind is known: a parquet table by its ``ncuflow.table`` footer metadata, a text file
(Markdown, a recorder's trace) by how ncuflow begins it, a PNG by its ``ncuflow.plot`` text
chunk (``plot_metadata``: every plot carries ``Software: ncuflow <version>`` and
``ncuflow.plot: <what it plots>``). A Matplotlib PNG of the user's, or a file that merely
holds the word, is someone else's. Plain standard library.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

REPORT_SIGNATURE = b"NVR\x00"  # how every report ncu writes begins (read.reportfile.REPORT_MAGIC)
PARQUET_MAGIC = b"PAR1"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def head_bytes(path: Path, size: int = 64) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(size)


def _tail(path: Path, size: int = 65536) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        end = handle.tell()
        handle.seek(max(0, end - size))
        return handle.read()


def parquet_table_recogniser(*tables: str) -> Callable[[Path], bool]:
    """True for a parquet file ncuflow wrote as one of ``tables`` (from its footer metadata)."""

    def recognise(path: Path) -> bool:
        if head_bytes(path, 4) != PARQUET_MAGIC:
            return False
        footer = _tail(path)
        if not footer.endswith(PARQUET_MAGIC) or b"ncuflow.table" not in footer:
            return False
        return any(table.encode() in footer for table in tables)

    return recognise


def text_recogniser(*first_lines: str) -> Callable[[Path], bool]:
    """True for a text file whose first line starts with one of ``first_lines``."""

    def recognise(path: Path) -> bool:
        head = head_bytes(path, 256)
        return any(head.startswith(line.encode()) for line in first_lines)

    return recognise


PLOT_KEY = "ncuflow.plot"  # the PNG text chunk every plot of ncuflow carries (what it plots)
LEGACY_PLOT_SOFTWARE = "ncuflow (Matplotlib)"  # the Software chunk of ncuflow's plots before PLOT_KEY


def plot_metadata(kind: str) -> dict[str, str]:
    """The PNG text chunks of an ncuflow plot: ``Software: ncuflow <version>`` and ``ncuflow.plot: <kind>``."""
    from ncuflow import __version__

    return {"Software": f"ncuflow {__version__}", PLOT_KEY: kind}


def png_text(path: Path, limit: int = 1 << 16) -> dict[str, str]:
    """The ``tEXt`` chunks of a PNG before its image data (within its first ``limit`` bytes)."""
    head = head_bytes(path, limit)
    if not head.startswith(PNG_MAGIC):
        return {}
    found: dict[str, str] = {}
    at = len(PNG_MAGIC)
    while at + 8 <= len(head):
        length, kind = int.from_bytes(head[at:at + 4], "big"), head[at + 4:at + 8]
        if kind in (b"IDAT", b"IEND") or at + 8 + length > len(head):
            break
        if kind == b"tEXt":
            key, _, value = head[at + 8:at + 8 + length].partition(b"\0")
            found[key.decode("latin-1")] = value.decode("latin-1")
        at += 12 + length  # length, type, data, CRC
    return found


def png_recogniser(path: Path) -> bool:
    """True for a PNG ncuflow wrote (its ``ncuflow.plot`` text chunk, or the Software chunk its
    plots carried before); a PNG of Matplotlib, or of anything else, is someone else's."""
    text = png_text(path)
    return PLOT_KEY in text or text.get("Software") == LEGACY_PLOT_SOFTWARE


def describe(path: Path) -> str:
    """What ``path`` holds, in words, for a refusal."""
    try:
        head = head_bytes(path, 80)
    except OSError:
        return "a file ncuflow cannot read"
    if head.startswith(b"# ncuflow "):
        first_line = head.splitlines()[0][:40].decode(errors="replace")
        return f"ncuflow Markdown of another kind ({first_line!r})"
    if head.startswith(REPORT_SIGNATURE):
        return "an Nsight Compute report"
    if head.startswith(PARQUET_MAGIC):
        return "a parquet file of another kind"
    if head.startswith(PNG_MAGIC):
        return "a PNG image ncuflow did not write"
    return "a file ncuflow did not write"
