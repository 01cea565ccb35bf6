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


# --------------------------------------------------------------------------- agentic load


@dataclass
class AgenticRequest:
    client: int
    submit_s: float
    length: int
    prefill_start_s: float | None = None
    times: list[float] = field(default_factory=list)
    credit: float = 0.0

    @property
    def tpot_s(self) -> float:
        return (self.times[-1] - self.times[0]) / (len(self.times) - 1)


@dataclass
class AgenticSimulation:
    lines: list[str]
    requests: list[AgenticRequest]
    decode_lines: int

    @property
    def mean_tpot_s(self) -> float:
        return statistics.fmean(r.tpot_s for r in self.requests if len(r.times) > 1)

    @property
    def weighted_tpot_s(self) -> float:
        kept = [r for r in self.requests if len(r.times) > 1]
        return sum(r.times[-1] - r.times[0] for r in kept) / sum(len(r.times) - 1 for r in kept)


def _whole_second(start: datetime, t: float) -> str:
    return f"{start + timedelta(seconds=t):%Y-%m-%d %H:%M:%S}"


def simulate_agentic(
    *,
    clients: int,
    requests_per_client: int,
    length: Callable[[int], int],
    think_s: Callable[[int], float],
    step_s: Callable[[int], float],
    prefill_s: float = 0.15,
    interval: int = 40,
    accept: Callable[[float], float] | None = None,
    health_every_s: float | None = None,
    timing_lines: str | None = None,
    millis: bool = True,
    first_submit_s: Callable[[int], float] = lambda client: 0.0,
    rank_tag: str = "",
    start: datetime = datetime(2026, 3, 2, 9, 0, 0),
) -> AgenticSimulation:
    """Closed-loop clients that think between requests (tool calls), with output lengths
    from ``length(k)`` (k counts requests), so the batch rises and falls without holding a
    level. ``accept(t)``: mean tokens per step per request (speculative decoding; 1 when
    None). ``health_every_s``: a 1-token /health_generate prefill that often, busy or idle.
    ``timing_lines``: "new" (ReqTimeStats with post_prefill_elapsed) or "old" (Req Time Stats
    with forward_duration only) lines when each request finishes."""
    stamp = _stamp if millis else _whole_second
    tag = f" {rank_tag}" if rank_tag else ""
    lines: list[str] = []
    done: list[AgenticRequest] = []
    waiting: list[AgenticRequest] = []
    running: list[AgenticRequest] = []
    issued = [0] * clients
    next_submit: dict[int, float] = {c: first_submit_s(c) for c in range(clients)}
    t, steps, tokens_since, batch_steps, last_log = 0.0, 0, 0, 0, 0.0
    next_health = health_every_s if health_every_s else math.inf
    counter = 0
    decode_lines = 0

    def submit_due(now: float) -> None:
        nonlocal counter
        for client, due in list(next_submit.items()):
            if due <= now:
                waiting.append(AgenticRequest(client, due, length(counter)))
                counter += 1
                issued[client] += 1
                del next_submit[client]

    while waiting or running or next_submit:
        submit_due(t)
        if t >= next_health:
            lines.append(
                f"[{stamp(start, t)}{tag}] Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 0, "
                f"token usage: 0.01, #running-req: {len(running)}, #queue-req: 0, "
            )
            t += 0.005
            next_health += health_every_s or math.inf
            continue
        if waiting:
            batch = waiting[:8]
            lines.append(
                f"[{stamp(start, t)}{tag}] Prefill batch, #new-seq: {len(batch)}, #new-token: "
                f"{len(batch) * 700}, #cached-token: 300, token usage: 0.10, #running-req: "
                f"{len(running)}, #queue-req: {len(waiting) - len(batch)}, "
            )
            for r in batch:
                r.prefill_start_s = t
            t += prefill_s
            for r in batch:
                waiting.remove(r)
                r.times.append(t)
                running.append(r)
            continue
        if not running:
            t = min([*next_submit.values(), next_health])
            continue
        t += step_s(len(running))
        steps += 1
        batch_steps += len(running)
        rate = accept(t) if accept else 1.0
        for r in running:
            r.credit += rate
            count = min(int(r.credit), r.length - len(r.times))
            r.credit -= int(r.credit)
            r.times.extend([t] * count)
            tokens_since += count
        if steps % interval == 0:
            spec = f"accept len: {tokens_since / batch_steps:.2f}, " if accept else ""
            lines.append(
                f"[{stamp(start, t)}{tag}] Decode batch, #running-req: {len(running)}, #token: 5000, "
                f"token usage: 0.30, {spec}cuda graph: True, gen throughput (token/s): "
                f"{tokens_since / (t - last_log):.2f}, #queue-req: 0, "
            )
            decode_lines += 1
            tokens_since, batch_steps, last_log = 0, 0, t
        for r in [r for r in running if len(r.times) >= r.length]:
            running.remove(r)
            done.append(r)
            if timing_lines:
                lines.append(_timing_line(stamp(start, t) + tag, r, t, timing_lines))
            if issued[r.client] < requests_per_client:
                next_submit[r.client] = t + think_s(r.client)
    return AgenticSimulation(lines, done, decode_lines)


