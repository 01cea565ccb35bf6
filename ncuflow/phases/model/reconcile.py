"""Reconcile a reported TPOT with the phases that produced it.

Single generation (every request admitted in one ramp; the harness's batch TPOT):

    TPOT_harness ≈ T_steady + T_ramp / (N − 1) + T_warm-up / (N − 1)

Closed loop with several generations (bench_serving's per-request mean TPOT over R
requests of N output tokens each; a request's TPOT is its decode time over its N − 1
tokens, so the mean over requests is request-seconds of decoding per output token):

    TPOT_mean ≈ Σ_p share_p × t_p  +  Σ wait_i / R / (N − 1)  +  Σ T_warm-up × R_ramp / R / (N − 1)

where p runs over steady, mixed (plateau intervals with admissions), burst (the rise and
peak of a burst), overload (requests waiting at a full KV cache) and drain (and, on a
PD decode node, whose arrivals were prefilled elsewhere and start decoding at once, the
ramp's own decode intervals instead of a wait), ``share_p``
is the share of the output tokens generated in phase p and ``t_p`` its token-weighted
per-token time (both from the Decode lines); ``wait_i`` is the time a request admitted
during a ramp waits for the admissions after its own, summed over the ramp's requests and
divided by *all* R requests the mean is over (not just the ramp's); the warm-up interval
(last admission → first Decode line) delays the R_ramp requests of its ramp: the last
admission's own prefill ("last prefill", its tokens over the prefill throughput) and what
is left after it and half a decode-log interval of ordinary steps ("warm-up").
"""

from __future__ import annotations

from collections.abc import Sequence

from ncuflow.phases.model.results import PhaseKind, Reconciliation, RunAnalysis, Term
from ncuflow.phases.model.traces import BenchSummary

PHASES = ("ramp decode", "steady", "mixed", "burst", "overload", "drain")


def harness_reconciliation(
    *,
    label: str,
    reported_tpot_s: float,
    steady_token_s: float,
    admission_span_s: float,
    warmup_s: float | None,
    output_tokens: int,
    prefill_s: float | None = None,
) -> Reconciliation:
    steps = output_tokens - 1
    terms = [
        Term("steady", steady_token_s, "steady per-token time (median)", 1.0, steady_token_s),
        Term("ramp", admission_span_s / steps, f"{admission_span_s:.2f} s/{steps}"),
    ]
    if prefill_s is not None and prefill_s > 0:
        terms.append(Term("last prefill", prefill_s / steps, f"{prefill_s:.2f} s/{steps}"))
    if warmup_s is not None and warmup_s > 0:
        terms.append(
            Term(
                "warm-up",
                warmup_s / steps,
                f"{warmup_s:.2f} s/{steps}",
            )
        )
    return Reconciliation(
        reported_label=label,
        reported_tpot_s=reported_tpot_s,
        steady_term_s=steady_token_s,
        ramp_term_s=admission_span_s / steps,
        ramp_s=admission_span_s,
        output_tokens=output_tokens,
        terms=tuple(terms),
    )


def _phase_totals(runs: Sequence[RunAnalysis]) -> dict[str, tuple[float, float]]:
    """Per phase: (output tokens, request-seconds of decoding) over every segment."""
    totals = {phase: (0.0, 0.0) for phase in PHASES}
    for run in runs:
        decode_node = run.admission.requests_total is None  # no Prefill lines: prefilled elsewhere
        for segment in run.shape.segments:
            ramp = segment.phase(PhaseKind.RAMP)
            if decode_node and ramp.tokens and ramp.weighted_s:
                count, seconds = totals["ramp decode"]
                totals["ramp decode"] = (count + ramp.tokens, seconds + ramp.tokens * ramp.weighted_s)
            for phase, tokens, weighted in (
                (kind.value, segment.phase(kind).tokens, segment.phase(kind).weighted_s)
                for kind in (PhaseKind.STEADY, PhaseKind.MIXED, PhaseKind.BURST, PhaseKind.OVERLOAD, PhaseKind.DRAIN)
            ):
                if tokens and weighted:
                    count, seconds = totals[phase]
                    totals[phase] = (count + tokens, seconds + tokens * weighted)
    return totals


