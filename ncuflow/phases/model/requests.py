"""Per-request streaming traces (JSONL): the batch rebuilt from request events."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from itertools import pairwise

from ncuflow.phases.model.bench import analyse_without_start_times
from ncuflow.phases.model.results import (
    PhaseSpan,
    Reconciliation,
    RunAdmission,
    RunAnalysis,
    RunIdentity,
    RunPhases,
    RunPlotData,
    RunTiming,
    RunTokens,
    TimelinePoint,
    assemble_run,
)
from ncuflow.phases.model.stats import distribution
from ncuflow.phases.model.traces import RequestRecord, RequestTrace


def analyse_request_trace(
    trace: RequestTrace,
    *,
    batch_tolerance: float = 0.05,
    output_tokens: int | None = None,
    run_index: int = 1,
) -> RunAnalysis:
    requests = trace.requests
    notes: list[str] = []
    cannot: list[str] = []
    ttft = distribution([r.chunk_times_s[0] - r.submit_s for r in requests if r.chunk_times_s])
    lengths = sorted(r.output_tokens for r in requests)
    tokens = output_tokens or (lengths[len(lengths) // 2] if lengths else None)
    tokens_source = "--output-tokens" if output_tokens else "median chunk tokens per request"
    if lengths and lengths[0] != lengths[-1] and not output_tokens:
        notes.append(
            f"requests differ in output length ({lengths[0]}–{lengths[-1]} tokens): the "
            f"harness formula uses the median, {tokens}"
        )
    per_request_tpot = [
        (r.chunk_times_s[-1] - r.chunk_times_s[0]) / (r.output_tokens - 1)
        for r in requests
        if r.output_tokens > 1 and len(r.chunk_times_s) > 1
    ]
    mean_request_tpot = statistics.fmean(per_request_tpot) if per_request_tpot else None

    if not trace.has_start_times:
        return analyse_without_start_times(
            trace, ttft, tokens, tokens_source, mean_request_tpot, run_index
        )

    first_tokens = [r.chunk_times_s[0] for r in requests]
    last_tokens = [r.chunk_times_s[-1] for r in requests]
    start_s = min(r.submit_s for r in requests)
    end_s = max(last_tokens)

    # piecewise-constant batch: decoding = first token ≤ t < last token; prefilling = submit ≤ t < first token
    segments = _batch_segments(requests)
    peak = max((d for _, _, d, _ in segments), default=0)

    timeline = tuple(
        TimelinePoint(a, "prefill" if p else "decode", d, p, None) for a, _, d, p in segments
    ) + ((TimelinePoint(end_s, "decode", 0, 0, None),) if segments else ())

    # merge prefill-free segments with a stable batch near the peak
    # (per-request traces are exact: a stretch keeps one batch size; any change ends it)
    best: tuple[float, float] | None = None
    run_start: float | None = None
    run_end: float | None = None
    run_count = -1
    for a, b, decoding, prefilling in segments:
        ok = prefilling == 0 and peak > 0 and decoding >= (1 - batch_tolerance) * peak
        if ok and run_start is not None and decoding == run_count:
            run_end = b
            continue
        if (
            run_start is not None
            and run_end is not None
            and (best is None or run_end - run_start > best[1] - best[0])
        ):
            best = (run_start, run_end)
        run_start = run_end = None
        if ok:
            run_start, run_end, run_count = a, b, decoding
    if (
        run_start is not None
        and run_end is not None
        and (best is None or run_end - run_start > best[1] - best[0])
    ):
        best = (run_start, run_end)

    all_gaps = sorted(
        (r.chunk_times_s[k] - r.chunk_times_s[k - 1]) / max(r.chunk_tokens[k], 1)
        for r in requests
        for k in range(1, len(r.chunk_times_s))
    )
    typical_gap = statistics.median(all_gaps) if all_gaps else 0.0
    if best is not None and best[1] - best[0] < 5 * typical_gap:
        notes.append(
            f"the longest stable stretch lasts {best[1] - best[0]:.3f} s, under 5 token intervals: "
            "not counted as steady decode"
        )
        best = None

    steady = ramp = drain = None
    steady_tokens = None
    admission_span = None
    mean_wait = None
    total_wait = None
    admitted = None
    steady_batch: float | None = None
    if best is None:
        cannot.append(
            f"no steady decode phase: the batch never held ≥ {100 * (1 - batch_tolerance):.0f} % of its "
            f"peak size ({peak}) with no request prefilling — the batch never fills"
        )
    else:
        a, b = best
        steady = PhaseSpan("steady", a, b)
        ramp = PhaseSpan("ramp", start_s, a)
        drain = PhaseSpan("drain", b, end_s)
        steady_batch = float(
            statistics.median(d for s0, s1, d, p in segments if s0 >= a and s1 <= b)
        )
        intervals: list[float] = []
        for r in requests:
            times, toks = r.chunk_times_s, r.chunk_tokens
            for k in range(1, len(times)):
                if times[k - 1] >= a and times[k] <= b and toks[k] > 0:
                    intervals.append((times[k] - times[k - 1]) / toks[k])
        steady_tokens = distribution(intervals)
        if steady_tokens is None:
            cannot.append("no two consecutive chunks of one request fall inside the steady stretch")
        admitted_before = [t for t in first_tokens if t <= a]
        admitted = len(admitted_before)
        if admitted_before:
            last_admission = max(admitted_before)
            admission_span = last_admission - min(first_tokens)
            mean_wait = statistics.fmean(last_admission - t for t in admitted_before)
            total_wait = sum(last_admission - t for t in admitted_before)

    gaps = [
        (r.chunk_times_s[k], (r.chunk_times_s[k] - r.chunk_times_s[k - 1]) / r.chunk_tokens[k])
        for r in requests
        for k in range(1, len(r.chunk_times_s))
        if r.chunk_tokens[k] > 0
    ]
    stride = max(1, len(gaps) // 20000)
    token_gaps = tuple(sorted(gaps[::stride]))

    harness = None
    reconciliation = None
    if tokens is not None and tokens > 1:
        harness = (end_s - min(first_tokens)) / (tokens - 1)
        if steady_tokens is not None and admission_span is not None:
            reconciliation = Reconciliation(
                reported_label="harness TPOT (batch end − first token)/(N − 1)",
                reported_tpot_s=harness,
                steady_term_s=steady_tokens.median,
                ramp_term_s=admission_span / (tokens - 1),
                ramp_s=admission_span,
                output_tokens=tokens,
            )
    return assemble_run(
        RunIdentity(
            trace.path, trace.source_format, run_index, trace.run, None, trace.clock_origin
        ),
        RunPhases(start_s, end_s, peak, steady_batch, ramp, steady, None, drain),
        admission=RunAdmission(admission_span, mean_wait, admitted, total_wait),
        timing=RunTiming(
            step_method="per-token time = gap between consecutive streamed chunks of one request "
            "(divided by the chunk's tokens) inside the steady stretch",
            ttft_s=ttft,
            steady_token_s=steady_tokens,
            steady_step_s=steady_tokens.median if steady_tokens else None,
            mean_request_tpot_s=mean_request_tpot,
        ),
        tokens=RunTokens(tokens, tokens_source, harness, reconciliation),
        cannot=cannot,
        notes=notes,
        plot=RunPlotData(timeline=timeline, token_gaps=token_gaps),
    )


def _batch_segments(requests: Sequence[RequestRecord]) -> list[tuple[float, float, int, int]]:
    """(start, end, decoding, prefilling) for every interval between two request events:
    a request is prefilling from submit to first token, decoding from first to last token."""
    changes: dict[float, list[int]] = {}
    for r in requests:
        first, last = r.chunk_times_s[0], r.chunk_times_s[-1]
        changes.setdefault(r.submit_s, [0, 0])[1] += 1
        changes.setdefault(first, [0, 0])[1] -= 1
        changes.setdefault(first, [0, 0])[0] += 1
        changes.setdefault(last, [0, 0])[0] -= 1
    times = sorted(changes)
    segments = []
    decoding = prefilling = 0
    for a, b in pairwise(times):
        decoding += changes[a][0]
        prefilling += changes[a][1]
        segments.append((a, b, decoding, prefilling))
    return segments
