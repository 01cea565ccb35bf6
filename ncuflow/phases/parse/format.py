"""What a log format is to ncuflow: a module that claims a file, reads it and states what its
lines can say. ``registry`` lists them; ``ncuflow.phases.detect`` asks each in turn.

Two kinds:

- ``LineFormat``: a server log, read as a stream (a log of batch statistics gives
  ``ServerTrace``s; a log of one line per request, its requests as ``RequestTrace``s). ``claims(line)`` is true for a line only
  this format prints (its first statistics line decides the file); ``reader(path,
  skip_malformed)`` makes a ``LineReader`` that is fed every line (``context`` before the
  format is known, ``feed`` after) and returns one ``ServerTrace`` per scheduler; the
  ``Capabilities`` it states are what the model reads.
- ``JsonFormat``: a file whose first non-blank line is JSON, read whole. ``claims(objects)``
  looks at the parsed objects; ``read(path, lines, objects)`` returns the traces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.model.traces import RequestTrace, ServerTrace


class LineReader(Protocol):
    """The line-by-line state of one server log."""

    def context(self, number: int, line: str) -> None:
        """A line read before the file's format is known (the lines around the first
        statistics line: banners, the bench_serving command, events)."""

    def feed(self, number: int, line: str) -> None:
        """A line of a file known to be in this format."""

    def traces(self) -> tuple[ServerTrace | RequestTrace, ...]:
        """One trace per scheduler (a per-request format: one ``RequestTrace`` per run);
        raises ``TraceError`` when the file held none."""


@dataclass(frozen=True)
class LineFormat:
    name: str  # what --format takes
    capabilities: Capabilities
    claims: Callable[[str], bool]
    reader: Callable[[Path, bool], LineReader]
    describe: str  # the lines that make a file this format, for error messages
    help: str  # its row of ``phases --help``: what its lines look like (lines joined by "\n")

    @property
    def title(self) -> str:
        return self.capabilities.title


JsonObjects = Sequence[tuple[int, Any]]  # (line number, parsed object)


@dataclass(frozen=True)
class JsonFormat:
    name: str
    title: str
    claims: Callable[[JsonObjects], bool]
    read: Callable[[Path, list[str], JsonObjects], tuple[RequestTrace, ...]]
    describe: str
    help: str  # its row of ``phases --help``
