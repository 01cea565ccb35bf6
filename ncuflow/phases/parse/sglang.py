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
from dataclasses import dataclass, field, replace
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
    reader = _Reader(path, skip_malformed)
    for number, raw in enumerate(lines, start=1):
        reader.read(number, raw.rstrip("\n"))
    return reader.traces()


@dataclass
class _Reader:
    """Line-by-line state of one SGLang log (private to this parser)."""

    path: Path
    skip_malformed: bool
    origin: datetime | None = None
    any_fraction: bool = False
    per_rank: dict[str, list[BatchSample]] = field(default_factory=dict)
    events: list[LogEvent] = field(default_factory=list)
    skipped: list[LogEvent] = field(default_factory=list)
    last_time: dict[str, tuple[float, int]] = field(default_factory=dict)
    last_any_time: float | None = None
    command_args: dict[str, str] = field(default_factory=dict)
    command_line: int = 0
    result: dict[str, float] = field(default_factory=dict)
    result_line: int = 0
    in_result: bool = False
    traceback_line: int | None = None
    traceback_time: float | None = None

    def read(self, number: int, line: str) -> None:
        time_s, tags = self._clock(line)
        if self._bench(number, line) or self._event(number, line, time_s):
            return
        stats = STATS_LINE.search(line)
        if stats and "#" in stats.group("fields"):  # else prose mentioning a batch
            self._stats(number, line, stats, time_s, tags)

    def _clock(self, line: str) -> tuple[float | None, str]:
        stamp = TIMESTAMP.match(line)
        if not stamp:
            return None, ""
        moment = datetime.strptime(
            f"{stamp.group('date')} {stamp.group('time')}", "%Y-%m-%d %H:%M:%S"
        )
        frac = stamp.group("frac")
        self.any_fraction = self.any_fraction or bool(frac)
        if self.origin is None:
            self.origin = moment
        time_s = (moment - self.origin).total_seconds() + (float("0." + frac) if frac else 0.0)
        self.last_any_time = time_s
        return time_s, stamp.group("tags") or ""

    def _bench(self, number: int, line: str) -> bool:
        """The bench_serving command line and result block, when interleaved in the log."""
        if BENCH_COMMAND.search(line) and "--" in line:
            self.command_line = number
            tokens = line.split()
            for i, token in enumerate(tokens):
                if (
                    token.startswith("--")
                    and i + 1 < len(tokens)
                    and not tokens[i + 1].startswith("--")
                ):
                    self.command_args[token[2:]] = tokens[i + 1]
            return True
        if "Serving Benchmark Result" in line:
            self.in_result, self.result_line = True, number
            return True
        if self.in_result:
            found = RESULT_FIELD.match(line.strip())
            if found:
                self.result[found.group("key").strip()] = float(found.group("value"))
            elif line.startswith("=====") and self.result:
                self.in_result = False
            return True
        return False

    def _event(self, number: int, line: str, time_s: float | None) -> bool:
        """Tracebacks (a shutdown's own exception is not an abort), SIGTERM, retractions."""
        if "Traceback (most recent call last)" in line and self.traceback_line is None:
            self.traceback_line, self.traceback_time = number, self.last_any_time
            return True
        if self.traceback_line is not None and re.match(r"^[A-Za-z_.]+(Error|Exception)\b", line):
            after_shutdown = any(e.kind == "shutdown" for e in self.events)
            exception = line.strip()[:120]
            self.events.append(
                LogEvent(
                    self.traceback_time,
                    self.traceback_line,
                    "shutdown" if after_shutdown else "traceback",
                    f"an exception after the shutdown began ({exception}): a shutdown, not an "
                    "aborted run"
                    if after_shutdown
                    else f"the server hit an exception and the run was aborted ({exception})",
                )
            )
            self.traceback_line = -1  # reported once
            return True
        if "SIGTERM received" in line:
            self.events.append(
                LogEvent(time_s, number, "shutdown", "the server was shut down (SIGTERM)")
            )
            return True
        if RETRACTION.search(line):
            self.events.append(LogEvent(time_s, number, "retraction", line.strip()))
            return True
        return False

    def _stats(
        self, number: int, line: str, stats: re.Match[str], time_s: float | None, tags: str
    ) -> None:
        fields = parse_fields(stats.group("fields"))
        running = _int_field(fields, "#running-req")
        problem = None
        if time_s is None:
            problem = "has no timestamp in square brackets at the start of the line"
        elif running is None:
            problem = "has no readable '#running-req: N' field"
        elif stats.group("kind") == "Prefill" and "#new-seq" not in fields:
            problem = "is a Prefill line without a readable '#new-seq: N' field"
        if problem is not None:
            if self.skip_malformed:
                self.skipped.append(LogEvent(time_s, number, "malformed", line.strip()[:100]))
                return
            raise TraceError(
                f"{self.path}:{number}: this SGLang scheduler line {problem}: {line.strip()[:160]!r}.",
                "ncuflow phases needs the time and the batch size of every Prefill/Decode batch line.",
                "Use the server's own log as written (SGLang prints '[YYYY-MM-DD HH:MM:SS] Decode "
                "batch, #running-req: …'), or pass --skip-malformed to leave such lines out.",
            )
        assert time_s is not None and running is not None
        rank = _rank_of(tags)
        self._check_order(number, rank, time_s)
        self.per_rank.setdefault(rank, []).append(
            BatchSample(
                time_s=time_s,
                kind="prefill" if stats.group("kind") == "Prefill" else "decode",
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

    def _check_order(self, number: int, rank: str, time_s: float) -> None:
        previous = self.last_time.get(rank)
        if previous is not None and time_s < previous[0] - 1.0:
            raise TraceError(
                f"{self.path}:{number}: time goes back from line {previous[1]} to this line "
                f"({time_s - previous[0]:+.0f} s) for the same scheduler{' ' + rank if rank else ''}.",
                "The file holds interleaved or concatenated runs from different server processes or "
                "restarts, whose lines cannot be put on one timeline.",
                "Split the file into one log per server run (e.g. at the restart) and pass each file.",
            )
        self.last_time[rank] = (time_s, number)

    def traces(self) -> tuple[ServerTrace, ...]:
        if not self.per_rank:
            raise TraceError(
                f"{self.path}: no SGLang 'Prefill batch' or 'Decode batch' lines with a timestamp.",
                "Without scheduler statistics lines there is nothing to split into phases.",
                "Pass the SGLang server log (not the client output), with default logging enabled.",
            )
        bench = _bench_summary(self.command_args, self.command_line, self.result, self.result_line)
        events = list(self.events)
        if self.skipped:
            first = self.skipped[0].line
            events.append(
                LogEvent(
                    None,
                    first,
                    "malformed",
                    f"{len(self.skipped)} malformed scheduler line(s) left out (first at line {first})",
                )
            )
        multi = len(self.per_rank) > 1
        return tuple(
            ServerTrace(
                path=str(self.path),
                engine="sglang",
                rank=(rank or None) if multi else None,
                clock_origin=self.origin.strftime("%Y-%m-%d %H:%M:%S") if self.origin else "",
                samples=mark_chunked_prefills(samples),
                events=tuple(events),
                time_resolution_s=0.001 if self.any_fraction else 1.0,
                bench=bench,
            )
            for rank, samples in sorted(self.per_rank.items(), key=lambda kv: _rank_sort_key(kv[0]))
        )


def mark_chunked_prefills(samples: Sequence[BatchSample]) -> tuple[BatchSample, ...]:
    """One scheduler's lines, each Prefill line whose last request is cut off marked.

    SGLang prefills a prompt longer than what is left of the batch's token budget over
    several batches, and counts that request in ``#new-seq`` on each of them: summed,
    ``#new-seq`` counts it once per chunk (seen on the DP-attention log: 80 admissions on
    a rank that holds 72 requests). Where the log has ``#pending-token`` (newer SGLang),
    a Prefill line with pending tokens is cut off. Otherwise a line is taken to be cut off
    when it carries the scheduler's largest ``#new-token`` (the budget; seen on at least
    two lines), the very next line is a Prefill line (the cut request goes on at once),
    and that line shows one request fewer joined the running batch than ``#new-seq``
    said. Anything else is left as logged.
    """
    prefill_tokens = [s.new_tokens for s in samples if s.kind == "prefill" and s.new_tokens]
    budget = max(prefill_tokens, default=None)
    if budget is not None and prefill_tokens.count(budget) < 2:
        budget = None
    marked = list(samples)
    for index, sample in enumerate(marked):
        if sample.kind != "prefill" or not sample.new_seqs:
            continue
        following = marked[index + 1] if index + 1 < len(marked) else None
        if sample.pending_tokens is not None:
            cut = sample.pending_tokens > 0
        else:
            cut = (
                following is not None
                and following.kind == "prefill"
                and sample.new_tokens == budget
                and following.running - sample.running == sample.new_seqs - 1
            )
        if cut:
            marked[index] = replace(sample, unfinished_seqs=1)
    return tuple(marked)


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
