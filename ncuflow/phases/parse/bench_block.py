"""The bench_serving command line and result block, when the client's output is interleaved
in an SGLang server log: the output length per request, the stated max concurrency and the
reported TPOT/ITL the phases are reconciled with. Options that are not numbers are ignored
(the command line is text, not data); result values are checked by the reader."""

from __future__ import annotations

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