def _timing_line(prefix: str, r: AgenticRequest, t: float, kind: str) -> str:
    assert r.prefill_start_s is not None
    queue = (r.prefill_start_s - r.submit_s) * 1000
    prefill = (r.times[0] - r.prefill_start_s) * 1000
    post = (r.times[-1] - r.times[0]) * 1000
    rid = f"{abs(hash((r.client, r.submit_s))) % 16**12:012x}"
    if kind == "old":
        return (
            f"[{prefix}] Req Time Stats(rid={rid}, input len=1000, output len={len(r.times)}, "
            f"type=unified): queue_duration={queue:.2f}ms, forward_duration={prefill + post:.2f}ms, "
            f"start_time={1_790_000_000 + r.submit_s:.3f}"
        )
    return (
        f"[{prefix}] ReqTimeStats(rid={rid}, input_len=1000, cached_input_len=300, output_len="
        f"{len(r.times)}, attempts=0, type=unified): queue_duration={queue:.2f}ms, "
        f"initial_prefill_elapsed={prefill:.2f}ms, post_prefill_elapsed={post:.2f}ms, "
        f"forward_duration={prefill + post:.2f}ms, entry_time={1_790_000_000 + r.submit_s:.3f}"
    )


# --------------------------------------------------------------------------- vLLM, step level


def simulate_vllm(
    *,
    arrivals: Sequence[tuple[float, int]],
    step_s: Callable[[int], float],
    prompt_tokens: int = 1000,
    window_s: float = 10.0,
    start: datetime = datetime(2026, 11, 28, 15, 30, 0),
) -> tuple[list[str], list[AgenticRequest]]:
    """vLLM's 10-s statistics lines for requests arriving at ``(time, output length)``:
    ``Running`` is counted at the end of each window, the throughputs over the whole window,
    as vLLM does. Returns the lines and the requests (with their token times)."""
    pending = sorted(arrivals)
    running: list[AgenticRequest] = []
    done: list[AgenticRequest] = []
    lines: list[str] = []
    t, boundary, generated, prompted, idle_lines = 0.0, window_s, 0, 0, 0
    while pending or running or idle_lines < 1:
        while pending and pending[0][0] <= t:
            at, n = pending.pop(0)
            request = AgenticRequest(0, at, n)
            request.times.append(t)
            running.append(request)
            prompted += prompt_tokens
        if running:
            t += step_s(len(running))
            for r in running:
                r.times.append(t)
                generated += 1
            for r in [r for r in running if len(r.times) >= r.length]:
                running.remove(r)
                done.append(r)
        else:
            t = min(boundary, pending[0][0]) if pending else boundary
        while t >= boundary:
            moment = start + timedelta(seconds=boundary)
            lines.append(
                f"(APIServer pid=7) INFO {moment:%m-%d %H:%M:%S} [loggers.py:236] Engine 000: Avg "
                f"prompt throughput: {prompted / window_s:.1f} tokens/s, Avg generation throughput: "
                f"{generated / window_s:.1f} tokens/s, Running: {len(running)} reqs, Waiting: 0 "
                "reqs, GPU KV cache usage: 2.0%, Prefix cache hit rate: 0.0%"
            )
            idle_lines = idle_lines + 1 if not running and not generated else 0
            generated = prompted = 0
            boundary += window_s
    return lines, done


# --------------------------------------------------------------------------- DP ranks, long logs


def merge_by_time(*logs: Sequence[str]) -> list[str]:
    """Lines of several schedulers of one server, in time order (stable within a scheduler)."""
    keyed = [(line[1:24], n, k, line) for n, log in enumerate(logs) for k, line in enumerate(log)]
    return [line for *_, line in sorted(keyed)]


