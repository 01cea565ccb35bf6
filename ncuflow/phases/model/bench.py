"""bench_serving --output-details JSON: TTFT and inter-token latencies per request, but no
start times, so requests cannot be placed on one timeline. Unknowns stay None."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from itertools import pairwise

from ncuflow.phases.model.results import (
    PhaseKind,
    PhaseStats,
    Reconciliation,
    RunAdmission,
    RunAnalysis,
    RunFindings,
    RunIdentity,
    RunPlotData,
    RunShape,
    RunTiming,
    RunTokens,
    assemble_run,
)
from ncuflow.phases.model.stats import Distribution, distribution
from ncuflow.phases.model.traces import RequestRecord, RequestTrace

_ITL_STEP_METHOD = (
    "steady per-token time ≈ median inter-token latency over all requests; "
    "the ramp term is the mean per-request time above median ITL (stalls), not a "
    "measured ramp"
)
_NO_START_TIMES = (
    "the trace has no per-request start times: batch size over time, the "
    "admission ramp, steady window, drain and the harness-style (batch) TPOT cannot "
    "be derived; only TTFT/ITL distributions and per-request stalls can"
)


def analyse_without_start_times(
    trace: RequestTrace,
    ttft: Distribution | None,
    tokens: int | None,
    tokens_source: str,
    mean_request_tpot: float | None,
    run_index: int,
) -> RunAnalysis:
    """bench_serving --output-details JSON: per-request TTFT and inter-token latencies, but
    no start times, so requests cannot be placed on one timeline."""
    itl = distribution([gap for r in trace.requests for gap in _gaps(r)])
    reported = (
        trace.reported_mean_tpot_ms / 1000.0 if trace.reported_mean_tpot_ms else mean_request_tpot
    )
    reconciliation = None
    if reported and itl is not None and tokens and tokens > 1:
        reconciliation = _stall_reconciliation(trace.requests, reported, itl.median, tokens)
    return assemble_run(
        RunIdentity(trace.path, trace.source_format, run_index, trace.run, None, ""),
        RunShape(),  # no start times: no timeline, no peak, no spans (None, never 0)
        RunAdmission(requests_admitted=len(trace.requests)),
        RunTiming(
            step_method=_ITL_STEP_METHOD,
            ttft_s=ttft,
            steady_step_s=itl.median if itl else None,
            mean_request_tpot_s=mean_request_tpot,
        ),
        RunTokens(tokens, tokens_source, None, reconciliation),
        RunPlotData(
            itl_by_position=_median_itl_by_position(trace.requests),
            ttft_values_s=tuple(r.chunk_times_s[0] - r.submit_s for r in trace.requests),
        ),
        phases={PhaseKind.STEADY: PhaseStats(token_s=itl)},
        findings=RunFindings(cannot=(_NO_START_TIMES,)),
    )


def _gaps(request: RequestRecord) -> list[float]:
    """The request's inter-token latencies, in order (a chunk's gap over its tokens: a
    per-request server log lays a request out in chunks of several tokens)."""
    return [(b - a) / max(n, 1) for (a, b), n in zip(pairwise(request.chunk_times_s), request.chunk_tokens[1:], strict=False)]


def _stall_reconciliation(
    requests: Sequence[RequestRecord], reported_s: float, median_itl_s: float, tokens: int
) -> Reconciliation | None:
    """TPOT ≈ median ITL + mean stall / (N − 1), a request's stall being its time above the
    median ITL; None without requests."""
    stalls = [sum(gaps) - len(gaps) * median_itl_s for gaps in map(_gaps, requests)]
    if not stalls:
        return None
    mean_stall = statistics.fmean(stalls)
    return Reconciliation(
        reported_label="mean per-request TPOT",
        reported_tpot_s=reported_s,
        steady_term_s=median_itl_s,
        ramp_term_s=mean_stall / (tokens - 1),
        ramp_s=mean_stall,
        output_tokens=tokens,
    )


def _median_itl_by_position(requests: Sequence[RequestRecord]) -> tuple[float, ...]:
    """The median inter-token latency at each output position, over the requests that reach it."""
    by_position: list[list[float]] = []
    for r in requests:
        times = r.chunk_times_s
        for k in range(1, len(times)):
            if len(by_position) < k:
                by_position.append([])
            by_position[k - 1].append(times[k] - times[k - 1])
    return tuple(statistics.median(values) for values in by_position if values)
