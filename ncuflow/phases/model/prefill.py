"""A prefill's own time, from its tokens and the scheduler's prefill throughput.

SGLang runs a prefill batch whenever it can form one, before any decode step, and logs its
Prefill line as it forms it. So two consecutive Prefill lines, the first of which leaves
work pending (requests still queued, ``#pending-token``, a prompt cut into chunks), are
two prefill forwards back to back: the time between the lines is the first one's
prefill. A *chain* is such a run of Prefill lines; the throughput is the chains' tokens
(all but each chain's last line) over their time, kept where that time is at least
``MIN_CHAIN_RESOLUTIONS`` timestamp steps (a log with 1-s timestamps needs chains of
seconds). ``PrefillRate.tokens_per_s`` is then the scheduler's prefill throughput, and a
batch of T tokens takes T / it.

The interval from a ramp's last admission to the first Decode line after it (the
*warm-up* interval) holds that admission's own prefill, then ordinary decode steps up to
the Decode line (on average half a decode-log interval: the counter runs at an unknown
phase), and only what is left is warm-up (first-step warm-up, graph capture).

In words: a long admission is prefill, not warm-up (``prefill_note``), and the warm-up note
says what is left after the last admission's own prefill (``warmup_note``)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.model.results import Segment, WarmupSplit
from ncuflow.phases.model.traces import BatchSample, ServerTrace

MIN_CHAIN_RESOLUTIONS = 3


@dataclass(frozen=True)
class PrefillRate:
    tokens_per_s: float
    tokens: float  # the tokens it was measured on
    seconds: float
    chains: int


def _leaves_work(sample: BatchSample) -> bool:
    return bool(sample.queued) or bool(sample.pending_tokens) or sample.unfinished_seqs > 0


def prefill_rate(samples: Sequence[BatchSample], resolution_s: float) -> PrefillRate | None:
    """The prefill throughput of one scheduler's lines (None where no chain says it)."""
    tokens = seconds = 0.0
    chains = 0
    chain_tokens, chain_start = 0.0, None
    previous: BatchSample | None = None
    for sample in [*samples, None]:
        linked = (
            sample is not None
            and previous is not None
            and sample.kind == "prefill"
            and previous.kind == "prefill"
            and _leaves_work(previous)
        )
        if linked and previous is not None:
            chain_start = previous.time_s if chain_start is None else chain_start
            chain_tokens += previous.new_tokens or 0
        elif chain_start is not None and previous is not None:
            tokens, seconds, chains = tokens + chain_tokens, seconds + previous.time_s - chain_start, chains + 1
            chain_tokens, chain_start = 0.0, None
        previous = sample
    if chains == 0 or seconds < MIN_CHAIN_RESOLUTIONS * resolution_s or seconds <= 0 or tokens <= 0:
        return None
    return PrefillRate(tokens / seconds, tokens, seconds, chains)


def split_warmup(
    duration_s: float,
    prefill_tokens: int,
    rate: PrefillRate | None,
    ordinary_decode_s: float,
) -> WarmupSplit:
    prefill = prefill_tokens / rate.tokens_per_s if rate is not None and prefill_tokens else None
    # a prefill longer than the interval cannot be: the rate is off; keep the interval whole
    if prefill is not None and prefill > duration_s:
        prefill = duration_s
    decode = max(0.0, min(ordinary_decode_s, duration_s - (prefill or 0.0)))
    excess = max(0.0, duration_s - (prefill or 0.0) - decode)
    return WarmupSplit(prefill, prefill_tokens, decode, excess)


LONG_ADMISSION_TOKENS = 4096  # an admission this large may take longer than a decode-log interval


def typical_prefill_gap(samples: Sequence[BatchSample], segment: Segment) -> float:
    """Typical time between consecutive Prefill lines of the ramp: the last admission's own
    prefill runs after its line, inside the warm-up interval (where no throughput is known)."""
    start = segment.ramp.start_s if segment.ramp is not None else segment.plateau.start_s
    times = [s.time_s for s in samples if s.kind == "prefill" and start <= s.time_s <= segment.plateau.start_s]
    gaps = [b - a for a, b in pairwise(times)]
    return statistics.median(gaps) if gaps else 0.0


