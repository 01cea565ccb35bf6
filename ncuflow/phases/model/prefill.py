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
phase), and only what is left is warm-up (first-step warm-up, graph capture)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ncuflow.phases.model.traces import BatchSample

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


@dataclass(frozen=True)
class WarmupSplit:
    """The warm-up interval, less its last admission's prefill and ordinary decode steps."""

    prefill_s: float | None  # the last admission's prefill (None where the rate is unknown)
    prefill_tokens: int
    decode_s: float  # ordinary decode steps (half a decode-log interval)
    excess_s: float  # what is left: warm-up


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
