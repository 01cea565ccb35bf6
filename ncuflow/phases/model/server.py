"""Server logs (SGLang, vLLM): split into runs, find the phases of each run."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from ncuflow.phases.model.results import PhaseSpan, Reconciliation, RunAnalysis, TimelinePoint
from ncuflow.phases.model.stats import Distribution, distribution, stable
from ncuflow.phases.model.traces import BatchSample, BenchSummary, LogEvent, ServerTrace


@dataclass(frozen=True)
class ServerRun:
    index: int
    samples: tuple[BatchSample, ...]
    events: tuple[LogEvent, ...]


def split_server_runs(trace: ServerTrace) -> tuple[ServerRun, ...]:
    """Cut a scheduler's lines into runs: a new run starts when the batch was empty.

    SGLang: a Prefill line with ``#running-req: 0`` after any Decode line (or after a run
    that already admitted requests and decoded) starts a new run. vLLM: a run is a stretch
    of stats lines with running or waiting requests, closed by the first idle line.
    """
    runs: list[list[BatchSample]] = []
    if trace.engine == "vllm":
        current: list[BatchSample] = []
        for sample in trace.samples:
            busy = sample.running > 0 or (sample.queued or 0) > 0
            if busy:
                current.append(sample)
            elif current:
                current.append(sample)  # the idle line closes the run (its window had output)
                runs.append(current)
                current = []
        if current:
            runs.append(current)
    else:
        current = []
        for sample in trace.samples:
            continues_chunked_prefill = bool(current) and (current[-1].pending_tokens or 0) > 0
            starts_new = (
                sample.kind == "prefill"
                and sample.running == 0
                and bool(current)
                and not continues_chunked_prefill
            )
            if starts_new:
                runs.append(current)
                current = []
            current.append(sample)
        if current:
            runs.append(current)
    result = []
    for index, samples in enumerate(runs, start=1):
        # events before the first run or after the last one belong to those runs
        first = samples[0].time_s if index > 1 else -math.inf
        last = runs[index][0].time_s if index < len(runs) else math.inf
        events = tuple(e for e in trace.events if e.time_s is not None and first <= e.time_s < last)
        result.append(ServerRun(index=index, samples=tuple(samples), events=events))
    return tuple(result)


def _stable_stretches(
    samples: Sequence[BatchSample], tolerance: float, retraction_times: Sequence[float]
) -> list[tuple[int, int]]:
    """Index ranges [i, j] of consecutive decode samples with no prefill between and a batch
    size within ``tolerance`` of the stretch's first sample."""
    stretches: list[tuple[int, int]] = []
    start: int | None = None
    for index, sample in enumerate(samples):
        is_decode = sample.kind in ("decode", "stats")
        mixed_prefill = (sample.kind == "stats" and (sample.prompt_throughput or 0.0) > 0.0) or (
            (sample.incoming or 0) > 0  # a PD decode node still receiving requests
        )
        retracted = start is not None and any(
            samples[index - 1].time_s < t <= sample.time_s for t in retraction_times
        )
        if not is_decode or mixed_prefill or sample.running == 0:
            if start is not None and index - 1 > start:
                stretches.append((start, index - 1))
            start = None if not is_decode or sample.running == 0 else index
            continue
        if start is None:
            start = index
            continue
        if retracted or not stable(sample.running, samples[start].running, tolerance):
            if index - 1 > start:
                stretches.append((start, index - 1))
            start = index
    if start is not None and len(samples) - 1 > start:
        stretches.append((start, len(samples) - 1))
    return stretches


def _per_token_from_throughput(sample: BatchSample) -> float | None:
    """Seconds per output token of one request over the interval ending at ``sample``:
    the scheduler's generated-token rate is shared by ``running`` requests."""
    if sample.gen_throughput is None or sample.gen_throughput <= 0 or sample.running <= 0:
        return None
    return sample.running / sample.gen_throughput


