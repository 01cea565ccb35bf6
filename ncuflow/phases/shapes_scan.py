"""What a server log says about the shapes it served beyond the scheduler lines ``phases`` reads.

One bounded pass over the file (the same line numbers ``phases`` prints): the KV tokens on each
Decode line (SGLang ``#token``, hybrid models ``#full token``), whether the line ran under a
CUDA graph (``cuda graph: True``), and the server's own settings where it prints them (its
``ServerArgs(...)`` / ``server_args=`` line, vLLM's ``with config:`` / ``non-default args``
lines, a launch command line). A setting is read only from such a line, so a traceback's
source line (``page_size = self.page_size``) is never taken for one. The first statement of a
setting wins. Every pattern is linear (no nested quantifiers) and every value bounded.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ncuflow.phases.detect import open_trace
from ncuflow.phases.parse.lines import numbered_lines
from ncuflow.serving import SETTINGS, ServingShape

KV_TOKENS = re.compile(r"(?:^|,)\s*#(?:full )?token:\s*(\d{1,15})\b")
CUDA_GRAPH = re.compile(r"\b(?:cuda|cpu|npu) graph:\s*(True|False)\b")
# the lines a server states its settings on
SETTINGS_CONTEXT = ("ServerArgs(", "server_args=", "with config:", "non-default args",
                    "launch_server", "vllm serve", "api_server", "Command:")
# a quoted string, a list or a dict whole (never cut: an unclosed one states nothing), or a bare word
VALUE = r"('[^']{0,200}'|\"[^\"]{0,200}\"|\[[^\]]{0,4000}\]|\{[^}]{0,4000}\}|[^,\s)}\[{'\"][^,\s)}]{0,199})"
CLIENT_DURATION = re.compile(r"^Benchmark duration \(s\):\s*([0-9]{1,9}(?:\.[0-9]{1,9})?)\s*$")
KV_CAPACITY = re.compile(r"\bGPU KV cache size:\s*([0-9][0-9,]{0,20})\s*tokens\b")  # vLLM, at start-up
BACKEND_LINE = re.compile(r"\bUsing ([A-Za-z0-9_]{1,40}) backend\b")


def _setting_patterns(key: str) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """(the text it needs, pattern): ``key=value``, ``'key': value`` and ``--key value`` / ``--key=value``."""
    flag = "--" + key.replace("_", "-")
    return (
        (key, re.compile(rf"(?<![\w-])['\"]?{key}['\"]?\s*[=:]\s*{VALUE}")),
        (flag, re.compile(rf"(?<![\w-]){re.escape(flag)}(?:=|\s+)([^\s]{{1,200}})")),
    )


PATTERNS: tuple[tuple[ServingShape, str, re.Pattern[str]], ...] = tuple(
    (row.shape, needle, pattern) for row in SETTINGS for key in row.keys for needle, pattern in _setting_patterns(key)
)


@dataclass(frozen=True)
class StatedValue:
    """A setting as the log states it, with the line that says so."""

    value: str
    line: int


@dataclass
class LogShapeLines:
    """What one pass over the log found, by line number."""

    kv_tokens: dict[int, int] = field(default_factory=dict)  # Decode line -> KV tokens in use
    cuda_graph: dict[int, bool] = field(default_factory=dict)  # Decode line -> ran under a graph
    settings: dict[ServingShape, StatedValue] = field(default_factory=dict)
    client_duration: StatedValue | None = None  # bench_serving's "Benchmark duration (s)" (the first)
    kv_capacity: StatedValue | None = None  # vLLM's "GPU KV cache size: N tokens" (the first)


def scan_log(path: Path, decode_lines: Container[int] | None = None) -> LogShapeLines:
    """The shape fields and stated settings of a server log (I/O: opens and reads the file).
    Only the Decode lines in ``decode_lines`` are kept (those the parser kept: a very long
    log's folded lines are not), so memory stays bounded by what the analysis holds."""
    with open_trace(path) as handle:
        return scan_lines(numbered_lines(handle), decode_lines)


def scan_lines(lines: Iterable[tuple[int, str]], decode_lines: Container[int] | None = None) -> LogShapeLines:
    found = LogShapeLines()
    for number, text in lines:
        if "Decode batch" in text:
            if decode_lines is None or number in decode_lines:
                _decode_fields(found, number, text)
        elif any(context in text for context in SETTINGS_CONTEXT):
            _settings(found, number, text)
        elif found.client_duration is None and (match := CLIENT_DURATION.match(text)):
            found.client_duration = StatedValue(match.group(1), number)
        elif found.kv_capacity is None and "KV cache size" in text and (match := KV_CAPACITY.search(text)):
            found.kv_capacity = StatedValue(match.group(1).replace(",", ""), number)
        elif ServingShape.ATTENTION_BACKEND not in found.settings and (match := BACKEND_LINE.search(text)):
            found.settings[ServingShape.ATTENTION_BACKEND] = StatedValue(match.group(1), number)
    return found


def _decode_fields(found: LogShapeLines, number: int, text: str) -> None:
    if match := KV_TOKENS.search(text):
        found.kv_tokens[number] = int(match.group(1))
    if match := CUDA_GRAPH.search(text):
        found.cuda_graph[number] = match.group(1) == "True"


def _settings(found: LogShapeLines, number: int, text: str) -> None:
    for shape, needle, pattern in PATTERNS:
        if shape in found.settings or needle not in text:
            continue
        if (match := pattern.search(text)) and (value := match.group(1).strip("'\"")).isprintable() and value:
            found.settings[shape] = StatedValue(value, number)  # a value with control characters states nothing
