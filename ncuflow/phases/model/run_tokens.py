"""Server logs: the output length per request of a run and the harness-style TPOT the log
gives with it, ``(last Decode line − first Prefill line) / (N − 1)``, reconciled with the
steady per-token time and the admission span."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.model.intervals import is_decode
from ncuflow.phases.model.reconcile import harness_reconciliation
from ncuflow.phases.model.results import (
    PhaseKind,
    RunAdmission,
    RunTiming,
    RunTokens,
    Segment,
    ServerRequests,
)
from ncuflow.phases.model.runs import RunSettings
from ncuflow.phases.model.server_requests import single_length
from ncuflow.phases.model.stats import Distribution
from ncuflow.phases.model.traces import BatchSample


def run_tokens(
    capabilities: Capabilities,
    settings: RunSettings,
    main: Segment | None,
    samples: Sequence[BatchSample],
    closed_loop: bool,
    notes: list[str],
    cannot: list[str],
    requests: ServerRequests | None = None,
) -> RunTokens:
    """N per request and the harness-style TPOT the log gives with it (not yet reconciled),
    from the run's lines (``samples``: its admission and statistics lines in order)."""
    prefills = [s for s in samples if s.kind == "prefill"]
    decodes = [s for s in samples if is_decode(s)]
    tokens, source = settings.output_tokens, settings.output_tokens_source
    if tokens is None and single_length(requests) is not None and requests is not None:
        tokens = single_length(requests)
        source = f"the server's per-request timing lines (from line {requests.first_line})"
    steady = main.phase(PhaseKind.STEADY).span if main is not None else None
    if closed_loop and tokens is not None and steady is not None:
        cannot.append(
            "harness-style batch TPOT: requests kept being admitted after the batch filled, so "
            "(batch end − first token)/(N − 1) would span several generations of requests"
        )
        return RunTokens(tokens, source)
    if tokens is None:
        lengths = requests.output_tokens if requests is not None else None
        if steady is not None and prefills and lengths is not None:
            cannot.append(
                f"harness TPOT: the requests differ in output length ({lengths.minimum:.0f}–"
                f"{lengths.maximum:.0f} tokens, from the server's per-request timing lines), so "
                "there is no single N for (batch end − first token)/(N − 1)"
            )
        elif steady is not None and prefills:
            cannot.append(
                "harness TPOT and reconciliation: the output length per request is unknown "
                "(give --output-tokens, or keep the bench_serving command line in the log)"
            )
        return RunTokens(None, source)
    if tokens <= 1 or not prefills or steady is None or main is None:
        return RunTokens(tokens, source)
    harness = (decodes[-1].time_s - prefills[0].time_s) / (tokens - 1)
    notes.append(
        f"harness-style TPOT estimated from the log as (last {capabilities.stats_line} − first "
        f"{capabilities.admission_line}) / (N − 1) with N = {tokens} ({source}); the true batch "
        f"end can be up to one {capabilities.line_interval} later"
    )
    return RunTokens(tokens, source, harness)


def with_reconciliation(
    tokens: RunTokens,
    main: Segment | None,
    admission: RunAdmission,
    timing: RunTiming,
    steady_token_s: Distribution | None,
) -> RunTokens:
    """The harness-style TPOT reconciled with the steady per-token time (``steady_token_s``,
    the run's) and the admission span, where the log gives all three."""
    harness, output_tokens = tokens.harness_tpot_s, tokens.output_tokens
    if (
        harness is None
        or output_tokens is None
        or main is None
        or steady_token_s is None
        or admission.admission_span_s is None
        or harness <= 0
    ):
        return tokens
    reconciliation = harness_reconciliation(
        label="harness TPOT (from log)",
        reported_tpot_s=harness,
        steady_token_s=timing.headline_token_s or steady_token_s.median,
        admission_span_s=admission.admission_span_s,
        warmup_s=main.warmup_split.excess_s if main.warmup_split is not None else None,
        output_tokens=output_tokens,
        prefill_s=main.warmup_split.prefill_s if main.warmup_split is not None else None,
    )
    return replace(tokens, reconciliation=reconciliation)
