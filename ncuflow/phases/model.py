"""Phase split, TPOT reconciliation and the amortization test.

Pure functions over frozen dataclasses; no I/O. The parsers turn files into
``ServerTrace`` (scheduler statistics lines of SGLang or vLLM) or ``RequestTrace``
(per-request streaming timestamps); ``analyse_server_trace`` and ``analyse_request_trace``
turn those into ``RunAnalysis`` values, one per run; ``amortization_test`` compares runs.

Vocabulary used throughout:
- *admission ramp*: from the first request's submission (server logs: the first Prefill
  line of the run) until the batch reaches its steady size;
- *steady decode*: the longest stretch at stable batch size with no prefill mixed in;
- *drain*: from the end of the steady stretch until the last request finishes;
- *per-token time*: time between two output tokens of one request during steady decode
  (for speculative decoding, the step time divided by the accept length);
- *admission span*: first request's first token to the last admitted request's first
  token; this is the ``T_ramp`` of ``TPOT_reported ≈ T_steady + T_ramp / (N_output − 1)``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from ncuflow.spread import quantile, relative_width

# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class BatchSample:
    """One scheduler statistics line of a server log.

    ``kind`` is "prefill" or "decode" (SGLang) or "stats" (vLLM's periodic line).
    ``running`` is the batch size the line reports; for SGLang Prefill lines it is the
    number of requests already running *before* the new ones join.
    """

    time_s: float
    kind: str
    running: int
    line: int
    queued: int | None = None
    new_seqs: int | None = None
    new_tokens: int | None = None
    gen_throughput: float | None = None
    prompt_throughput: float | None = None
    accept_len: float | None = None
    pending_tokens: int | None = (
        None  # SGLang chunked prefill: tokens of this request still to come
    )
    incoming: int | None = None  # PD decode node: requests pre-allocated or in KV transfer


@dataclass(frozen=True)
class LogEvent:
    """A line worth telling the user about: retraction, traceback, shutdown."""

    time_s: float | None
    line: int
    kind: str
    text: str


@dataclass(frozen=True)
class BenchSummary:
    """What a bench_serving command line and result block in the same log say."""

    line: int
    output_tokens: int | None = None
    output_tokens_source: str = ""
    mean_tpot_ms: float | None = None
    median_tpot_ms: float | None = None
    mean_ttft_ms: float | None = None
    median_ttft_ms: float | None = None
    median_itl_ms: float | None = None
    max_concurrency: int | None = None


@dataclass(frozen=True)
class ServerTrace:
    """The statistics lines of one scheduler (one DP rank) of one server log."""

    path: str
    engine: str  # "sglang" or "vllm"
    rank: str | None
    clock_origin: str  # wall-clock text of time_s == 0
    samples: tuple[BatchSample, ...]
    events: tuple[LogEvent, ...]
    time_resolution_s: float
    bench: BenchSummary | None = None


@dataclass(frozen=True)
class RequestRecord:
    """One request of a streaming trace: submit time and the arrival of every chunk."""

    request_id: str
    submit_s: float
    chunk_times_s: tuple[float, ...]
    chunk_tokens: tuple[int, ...]  # tokens carried by each chunk (1 when not recorded)
    line: int
    declared_output_tokens: int | None = None  # when the source states it (bench JSON)

    @property
    def output_tokens(self) -> int:
        if self.declared_output_tokens is not None:
            return self.declared_output_tokens
        return sum(self.chunk_tokens)


@dataclass(frozen=True)
class RequestTrace:
    """The requests of one run of a client-side streaming trace (JSONL or bench JSON)."""

    path: str
    run: str
    source_format: str  # "jsonl" or "bench-json"
    requests: tuple[RequestRecord, ...]
    has_start_times: bool = True
    clock_origin: str = ""
    reported_mean_tpot_ms: float | None = None


# --------------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class Distribution:
    count: int
    median: float
    p10: float
    p90: float
    minimum: float
    maximum: float

    @property
    def relative_spread(self) -> float:
        """(p90 − p10) / median."""
        return relative_width(self.p10, self.p90, self.median) if self.median else math.nan


@dataclass(frozen=True)
class PhaseSpan:
    name: str  # "ramp", "steady", "mixed", "drain"
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Reconciliation:
    """TPOT_reported ≈ T_steady + T_ramp / (N_output − 1), and what each term explains."""

    reported_label: str
    reported_tpot_s: float
    steady_term_s: float
    ramp_term_s: float
    ramp_s: float
    output_tokens: int

    @property
    def predicted_tpot_s(self) -> float:
        return self.steady_term_s + self.ramp_term_s

    @property
    def steady_share(self) -> float:
        return self.steady_term_s / self.reported_tpot_s

    @property
    def ramp_share(self) -> float:
        return self.ramp_term_s / self.reported_tpot_s

    @property
    def residual_share(self) -> float:
        return 1.0 - self.steady_share - self.ramp_share


@dataclass(frozen=True)
class TimelinePoint:
    time_s: float
    kind: str
    batch: int
    queued: int | None
    per_token_s: float | None  # per-token time over the interval ending here, if known


@dataclass(frozen=True)
class RunAnalysis:
    path: str
    source_format: str
    run_index: int
    run_label: str
    rank: str | None
    clock_origin: str
    start_s: float
    end_s: float
    peak_batch: int
    steady_batch: float | None
    ramp: PhaseSpan | None
    steady: PhaseSpan | None
    drain: PhaseSpan | None
    admission_span_s: float | None
    mean_admission_wait_s: float | None  # mean over admitted requests of (last admission − own)
    requests_admitted: int | None
    ttft_s: Distribution | None
    steady_token_s: Distribution | None
    steady_step_s: float | None
    step_method: str
    output_tokens: int | None
    output_tokens_source: str
    harness_tpot_s: float | None
    mean_request_tpot_s: float | None
    reconciliation: Reconciliation | None
    cannot: tuple[str, ...]
    notes: tuple[str, ...]
    timeline: tuple[TimelinePoint, ...] = field(default=(), repr=False)
    mixed: PhaseSpan | None = None  # batch at steady size but with admissions (closed loop)
    token_gaps: tuple[tuple[float, float], ...] = field(default=(), repr=False)  # (time, s/token)
    itl_by_position: tuple[float, ...] = field(default=(), repr=False)  # median ITL per position
    retraction_times_s: tuple[float, ...] = ()
    ttft_values_s: tuple[float, ...] = field(default=(), repr=False)
    abort_time_s: float | None = None  # a traceback ended the run here


@dataclass(frozen=True)
class AmortizationRun:
    label: str
    config: str
    output_tokens: int
    reported_tpot_s: float
    steady_token_s: float

    @property
    def excess_s(self) -> float:
        return self.reported_tpot_s - self.steady_token_s


@dataclass(frozen=True)
class AmortizationResult:
    config: str
    runs: tuple[AmortizationRun, ...]
    verdict: str  # "fixed", "per-token", "none", "inconclusive"
    fixed_cost_s: float | None
    per_token_cost_s: float | None
    fixed_rms_rel: float | None
    per_token_rms_rel: float | None
    explanation: str


@dataclass(frozen=True)
class ConfigGap:
    output_tokens: int
    configs: tuple[str, str]
    reported_gap: float
    steady_gap: float


# --------------------------------------------------------------------------- helpers


def distribution(values: Sequence[float]) -> Distribution | None:
    if not values:
        return None
    ordered = sorted(values)
    return Distribution(
        count=len(ordered),
        median=statistics.median(ordered),
        p10=quantile(ordered, 0.10),
        p90=quantile(ordered, 0.90),
        minimum=ordered[0],
        maximum=ordered[-1],
    )


def _stable(batch: float, reference: float, tolerance: float) -> bool:
    return abs(batch - reference) <= max(tolerance * reference, 0.0)


# --------------------------------------------------------------------------- server logs


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
        if retracted or not _stable(sample.running, samples[start].running, tolerance):
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


# --------------------------------------------------------------------------- request traces


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
        return _analyse_without_start_times(
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
    return RunAnalysis(
        path=trace.path,
        source_format=trace.source_format,
        run_index=run_index,
        run_label=trace.run,
        rank=None,
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
        ttft_s=ttft,
        steady_token_s=steady_tokens,
        steady_step_s=steady_tokens.median if steady_tokens else None,
        step_method="per-token time = gap between consecutive streamed chunks of one request "
        "(divided by the chunk's tokens) inside the steady stretch",
        output_tokens=tokens,
        output_tokens_source=tokens_source,
        harness_tpot_s=harness,
        mean_request_tpot_s=mean_request_tpot,
        reconciliation=reconciliation,
        cannot=tuple(cannot),
        notes=tuple(notes),
        timeline=timeline,
        token_gaps=token_gaps,
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


def _analyse_without_start_times(
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
    return RunAnalysis(
        path=trace.path,
        source_format=trace.source_format,
        run_index=run_index,
        run_label=trace.run,
        rank=None,
        clock_origin="",
        start_s=0.0,
        end_s=0.0,
        peak_batch=0,
        steady_batch=None,
        ramp=None,
        steady=None,
        drain=None,
        admission_span_s=None,
        mean_admission_wait_s=None,
        requests_admitted=len(trace.requests),
        ttft_s=ttft,
        steady_token_s=itl,
        steady_step_s=itl.median if itl else None,
        step_method="steady per-token time ≈ median inter-token latency over all requests; the "
        "ramp term is the mean per-request time above median ITL (stalls), not a measured ramp",
        output_tokens=tokens,
        output_tokens_source=tokens_source,
        harness_tpot_s=None,
        mean_request_tpot_s=mean_request_tpot,
        reconciliation=reconciliation,
        cannot=(
            "bench_serving JSON has no per-request start times: batch size over time, the "
            "admission ramp, steady window, drain and the harness-style (batch) TPOT cannot "
            "be derived; only TTFT/ITL distributions and per-request stalls can",
        ),
        notes=(),
        timeline=(),
        itl_by_position=itl_by_position,
        ttft_values_s=tuple(r.chunk_times_s[0] - r.submit_s for r in trace.requests),
    )


# --------------------------------------------------------------------------- amortization


def amortization_test(
    runs: Sequence[AmortizationRun], *, tolerance: float = 0.25
) -> tuple[AmortizationResult, ...]:
    """Per configuration: does TPOT − T_steady shrink as 1/(N − 1) (a fixed cost, such as an
    admission ramp, amortized over more tokens) or stay constant (a recurring per-token cost)?

    Fits both one-parameter models by least squares and keeps the one with the smaller
    relative RMS residual; "inconclusive" when both fit about equally (within ``tolerance``)
    or when fewer than two output lengths are present; "none" when the excess is < 1 % of
    the steady time everywhere.
    """
    by_config: dict[str, list[AmortizationRun]] = {}
    for run in runs:
        by_config.setdefault(run.config, []).append(run)
    results = []
    for config, group in by_config.items():
        group = sorted(group, key=lambda r: r.output_tokens)
        lengths = {r.output_tokens for r in group}
        if len(lengths) < 2:
            results.append(
                AmortizationResult(
                    config,
                    tuple(group),
                    "inconclusive",
                    None,
                    None,
                    None,
                    None,
                    "needs runs with at least two different output lengths",
                )
            )
            continue
        if all(abs(r.excess_s) < 0.01 * r.steady_token_s for r in group):
            results.append(
                AmortizationResult(
                    config,
                    tuple(group),
                    "none",
                    None,
                    None,
                    None,
                    None,
                    "reported TPOT equals steady decode at every output length",
                )
            )
            continue
        inv = [1.0 / (r.output_tokens - 1) for r in group]
        excess = [r.excess_s for r in group]
        fixed = sum(x * e for x, e in zip(inv, excess, strict=True)) / sum(x * x for x in inv)
        per_token = statistics.fmean(excess)
        scale = statistics.fmean(abs(e) for e in excess) or 1.0
        rms_fixed = (
            math.sqrt(
                statistics.fmean((e - fixed * x) ** 2 for x, e in zip(inv, excess, strict=True))
            )
            / scale
        )
        rms_token = math.sqrt(statistics.fmean((e - per_token) ** 2 for e in excess)) / scale
        if rms_fixed < rms_token * (1 - tolerance) and fixed > 0:
            verdict = "fixed"
            text = (
                f"the excess over steady decode shrinks as 1/(N − 1): a fixed cost of "
                f"{fixed:.2f} s per run amortized over the output tokens (an admission ramp), "
                "not a per-token cost"
            )
        elif rms_token < rms_fixed * (1 - tolerance):
            verdict = "per-token"
            text = (
                f"the excess over steady decode stays ≈ {per_token * 1000:.2f} ms per token "
                "whatever the output length: a recurring per-token cost"
            )
        else:
            verdict = "inconclusive"
            text = "both a fixed and a per-token cost fit the runs about equally well"
        results.append(
            AmortizationResult(
                config, tuple(group), verdict, fixed, per_token, rms_fixed, rms_token, text
            )
        )
    return tuple(results)


def config_gaps(runs: Sequence[AmortizationRun]) -> tuple[ConfigGap, ...]:
    """Relative gap between two configurations at each common output length."""
    configs = sorted({r.config for r in runs})
    if len(configs) != 2:
        return ()
    gaps = []
    lengths = sorted({r.output_tokens for r in runs})
    for n in lengths:
        pair = [[r for r in runs if r.config == c and r.output_tokens == n] for c in configs]
        if not pair[0] or not pair[1]:
            continue
        a, b = pair[0][0], pair[1][0]
        low, high = (a, b) if a.reported_tpot_s <= b.reported_tpot_s else (b, a)
        gaps.append(
            ConfigGap(
                output_tokens=n,
                configs=(high.config, low.config),
                reported_gap=high.reported_tpot_s / low.reported_tpot_s - 1,
                steady_gap=high.steady_token_s / low.steady_token_s - 1,
            )
        )
    return tuple(gaps)
