"""Admission from the server's arrival lines: when each request of a run arrived, when it
left the queue and bounds on its time to first token.

A run's arrivals are those between the previous run's last statistics line and its own
last one (a request that arrives while the server is idle starts the next run). Requests
leave the queue in the order they arrived (FIFO, as both schedulers admit by default):

- with Prefill lines (SGLang), the k-th arrival starts its prefill at the Prefill line where
  the requests started so far reach k (a prompt prefilled in chunks starts at its first
  chunk), and has its first token by the line after the one that completes its prompt:
  its queue wait is exact to the timestamps, its TTFT between the two;
- with statistics windows (vLLM), the requests admitted by a line's time are the arrivals so
  far less ``Waiting``: the k-th arrival was admitted inside the first window where they
  reach k, so its queue wait and TTFT lie between the window's start and its end (the
  prefill done within the window). Preempted requests wait again and are counted in
  ``Waiting`` (and SGLang readmits them with Prefill lines): once requests were pushed
  back, a later admission has only an upper bound.

Where the arrival lines do not match the admissions the lines count (a log whose request
logging started mid-run), only the count and the arrival span are given.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.model.intervals import is_decode
from ncuflow.phases.model.results import ArrivalTimes
from ncuflow.phases.model.stats import distribution
from ncuflow.phases.model.traces import BatchSample, RequestArrivals

MISMATCH = 0.10  # arrivals and admissions may differ by this share and still be matched

# (start, end) of the moment each request of a run left the queue, in FIFO order, and the
# latest moment its first token can have come
Admission = tuple[float, float, float]


def arrival_windows(last_lines: Sequence[float]) -> list[tuple[float, float]]:
    """Per run (given each run's last line): the (start, end] its arrivals fall in."""
    bounds = [-float("inf"), *last_lines[:-1], float("inf")]
    return list(itertools.pairwise(bounds))


def _prefill_admissions(samples: Sequence[BatchSample]) -> list[Admission]:
    """One (start, start, first-token bound) per request a run's Prefill lines admit."""
    starts: list[float] = []
    done: list[int] = []  # index of the line that completes each request's prompt
    carried = 0
    for index, sample in enumerate(samples):
        if sample.kind != "prefill":
            carried = 0
            continue
        starts.extend([sample.time_s] * max((sample.new_seqs or 0) - carried, 0))
        done.extend([index] * sample.admitted_seqs)
        carried = sample.unfinished_seqs
    last = samples[-1].time_s
    bound = [samples[i + 1].time_s if i + 1 < len(samples) else last for i in done]
    return [(s, s, b) for s, b in zip(starts, bound, strict=False)]


def _window_admissions(samples: Sequence[BatchSample], arrivals: Sequence[float], window_s: float) -> list[Admission]:
    """One (window start, window end, window end) per request a run's statistics lines
    show admitted (arrivals so far less Waiting), in order."""
    found: list[Admission] = []
    previous = None
    for sample in samples:
        if not is_decode(sample):
            continue
        start = previous if previous is not None else sample.time_s - window_s
        admitted = bisect.bisect_right(arrivals, sample.time_s) - (sample.queued or 0)
        found.extend([(start, sample.time_s, sample.time_s)] * max(admitted - len(found), 0))
        previous = sample.time_s
    return found


def run_arrivals(
    arrivals: RequestArrivals,
    window: tuple[float, float],
    samples: Sequence[BatchSample],
    capabilities: Capabilities,
    pushed_back_s: float | None,
) -> ArrivalTimes | None:
    """What the arrival lines say about one run (None where it has none). Where requests
    are pushed back to the queue (from ``pushed_back_s`` on) they wait, and are admitted,
    again: a request admitted after that has only an upper bound."""
    kept = arrivals.between(*window)
    times = [arrivals.time_s[i] for i in kept]
    refused = sum(1 for t in arrivals.refused_s if window[0] < t <= window[1])
    if not times:
        return ArrivalTimes(0, refused, 0.0, None, None, None, None, None, "") if refused else None
    stride = arrivals.stride
    if capabilities.prefill_lines:
        admissions = _prefill_admissions(samples)
        method = f"each request leaves the queue at the {capabilities.admission_line} that starts it (arrival order)"
    else:
        every = [t for t in times for _ in range(stride)]
        admissions = _window_admissions(samples, every, capabilities.stats_window_s or 0.0)
        method = (
            f"each request is admitted inside the {capabilities.stats_window_s or 0:g}-s statistics "
            f"window where arrivals less {capabilities.queue_field} first count it (arrival order)"
        )
    base = ArrivalTimes(len(times) * stride, refused, times[-1] - times[0], None, None, None, None, None, "")
    count = len(times) * stride
    if not admissions or abs(len(admissions) - count) > MISMATCH * count:
        return base
    cutoff = pushed_back_s if pushed_back_s is not None else float("inf")
    lower = all(end <= cutoff for _, end, _ in admissions[: count])
    return _bounds(base, times, stride, admissions, method, exact=capabilities.prefill_lines and lower, lower=lower)


def _bounds(
    base: ArrivalTimes,
    times: Sequence[float],
    stride: int,
    admissions: Sequence[Admission],
    method: str,
    *,
    exact: bool,
    lower: bool,
) -> ArrivalTimes:
    """Queue waits and TTFT bounds of the arrivals matched to admissions in order."""
    waits_low, waits, ttft_high = [], [], []
    for k, arrived in enumerate(times):
        position = k * stride
        if position >= len(admissions):
            break
        start, end, first_token = admissions[position]
        waits_low.append(max(start - arrived, 0.0))
        waits.append(max(end - arrived, 0.0))
        ttft_high.append(max(first_token - arrived, 0.0))
    last_admitted = admissions[min(len(admissions), len(times) * stride) - 1][1]
    return ArrivalTimes(
        requests=base.requests,
        refused=base.refused,
        arrival_span_s=base.arrival_span_s,
        admission_span_s=max(last_admitted - times[0], 0.0),
        queue_wait_s=distribution(waits),
        queue_wait_low_s=distribution(waits_low) if lower else None,
        ttft_low_s=distribution(waits_low) if lower else None,
        ttft_high_s=distribution(ttft_high),
        method=method + ("" if exact or not lower else "; bounds: the window's start and end"),
    )
