"""Read SGLang server logs: ``Prefill batch`` / ``Decode batch`` scheduler lines.

Handles ``[date time]``, ``[date time TP0]`` and ``[date time DPk TPk EPk]`` prefixes, with or
without fractional seconds, ``Decode batch.`` and ``Decode batch,`` punctuation, the
speculative (``accept len``) and hybrid-model (``#full token``) fields, retraction lines,
tracebacks, and the ``bench_serving`` command line and result block when the client output
is interleaved in the same file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from ncuflow.phases import TraceError
from ncuflow.phases.model.traces import BatchSample, BenchSummary, LogEvent, ServerTrace

TIMESTAMP = re.compile(
    r"^\[(?P<date>\d{4}-\d{2}-\d{2})[ T](?P<time>\d{2}:\d{2}:\d{2})(?:[.,](?P<frac>\d{1,6}))?"
    r"(?P<tags>(?:\s+[A-Z]+\d+)*)\s*\]"
)
STATS_LINE = re.compile(
    r"\b(?P<kind>Prefill|Decode) batch\b(?:\s*\[[^\]]*\])?[.,:]?\s*(?P<fields>.*)$"
)
FIELD = re.compile(
    r"(?P<key>#?[A-Za-z][A-Za-z0-9 _\-()/]*?)\s*:\s*(?P<value>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|True|False|nan|inf)%?"
)
RETRACTION = re.compile(r"Decode out of memory happened|Retract requests|#retracted_reqs")
BENCH_COMMAND = re.compile(r"(?:^|\s)(?:python3? -m )?sglang\.bench_serving\b")
RESULT_FIELD = re.compile(
    r"^(?P<key>[A-Za-z][A-Za-z0-9 ()/.\-]*?):\s+(?P<value>-?\d+(?:\.\d+)?)\s*$"
)


def looks_like_sglang(lines: Sequence[str]) -> bool:
    return any(STATS_LINE.search(line) and "#running-req" in line for line in lines)


def _rank_of(tags: str) -> str:
    parts = tags.split()
    dp = [p for p in parts if p.startswith("DP")]
    return dp[0] if dp else " ".join(parts)


def _number(value: str) -> float:
    if value in ("True", "False"):
        return 1.0 if value == "True" else 0.0
    return float(value)


def parse_fields(text: str) -> dict[str, float]:
    return {m.group("key").strip(): _number(m.group("value")) for m in FIELD.finditer(text)}


def _int_field(fields: dict[str, float], key: str) -> int | None:
    value = fields.get(key)
    return None if value is None else int(value)


def parse_sglang_log(
    path: Path, lines: Sequence[str], *, skip_malformed: bool = False
) -> tuple[ServerTrace, ...]:
    """One ``ServerTrace`` per scheduler (DP rank) found in the log."""
    origin: datetime | None = None
    any_fraction = False
    per_rank: dict[str, list[BatchSample]] = {}
    events: list[LogEvent] = []
    skipped: list[LogEvent] = []
    last_time: dict[str, tuple[float, int]] = {}
    last_any_time: float | None = None
    command_args: dict[str, str] = {}
    command_line = 0
    result: dict[str, float] = {}
    result_line = 0
    in_result = False
    traceback_line: int | None = None
    traceback_time: float | None = None

    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\n")
        stamp = TIMESTAMP.match(line)
        time_s: float | None = None
        tags = ""
        if stamp:
            moment = datetime.strptime(
                f"{stamp.group('date')} {stamp.group('time')}", "%Y-%m-%d %H:%M:%S"
            )
            frac = stamp.group("frac")
            if frac:
                any_fraction = True
            if origin is None:
                origin = moment
            time_s = (moment - origin).total_seconds() + (float("0." + frac) if frac else 0.0)
            tags = stamp.group("tags") or ""
            last_any_time = time_s

        if BENCH_COMMAND.search(line) and "--" in line:
            command_line = number
            tokens = line.split()
            for i, token in enumerate(tokens):
                if (
                    token.startswith("--")
                    and i + 1 < len(tokens)
                    and not tokens[i + 1].startswith("--")
                ):
                    command_args[token[2:]] = tokens[i + 1]
            continue
        if "Serving Benchmark Result" in line:
            in_result, result_line = True, number
            continue
        if in_result:
            field = RESULT_FIELD.match(line.strip())
            if field:
                result[field.group("key").strip()] = float(field.group("value"))
            elif line.startswith("=====") and result:
                in_result = False
            continue

        if "Traceback (most recent call last)" in line and traceback_line is None:
            traceback_line, traceback_time = number, last_any_time
            continue
        if traceback_line is not None and re.match(r"^[A-Za-z_.]+(Error|Exception)\b", line):
            after_shutdown = any(e.kind == "shutdown" for e in events)
            events.append(
                LogEvent(
                    traceback_time,
                    traceback_line,
                    "shutdown" if after_shutdown else "traceback",
                    f"an exception after the shutdown began ({line.strip()[:120]}): a shutdown, "
                    "not an aborted run"
                    if after_shutdown
                    else f"the server hit an exception and the run was aborted ({line.strip()[:120]})",
                )
            )
            traceback_line = -1  # reported once
            continue
        if "SIGTERM received" in line:
            events.append(
                LogEvent(time_s, number, "shutdown", "the server was shut down (SIGTERM)")
            )
            continue
        if RETRACTION.search(line):
            events.append(LogEvent(time_s, number, "retraction", line.strip()))
            continue

        stats = STATS_LINE.search(line)
        if not stats or "#" not in stats.group("fields"):
            continue  # prose mentioning a batch, not a scheduler statistics line
        problem = None
        fields = parse_fields(stats.group("fields"))
        running = _int_field(fields, "#running-req")
        if time_s is None:
            problem = "has no timestamp in square brackets at the start of the line"
        elif running is None:
            problem = "has no readable '#running-req: N' field"
        elif stats.group("kind") == "Prefill" and "#new-seq" not in fields:
            problem = "is a Prefill line without a readable '#new-seq: N' field"
        if problem is not None:
            if skip_malformed:
                skipped.append(LogEvent(time_s, number, "malformed", line.strip()[:100]))
                continue
            raise TraceError(
                f"{path}:{number}: this SGLang scheduler line {problem}: {line.strip()[:160]!r}.",
                "ncuflow phases needs the time and the batch size of every Prefill/Decode batch line.",
                "Use the server's own log as written (SGLang prints '[YYYY-MM-DD HH:MM:SS] Decode "
                "batch, #running-req: …'), or pass --skip-malformed to leave such lines out.",
            )
        assert time_s is not None and running is not None
        rank = _rank_of(tags)
        previous = last_time.get(rank)
        if previous is not None and time_s < previous[0] - 1.0:
            raise TraceError(
                f"{path}:{number}: time goes back from line {previous[1]} to this line "
                f"({time_s - previous[0]:+.0f} s) for the same scheduler{' ' + rank if rank else ''}.",
                "The file holds interleaved or concatenated runs from different server processes or "
                "restarts, whose lines cannot be put on one timeline.",
                "Split the file into one log per server run (e.g. at the restart) and pass each file.",
            )
        last_time[rank] = (time_s, number)
        kind = "prefill" if stats.group("kind") == "Prefill" else "decode"
        per_rank.setdefault(rank, []).append(
            BatchSample(
                time_s=time_s,
                kind=kind,
                running=running,
                line=number,
                queued=_int_field(fields, "#queue-req"),
                new_seqs=_int_field(fields, "#new-seq"),
                new_tokens=_int_field(fields, "#new-token"),
                gen_throughput=fields.get("gen throughput (token/s)"),
                accept_len=fields.get("accept len"),
                pending_tokens=_int_field(fields, "#pending-token"),
                incoming=_incoming(fields),
            )
        )

    if not per_rank:
        raise TraceError(
            f"{path}: no SGLang 'Prefill batch' or 'Decode batch' lines with a timestamp.",
            "Without scheduler statistics lines there is nothing to split into phases.",
            "Pass the SGLang server log (not the client output), with default logging enabled.",
        )
    bench = _bench_summary(command_args, command_line, result, result_line)
    resolution = 0.001 if any_fraction else 1.0
    clock = origin.strftime("%Y-%m-%d %H:%M:%S") if origin else ""
    multi = len(per_rank) > 1
    if skipped:
        events.append(
            LogEvent(
                None,
                skipped[0].line,
                "malformed",
                f"{len(skipped)} malformed scheduler line(s) left out (first at line {skipped[0].line})",
            )
        )
    return tuple(
        ServerTrace(
            path=str(path),
            engine="sglang",
            rank=(rank or None) if multi else None,
            clock_origin=clock,
            samples=tuple(samples),
            events=tuple(events),
            time_resolution_s=resolution,
            bench=bench,
        )
        for rank, samples in sorted(per_rank.items(), key=lambda kv: _rank_sort_key(kv[0]))
    )


def _incoming(fields: dict[str, float]) -> int | None:
    """Requests a PD decode node has pre-allocated or is receiving KV for (not yet running)."""
    keys = [k for k in ("#prealloc-req", "#transfer-req") if k in fields]
    return int(sum(fields[k] for k in keys)) if keys else None


def _rank_sort_key(rank: str) -> tuple[int, str]:
    digits = re.search(r"\d+", rank)
    return (int(digits.group()) if digits else -1, rank)


def _bench_summary(
    args: dict[str, str], command_line: int, result: dict[str, float], result_line: int
) -> BenchSummary | None:
    if not args and not result:
        return None
    tokens: int | None = None
    source = ""
    dataset = args.get("dataset-name", "")
    if "random-output-len" in args and dataset in ("random", "random-ids", ""):
        ratio = float(args.get("random-range-ratio", "0.0"))
        if ratio >= 1.0:
            tokens = int(args["random-output-len"])
            source = f"bench_serving --random-output-len {tokens} --random-range-ratio 1 (line {command_line})"
    if (
        tokens is None
        and result.get("Successful requests")
        and result.get("Total generated tokens")
    ):
        tokens = round(result["Total generated tokens"] / result["Successful requests"])
        source = f"mean generated tokens per request in the bench result block (line {result_line})"
    concurrency = result.get("Max request concurrency")
    if concurrency is None and args.get("max-concurrency", "").isdigit():
        concurrency = float(args["max-concurrency"])
    completed = result.get("Successful requests")
    return BenchSummary(
        line=result_line or command_line,
        output_tokens=tokens,
        output_tokens_source=source,
        mean_tpot_ms=result.get("Mean TPOT (ms)"),
        median_tpot_ms=result.get("Median TPOT (ms)"),
        mean_ttft_ms=result.get("Mean TTFT (ms)"),
        median_ttft_ms=result.get("Median TTFT (ms)"),
        median_itl_ms=result.get("Median ITL (ms)"),
        max_concurrency=int(concurrency) if concurrency is not None else None,
        completed_requests=int(completed) if completed is not None else None,
    )
