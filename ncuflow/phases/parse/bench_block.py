"""The bench_serving command line and result block, when the client's output is interleaved
in an SGLang server log: the output length per request, the stated max concurrency and the
reported TPOT/ITL the phases are reconciled with. Options that are not numbers are ignored
(the command line is text, not data); result values are checked by the reader."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ncuflow.phases.model.traces import BenchSummary
from ncuflow.phases.parse.values import MAX_COUNT, BadValue, count_value, rate_value


def _option(args: dict[str, str], key: str, read: type) -> float | None:
    """A bench_serving option as a number, or None where it is absent or not one."""
    try:
        return (count_value if read is int else rate_value)(key, args[key]) if key in args else None
    except BadValue:
        return None


def bench_summary(
    args: dict[str, str], command_line: int, result: dict[str, float], result_line: int
) -> BenchSummary | None:
    if not args and not result:
        return None
    tokens: int | None = None
    source = ""
    dataset = args.get("dataset-name", "")
    output_len = _option(args, "random-output-len", int)
    if output_len is not None and dataset in ("random", "random-ids", ""):
        ratio = _option(args, "random-range-ratio", float)
        if ratio is not None and ratio >= 1.0:
            tokens = int(output_len)
            source = f"bench_serving --random-output-len {tokens} --random-range-ratio 1 (line {command_line})"
    completed_value = result.get("Successful requests")
    generated = result.get("Total generated tokens")
    if tokens is None and completed_value and generated and 0 < generated <= MAX_COUNT * 1000:
        tokens = round(generated / completed_value)
        source = f"mean generated tokens per request in the bench result block (line {result_line})"
    concurrency = result.get("Max request concurrency")
    if concurrency is None:
        concurrency = _option(args, "max-concurrency", int)
    return BenchSummary(
        line=result_line or command_line,
        output_tokens=tokens,
        output_tokens_source=source,
        mean_tpot_ms=result.get("Mean TPOT (ms)"),
        median_tpot_ms=result.get("Median TPOT (ms)"),
        mean_ttft_ms=result.get("Mean TTFT (ms)"),
        median_ttft_ms=result.get("Median TTFT (ms)"),
        median_itl_ms=result.get("Median ITL (ms)"),
        max_concurrency=_bounded_count(concurrency),
        completed_requests=_bounded_count(completed_value),
    )


def _bounded_count(value: float | None) -> int | None:
    if value is None or value < 0 or value > MAX_COUNT:
        return None
    return int(value)


BENCH_COMMAND = re.compile(r"(?:^|\s)(?:python3? -m )?sglang\.bench_serving\b")
RESULT_FIELD = re.compile(
    r"^(?P<key>[A-Za-z][A-Za-z0-9 ()/.\-]*?):\s+(?P<value>-?\d+(?:\.\d+)?)\s*$"
)


@dataclass
class BenchBlockReader:
    """The bench_serving command line and result block as they are read, line by line.
    ``read`` returns whether the line belonged to them; ``out_of_range`` is told of a result
    value that cannot be data (the log's reader decides what that means)."""

    out_of_range: Callable[[int, str, str], None]
    command_args: dict[str, str] = field(default_factory=dict)
    command_line: int = 0
    result: dict[str, float] = field(default_factory=dict)
    result_line: int = 0
    in_result: bool = False

    def read(self, number: int, line: str) -> bool:
        if "bench_serving" in line and "--" in line and BENCH_COMMAND.search(line):
            self.command_line = number
            tokens = line.split()
            for i, token in enumerate(tokens):
                if token.startswith("--") and i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                    self.command_args[token[2:]] = tokens[i + 1]
            return True
        if "Serving Benchmark Result" in line:
            self.in_result, self.result_line = True, number
            return True
        if self.in_result:
            found = RESULT_FIELD.match(line.strip())
            if found:
                value = float(found.group("value"))
                if abs(value) > 1e12:
                    self.out_of_range(number, line, f"has a value out of range ({found.group('value')[:30]})")
                else:
                    self.result[found.group("key").strip()] = value
            elif line.startswith("=====") and self.result:
                self.in_result = False
            return True
        return False

    def summary(self) -> BenchSummary | None:
        return bench_summary(self.command_args, self.command_line, self.result, self.result_line)
