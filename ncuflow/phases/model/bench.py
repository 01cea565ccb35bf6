"""bench_serving --output-details JSON: TTFT and inter-token latencies per request, but no
start times, so requests cannot be placed on one timeline. Unknowns stay None."""

from __future__ import annotations

import statistics
from itertools import pairwise

from ncuflow.phases.model.results import (
    Reconciliation,
    RunAdmission,
    RunAnalysis,
    RunIdentity,
    RunPhases,
    RunPlotData,
    RunTiming,
    RunTokens,
    assemble_run,
)
from ncuflow.phases.model.stats import Distribution, distribution
from ncuflow.phases.model.traces import RequestTrace


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
    itls: list[float] = []
    for r in trace.requests:
        times = r.chunk_times_s
        itls.extend(b - a for a, b in pairwise(times))
    itl = distribution(itls)
    stalls: list[float] = []
    if itl is not None:
        for r in trace.requests:
            times = r.chunk_times_s
            gaps = [b - a for a, b in pairwise(times)]
            stalls.append(sum(gaps) - len(gaps) * itl.median)
    mean_stall = statistics.fmean(stalls) if stalls else None
    by_position: list[list[float]] = []
    for r in trace.requests:
        times = r.chunk_times_s
        for k in range(1, len(times)):
            if len(by_position) < k:
                by_position.append([])
            by_position[k - 1].append(times[k] - times[k - 1])
    itl_by_position = tuple(statistics.median(values) for values in by_position if values)
    reported = (
        trace.reported_mean_tpot_ms / 1000.0 if trace.reported_mean_tpot_ms else mean_request_tpot
    )
    reconciliation = None
    if reported and itl is not None and tokens and tokens > 1 and mean_stall is not None:
        reconciliation = Reconciliation(
            reported_label="mean per-request TPOT",
            reported_tpot_s=reported,
            steady_term_s=itl.median,
            ramp_term_s=mean_stall / (tokens - 1),
            ramp_s=mean_stall,
            output_tokens=tokens,
        )
    return assemble_run(
        RunIdentity(trace.path, trace.source_format, run_index, trace.run, None, ""),
        RunPhases(),  # no start times: no timeline, no peak, no phases (None, never 0)
        admission=RunAdmission(requests_admitted=len(trace.requests)),
        timing=RunTiming(
            step_method="steady per-token time ≈ median inter-token latency over all requests; "
            "the ramp term is the mean per-request time above median ITL (stalls), not a "
            "measured ramp",
            ttft_s=ttft,
            steady_token_s=itl,
            steady_step_s=itl.median if itl else None,
            mean_request_tpot_s=mean_request_tpot,
        ),
        tokens=RunTokens(tokens, tokens_source, None, reconciliation),
        cannot=(
            "bench_serving JSON has no per-request start times: batch size over time, the "
            "admission ramp, steady window, drain and the harness-style (batch) TPOT cannot "
            "be derived; only TTFT/ITL distributions and per-request stalls can",
        ),
        plot=RunPlotData(
            itl_by_position=itl_by_position,
            ttft_values_s=tuple(r.chunk_times_s[0] - r.submit_s for r in trace.requests),
        ),
    )
