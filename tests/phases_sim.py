"""A step-level serving simulator that writes SGLang and vLLM server logs with a known truth.

Closed-loop clients keep ``concurrency`` requests in flight; a stage of a sweep ends when
its requests are submitted, and the next stage's concurrency applies from then on, with no
idle gap. The scheduler runs a prefill batch whenever requests wait (SGLang; the running
batch stalls meanwhile) or, on a PD decode node, lets requests join as their KV arrives;
otherwise one decode step of ``step_s(batch)``. Every request's token times are kept, so
the test knows the true mean TPOT, median ITL and step time at each batch size.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta


@dataclass
class Request:
    submit_s: float
    stage: int
    index: int
    first_s: float | None = None
    times: list[float] = field(default_factory=list)


@dataclass
class Simulation:
    lines: list[str]
    requests: list[Request]
    output_tokens: int
    plateau_reached_s: dict[int, float]  # stage → first time ≥ 90 % of its concurrency ran
    log_origin_s: float  # simulated time of t = 0 of the parsed log (first line's whole second)

    @property
    def mean_tpot_s(self) -> float:
        n = self.output_tokens
        return statistics.fmean((r.times[-1] - r.times[0]) / (n - 1) for r in self.requests)

    @property
    def median_itl_s(self) -> float:
        return statistics.median(
            b - a for r in self.requests for a, b in zip(r.times, r.times[1:], strict=False)
        )


def _stamp(start: datetime, t: float) -> str:
    moment = start + timedelta(seconds=t)
    return f"{moment:%Y-%m-%d %H:%M:%S}.{moment.microsecond // 1000:03d}"


def simulate_sglang(
    *,
    stages: Sequence[tuple[int, int]],
    output_tokens: int,
    step_s: Callable[[int], float],
    prefill_s: float = 0.2,
    prefill_batch: int = 8,
    interval: int = 40,
    decode_node: bool = False,
    transfer_s: float = 0.5,
    arrival_gap_s: float = 0.0,
    warmup_s: float = 0.0,
    speculative: bool = False,
    rank_tag: str = "TP0",
    start: datetime = datetime(2026, 1, 4, 7, 0, 0),
) -> Simulation:
    """``stages``: (concurrency, requests) per stage, back to back. ``speculative``: request
    k gets a second token every (k mod 5 + 2)-th step, so requests admitted together
    finish at different steps, as under speculative decoding."""
    lines: list[str] = []
    done: list[Request] = []
    waiting: list[Request] = []  # submitted, not yet running (decode node: KV in transfer)
    running: list[Request] = []
    stage, submitted_in_stage, t = 0, 0, 0.0
    steps = tokens_since_log = 0
    last_log, warmed = 0.0, warmup_s <= 0
    plateau: dict[int, float] = {}
    first_line_s: float | None = None

    def submit(now: float) -> None:
        nonlocal stage, submitted_in_stage
        while stage < len(stages):
            concurrency, count = stages[stage]
            if submitted_in_stage >= count:
                stage, submitted_in_stage = stage + 1, 0
                continue
            if len(waiting) + len(running) >= concurrency:
                return
            delay = transfer_s if decode_node else 0.0
            gap = arrival_gap_s * len(waiting) if now == 0.0 else 0.0  # the client's own ramp
            waiting.append(
                Request(now + delay + gap, stage, len(done) + len(running) + len(waiting))
            )
            submitted_in_stage += 1

    submit(0.0)
    while waiting or running:
        ready = [r for r in waiting if r.submit_s <= t]
        if ready and not decode_node:
            first_line_s = t if first_line_s is None else first_line_s
            batch = ready[:prefill_batch]
            lines.append(
                f"[{_stamp(start, t)} {rank_tag}] Prefill batch, #new-seq: {len(batch)}, #new-token: "
                f"{len(batch) * 1000}, #cached-token: 0, token usage: 0.10, #running-req: "
                f"{len(running)}, #queue-req: {len(waiting) - len(batch)}, "
            )
            t += prefill_s
            for r in batch:
                waiting.remove(r)
                r.first_s = t
                r.times.append(t)
                running.append(r)
            continue
        if ready and decode_node:
            for r in ready:
                waiting.remove(r)
                r.first_s = t
                r.times.append(t)
                running.append(r)
        if not running:
            t = min(r.submit_s for r in waiting)
            continue
        if not warmed:
            t += warmup_s
            warmed = True
        t += step_s(len(running))
        steps += 1
        produced = 0
        concurrency = stages[min(stage, len(stages) - 1)][0]
        current = running[0].stage
        if len(running) >= 0.9 * concurrency and current not in plateau:
            plateau[current] = t
        for r in running:
            extra = speculative and steps % (r.index % 5 + 2) == 0
            for _ in range(2 if extra and len(r.times) + 1 < output_tokens else 1):
                r.times.append(t)
                produced += 1
        tokens_since_log += produced
        if steps % interval == 0:
            first_line_s = t if first_line_s is None else first_line_s
            incoming = f"#prealloc-req: 0, #transfer-req: {len(waiting)}, " if decode_node else ""
            lines.append(
                f"[{_stamp(start, t)} {rank_tag}] Decode batch, #running-req: {len(running)}, #token: "
                f"1000, token usage: 0.20, {incoming}cuda graph: True, gen throughput (token/s): "
                f"{tokens_since_log / (t - last_log):.2f}, #queue-req: 0, "
            )
            tokens_since_log, last_log = 0, t
        finished = [r for r in running if len(r.times) >= output_tokens]
        for r in finished:
            running.remove(r)
            done.append(r)
        if finished:
            submit(t)
    return Simulation(lines, done, output_tokens, plateau, math.floor(first_line_s or 0.0))


def bench_block(sim: Simulation, *, max_concurrency: int) -> list[str]:
    n = sim.output_tokens
    return [
        "python3 -m sglang.bench_serving --backend sglang --dataset-name random "
        f"--random-input-len 1000 --random-output-len {n} --random-range-ratio 1 "
        f"--num-prompts {len(sim.requests)} --max-concurrency {max_concurrency}",
        "============ Serving Benchmark Result ============",
        f"Max request concurrency:                 {max_concurrency}",
        f"Successful requests:                     {len(sim.requests)}",
        f"Mean TPOT (ms):                          {sim.mean_tpot_s * 1000:.2f}",
        f"Median ITL (ms):                         {sim.median_itl_s * 1000:.2f}",
        "==================================================",
    ]


def vllm_windows(
    *,
    levels: Sequence[tuple[int, int]],
    step_s: Callable[[int], float],
    prompt_tokens_per_request: float,
    output_tokens: int,
    accept: Callable[[int], float | None] = lambda window: None,
    window_s: int = 10,
) -> list[str]:
    """vLLM stats lines for a closed loop holding ``level`` requests for ``windows`` 10-s
    windows per (level, windows) entry, back to back. Each request lasts
    ``output_tokens × step`` seconds, so a window admits running × window / duration
    requests, each computing ``prompt_tokens_per_request`` uncached prompt tokens."""
    lines = []
    start = datetime(2026, 11, 28, 15, 30, 0)
    window = 0
    for level, windows in levels:
        for _ in range(windows):
            window += 1
            step = step_s(level)
            acceptance = accept(window)
            generated = level * window_s / step
            admitted = generated / output_tokens
            moment = start + timedelta(seconds=window * window_s)
            lines.append(
                f"(APIServer pid=1) INFO {moment:%m-%d %H:%M:%S} [loggers.py:236] Engine 000: Avg "
                f"prompt throughput: {admitted * prompt_tokens_per_request / window_s:.1f} tokens/s, "
                f"Avg generation throughput: {generated / window_s:.1f} tokens/s, Running: {level} "
                "reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 95.0%"
            )
            if acceptance is not None:
                lines.append(
                    f"(APIServer pid=1) INFO {moment:%m-%d %H:%M:%S} [metrics.py:96] SpecDecoding "
                    f"metrics: Mean acceptance length: {acceptance:.2f}, Accepted throughput: "
                    "10.00 tokens/s, Drafted throughput: 20.00 tokens/s"
                )
    return lines
