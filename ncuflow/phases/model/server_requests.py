"""What the server's own per-request timing lines say about a run (SGLang ``ReqTimeStats``).

A request belongs to the run during whose stretch of the log (``ServerRun.window``) its
line was written (when it finished). Its TPOT is ``post_prefill_elapsed / (N − 1)``: first
token to last over the tokens after the first, as bench_serving measures it; the mean over
requests is what bench_serving's mean TPOT is, and Σ decode time / Σ (N − 1) the
token-weighted mean that the Decode lines' token-weighted per-token time estimates.

In words: those lines against the Decode lines (``request_notes``, with the server-side
TTFT they give, ``with_request_timings``), and what the arrival lines bound (queue wait,
TTFT; ``arrival_notes``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.model.intervals import DecodeInterval
from ncuflow.phases.model.results import (
    ArrivalTimes,
    RunTiming,
    ServerRequests,
)
from ncuflow.phases.model.stats import Distribution, distribution
from ncuflow.phases.model.traces import RequestTimings


def summarise_requests(timings: RequestTimings | None, window: tuple[float, float]) -> ServerRequests | None:
    if timings is None:
        return None
    indices = timings.between(*window)
    if not indices:
        return None
    tpots = [t for t in (timings.tpot_s(i) for i in indices) if t is not None]
    decoded = [
        (timings.decode_s[i], timings.output_tokens[i] - 1)
        for i in indices
        if not math.isnan(timings.decode_s[i]) and timings.output_tokens[i] >= 2
    ]
    steps = sum(n for _, n in decoded)
    prefill = [timings.prefill_s[i] for i in indices if not math.isnan(timings.prefill_s[i])]
    queue = [timings.queue_s[i] for i in indices if not math.isnan(timings.queue_s[i])]
    ttft = [
        timings.queue_s[i] + timings.prefill_s[i]
        for i in indices
        if not math.isnan(timings.prefill_s[i]) and not math.isnan(timings.queue_s[i])
    ]
    return ServerRequests(
        requests=len(indices) * timings.stride,
        first_line=timings.line[indices[0]],
        output_tokens=distribution([float(timings.output_tokens[i]) for i in indices]),
        tpot_s=distribution(tpots),
        mean_tpot_s=sum(tpots) / len(tpots) if tpots else None,
        weighted_tpot_s=sum(d for d, _ in decoded) / steps if steps else None,
        queue_s=distribution(queue),
        prefill_s=distribution(prefill),
        ttft_s=distribution(ttft),
        stride=timings.stride,
    )


def single_length(requests: ServerRequests | None) -> int | None:
    """The output length when every request of the run had the same one."""
    lengths = requests.output_tokens if requests is not None else None
    if lengths is None or lengths.minimum != lengths.maximum or lengths.minimum < 2:
        return None
    return int(lengths.minimum)


def with_request_timings(
    capabilities: Capabilities,
    timing: RunTiming,
    requests: ServerRequests | None,
    intervals: Sequence[DecodeInterval],
    notes: list[str],
    cannot: list[str],
) -> RunTiming:
    """The server's own per-request timing lines: TTFT (server-side) and a cross-check."""
    if requests is None:
        return timing
    notes.extend(request_notes(capabilities, requests, _weighted_all(intervals)))
    if requests.ttft_s is None:
        return timing
    cannot[:] = [c for c in cannot if not c.startswith("TTFT distribution")]
    return replace(timing, ttft_s=requests.ttft_s, mean_request_tpot_s=requests.mean_tpot_s)


def _weighted_all(intervals: Sequence[DecodeInterval]) -> float | None:
    """Request-seconds of decoding per output token over every decode interval of a run."""
    pairs = [(i.per_token_s, i.tokens) for i in intervals if i.per_token_s and i.tokens]
    total = sum(t for _, t in pairs)
    return sum(p * t for p, t in pairs) / total if total > 0 else None


def request_notes(capabilities: Capabilities, requests: ServerRequests, decode_weighted_s: float | None) -> list[str]:
    """The server's own per-request timing lines against the statistics lines."""
    lengths = requests.output_tokens
    sampled = f" (every {requests.stride}th line kept)" if requests.stride > 1 else ""
    head = (
        f"{requests.requests} request(s) finished in this run by the server's per-request timing "
        f"lines (from line {requests.first_line}){sampled}"
    )
    if lengths is not None and lengths.minimum == lengths.maximum:
        head += f": output {lengths.minimum:.0f} tokens each"
    elif lengths is not None:
        head += f": output {lengths.minimum:.0f}–{lengths.maximum:.0f} tokens (median {lengths.median:.0f})"
    if requests.mean_tpot_s is None or requests.weighted_tpot_s is None:
        return [
            head + "; these lines hold prefill and decode together (forward_duration), so they "
            "give no per-request TPOT"
        ]
    line = (
        f"{head}; their own TPOT: mean {requests.mean_tpot_s * 1000:.2f} ms, token-weighted "
        f"{requests.weighted_tpot_s * 1000:.2f} ms"
    )
    if decode_weighted_s is not None:
        gap = decode_weighted_s / requests.weighted_tpot_s - 1
        line += (
            f"; the {capabilities.stats_line}s' token-weighted per-token time over the whole run is "
            f"{decode_weighted_s * 1000:.2f} ms ({gap:+.1%})"
        )
    if requests.ttft_s is not None:
        line += "; the TTFT column is server-side: queue + prefill, from these lines"
    return [line]


def arrival_notes(arrivals: ArrivalTimes | None, cannot: list[str]) -> list[str]:
    """What the arrival lines say about a run; where they bound the TTFT, the "cannot
    tell" that a server log has no submit times is taken back (``cannot`` is edited)."""
    if arrivals is None:
        return []
    head = f"{arrivals.requests} request(s) arrived (the server's arrival lines) over {arrivals.arrival_span_s:.1f} s"
    if arrivals.refused:
        head += f"; {arrivals.refused} more were refused before the scheduler"
    if arrivals.queue_wait_s is None:
        if arrivals.requests:
            head += "; they do not match the admissions the statistics lines count, so no queue wait is given"
        return [head]
    cannot[:] = [c for c in cannot if not c.startswith("TTFT distribution")]
    return [
        f"{head}; admitted within {arrivals.admission_span_s or 0.0:.1f} s of the first arrival; queue "
        f"wait median {_between(arrivals.queue_wait_low_s, arrivals.queue_wait_s)} (p90 ≤ "
        f"{arrivals.queue_wait_s.p90:.2f} s); TTFT median {_between(arrivals.ttft_low_s, arrivals.ttft_high_s)}: "
        f"{arrivals.method}"
    ]


def _between(low: Distribution | None, high: Distribution | None) -> str:
    """A median between bounds, in seconds: "0.21–0.93 s", or "≤ 0.93 s" with no lower one."""
    if high is None:
        return "—"
    if low is None:
        return f"≤ {high.median:.2f} s"
    if abs(high.median - low.median) < 0.0005:
        return f"{high.median:.2f} s"
    return f"{low.median:.2f}–{high.median:.2f} s"
