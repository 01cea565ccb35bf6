"""What a log format is to ncuflow: a module that claims a file, reads it and states what its
lines can say. ``registry`` lists them; ``ncuflow.phases.detect`` asks each in turn.

Two kinds:

- ``LineFormat``: a server log, read as a stream (a log of batch statistics gives
  ``ServerTrace``s; a log of one line per request, its requests as ``RequestTrace``s). ``claims(line)`` is true for a line only
  this format prints (its first statistics line decides the file); ``reader(path,
  reading)`` makes a ``LineReader`` that is fed every line (``context`` before the
  format is known, ``feed`` after) and returns one ``ServerTrace`` per scheduler; the
  ``Capabilities`` it states are what the model reads. Its ``options`` are the server
  settings it needs that a log may not state (one ``FormatOption`` row each): ``phases``
  offers one option per row, and the reader resolves each into a ``ServerSetting``.
- ``JsonFormat``: a file whose first non-blank line is JSON, read whole. ``claims(objects)``
  looks at the parsed objects; ``read(path, lines, objects)`` returns the traces.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.model.settings import ServerSetting, SettingSource, option_flag
from ncuflow.phases.model.traces import RequestTrace, ServerTrace
from ncuflow.phases.parse.values import MAX_COUNT


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
class FormatOption:
    """A server setting a format's model needs and its log may not state: one row, from
    which the ``phases`` option (``--`` + the name with dashes), its help and the value
    used derive."""

    name: str  # the server's own argument name, e.g. "decode_log_interval"
    default: int  # the server's default
    minimum: int
    help: str  # what it is, for the option's help
    stated_in: str  # the marker of the log line that states ``name=value`` (e.g. "ServerArgs(")
    maximum: int = MAX_COUNT  # a value past it is no setting a server runs with (option and log alike)

    @property
    def flag(self) -> str:
        return option_flag(self.name)


@dataclass(frozen=True)
class LogReading:
    """How to read logs: the user's choices, parsed once where they enter (the CLI or API)."""

    skip_malformed: bool = False  # leave out unreadable statistics lines, counted
    format_name: str | None = None  # read every input as this format (no detection)
    # server settings given by option name (``FormatOption.name``); the log's own statement wins
    given: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


class StatedSettings:
    """The values a log states for a format's options (first statement of each), read from
    the lines that carry the option's marker; a bounded scan of one line each."""

    def __init__(self, options: Sequence[FormatOption]) -> None:
        self._options = tuple(options)
        self._patterns = {o.name: re.compile(rf"\b{re.escape(o.name)}=(\d{{1,9}})\b") for o in options}
        self._found: dict[str, tuple[int, int]] = {}  # name → (value, line)

    def read(self, number: int, line: str) -> None:
        for option in self._options:
            if option.name in self._found or option.stated_in not in line:
                continue
            match = self._patterns[option.name].search(line)
            if match and option.minimum <= int(match.group(1)) <= option.maximum:
                self._found[option.name] = (int(match.group(1)), number)

    def resolved(self, option: FormatOption, reading: LogReading) -> ServerSetting:
        """The value used: the log's statement, else the option's, else the default."""
        given = reading.given.get(option.name)
        if option.name in self._found:
            value, line = self._found[option.name]
            return ServerSetting(option.name, value, SettingSource.LOG, line, given)
        if given is not None:
            return ServerSetting(option.name, given, SettingSource.OPTION)
        return ServerSetting(option.name, option.default, SettingSource.DEFAULT)


@dataclass(frozen=True)
class LineFormat:
    name: str  # what --format takes
    capabilities: Capabilities
    claims: Callable[[str], bool]
    reader: Callable[[Path, LogReading], LineReader]
    describe: str  # the lines that make a file this format, for error messages
    help: str  # its row of ``phases --help``: what its lines look like (lines joined by "\n")
    options: tuple[FormatOption, ...] = ()  # server settings the model needs (see ``FormatOption``)

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
