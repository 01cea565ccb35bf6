"""Engines whose logs ``ncuflow phases`` recognises but has no format for: one row each, with
the words only its log prints and what it logs instead of batch statistics. A file no format
claims is refused naming the engine found here (``recognised``), and pointing to how a
format is added (one module and one registry row: docs/ARCHITECTURE.md)."""

from __future__ import annotations

from dataclasses import dataclass

from ncuflow.files.safe_text import safe_text


@dataclass(frozen=True)
class KnownEngine:
    name: str
    markers: tuple[str, ...]  # substrings only its logs print (any one recognises it)
    logs: str  # what its log holds instead of per-batch statistics, in words


# TGI and llama.cpp's server, once here, have formats of their own (``parse/tgi.py``,
# ``parse/llamacpp.py``); an engine recognised without a format is one row here.
KNOWN_ENGINES: tuple[KnownEngine, ...] = ()


@dataclass(frozen=True)
class Recognised:
    engine: KnownEngine
    line: int
    text: str


def recognised(number: int, line: str) -> Recognised | None:
    """The known engine a line belongs to, if it is one of theirs."""
    for engine in KNOWN_ENGINES:
        if any(marker in line for marker in engine.markers):
            return Recognised(engine, number, line.strip()[:100])
    return None


def refusal_words(found: Recognised) -> tuple[str, str]:
    """(what, why) of the refusal of a file recognised as ``found``'s engine's log."""
    return (
        f"a {found.engine.name} log (line {found.line}: '{safe_text(found.text, limit=80)}'), "
        "an engine ncuflow phases has no format for",
        f"{found.engine.name} logs {found.engine.logs}, not the per-batch statistics lines of the "
        "formats ncuflow reads; a format is a plug-in: one module in ncuflow/phases/parse and one "
        "row in its registry (docs/ARCHITECTURE.md, 'A serving-log format').",
    )