def analyse_server_trace(
    trace: ServerTrace,
    *,
    decode_log_interval: int = 40,
    batch_tolerance: float = 0.05,
    output_tokens: int | None = None,
    run_label_prefix: str = "",
) -> tuple[RunAnalysis, ...]:
    runs = split_server_runs(trace)
    bench = trace.bench
    tokens, tokens_source = output_tokens, "--output-tokens" if output_tokens else ""
    if tokens is None and bench is not None and bench.output_tokens is not None:
        tokens, tokens_source = bench.output_tokens, bench.output_tokens_source
    retractions = [
        e.time_s for e in trace.events if e.kind == "retraction" and e.time_s is not None
    ]
    results = []
    for run in runs:
        results.append(
            _analyse_server_run(
                trace,
                run,
                decode_log_interval=decode_log_interval,
                batch_tolerance=batch_tolerance,
                output_tokens=tokens,
                output_tokens_source=tokens_source,
                retraction_times=retractions,
                run_label_prefix=run_label_prefix,
            )
        )
    return tuple(results)


def _analyse_server_run(
    trace: ServerTrace,
    run: ServerRun,
    *,
    decode_log_interval: int,
    batch_tolerance: float,
    output_tokens: int | None,
    output_tokens_source: str,
    retraction_times: Sequence[float],
    run_label_prefix: str,
) -> RunAnalysis:
    samples = run.samples
    engine = trace.engine
    notes: list[str] = []
    cannot: list[str] = []
    prefills = [s for s in samples if s.kind == "prefill"]
    decodes = [s for s in samples if s.kind in ("decode", "stats")]
    start_s, end_s = samples[0].time_s, samples[-1].time_s
    peak = max(
        [s.running for s in decodes] + [s.running + (s.new_seqs or 0) for s in prefills] + [0]
    )
    resolution = trace.time_resolution_s

    # timeline for the plot
    timeline: list[TimelinePoint] = []
    for sample in samples:
        per_token = _per_token_from_throughput(sample) if sample.kind != "prefill" else None
        batch = (
            sample.running + (sample.new_seqs or 0) if sample.kind == "prefill" else sample.running
        )
        timeline.append(TimelinePoint(sample.time_s, sample.kind, batch, sample.queued, per_token))

    if engine == "sglang" and not prefills:
        cannot.append(
            "no Prefill lines in this run (e.g. a PD decode node): admissions are seen only as "
            "increases of #running-req between Decode lines, so TTFT and the admission span "
            "cannot be measured"
        )
    if len(decodes) < 2:
        cannot.append(
            f"only {len(decodes)} Decode line(s): the run is shorter than two decode-log "
            f"intervals ({decode_log_interval} steps each), so no step time can be derived"
            if engine == "sglang"
            else f"only {len(decodes)} stats line(s) with running requests: too short for the "
            "10-s statistics window"
        )
    if (
        run.index == 1
        and peak <= 1
        and trace.bench is not None
        and len(split_server_runs(trace)) > 1
    ):
        notes.append(
            "a single request before the benchmark: probably bench_serving's warm-up request"
        )
    for event in run.events:
        if event.kind in ("traceback", "shutdown"):
            notes.append(f"line {event.line}: {event.text}")
    n_retractions = sum(1 for e in run.events if e.kind == "retraction")
    if n_retractions:
        notes.append(
            f"{n_retractions} retraction(s) (KV cache full, requests pushed back to the queue): "
            "the batch size is not stable around them"
        )

    # steady stretch: longest (in time) stable stretch at ≥ 90 % of the peak batch
    stretches = _stable_stretches(samples, batch_tolerance, retraction_times)
    candidates = [
        (i, j)
        for i, j in stretches
        if peak > 0
        and samples[i].running >= (1 - batch_tolerance) * peak - 1e-9
        and (samples[j].time_s - samples[i].time_s >= resolution or j - i >= 2)
    ]
    steady: PhaseSpan | None = None
    ramp: PhaseSpan | None = None
    drain: PhaseSpan | None = None
    steady_tokens: Distribution | None = None
    steady_step: float | None = None
    steady_batch: float | None = None
    step_method = ""
    admission_span: float | None = None
    mean_wait: float | None = None
    admitted: int | None = None
    mixed: PhaseSpan | None = None
    closed_loop = False
    if not candidates and len(decodes) >= 2:
        best_any = max((samples[j].time_s - samples[i].time_s for i, j in stretches), default=None)
        reason = (
            "the batch never held its peak size between two consecutive statistics lines with "
            "no admission in between (Prefill lines, vLLM prompt throughput, or PD "
            "#transfer-req/#prealloc-req)"
        )
        if n_retractions:
            reason += (
                f" (the KV cache filled up: {n_retractions} retraction(s) make the batch size "
                "saw-tooth)"
            )
        elif any(e.kind == "traceback" for e in run.events):
            reason += " (the run ends in a traceback while still admitting requests)"
        elif engine == "vllm":
            reason += (
                " (vLLM prints one line per 10 s; every busy window here also processed prompts)"
            )
        if best_any:
            reason += f"; the longest stable stretch below the peak lasts {best_any:.1f} s"
        cannot.append("no steady decode phase: " + reason)
    if candidates:
        i, j = max(
            candidates,
            key=lambda ij: (samples[ij[1]].time_s - samples[ij[0]].time_s, ij[1] - ij[0]),
        )
        stretch = samples[i : j + 1]
        steady = PhaseSpan("steady", stretch[0].time_s, stretch[-1].time_s)
        steady_batch = statistics.median(s.running for s in stretch)
        ramp = PhaseSpan("ramp", start_s, stretch[0].time_s)
        drain = PhaseSpan("drain", stretch[-1].time_s, end_s)
        token_times = [_per_token_from_throughput(s) for s in stretch[1:]]
        accept = [s.accept_len for s in stretch[1:] if s.accept_len is not None]
        mean_accept = statistics.fmean(accept) if accept else None
        span = stretch[-1].time_s - stretch[0].time_s
        intervals = len(stretch) - 1
        if all(v is not None for v in token_times) and token_times:
            values = [v for v in token_times if v is not None]
            steady_tokens = distribution(values)
            assert steady_tokens is not None
            steady_step = steady_tokens.median * (mean_accept or 1.0)
            if engine == "sglang":
                step_method = (
                    "per-token time = #running-req / gen throughput on each Decode line of the "
                    "steady stretch"
                )
                if mean_accept:
                    step_method += (
                        f"; speculative decoding: step = per-token × accept len ({mean_accept:.2f})"
                    )
                if span > 0 and steady_step > 0:
                    implied = span / (intervals * steady_step)
                    step_method += (
                        f"; cross-check: the timestamps imply {implied:.0f} steps between Decode "
                        f"lines (assumed --decode-log-interval {decode_log_interval}"
                        + (
                            f"; ±{resolution / span * implied:.0f} from the "
                            f"{resolution:g}-s timestamps"
                            if resolution >= 0.5
                            else ""
                        )
                        + ")"
                    )
                    if abs(implied - decode_log_interval) > max(
                        0.15 * decode_log_interval, 2 * resolution / span * implied
                    ):
                        notes.append(
                            f"timestamps imply ≈{implied:.0f} decode steps between Decode lines, "
                            f"not {decode_log_interval}: check --decode-log-interval"
                        )
            else:
                step_method = (
                    "per-token time = Running / Avg generation throughput of each 10-s vLLM "
                    "stats window (a window average, not a step time)"
                )
        elif engine == "sglang" and span > 0:
            step = span / (intervals * decode_log_interval)
            steady_step = step
            values = [
                (b.time_s - a.time_s) / decode_log_interval / (mean_accept or 1.0)
                for a, b in pairwise(stretch)
            ]
            steady_tokens = distribution(values)
            step_method = (
                f"step = Δt between Decode lines / {decode_log_interval} steps (assumed "
                "--decode-log-interval; no gen throughput on these lines)"
            )
            if resolution >= 0.5:
                step_method += f"; timestamps to {resolution:g} s limit each interval's resolution"
        else:
            cannot.append("no step time: the steady stretch has no throughput and no time span")
        if len(stretch) - 1 < 3:
            notes.append(
                f"the steady stretch covers only {len(stretch) - 1} statistics interval(s): "
                "treat its step time as a rough estimate"
            )
        if resolution >= 0.5:
            notes.append(
                f"timestamps have {resolution:g}-s resolution: phase boundaries are uncertain "
                f"by ±{resolution:g} s"
            )
        if engine == "sglang":
            ramp_prefills = [s for s in prefills if s.time_s <= stretch[0].time_s]
            if ramp_prefills:
                last_admission = ramp_prefills[-1].time_s
                admission_span = last_admission - ramp_prefills[0].time_s
                admitted = sum(s.new_seqs or 0 for s in ramp_prefills)
                if admitted:
                    mean_wait = (
                        sum((s.new_seqs or 0) * (last_admission - s.time_s) for s in ramp_prefills)
                        / admitted
                    )
            last = stretch[-1]
            later = samples[j + 1 :]
            full = [
                s for s in later if s.running >= (1 - 2 * batch_tolerance) * (steady_batch or 0)
            ]
            readmitted = sum(s.new_seqs or 0 for s in later if s.kind == "prefill")
            if readmitted:
                closed_loop = True
                mixed_end = full[-1].time_s if full else last.time_s
                mixed = PhaseSpan("mixed", last.time_s, mixed_end)
                drain = PhaseSpan("drain", mixed_end, end_s)
                notes.append(
                    f"{readmitted} request(s) were admitted after the steady stretch while the batch "
                    f"stayed near {steady_batch:g} (a closed loop refilling finished requests): "
                    f"that stretch ({mixed.duration_s:.0f} s) mixes prefill into decode and is shown "
                    "as 'mixed', not steady"
                )
                mixed_tokens = [
                    v
                    for v in (
                        _per_token_from_throughput(s)
                        for s in later
                        if s.kind == "decode" and s.time_s <= mixed_end
                    )
                    if v is not None
                ]
                if mixed_tokens and steady_tokens is not None:
                    notes.append(
                        "per-token time in the mixed stretch: median "
                        f"{statistics.median(mixed_tokens) * 1000:.1f} ms, mean "
                        f"{statistics.fmean(mixed_tokens) * 1000:.1f} ms (steady "
                        f"{steady_tokens.median * 1000:.1f} ms): each replacement admission "
                        "stalls the running batch, a per-token cost the ramp term does not cover"
                    )
            if last is samples[-1] and last.running > 0:
                drain = None
                cannot.append(
                    f"drain not visible: the run's last Decode line still shows {last.running} "
                    f"running requests, so they all finished within one decode-log interval "
                    f"({decode_log_interval} steps"
                    + (f" ≈ {decode_log_interval * steady_step:.1f} s" if steady_step else "")
                    + ") after it"
                )
        elif engine == "vllm":
            cannot.append(
                "vLLM stats lines carry no per-request times: admission span and TTFT are "
                "not measurable"
            )

    if engine == "sglang" and prefills:
        cannot.append("TTFT distribution: a server log has no per-request submit times")

    harness: float | None = None
    reconciliation: Reconciliation | None = None
    if closed_loop and output_tokens is not None:
        cannot.append(
            "harness-style batch TPOT: requests kept being admitted after the batch filled, so "
            "(batch end − first token)/(N − 1) would span several generations of requests"
        )
    elif output_tokens is not None and output_tokens > 1 and prefills and steady is not None:
        last_decode = decodes[-1].time_s
        harness = (last_decode - prefills[0].time_s) / (output_tokens - 1)
        notes.append(
            "harness-style TPOT estimated from the log as (last Decode line − first Prefill "
            f"line) / (N − 1) with N = {output_tokens} ({output_tokens_source}); the true batch "
            "end can be up to one decode-log interval later"
        )
        if steady_tokens is not None and admission_span is not None and harness > 0:
            reconciliation = Reconciliation(
                reported_label="harness TPOT (from log)",
                reported_tpot_s=harness,
                steady_term_s=steady_tokens.median,
                ramp_term_s=admission_span / (output_tokens - 1),
                ramp_s=admission_span,
                output_tokens=output_tokens,
            )
    elif output_tokens is None and steady is not None and prefills:
        cannot.append(
            "harness TPOT and reconciliation: the output length per request is unknown "
            "(give --output-tokens, or keep the bench_serving command line in the log)"
        )

    label = f"{run_label_prefix}{'' if trace.rank is None else trace.rank + ' '}run {run.index}"
    return RunAnalysis(
        path=trace.path,
        source_format=f"{engine} server log",
        run_index=run.index,
        run_label=label.strip(),
        rank=trace.rank,
        clock_origin=trace.clock_origin,
        start_s=start_s,
        end_s=end_s,
        peak_batch=peak,
        steady_batch=steady_batch,
        ramp=ramp,
        steady=steady,
        drain=drain,
        admission_span_s=admission_span,
        mean_admission_wait_s=mean_wait,
        requests_admitted=admitted,
        ttft_s=None,
        steady_token_s=steady_tokens,
        steady_step_s=steady_step,
        step_method=step_method,
        output_tokens=output_tokens,
        output_tokens_source=output_tokens_source,
        harness_tpot_s=harness,
        mean_request_tpot_s=None,
        reconciliation=reconciliation,
        cannot=tuple(dict.fromkeys(cannot)),
        notes=tuple(dict.fromkeys(notes)),
        timeline=tuple(timeline),
        mixed=mixed,
        retraction_times_s=tuple(
            e.time_s for e in run.events if e.kind == "retraction" and e.time_s is not None
        ),
        abort_time_s=next(
            (e.time_s for e in run.events if e.kind == "traceback" and e.time_s is not None), None
        ),
    )


