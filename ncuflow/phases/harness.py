"""The harness check in one line: how much of a benchmark's timed window was not steady decode,
and how far that moves the benchmark's per-token figure from the steady one.

The client's result states the timed window's length ``D`` (bench_serving's ``Benchmark
duration (s)``, or ``duration`` of its JSON) and its mean TPOT. The window ends at the last
statistics line before the result block (with ``--bench-json``, at the log's last one) and
spans ``D`` before it; the runs of the first scheduler that end inside it are the benchmark's.
Their plateau segments' admission-free time (``steady_s``) is steady decode; the rest of ``D``
is ramp, mixed (decode while requests were admitted), drain, burst, overload, and what no
stretch covers (the client's own time, gaps between waves). The per-token move is the client's
mean TPOT over the steady per-token time (the runs' headlines weighted by their steady time),
less one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ncuflow.files import read_small_file
from ncuflow.phases import TraceError
from ncuflow.phases.model import RunAnalysis
from ncuflow.phases.model.results import PhaseKind, Segment, SegmentKind

MAX_BENCH_JSON = 512 << 20


@dataclass(frozen=True)
class ClientResult:
    """What the client says of its timed window."""

    source: str  # "bench_serving result block, line 663" or "--bench-json results.json"
    duration_s: float
    mean_tpot_s: float | None


@dataclass(frozen=True)
class HarnessCheck:
    client: ClientResult
    window: tuple[float, float]  # on the log's clock
    runs: tuple[str, ...]  # the benchmark's runs (first scheduler)
    steady_s: float
    outside: tuple[tuple[str, float], ...]  # (ramp | mixed | drain | burst | overload | uncovered, seconds)
    outside_share: float
    steady_token_s: float | None
    tpot_move: float | None  # client mean TPOT / steady per-token − 1

    def line(self) -> str:
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.outside if seconds > 0.05)
        text = (f"harness: {self.outside_share:.1%} of the {self.client.duration_s:.2f}-s timed window "
                f"({self.client.source}) is outside steady decode ({parts or 'nothing'})")
        if self.tpot_move is not None and self.client.mean_tpot_s and self.steady_token_s:
            text += (f"; its mean TPOT {self.client.mean_tpot_s * 1e3:.2f} ms is {self.tpot_move:+.1%} "
                     f"from the steady per-token time {self.steady_token_s * 1e3:.2f} ms")
        return text


def _spans(seg: Segment) -> list[tuple[str, float]]:
    if seg.kind is SegmentKind.PLATEAU:
        drain = seg.phase(PhaseKind.DRAIN).span
        return [("ramp", seg.ramp.duration_s if seg.ramp else 0.0), ("mixed", seg.phase(PhaseKind.MIXED).seconds),
                ("drain", drain.duration_s if drain else 0.0)]
    return [(seg.kind.value, seg.end_s - seg.start_s)]


def harness_check(client: ClientResult, runs: Sequence[RunAnalysis], window_end_s: float) -> HarnessCheck | None:
    """The check over the runs of the first scheduler that end inside the window (None: none do)."""
    start = window_end_s - client.duration_s
    first_rank = runs[0].identity.rank if runs else None
    timed = [r for r in runs if r.identity.rank == first_rank and r.shape.end_s is not None and start <= r.shape.end_s <= window_end_s]
    if not timed:
        return None
    segments = [seg for r in timed for seg in r.shape.segments]
    # a run that began before the window counts whole: its steady time is at most the window
    steady = min(sum(seg.phase(PhaseKind.STEADY).seconds for seg in segments if seg.kind is SegmentKind.PLATEAU), client.duration_s)
    outside: dict[str, float] = {}
    for seg in segments:
        for name, seconds in _spans(seg):
            outside[name] = outside.get(name, 0.0) + seconds
    outside["uncovered"] = max(client.duration_s - steady - sum(outside.values()), 0.0)
    weighted = [(r.timing.headline_token_s, sum(s.phase(PhaseKind.STEADY).seconds for s in r.shape.segments if s.kind is SegmentKind.PLATEAU))
                for r in timed if r.timing.headline_token_s is not None]
    total = sum(w for _, w in weighted)
    steady_token = sum(v * w for v, w in weighted) / total if total > 0 else None
    move = client.mean_tpot_s / steady_token - 1 if client.mean_tpot_s and steady_token else None
    return HarnessCheck(client, (start, window_end_s), tuple(r.identity.run_label for r in timed), steady,
                        tuple(outside.items()), 1 - steady / client.duration_s, steady_token, move)


def _positive(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def read_bench_json(path: Path) -> ClientResult:
    """bench_serving's result JSON: its ``duration`` (s) and ``mean_tpot_ms``."""

    def refused(problem: str) -> TraceError:
        return TraceError(f"The bench_serving result {path} {problem}.",
                          "The harness check needs the client's timed window: bench_serving's JSON "
                          "result holds it as \"duration\" (seconds) and \"mean_tpot_ms\".",
                          "Give --bench-json the file bench_serving wrote with --output-file.")

    text = read_small_file(path, MAX_BENCH_JSON, what="a bench_serving result", error=refused)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise refused("is not JSON") from None
    duration = _positive(data.get("duration")) if isinstance(data, dict) else None
    if duration is None:
        raise refused("has no positive finite \"duration\"")
    tpot = _positive(data.get("mean_tpot_ms"))
    return ClientResult(f"--bench-json {path.name}", duration, tpot / 1e3 if tpot else None)