def write_long_sglang_log(path: str, target_bytes: int, *, batch: int = 64, noise: int = 1) -> int:
    """A closed-loop SGLang log of about ``target_bytes`` (a server that never went idle):
    a Decode line every 1.2 s at ``batch`` (±1), a Prefill line of one replacement request
    before most of them, and ``noise`` HTTP access lines per Decode line. Returns the lines
    written. Fast enough for a gigabyte."""
    start = datetime(2026, 1, 1, 0, 0, 0)
    written = size = 0
    second_text: dict[int, str] = {}
    with open(path, "w", encoding="utf-8") as out:
        t = 0.0
        k = 0
        while size < target_bytes:
            chunk = []
            for _ in range(2000):
                k += 1
                t += 1.2
                whole = int(t)
                text = second_text.get(whole)
                if text is None:
                    second_text.clear()
                    text = second_text[whole] = f"{start + timedelta(seconds=whole):%Y-%m-%d %H:%M:%S}"
                stamp = f"[{text}.{int((t - whole) * 1000):03d} TP0]"
                running = batch - (k % 3 == 0)
                if k % 4:
                    chunk.append(
                        f"{stamp} Prefill batch, #new-seq: 1, #new-token: 812, #cached-token: 200, "
                        f"token usage: 0.42, #running-req: {running - 1}, #queue-req: 0, \n"
                    )
                chunk.append(
                    f"{stamp} Decode batch, #running-req: {running}, #token: 51234, token usage: 0.43, "
                    f"cuda graph: True, gen throughput (token/s): {running / 0.0302:.2f}, #queue-req: 0, \n"
                )
                for j in range(noise):
                    chunk.append(f'{stamp} INFO:     127.0.0.1:{40000 + (k + j) % 20000} - "POST /generate HTTP/1.1" 200 OK\n')
            block = "".join(chunk)
            out.write(block)
            size += len(block)
            written += len(chunk)
    return written


# --------------------------------------------------------------------------- issue-23 cases


def lone_step_s(batch: float) -> float:
    """The step of the hand-made logs below: 20 ms + 0.5 ms per request."""
    return 0.020 + 0.0005 * batch


def _at(t: float) -> str:
    moment = datetime(2026, 3, 2, 10, 0, 0) + timedelta(seconds=t)
    return f"[{moment:%Y-%m-%d %H:%M:%S}.{moment.microsecond // 1000:03d}]"


def decode_line(t: float, running: int, mean_batch: float | None = None) -> str:
    """A Decode line whose interval ran at ``mean_batch`` (default: ``running``) requests:
    gen throughput = mean batch / step(mean batch), as a scheduler would count it."""
    mean = running if mean_batch is None else mean_batch
    throughput = mean / lone_step_s(mean)
    return (
        f"{_at(t)} Decode batch, #running-req: {running}, #token: 900, token usage: 0.05, "
        f"cuda graph: True, gen throughput (token/s): {throughput:.2f}, #queue-req: 0, "
    )


def prefill_line(t: float, new: int, running: int) -> str:
    return (
        f"{_at(t)} Prefill batch, #new-seq: {new}, #new-token: {new * 500}, #cached-token: 0, "
        f"token usage: 0.05, #running-req: {running}, #queue-req: 0, "
    )


def burst_lines() -> list[str]:
    """A lone request held at 1 (5 Decode lines), then a burst 6 → 8 → 7 → 3 → 2 → 1 that
    is never held, then the lone request's tail at 1."""
    lines = [prefill_line(0.0, 1, 0)] + [decode_line(0.9 * k, 1) for k in range(1, 6)]
    lines += [prefill_line(5.0, 5, 1), decode_line(5.9, 6, 3.5), prefill_line(6.0, 2, 6)]
    lines += [decode_line(6.9, 8, 7.0), decode_line(7.8, 7, 7.5), decode_line(8.7, 3, 5.0)]
    lines += [decode_line(9.6, 2, 2.5)] + [decode_line(9.6 + 0.85 * k, 1) for k in range(1, 5)]
    return lines


def lone_request_lines() -> list[str]:
    """A lone request with three usable Decode lines, then a second one for two lines."""
    return [
        prefill_line(0.0, 1, 0), decode_line(0.9, 1), decode_line(1.8, 1), decode_line(2.7, 1),
        prefill_line(2.8, 1, 1), decode_line(3.6, 2, 1.9), decode_line(4.5, 2),
    ]


def tail_lines() -> list[str]:
    """Two runs with the same straggler tail at 2 (11 Decode lines, no admission): after a
    held plateau at 8, and after a burst to 8."""
    lines = [prefill_line(0.0, 8, 0)] + [decode_line(0.9 * k, 8) for k in range(1, 6)]
    lines += [decode_line(5.4, 5, 6.5)] + [decode_line(5.4 + 0.8 * k, 2, 2 if k > 1 else 3.5) for k in range(1, 12)]
    t0 = 20.0
    lines += [prefill_line(t0, 8, 0), decode_line(t0 + 0.9, 8), decode_line(t0 + 1.8, 5, 6.5)]
    lines += [decode_line(t0 + 1.8 + 0.8 * k, 2, 2 if k > 1 else 3.5) for k in range(1, 12)]
    return lines


