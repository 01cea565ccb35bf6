"""Cut one scheduler's statistics lines into runs at the points where the server was idle;
the settings every run is analysed with."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ncuflow.phases.model.capabilities import RunBoundary
from ncuflow.phases.model.intervals import is_decode
from ncuflow.phases.model.overload import KV_FULL
from ncuflow.phases.model.prefill import PrefillRate
from ncuflow.phases.model.traces import BatchSample, LogEvent, ServerTrace


@dataclass(frozen=True)
class ServerRun:
    index: int
    samples: tuple[BatchSample, ...]
    events: tuple[LogEvent, ...]
    # the stretch of the log's clock that belongs to the run (from its first line, or the
    # log's start, to the next run's first line, or the log's end)
    window: tuple[float, float] = (-math.inf, math.inf)
    retractions: int = 0  # retraction lines in the window


def split_server_runs(trace: ServerTrace) -> tuple[ServerRun, ...]:
    """Cut a scheduler's lines into runs: a new run starts when the batch was empty.

    ``ADMISSION_FROM_EMPTY`` (SGLang): a Prefill line with ``#running-req: 0`` starts a new
    run, unless it continues a chunked prefill or requests were waiting on the line before at
    a full KV cache (the batch emptied to make room for them: the server never went idle).
    ``BUSY_AFTER_IDLE`` (vLLM): a run is a stretch of stats lines with running or waiting
    requests, closed by the first idle line; an idle line whose window had output on its
    own is a run of one line (requests that came and went inside one window).
    """
    runs: list[list[BatchSample]] = []
    if trace.capabilities.run_boundary is RunBoundary.BUSY_AFTER_IDLE:
        current: list[BatchSample] = []
        for sample in trace.samples:
            busy = sample.running > 0 or (sample.queued or 0) > 0
            if busy:
                current.append(sample)
            elif current:
                current.append(sample)  # the idle line closes the run (its window had output)
                runs.append(current)
                current = []
            elif (sample.gen_throughput or 0) > 0 or (sample.prompt_throughput or 0) > 0:
                runs.append([sample])  # requests that came and went inside one window
        if current:
            runs.append(current)
    else:
        current = []
        for sample in trace.samples:
            before = current[-1] if current else None
            continues = before is not None and (
                (before.pending_tokens or 0) > 0 or before.unfinished_seqs > 0 or waiting_for_cache(before)
            )
            starts_new = sample.kind == "prefill" and sample.running == 0 and bool(current) and not continues
            if starts_new:
                runs.append(current)
                current = []
            current.append(sample)
        if current:
            runs.append(current)
    timed = sorted((e for e in trace.events if e.time_s is not None), key=lambda e: e.time_s or 0.0)
    times = [e.time_s or 0.0 for e in timed]
    retractions = trace.retraction_times_s
    result = []
    for index, samples in enumerate(runs, start=1):
        # events before the first run or after the last one belong to those runs
        first = samples[0].time_s if index > 1 else -math.inf
        last = runs[index][0].time_s if index < len(runs) else math.inf
        events = tuple(timed[bisect.bisect_left(times, first) : bisect.bisect_left(times, last)])
        result.append(
            ServerRun(
                index=index,
                samples=tuple(samples),
                events=events,
                window=(first, last),
                retractions=bisect.bisect_left(retractions, last) - bisect.bisect_left(retractions, first),
            )
        )
    return tuple(result)


def waiting_for_cache(sample: BatchSample) -> bool:
    """Requests still queued at a full KV cache: the batch empties to make room for them,
    the server does not go idle (an emptied batch with a queue and room to spare was
    cancelled)."""
    return bool(sample.queued) and sample.kv_usage is not None and sample.kv_usage >= KV_FULL


@dataclass(frozen=True)
class RunSettings:
    batch_tolerance: float
    output_tokens: int | None
    output_tokens_source: str
    retraction_times: Sequence[float]  # sorted
    lockstep_admissions: tuple[float, ...]
    stated_concurrency: int | None
    run_label_prefix: str
    several_runs: bool
    prefill_rate: PrefillRate | None = None  # the scheduler's prefill throughput


def aborted(run: ServerRun) -> bool:
    return any(e.kind == "traceback" for e in run.events)


def peak_batch(samples: Sequence[BatchSample]) -> int:
    """From Decode lines: a Prefill line's #running-req still counts finished requests."""
    decoding = [s.running for s in samples if is_decode(s)]
    if decoding and max(decoding) > 0:
        return max(decoding)
    return max([s.running + (s.new_seqs or 0) for s in samples if s.kind == "prefill"] + [0])