def warmup_note(
    trace: ServerTrace,
    run_samples: Sequence[BatchSample],
    main: Segment,
    interval_s: float | None,
) -> list[str]:
    """A note where the warm-up interval outlasts one decode-log interval and its last
    admission's prefill: first-step warm-up or graph capture, unless the prefill of a
    large admission cannot be told apart (no prefill throughput in the log)."""
    warmup, words = main.warmup, trace.capabilities
    if warmup is None or not interval_s or not words.prefill_lines:
        return []
    prefill = main.warmup_split.prefill_s if main.warmup_split is not None else None
    known = prefill if prefill is not None else typical_prefill_gap(run_samples, main)
    if warmup.duration_s <= interval_s * 1.05 + known + trace.time_resolution_s:
        return []
    tokens = main.warmup_split.prefill_tokens if main.warmup_split is not None else 0
    if prefill is None and tokens >= LONG_ADMISSION_TOKENS:
        return [
            f"the interval from the ramp's last admission to the first {words.stats_line} ({warmup.duration_s:.1f} s) "
            f"holds that admission's prefill of {tokens:,} tokens, and the log gives no prefill throughput "
            f"(no back-to-back {words.admission_line}s): its prefill and any warm-up cannot be told apart"
        ]
    own = f" and the last admission's own prefill ({tokens:,} tokens, {prefill:.2f} s)" if prefill else ""
    return [
        f"warm-up (last admission → first {words.stats_line}, its own column) longer than one "
        f"{words.line_interval} ({trace.steps_between_lines} steps): first-step warm-up or graph capture; "
        f"counted as its own reconciliation term, less half a {words.line_interval} of ordinary steps" + own
    ]


def _admissions(samples: Sequence[BatchSample]) -> list[tuple[int, int, float]]:
    """(tokens, Prefill lines, time to the next line) of every admission, a prompt cut into
    chunks as one (the time from its first chunk's line to the line after its last)."""
    found: list[tuple[int, int, float]] = []
    carried = False
    start = 0.0
    for index, sample in enumerate(samples):
        if sample.kind != "prefill":
            carried = False
            continue
        following = samples[index + 1].time_s if index + 1 < len(samples) else sample.time_s
        tokens = sample.new_tokens or 0
        if carried and found:
            found[-1] = (found[-1][0] + tokens, found[-1][1] + 1, following - start)
        else:
            start = sample.time_s
            found.append((tokens, 1, following - start))
        carried = sample.unfinished_seqs > 0 or bool(sample.pending_tokens)
    return found


def prefill_note(
    capabilities: Capabilities,
    samples: Sequence[BatchSample],
    rate: PrefillRate | None,
    interval_s: float | None,
    resolution_s: float,
) -> list[str]:
    """The run's longest admission where its prefill outlasts a decode-log interval (or a
    second): prefill, with its time from the scheduler's prefill throughput, or where the
    log gives none, the time until the next line (at most that much prefill; two
    timestamp steps at least, so that a rounding is not read as a prefill)."""
    admissions = _admissions(samples)
    if not admissions:
        return []
    tokens, lines, until_next = max(admissions)
    chunks = f" in {lines} chunks" if lines > 1 else ""
    floor = max(interval_s or 0.0, 1.0)
    if rate is None:
        if tokens < LONG_ADMISSION_TOKENS or until_next < max(floor, 2 * resolution_s):
            return []
        return [
            f"prefill: the run's longest admission, {tokens:,} tokens{chunks}, is followed by the next "
            f"line {until_next:.1f} s later: up to that much prefill (the log gives no prefill "
            "throughput), not warm-up"
        ]
    seconds = tokens / rate.tokens_per_s
    if seconds < floor:
        return []
    return [
        f"prefill: the scheduler prefills ≈ {rate.tokens_per_s:,.0f} tokens/s (from {rate.chains} run(s) "
        f"of back-to-back {capabilities.admission_line}s, {rate.tokens:,.0f} tokens over {rate.seconds:.1f} s); the run's "
        f"longest admission, {tokens:,} tokens{chunks}, is ≈ {seconds:.1f} s of prefill, not warm-up"
    ]