def sglang_window_bias_lines() -> list[str]:
    """A lone request (steady at step(1) = 20.5 ms), then 8 requests whose batch falls to 1
    just before a Decode line: that line counts 1 request for an interval that ran at 8."""
    lines = [prefill_line(0.0, 1, 0)] + [decode_line(0.9 * k, 1) for k in range(1, 6)]
    t = 20.0
    lines += [prefill_line(t, 8, 0)] + [decode_line(t + 0.9 * k, 8) for k in range(1, 6)]
    lines += [decode_line(t + 0.9 * 6, 1, 7.9), decode_line(t + 0.9 * 7, 1)]
    return lines


def carriage_return_lines() -> tuple[list[str], int]:
    """Progress bars with bare carriage returns before the statistics, and a SIGTERM line:
    (the lines, the SIGTERM line's number as an editor counts it)."""
    lines = [
        "Loading safetensors checkpoint shards:   0% Completed | 0/4\r" + "Loading ... 25%\r" * 5 + "Loading 100%",
        "Capturing batches (bs=4 avail_mem=10.2 GB):  50%|#####     | 2/4\rCapturing batches (bs=1 "
        "avail_mem=10.1 GB): 100%|##########| 4/4",
    ]
    lines += simulate_sglang(stages=[(8, 8)], output_tokens=400, step_s=lambda b: 0.030 + 0.0002 * b).lines
    lines.append("[2026-01-04 07:00:40] SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
    return lines, len(lines)


def health_check_lines() -> list[str]:
    """A lone request, 45 s idle with a health check every 5 s, then four requests; a health
    check also lands while each batch decodes."""
    step = lambda b: 0.030 + 0.0002 * b  # noqa: E731
    first = simulate_agentic(clients=1, requests_per_client=1, length=lambda k: 300,
                             think_s=lambda c: 0, step_s=step, health_every_s=5.0)
    idle = [
        f"[2026-03-02 09:00:{t:02d}.000] Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 0, "
        "token usage: 0.00, #running-req: 0, #queue-req: 0, "
        for t in range(15, 60, 5)
    ]
    later = simulate_agentic(clients=4, requests_per_client=1, length=lambda k: 300,
                             think_s=lambda c: 0, step_s=step, health_every_s=5.0,
                             start=datetime(2026, 3, 2, 9, 1, 0))
    return first.lines + idle + later.lines


def vllm_window_lines(finish: str = "mid") -> tuple[list[str], list[AgenticRequest]]:
    """vLLM: a lone request (60 s), then 8 requests that hold 8 for two windows and finish
    in groups inside later windows: in their middle (``mid``) or just before their end
    (``late``, where even the mean of both ends undercounts the batch)."""
    lengths = (1850, 1850, 1850, 1850, 2400, 2400, 2400, 3000)
    if finish == "late":
        lengths = (1560, 1560, 1560, 1560, 2080, 2080, 2080, 2600)
    arrivals = [(0.0, 3000)] + [(70.0, n) for n in lengths]
    return simulate_vllm(arrivals=arrivals, step_s=lambda b: 0.0169 + 0.0003 * (b - 1))


def dp_warmup_lines(ranks: int = 4) -> list[str]:
    """DP attention: every rank runs two waves of 36; rank DP{ranks-1} alone also had the
    benchmark's 1-request warm-up 10 s before."""
    step = lambda b: 0.030 + 0.0002 * b  # noqa: E731
    logs = []
    for k in range(ranks):
        tag = f"DP{k} TP{k * 8} EP{k * 8}"
        lines = simulate_sglang(stages=[(36, 72)], output_tokens=400, step_s=step, rank_tag=tag,
                                start=datetime(2026, 1, 4, 7, 0, 10)).lines
        if k == ranks - 1:
            lines = simulate_sglang(stages=[(1, 1)], output_tokens=120, step_s=step, rank_tag=tag,
                                    start=datetime(2026, 1, 4, 7, 0, 0)).lines + lines
        logs.append(lines)
    return merge_by_time(*logs)


def speculative_closed_loop() -> AgenticSimulation:
    """16 long requests under speculative decoding whose acceptance length is 2.3 most of the
    time and 5.4 a third of it, with the server's per-request timing lines."""
    return simulate_agentic(
        clients=16, requests_per_client=1, length=lambda k: 12000, think_s=lambda c: 0.0,
        step_s=lambda b: 0.028 + 0.0004 * b, accept=lambda t: 5.4 if (t % 12.0) < 4.0 else 2.3,
        timing_lines="new",
    )


def agentic_closed_loop(seed: int = 3, timing_lines: str | None = "new") -> AgenticSimulation:
    """Six agents that think 0–20 s between requests of 60–1500 tokens, health checks every
    10 s: a batch that never sits still."""
    import random

    rng = random.Random(seed)
    return simulate_agentic(
        clients=6, requests_per_client=8, length=lambda k: rng.choice([60, 200, 600, 1500]),
        think_s=lambda c: rng.uniform(0, 20), step_s=lambda b: 0.02 + 0.0005 * b,
        timing_lines=timing_lines, health_every_s=10,
    )
