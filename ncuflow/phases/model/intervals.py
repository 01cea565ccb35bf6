"""Decode intervals: the time between two consecutive Decode (or vLLM stats) lines of one
scheduler, with the per-token time and the output tokens of that stretch.

Both engines count the batch at one moment (SGLang's ``#running-req`` on the Decode line,
vLLM's ``Running`` at the end of its 10-s window) but the generated tokens over the whole
interval. Where requests finished (or joined) inside the interval, the batch at its end is
not the batch it ran at: the per-token time ``batch / gen throughput`` is then taken with the
mean of the batch at both ends (exact when the batch changed at a steady pace), and the
interval is marked ``changing``; an interval that starts or ends with an empty batch has
no per-token time (when the batch emptied is unknown), only its tokens. Retractions and the admissions of other DP ranks are found
by bisection, so building the intervals of a run costs time linear in its lines.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from ncuflow.phases.model.traces import BatchSample

# A vLLM window whose prompt throughput is at most this fraction of its generation
# throughput (typically a cached prompt: only a few uncached tokens are computed) is not
# counted as an admission that disqualifies a steady window.
CACHED_PROMPT_FRACTION = 0.10


@dataclass(frozen=True, slots=True)
class DecodeInterval:
    start_s: float
    end_s: float
    running: int  # batch size on the Decode line that ends the interval
    per_token_s: float | None
    tokens: float | None  # output tokens generated in the interval, all requests together
    admitting: bool  # a Prefill line, prompt throughput or a lockstep rank's admission inside
    retracted: bool
    accept_len: float | None
    cached_prompt: bool = False  # vLLM: prompt throughput small enough to ignore
    from_throughput: bool = False  # per-token time from gen throughput (not Δt / interval)
    start_running: int = 0  # batch size on the line that starts the interval
    # requests waiting for admission on the lines at its start and end, and the KV cache's
    # largest usage on any line of the interval (0–1), where the lines say
    start_queued: int = 0
    queued: int = 0
    kv_usage: float | None = None
    preempted: int = 0  # requests pushed back to the queue by retraction/preemption lines inside
    overloaded: bool = False  # inside an overload stretch (``overload``)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def changing(self) -> bool:
        """The batch differs at the two ends: requests finished or joined inside."""
        return self.start_running != self.running


def is_decode(sample: BatchSample) -> bool:
    return sample.kind in ("decode", "stats")


def _any_between(times: Sequence[float], low: float, high: float, *, inclusive: bool) -> bool:
    """Whether a sorted ``times`` holds a value in (low, high] (or (low, high))."""
    index = bisect.bisect_right(times, low)
    if index >= len(times):
        return False
    return times[index] <= high if inclusive else times[index] < high


def decode_intervals(
    samples: Sequence[BatchSample],
    *,
    steps_per_line: int | None,
    retraction_times: Sequence[float],
    lockstep_admissions: Sequence[float] = (),
    retracted_counts: Sequence[int] = (),
) -> list[DecodeInterval]:
    """One interval per pair of consecutive Decode/stats lines of a run, in order
    (``retraction_times`` and ``lockstep_admissions`` sorted; ``retracted_counts``: the
    requests each retraction pushed back). ``steps_per_line``: where the lines come every so
    many decode steps (``Capabilities.step_counted_lines``), Δt / steps is a step time where a
    line has no throughput; None for other formats."""
    intervals: list[DecodeInterval] = []
    previous: BatchSample | None = None
    prefill_since_previous = False
    kv_inside: float | None = None
    for sample in samples:
        kv_inside = _larger(kv_inside, sample.kv_usage)
        if not is_decode(sample):
            prefill_since_previous = True
            continue
        if previous is not None:
            intervals.append(
                _interval(
                    previous,
                    sample,
                    steps_per_line=steps_per_line,
                    inside=_Inside(
                        own_prefill=prefill_since_previous,
                        retracted=_any_between(retraction_times, previous.time_s, sample.time_s, inclusive=True),
                        lockstep=_any_between(lockstep_admissions, previous.time_s, sample.time_s, inclusive=False),
                        kv_usage=kv_inside,
                        preempted=_pushed_back(retraction_times, retracted_counts, previous.time_s, sample.time_s),
                    ),
                )
            )
        previous, prefill_since_previous = sample, False
        kv_inside = sample.kv_usage
    return intervals


def _larger(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _pushed_back(times: Sequence[float], counts: Sequence[int], low: float, high: float) -> int:
    """Requests pushed back by the retraction lines in (low, high]."""
    if not counts:
        return 0
    return sum(counts[bisect.bisect_right(times, low) : bisect.bisect_right(times, high)])


@dataclass(frozen=True, slots=True)
class _Inside:
    """What happened between two statistics lines, besides the lines themselves."""

    own_prefill: bool  # a Prefill line of this rank
    retracted: bool  # a retraction/preemption line
    lockstep: bool  # another DP rank's admission (ranks step together)
    kv_usage: float | None  # the largest KV usage seen
    preempted: int  # requests pushed back to the queue


def _interval(
    previous: BatchSample,
    sample: BatchSample,
    *,
    steps_per_line: int | None,
    inside: _Inside,
) -> DecodeInterval:
    span = sample.time_s - previous.time_s
    # an interval that ends (or starts) with an empty batch: when it emptied is unknown; a
    # line that states its window's decode batch keeps the requests still in prefill out
    batch = (previous.running + sample.running) / 2 if previous.running > 0 else 0.0
    if sample.decoding is not None and batch > 0:
        batch = sample.decoding
    throughput = sample.gen_throughput
    per_token = batch / throughput if throughput and throughput > 0 and sample.running > 0 and batch > 0 else None
    if per_token is None and steps_per_line and span > 0 and sample.running > 0:
        per_token = span / (steps_per_line * sample.lines) / (sample.accept_len or 1.0)
    tokens: float | None = None
    if throughput is not None:
        tokens = throughput * span
    elif per_token:
        tokens = sample.running * span / per_token
    prompt = sample.prompt_throughput or 0.0
    cached = 0 < prompt <= CACHED_PROMPT_FRACTION * (throughput or 0.0)
    return DecodeInterval(
        start_s=previous.time_s,
        end_s=sample.time_s,
        running=sample.running,
        per_token_s=per_token,
        tokens=tokens,
        admitting=inside.own_prefill or inside.lockstep or (prompt > 0 and not cached),
        retracted=inside.retracted,
        accept_len=sample.accept_len,
        cached_prompt=cached,
        from_throughput=throughput is not None and throughput > 0,
        start_running=previous.running,
        start_queued=previous.queued or 0,
        queued=sample.queued or 0,
        kv_usage=inside.kv_usage,
        preempted=inside.preempted,
    )