def closed_loop_reconciliation(
    runs: Sequence[RunAnalysis], bench: BenchSummary
) -> Reconciliation | None:
    """bench_serving's mean TPOT against the phases of every run (all ranks) of the log."""
    if bench.mean_tpot_ms is None or bench.output_tokens is None or bench.output_tokens < 2:
        return None
    usable = [r for r in runs if r.shape.segments]
    totals = _phase_totals(usable)
    all_tokens = sum(tokens for tokens, _ in totals.values())
    requests = _request_count(usable, bench)
    if all_tokens <= 0 or requests <= 0:
        return None
    steps = bench.output_tokens - 1
    # a request arriving at a PD decode node starts decoding at once: no wait, only the
    # ramp's own (faster, smaller-batch) per-token time, counted as the "ramp decode" phase
    total_wait = sum(r.admission.total_admission_wait_s or 0.0 for r in usable if r.admission.requests_total)
    terms = [
        *_phase_terms(totals, all_tokens),
        *_wait_terms(usable, total_wait, requests=requests, steps=steps),
    ]
    steady = next((t.value_s for t in terms if t.name == "steady"), 0.0)
    ramp = sum(t.value_s for t in terms if t.name == "ramp")
    return Reconciliation(
        reported_label="bench_serving mean TPOT",
        reported_tpot_s=bench.mean_tpot_ms / 1000.0,
        steady_term_s=steady,
        ramp_term_s=ramp,
        ramp_s=total_wait / requests,
        output_tokens=bench.output_tokens,
        terms=tuple(terms),
        requests=requests,
    )


def _request_count(usable: Sequence[RunAnalysis], bench: BenchSummary) -> int:
    """Requests the mean TPOT is over: every run's admissions, or the result block's count
    where a PD decode node sees no Prefill lines."""
    if any(r.admission.requests_total is None for r in usable):
        return bench.completed_requests or 0
    return sum(r.admission.requests_total or 0 for r in usable)


def _phase_terms(totals: dict[str, tuple[float, float]], all_tokens: float) -> list[Term]:
    """share_p × t_p for every phase that generated tokens, in ``PHASES`` order."""
    terms: list[Term] = []
    for phase in PHASES:
        tokens, seconds = totals[phase]
        if tokens <= 0:
            continue
        per_token = seconds / tokens
        share = tokens / all_tokens
        terms.append(
            Term(
                phase,
                share * per_token,
                f"{share:.0%} of tokens × {per_token * 1000:.2f} ms",
                share,
                per_token,
            )
        )
    return terms


def _wait_terms(
    usable: Sequence[RunAnalysis], total_wait: float, *, requests: int, steps: int
) -> list[Term]:
    """The ramp's admission waits (where there are any) and the warm-up's delay, per token."""
    terms: list[Term] = []
    if not total_wait <= 0:  # as a comparison, so that a NaN wait is shown, not dropped
        terms.append(
            Term(
                "ramp",
                total_wait / requests / steps,
                f"{total_wait:.0f} request-s/{requests}/{steps}",
            )
        )
    for name, part in (("last prefill", "prefill_s"), ("warm-up", "excess_s")):
        # the warm-up interval delays every request of its ramp: its last admission's
        # own prefill, then what is left after it and the ordinary decode steps
        wait = sum(
            (getattr(r.shape.warmup_split, part) or 0.0) * (r.admission.requests_admitted or 0)
            for r in usable
            if r.admission.requests_total and r.shape.warmup_split is not None
        )
        if wait > 0:
            terms.append(Term(name, wait / requests / steps, f"{wait:.0f} request-s/{requests}/{steps}"))
    return terms
