"""One summary of a log of many runs (a session): how many runs and requests, the per-token
times over the whole session, what the prefix cache served, what the server refused and
why, and its errors, so that a 6-hour log of a thousand runs reads in a screen, with any
run in detail on request.

The request count comes from the best source the log has, said with it: the server's
arrival lines, its per-request timing lines, its admissions (Prefill lines) or its access
lines. Per-token times are those of every statistics interval the tables use (the value on
each Decode line), over all runs, and per batch size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ncuflow.phases.model.results import PhaseKind, RunAnalysis, SegmentKind
from ncuflow.phases.model.stats import Distribution, distribution
from ncuflow.phases.model.traces import ServiceCounts

MAX_LEVELS = 6  # batch sizes listed with their own per-token time


@dataclass(frozen=True)
class LevelTiming:
    batch: int
    intervals: int
    per_token_s: Distribution


@dataclass(frozen=True)
class SessionSummary:
    runs: int  # runs as the tables number them (a DP-attention log's ranks' runs of one wave share a number)
    start_s: float | None
    end_s: float | None
    busy_s: float  # time the server was busy: the runs' spans, overlapping ones once
    requests: int | None
    requests_source: str
    runs_with_steady: int
    runs_with_overload: int
    runs_aborted: int
    peak_batch: Distribution | None  # over runs
    per_token_s: Distribution | None  # every interval of every run
    levels: tuple[LevelTiming, ...]  # the most frequent batch sizes
    steady_token_s: Distribution | None  # the runs' headline (steady) per-token times
    service: ServiceCounts


def run_numbers(runs: Sequence[RunAnalysis]) -> int:
    """How many runs the tables number (each DP rank's run of one wave carries the wave's
    number): not the busy stretches, which merge runs that touch at a 1-s timestamp."""
    return len({r.identity.run_index for r in runs})


def busy_stretches(runs: Sequence[RunAnalysis]) -> list[tuple[float, float]]:
    """The stretches of time during which the server was busy: the runs' spans, those that
    overlap (the DP ranks' runs of one wave) merged."""
    spans = sorted((r.shape.start_s, r.shape.end_s) for r in runs if r.shape.start_s is not None and r.shape.end_s is not None)
    merged: list[tuple[float, float]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _requests(runs: Sequence[RunAnalysis], service: ServiceCounts) -> tuple[int | None, str]:
    arrivals = [r.server.arrivals.requests for r in runs if r.server.arrivals is not None]
    if arrivals and sum(arrivals):
        return sum(arrivals), "the server's arrival lines"
    timed = [r.server.server_requests.requests for r in runs if r.server.server_requests is not None]
    if timed:
        return sum(timed), "the server's per-request timing lines"
    admitted = [r.admission.requests_total for r in runs if r.admission.requests_total]
    if admitted:
        return sum(x or 0 for x in admitted), "admissions on Prefill lines"
    ok = sum(count for status, count in service.http_status if 200 <= status < 300)
    if ok:
        return ok, "access lines with status 2xx"
    return None, ""


def _levels(runs: Sequence[RunAnalysis]) -> tuple[LevelTiming, ...]:
    by_batch: dict[int, list[float]] = {}
    for run in runs:
        for point in run.plot.timeline:
            if point.per_token_s is not None and point.kind != "prefill":
                by_batch.setdefault(point.batch, []).append(point.per_token_s)
    frequent = sorted(by_batch, key=lambda b: (-len(by_batch[b]), b))[:MAX_LEVELS]
    levels = []
    for batch in sorted(frequent):
        timing = distribution(by_batch[batch])
        if timing is not None:
            levels.append(LevelTiming(batch, len(by_batch[batch]), timing))
    return tuple(levels)


def summarise_session(runs: Sequence[RunAnalysis], service: ServiceCounts) -> SessionSummary:
    starts = [r.shape.start_s for r in runs if r.shape.start_s is not None]
    ends = [r.shape.end_s for r in runs if r.shape.end_s is not None]
    values = [
        p.per_token_s for r in runs for p in r.plot.timeline if p.per_token_s is not None and p.kind != "prefill"
    ]
    values += [gap for r in runs if not r.plot.timeline for _, gap in r.plot.token_gaps]
    requests, source = _requests(runs, service)
    stretches = busy_stretches(runs)
    return SessionSummary(
        runs=run_numbers(runs),
        start_s=min(starts) if starts else None,
        end_s=max(ends) if ends else None,
        busy_s=sum(end - start for start, end in stretches),
        requests=requests,
        requests_source=source,
        runs_with_steady=sum(1 for r in runs if r.phase(PhaseKind.STEADY).span is not None),
        runs_with_overload=sum(1 for r in runs if any(s.kind is SegmentKind.OVERLOAD for s in r.shape.segments)),
        runs_aborted=sum(1 for r in runs if r.plot.abort_time_s is not None),
        peak_batch=distribution([float(r.shape.peak_batch) for r in runs if r.shape.peak_batch]),
        per_token_s=distribution(values),
        levels=_levels(runs),
        steady_token_s=distribution([r.timing.headline_token_s for r in runs if r.timing.headline_token_s is not None]),
        service=service,
    )
