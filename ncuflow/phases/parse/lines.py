"""Numbered text lines of a file, read in bounded memory.

A line is what ends with ``\\n``, as editors, ``grep -n`` and ``sed -n`` count them: a bare
carriage return (tqdm progress bars, banners) does not start a new line, so the line numbers
ncuflow prints are the ones a user finds. Within a line, a carriage return means "the text
after it was written over the text before it"; the segment that carries a timestamp (else the
last non-empty one) is the line's text. A line longer than ``MAX_LINE_BYTES`` is cut there
(no scheduler statistics line comes near it) and the rest is skipped in bounded reads, so a
file with a 300-MB line, or one without any newline, is read in bounded memory and time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

MAX_LINE_BYTES = 1 << 16
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """A line without its ANSI colour codes (vLLM's coloured prefix, TGI's tracing colours)."""
    return ANSI.sub("", text) if "\x1b" in text else text


@dataclass
class LineCounts:
    """What reading the lines found: lines cut at ``MAX_LINE_BYTES`` (how many, the first)."""

    cut: int = 0
    first_cut: int = 0
    lines: int = 0


def _visible(text: str) -> str:
    """The segment of a line with carriage returns that a terminal would show last, or the
    one that carries a timestamp."""
    segments = [s for s in text.split("\r") if s.strip()]
    if not segments:
        return ""
    stamped = [s for s in segments if s.lstrip().startswith(("[20", "(APIServer", "INFO", "(Engine"))]
    return (stamped or segments)[-1]


def numbered_lines(handle: BinaryIO, counts: LineCounts | None = None) -> Iterator[tuple[int, str]]:
    """(line number from 1, text without its line ending) for every line of ``handle``."""
    counts = counts if counts is not None else LineCounts()
    number = 0
    while True:
        chunk = handle.readline(MAX_LINE_BYTES)
        if not chunk:
            return
        number += 1
        counts.lines = number
        if not chunk.endswith(b"\n") and len(chunk) >= MAX_LINE_BYTES:
            counts.cut += 1
            counts.first_cut = counts.first_cut or number
            while True:  # skip the rest of the line without holding it
                rest = handle.readline(MAX_LINE_BYTES)
                if not rest or rest.endswith(b"\n"):
                    break
        text = chunk.decode("utf-8", "replace").rstrip("\n")
        if text.endswith("\r"):
            text = text[:-1]
        if "\r" in text:
            text = _visible(text)
        yield number, text
