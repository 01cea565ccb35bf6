"""Read vLLM server logs: the periodic ``Running: N reqs, Waiting: M reqs`` statistics lines.

vLLM (V0 and V1 engines) logs one line per ``--log-stats`` window (10 s by default) with the
average prompt and generation throughput over the window and the running/waiting counts at
its end, and (with speculative decoding) a ``SpecDecoding metrics`` line whose mean
acceptance length is attached to that window. ANSI colour codes and ``(APIServer pid=…)`` prefixes are stripped. The log has no
year, so times wrap at the new year (reported as an error if it happens).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from ncuflow.phases import TraceError
from ncuflow.phases.model.traces import BatchSample, LogEvent, ServerTrace

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
STATS = re.compile(
    r"(?P<month>\d{2})-(?P<day>\d{2}) (?P<time>\d{2}:\d{2}:\d{2})(?:[.,](?P<frac>\d{1,6}))?.*?"
    r"(?:Engine (?P<engine>\d+): )?Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<gen>[\d.]+) tokens/s, Running: (?P<running>\d+) reqs?"
    r"(?:, Swapped: \d+ reqs?)?, (?:Waiting|Pending): (?P<waiting>\d+) reqs?"
)
STATS_HINT = re.compile(r"Running: \d+ reqs?")
SPEC_DECODING = re.compile(r"SpecDecoding metrics:.*?Mean acceptance length: (?P<accept>[\d.]+)")
SHUTDOWN = re.compile(r"SIGTERM|Shutting down|Gracefully stopping")


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def looks_like_vllm(lines: Sequence[str]) -> bool:
    return any(STATS_HINT.search(line) and "throughput" in line for line in lines)


def _traceback_event(time_s: float | None, line: int, *, shutting_down: bool) -> LogEvent:
    if shutting_down:
        return LogEvent(
            time_s,
            line,
            "shutdown",
            "a traceback (EngineDeadError) after the shutdown began: the engine was stopped "
            "by the shutdown; the run was not aborted",
        )
    return LogEvent(time_s, line, "traceback", "the log contains a traceback")


def parse_vllm_log(
    path: Path, lines: Sequence[str], *, skip_malformed: bool = False
) -> tuple[ServerTrace, ...]:
    origin: datetime | None = None
    any_fraction = False
    per_engine: dict[str, list[BatchSample]] = {}
    events: list[LogEvent] = []
    last_time: float | None = None
    last_line = 0
    last_engine: str | None = None
    shutting_down = False
    for number, raw in enumerate(lines, start=1):
        line = strip_ansi(raw.rstrip("\n"))
        if SHUTDOWN.search(line) and not shutting_down:
            shutting_down = True
            events.append(LogEvent(last_time, number, "shutdown", "the server was shut down"))
            continue
        if "Traceback (most recent call last)" in line or "EngineDeadError" in line:
            events.append(_traceback_event(last_time, number, shutting_down=shutting_down))
            continue
        spec = SPEC_DECODING.search(line)
        if spec is not None and last_engine is not None and per_engine.get(last_engine):
            samples = per_engine[last_engine]
            samples[-1] = replace(samples[-1], accept_len=float(spec.group("accept")))
            continue
        if not STATS_HINT.search(line):
            continue
        match = STATS.search(line)
        if match is None:
            if skip_malformed:
                events.append(LogEvent(last_time, number, "malformed", line.strip()[:100]))
                continue
            raise TraceError(
                f"{path}:{number}: this vLLM statistics line cannot be read: {line.strip()[:160]!r}.",
                "ncuflow phases expects 'MM-DD HH:MM:SS … Avg prompt throughput: X tokens/s, Avg "
                "generation throughput: Y tokens/s, Running: N reqs, Waiting: M reqs'.",
                "Pass the vLLM server log as written, or --skip-malformed to leave such lines out.",
            )
        if origin is None:
            origin = _moment(match)
        any_fraction = any_fraction or bool(match.group("frac"))
        time_s = _seconds(match, origin)
        if last_time is not None and time_s < last_time - 1.0:
            raise TraceError(
                f"{path}:{number}: time goes back from line {last_line} to this line.",
                "The file holds interleaved or concatenated runs (or crosses a new year, which vLLM "
                "timestamps cannot show).",
                "Split the file into one log per server run and pass each file.",
            )
        last_time, last_line = time_s, number
        engine = match.group("engine") or "0"
        last_engine = engine
        per_engine.setdefault(engine, []).append(
            BatchSample(
                time_s=time_s,
                kind="stats",
                running=int(match.group("running")),
                line=number,
                queued=int(match.group("waiting")),
                gen_throughput=float(match.group("gen")),
                prompt_throughput=float(match.group("prompt")),
            )
        )
    return _traces(path, per_engine, events, origin, any_fraction)


def _moment(match: re.Match[str]) -> datetime:
    return datetime.strptime(
        f"2000-{match.group('month')}-{match.group('day')} {match.group('time')}",
        "%Y-%m-%d %H:%M:%S",
    )


def _seconds(match: re.Match[str], origin: datetime) -> float:
    frac = match.group("frac")
    return (_moment(match) - origin).total_seconds() + (float("0." + frac) if frac else 0.0)


def _traces(
    path: Path,
    per_engine: dict[str, list[BatchSample]],
    events: list[LogEvent],
    origin: datetime | None,
    any_fraction: bool,
) -> tuple[ServerTrace, ...]:
    if not per_engine:
        raise TraceError(
            f"{path}: no vLLM 'Running: N reqs, Waiting: M reqs' statistics lines.",
            "Without them there is nothing to split into phases.",
            "Run the vLLM server without --disable-log-stats and pass its log.",
        )
    clock = origin.strftime("%m-%d %H:%M:%S") if origin else ""
    multi = len(per_engine) > 1
    return tuple(
        ServerTrace(
            path=str(path),
            engine="vllm",
            rank=f"engine {engine}" if multi else None,
            clock_origin=clock,
            samples=tuple(samples),
            events=tuple(events),
            time_resolution_s=0.001 if any_fraction else 1.0,
        )
        for engine, samples in sorted(per_engine.items())
    )
