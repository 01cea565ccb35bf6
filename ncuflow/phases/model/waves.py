"""Waves in a per-request trace: generations of requests that filled the batch together.

A client at concurrency C that sends its requests in rounds (or a closed loop whose
requests all have one length) fills the batch, holds it, empties it and fills it again:
each round is a *wave*, a generation of requests. A stable stretch (the batch at its peak,
within the tolerance, one size, no request prefilling, at least ``MIN_GAPS`` token gaps
long) belongs to the requests decoding through all of it; consecutive stretches whose
requests are mostly the same (``SAME_WAVE``) are one wave (a replacement joining does not
start a generation). Two or more waves are segments of their own, each with its ramp
(its first submission to its stretch), steady and drain, and its own harness-style TPOT
(batch end − first token)/(N − 1) over its own requests: a TPOT over the whole trace
would span several generations.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ncuflow.phases.model.results import PhaseKind, PhaseSpan, PhaseStats, Reconciliation, Segment
from ncuflow.phases.model.stats import distribution
from ncuflow.phases.model.traces import RequestRecord

MIN_GAPS = 5  # a stable stretch is at least this many typical token gaps long
SAME_WAVE = 0.5  # stretches sharing this share of their requests are one wave

BatchStretch = tuple[float, float, int, int]  # (start, end, decoding, prefilling)


@dataclass(frozen=True)
class Wave:
    start_s: float  # its stable stretch
    end_s: float
    members: tuple[int, ...]  # indices of the requests decoding through it


def stable_stretches(
    stretches: Sequence[BatchStretch], peak: int, tolerance: float, min_s: float
) -> list[tuple[float, float]]:
    """Every prefill-free stretch at one batch size near the peak, ``min_s`` or longer."""
    found: list[tuple[float, float]] = []
    current: tuple[float, float, int] | None = None
    for a, b, decoding, prefilling in [*stretches, (float("inf"), float("inf"), -1, 1)]:
        ok = prefilling == 0 and peak > 0 and decoding >= (1 - tolerance) * peak
        if ok and current is not None and decoding == current[2]:
            current = (current[0], b, decoding)
            continue
        if current is not None and current[1] - current[0] >= min_s:
            found.append((current[0], current[1]))
        current = (a, b, decoding) if ok else None
    return found


def find_waves(requests: Sequence[RequestRecord], stable: Sequence[tuple[float, float]]) -> list[Wave]:
    waves: list[Wave] = []
    for a, b in stable:
        members = tuple(
            i for i, r in enumerate(requests) if r.chunk_times_s[0] <= a and r.chunk_times_s[-1] >= b
        )
        if waves and len(set(members) & set(waves[-1].members)) >= SAME_WAVE * min(len(members), len(waves[-1].members)):
            last = waves[-1]
            waves[-1] = Wave(last.start_s, b, tuple(sorted(set(last.members) | set(members))))
        elif members:
            waves.append(Wave(a, b, members))
    return waves


def _gaps(requests: Sequence[RequestRecord], low: float, high: float) -> list[float]:
    return [
        (r.chunk_times_s[k] - r.chunk_times_s[k - 1]) / r.chunk_tokens[k]
        for r in requests
        for k in range(1, len(r.chunk_times_s))
        if r.chunk_times_s[k - 1] >= low and r.chunk_times_s[k] <= high and r.chunk_tokens[k] > 0
    ]


def wave_segment(index: int, wave: Wave, requests: Sequence[RequestRecord], tokens: int | None) -> Segment:
    """One wave as a segment: ramp, steady, drain and its own harness-style TPOT."""
    own = [requests[i] for i in wave.members]
    start = min(r.submit_s for r in own)
    end = max(r.chunk_times_s[-1] for r in own)
    firsts = [r.chunk_times_s[0] for r in own]
    steady_gaps = _gaps(own, wave.start_s, wave.end_s)
    drain_gaps = _gaps(own, wave.end_s, end)
    steady = distribution(steady_gaps)
    reconciliation = None
    if tokens is not None and tokens > 1 and steady is not None:
        span = max(firsts) - min(firsts)
        reconciliation = Reconciliation(
            reported_label="harness TPOT of the wave (batch end − first token)/(N − 1)",
            reported_tpot_s=(end - min(firsts)) / (tokens - 1),
            steady_term_s=steady.median,
            ramp_term_s=span / (tokens - 1),
            ramp_s=span,
            output_tokens=tokens,
        )
    return Segment(
        index=index,
        level=len(own),
        start_s=start,
        end_s=end,
        warmup=None,
        plateau=PhaseSpan("plateau", wave.start_s, wave.end_s),
        phases={
            PhaseKind.RAMP: PhaseStats(PhaseSpan("ramp", start, wave.start_s)),
            PhaseKind.STEADY: PhaseStats(
                PhaseSpan("steady", wave.start_s, wave.end_s),
                wave.end_s - wave.start_s,
                steady,
                float(len(steady_gaps)),
                statistics.fmean(steady_gaps) if steady_gaps else None,
            ),
            PhaseKind.DRAIN: PhaseStats(
                PhaseSpan("drain", wave.end_s, end) if end > wave.end_s else None,
                0.0,
                distribution(drain_gaps),
                float(len(drain_gaps)),
                statistics.fmean(drain_gaps) if drain_gaps else None,
            ),
        },
        headline_token_s=steady.median if steady is not None else None,
        headline_method="median" if steady is not None else "",
        reconciliation=reconciliation,
    )