def bench_reconciliation(runs: Sequence[RunAnalysis], bench: BenchSummary) -> Reconciliation | None:
    """bench_serving's mean TPOT (per request) against steady decode plus admission stalls.

    A request admitted at ``a_i`` into a ramp that ends at ``a_last`` waits through the
    prefills of everyone admitted after it, so its share of the ramp is ``a_last − a_i``;
    the mean over requests of that, divided by N − 1, is the ramp term. The per-run values
    are combined weighting each run by the requests it admitted.
    """
    if bench.mean_tpot_ms is None or bench.output_tokens is None or bench.output_tokens < 2:
        return None
    usable = [
        r
        for r in runs
        if r.steady_token_s is not None and r.requests_admitted and r.ramp is not None
    ]
    if not usable:
        return None
    usable = [r for r in usable if r.mean_admission_wait_s is not None]
    if not usable:
        return None
    weights = [float(r.requests_admitted or 0) for r in usable]
    total = sum(weights)
    steady = (
        sum(
            w * r.steady_token_s.median
            for w, r in zip(weights, usable, strict=True)
            if r.steady_token_s
        )
        / total
    )
    mean_stall = (
        sum(w * (r.mean_admission_wait_s or 0.0) for w, r in zip(weights, usable, strict=True))
        / total
    )
    return Reconciliation(
        reported_label="bench_serving mean TPOT",
        reported_tpot_s=bench.mean_tpot_ms / 1000.0,
        steady_term_s=steady,
        ramp_term_s=mean_stall / (bench.output_tokens - 1),
        ramp_s=mean_stall,
        output_tokens=bench.output_tokens,
    )
