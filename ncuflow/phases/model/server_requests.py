"""What the server's own per-request timing lines say about a run (SGLang ``ReqTimeStats``).

A request belongs to the run during whose stretch of the log (``ServerRun.window``) its
line was written (when it finished). Its TPOT is ``post_prefill_elapsed / (N − 1)``: first
token to last over the tokens after the first, as bench_serving measures it; the mean over
requests is what bench_serving's mean TPOT is, and Σ decode time / Σ (N − 1) the
token-weighted mean that the Decode lines' token-weighted per-token time estimates.
"""

from __future__ import annotations

import math

from ncuflow.phases.model.results import ServerRequests
from ncuflow.phases.model.stats import distribution
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
