"""Step-level engines that write vLLM and SGLang server logs under load, with a known truth:
a KV cache of fixed size (vLLM: blocks of 16 tokens, requests preempted when a running one
needs a block; SGLang: retractions), a batch cap, a chunked-prefill token budget, the
server's per-request lines (vLLM ``Received request`` / ``Added request``, SGLang
``Receive: obj=``), uvicorn access lines and context-length refusals with their
tracebacks, as the engines print them (vLLM 0.6–0.11 ``loggers.py`` statistics lines,
SGLang 0.4–0.5 ``Prefill batch`` / ``Decode batch`` lines).

Every request's token times are kept, so a test knows when each arrived, was admitted,
got its first token and finished, and the step time at every batch size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

Step = Callable[[int, int], float]  # (decoding requests, prefill tokens) -> seconds


def linear_step(base: float = 0.030, per_seq: float = 0.00006, per_prefill_token: float = 0.00008) -> Step:
    """A step that grows with the batch and with the prefill tokens it carries."""
    return lambda decoding, prefill: base + per_seq * decoding + per_prefill_token * prefill


@dataclass
class Arrival:
    time_s: float
    prompt: int
    output: int
    cached: int = 0  # prompt tokens a prefix cache would serve (SGLang #cached-token)


@dataclass
class SimRequest:
    rid: str
    arrival: Arrival
    admitted_s: float | None = None
    first_s: float | None = None
    times: list[float] = field(default_factory=list)
    computed: int = 0  # tokens in the KV cache (prompt prefilled + outputs)
    preempted: int = 0
    refused: bool = False

    @property
    def target_prefill(self) -> int:
        """Tokens to prefill before the next output: the prompt, plus the outputs a
        preemption threw away (recomputed)."""
        return self.arrival.prompt + len(self.times)

    @property
    def done(self) -> bool:
        return len(self.times) >= self.arrival.output


@dataclass
class EngineConfig:
    kv_tokens: int
    max_running: int = 1024
    token_budget: int = 8192
    step: Step = field(default_factory=linear_step)
    max_model_len: int | None = None
    block: int = 16
    # SGLang admits a request only if its whole prompt and a share of its output fit in the
    # cache (so it queues instead of being preempted); vLLM V1 only needs the chunk's blocks
    reserve_output: float | None = None


@dataclass
class EngineLog:
    lines: list[str]
    requests: list[SimRequest]
    windows: list[tuple[float, int, int, float]]  # vLLM: (time, running, waiting, kv usage)
    decode_steps: list[tuple[float, int, float]] = field(default_factory=list)  # (t, batch, step s)


class _Engine:
    """The scheduling both engines share: FIFO admission under a token budget, a batch cap
    and a KV cache; preemption (recompute) of the newest running request when a running
    one needs cache it cannot get."""

    def __init__(self, config: EngineConfig, arrivals: Sequence[Arrival]) -> None:
        self.config = config
        self.pending = sorted(arrivals, key=lambda a: a.time_s)
        self.waiting: list[SimRequest] = []
        self.running: list[SimRequest] = []
        self.done: list[SimRequest] = []
        self.t = 0.0
        self.next_id = 0

    def used(self) -> int:
        block = self.config.block
        return sum(math.ceil(r.computed / block) * block for r in self.running)

    def arrive(self, on_arrival: Callable[[SimRequest], bool]) -> None:
        while self.pending and self.pending[0].time_s <= self.t:
            arrival = self.pending.pop(0)
            request = SimRequest(f"{self.next_id:032x}", arrival)
            self.next_id += 1
            if on_arrival(request):
                self.waiting.append(request)
            else:
                request.refused = True
                self.done.append(request)

    def make_room(self, on_preempt: Callable[[SimRequest], None]) -> None:
        """Every running request gets its next token's cache; the newest are preempted."""
        block = self.config.block
        need = sum(
            math.ceil((r.computed + 1) / block) * block for r in self.running if r.computed >= r.target_prefill
        ) + sum(math.ceil(r.computed / block) * block for r in self.running if r.computed < r.target_prefill)
        while self.running and need > self.config.kv_tokens:
            victim = self.running.pop()
            need -= math.ceil((victim.computed + 1) / block) * block
            victim.computed = 0
            victim.preempted += 1
            self.waiting.insert(0, victim)
            on_preempt(victim)

    def admit(self) -> tuple[int, int]:
        """Prefill chunks under the token budget: (prefill tokens of the step, requests that
        got a chunk)."""
        budget = self.config.token_budget
        free = self.config.kv_tokens - self.used()
        touched = 0
        reserve = self.config.reserve_output
        for r in self.running:  # chunks of prompts already started
            if r.computed < r.target_prefill and budget > 0 and (free > 0 or reserve is not None):
                chunk = min(r.target_prefill - r.computed, budget)
                chunk = chunk if reserve is not None else min(chunk, free)
                r.computed += chunk
                budget, free, touched = budget - chunk, free - chunk, touched + 1
        while self.waiting and budget > 0 and len(self.running) < self.config.max_running:
            r = self.waiting[0]
            chunk = min(r.target_prefill, budget)
            need = chunk if reserve is None else r.target_prefill + int(reserve * r.arrival.output)
            if reserve is not None:  # what the running requests will still need
                need += sum(int(reserve * (x.arrival.output - len(x.times))) + x.target_prefill - x.computed
                            for x in self.running)
            if need > free - self.config.block:
                break
            self.waiting.pop(0)
            r.admitted_s = self.t if r.admitted_s is None else r.admitted_s
            r.computed += chunk
            budget, free, touched = budget - chunk, free - chunk, touched + 1
            self.running.append(r)
        return self.config.token_budget - budget, touched

    def _token(self, r: SimRequest) -> None:
        r.times.append(self.t)
        r.computed += 1
        if r.first_s is None:
            r.first_s = self.t

    def decode(self, prefill_tokens: int) -> tuple[int, float]:
        """One step: every request whose prompt is in the cache makes a token (vLLM runs
        prefill chunks and decodes in the same step)."""
        decoding = [r for r in self.running if r.computed >= r.target_prefill]
        step = self.config.step(len(decoding), prefill_tokens)
        self.t += step
        for r in decoding:
            self._token(r)
        return len(decoding), step

    def prefill_only(self, prefill_tokens: int) -> None:
        """An SGLang prefill batch, on its own: the requests whose prompt it completes make
        their first token; the running batch waits."""
        self.t += self.config.step(0, prefill_tokens)
        for r in self.running:
            if r.first_s is None and r.computed >= r.target_prefill:
                self._token(r)

    def finish(self) -> list[SimRequest]:
        finished = [r for r in self.running if r.done]
        for r in finished:
            self.running.remove(r)
            self.done.append(r)
        return finished


# --------------------------------------------------------------------------- vLLM


VLLM_START = datetime(2025, 8, 12, 9, 0, 0)


def _vllm_stamp(t: float, start: datetime = VLLM_START) -> str:
    moment = start + timedelta(seconds=t)
    return f"{moment:%m-%d %H:%M:%S}"


def _vllm_refusal(stamp: str, request: SimRequest, limit: int) -> list[str]:
    """What vLLM (0.9–0.10, OpenAI server) prints for a prompt past the context: the error
    with its traceback, then the 400 access line."""
    tokens = request.arrival.prompt
    return [
        f"(APIServer pid=1) ERROR {stamp} [serving_chat.py:222] Error in preprocessing prompt inputs",
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/serving_chat.py", line 206, in create_chat_completion',
        "    ) = await self._preprocess_chat(",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/serving_engine.py", line 596, in _validate_input',
        "    raise ValueError(",
        f"ValueError: This model's maximum context length is {limit} tokens. However, your request has "
        f"{tokens} input tokens. Please reduce the length of the input messages.",
        '(APIServer pid=1) INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request',
    ]


def _v0_stats(stamp: str, prompt: float, generated: float, running: int, waiting: int, usage: float) -> str:
    """vLLM 0.6's statistics line (V0 engine, ``metrics.py``)."""
    return (
        f"INFO {stamp} metrics.py:351] Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation "
        f"throughput: {generated:.1f} tokens/s, Running: {running} reqs, Swapped: 0 reqs, Pending: "
        f"{waiting} reqs, GPU KV cache usage: {usage * 100:.1f}%, CPU KV cache usage: 0.0%."
    )


def _v0_preempted(stamp: str, rid: str, total: int) -> str:
    return (
        f"WARNING {stamp} scheduler.py:1481] Sequence group chatcmpl-{rid} is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect "
        "the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to "
        f"provide more KV cache memory. total_num_cumulative_preemption={total}"
    )


def simulate_vllm_engine(
    arrivals: Sequence[Arrival],
    config: EngineConfig,
    *,
    log_requests: bool = True,
    window_s: float = 10.0,
    start: datetime = VLLM_START,
    v0: bool = False,
) -> EngineLog:
    """A vLLM V1 engine: 10-s statistics lines (``Running`` and ``Waiting`` at the window's
    end, throughputs over it, GPU KV cache usage), no preemption lines (V1 prints none),
    ``Received request`` / ``Added request`` lines when ``log_requests``, access lines.
    ``v0``: vLLM 0.6's lines instead, and its warning at every 50th preemption."""
    engine = _Engine(config, arrivals)
    events: list[tuple[float, int, str]] = []
    windows: list[tuple[float, int, int, float]] = []
    steps: list[tuple[float, int, float]] = []
    counter = [0]

    def emit(t: float, line: str) -> None:
        counter[0] += 1
        events.append((t, counter[0], line))

    def on_arrival(r: SimRequest) -> bool:
        stamp = _vllm_stamp(engine.t, start)
        limit = config.max_model_len
        if limit is not None and r.arrival.prompt + 1 > limit:
            for line in _vllm_refusal(stamp, r, limit):
                emit(engine.t, line)
            return False
        if log_requests:
            emit(engine.t, f"(APIServer pid=1) INFO {stamp} [logger.py:43] Received request chatcmpl-{r.rid}: "
                 f"prompt: '<|user|>{'x' * 40}', params: SamplingParams(n=1, temperature=0.0, "
                 f"max_tokens={r.arrival.output}, ignore_eos=True), prompt_token_ids: None, "
                 "prompt_embeds shape: None, lora_request: None.")
            emit(engine.t, f"(APIServer pid=1) INFO {stamp} [async_llm.py:270] Added request chatcmpl-{r.rid}.")
        return True

    preemptions = [0]

    def on_preempt(r: SimRequest) -> None:
        preemptions[0] += 1
        if v0 and preemptions[0] % 50 == 1:
            emit(engine.t, _v0_preempted(_vllm_stamp(engine.t, start), r.rid, preemptions[0]))

    boundary, prompt_tokens, generated, last_active = window_s, 0, 0, False
    while engine.pending or engine.waiting or engine.running:
        engine.arrive(on_arrival)
        if not engine.waiting and not engine.running:
            engine.t = min(engine.pending[0].time_s, boundary) if engine.pending else boundary
        else:
            engine.make_room(on_preempt)
            prefill, _ = engine.admit()
            produced, step = engine.decode(prefill)
            steps.append((engine.t, len(engine.running), step))
            prompt_tokens += prefill
            generated += produced
            for _ in engine.finish():
                emit(engine.t, '(APIServer pid=1) INFO:     127.0.0.1:51234 - "POST /v1/chat/completions '
                     'HTTP/1.1" 200 OK')
        while engine.t >= boundary:
            usage = engine.used() / config.kv_tokens
            active = bool(prompt_tokens or generated)
            if v0 and (active or last_active):
                emit(boundary, _v0_stats(_vllm_stamp(boundary, start), prompt_tokens / window_s,
                                         generated / window_s, len(engine.running), len(engine.waiting), usage))
                windows.append((boundary, len(engine.running), len(engine.waiting), usage))
            elif active or last_active:  # vLLM logs idle windows at DEBUG only
                emit(boundary, f"(APIServer pid=1) INFO {_vllm_stamp(boundary, start)} [loggers.py:123] Engine 000: "
                     f"Avg prompt throughput: {prompt_tokens / window_s:.1f} tokens/s, Avg generation "
                     f"throughput: {generated / window_s:.1f} tokens/s, Running: {len(engine.running)} reqs, "
                     f"Waiting: {len(engine.waiting)} reqs, GPU KV cache usage: {usage * 100:.1f}%, "
                     "Prefix cache hit rate: 0.0%")
                windows.append((boundary, len(engine.running), len(engine.waiting), usage))
            last_active = active
            prompt_tokens = generated = 0
            boundary += window_s
    events.sort(key=lambda e: (e[0], e[1]))
    return EngineLog([line for *_, line in events], engine.done, windows, steps)


def vllm_burst_overload(requests: int = 400, seed: int = 5, v0: bool = False) -> EngineLog:
    """A burst of ``requests`` at once whose outputs outgrow the KV cache: the batch peaks,
    then at a full cache the engine preempts (Waiting rises while Running falls), then the
    queue empties and the batch drains."""
    import random

    rng = random.Random(seed)
    arrivals = [Arrival(0.0, 600, rng.randint(600, 2400)) for _ in range(requests)]
    return simulate_vllm_engine(arrivals, EngineConfig(kv_tokens=requests * 900, max_running=1024), v0=v0)


# --------------------------------------------------------------------------- SGLang


SGLANG_START = datetime(2025, 9, 3, 14, 0, 0)


def _sg_stamp(t: float, start: datetime = SGLANG_START) -> str:
    moment = start + timedelta(seconds=t)
    return f"[{moment:%Y-%m-%d %H:%M:%S}]"


@dataclass
class SglangLogOptions:
    decode_log_interval: int = 40
    log_requests: bool = False  # Receive: lines
    access_lines: bool = True
    retraction_text: str = "KV cache pool is full. Retract requests."
    health_every_s: float | None = None
    pending_token: bool = True  # newer SGLang: #pending-token on Prefill lines


def simulate_sglang_engine(
    arrivals: Sequence[Arrival],
    config: EngineConfig,
    options: SglangLogOptions | None = None,
    *,
    start: datetime = SGLANG_START,
) -> EngineLog:
    """An SGLang scheduler: a Prefill line per admitted batch (``#new-seq``, ``#new-token``,
    ``#cached-token``, token usage, ``#running-req`` before it, ``#queue-req`` after it), a
    Decode line every ``decode_log_interval`` decode steps, a retraction line when the cache
    cannot hold the running batch's next tokens."""
    options = options or SglangLogOptions()
    engine = _Engine(config, arrivals)
    lines: list[str] = []
    steps: list[tuple[float, int, float]] = []
    decode_ct, since_log, last_log = 0, 0, 0.0
    retracted: list[SimRequest] = []

    def on_arrival(r: SimRequest) -> bool:
        if options.log_requests:
            lines.append(f"{_sg_stamp(engine.t, start)} Receive: obj=GenerateReqInput(text='{'x' * 30}', "
                         f"sampling_params={{'max_new_tokens': {r.arrival.output}}}, rid='{r.rid}', stream=True)")
        return True

    while engine.pending or engine.waiting or engine.running:
        engine.arrive(on_arrival)
        if not engine.waiting and not engine.running:
            engine.t = engine.pending[0].time_s
            continue
        retracted.clear()
        engine.make_room(retracted.append)
        usage = engine.used() / config.kv_tokens
        if retracted:
            lines.append(f"{_sg_stamp(engine.t, start)} {options.retraction_text} #retracted_reqs: "
                         f"{len(retracted)}, #new_token_ratio: 0.6500 -> 1.0000")
        before = sum(1 for r in engine.running if r.computed >= r.target_prefill)
        stamp = _sg_stamp(engine.t, start)
        chunks_cached = sum(r.arrival.cached for r in engine.waiting[:1])
        prefill, touched = engine.admit()
        if prefill:
            pending = sum(r.target_prefill - r.computed for r in engine.running)
            lines.append(f"{stamp} Prefill batch, #new-seq: {touched}, #new-token: {prefill}, "
                         f"#cached-token: {chunks_cached}, token usage: {engine.used() / config.kv_tokens:.2f}, "
                         f"#running-req: {before}, #queue-req: {len(engine.waiting)}, "
                         + (f"#pending-token: {pending}, " if options.pending_token else ""))
            engine.prefill_only(prefill)
            _finish_sglang(engine, lines, options, start)
            continue
        produced, step = engine.decode(0)
        steps.append((engine.t, len(engine.running), step))
        decode_ct += 1
        since_log += produced
        if decode_ct % options.decode_log_interval == 0:
            usage = engine.used() / config.kv_tokens
            lines.append(f"{_sg_stamp(engine.t, start)} Decode batch, #running-req: {len(engine.running)}, "
                         f"#token: {engine.used()}, token usage: {usage:.2f}, cuda graph: True, gen throughput "
                         f"(token/s): {since_log / max(engine.t - last_log, 1e-9):.2f}, #queue-req: {len(engine.waiting)}, ")
            since_log, last_log = 0, engine.t
        _finish_sglang(engine, lines, options, start)
    return EngineLog(lines, engine.done, [], steps)


def _finish_sglang(engine: _Engine, lines: list[str], options: SglangLogOptions, start: datetime) -> None:
    for _ in engine.finish():
        if options.access_lines:
            lines.append(f'{_sg_stamp(engine.t, start)} INFO:     127.0.0.1:40000 - "POST /v1/chat/completions '
                         'HTTP/1.1" 200 OK')


def sglang_long_context(log_requests: bool = True, chunk: int = 8192) -> EngineLog:
    """Two long prompts (24.3K and 22.7K tokens) sent together to a server whose KV pool
    holds 25,169 tokens, chunked prefill of 8,192 tokens at ~12K tokens/s: the first is
    prefilled in three chunks (~2 s) and decodes while the second waits (#queue-req 1,
    token usage 0.97) for the cache it holds. ``chunk`` above the prompts: one Prefill line
    each (no chunked prefill), so the log gives no prefill throughput."""
    arrivals = [Arrival(1.0, 24_300, 400), Arrival(1.0, 22_700, 400)]
    step = linear_step(base=0.012, per_seq=0.0002, per_prefill_token=1 / 12_000)
    config = EngineConfig(kv_tokens=25_169, max_running=64, token_budget=chunk, step=step, reserve_output=0.3)
    return simulate_sglang_engine(arrivals, config, SglangLogOptions(log_requests=log_requests))


def sglang_session(requests: int = 1000, seed: int = 11) -> EngineLog:
    """One user's six hours: ``requests`` conversational turns one at a time (each sent
    some 20 s after the last one began), prompts that grow with the conversation and are
    mostly served by the prefix cache, 100–500 output tokens."""
    import random

    rng = random.Random(seed)
    arrivals, t, history = [], 0.0, 0
    for k in range(requests):
        if k % 25 == 0:
            history = 0  # a new conversation
        new = rng.randint(60, 900)
        arrivals.append(Arrival(t, new, rng.randint(100, 500), cached=history))
        history += new
        t += rng.uniform(8.0, 34.0)
    step = linear_step(base=0.0135, per_seq=0.0001, per_prefill_token=1 / 20_000)
    config = EngineConfig(kv_tokens=400_000, max_running=64, token_budget=8192, step=step, reserve_output=0.3)
    return simulate_sglang_engine(arrivals, config, SglangLogOptions(log_requests=False))


def vllm_debate(requests: int = 350, seed: int = 7) -> EngineLog:
    """Two agents debating through one vLLM server, turn after turn, over two days: every
    turn's prompt is the debate so far, so a long debate outgrows the 8,192-token context
    and its next turns are refused (HTTP 400, with vLLM's traceback); a new debate then
    starts. Half the turns come the next day."""
    import random

    rng = random.Random(seed)
    arrivals, t, history = [], 5.0, 0
    for k in range(requests):
        if k == requests // 2:
            t += 86_400.0  # the next day
        if history > 9_000 or (history > 8_000 and rng.random() < 0.5):
            history = 0  # the operator starts a new debate
        answer = rng.randint(150, 600)
        arrivals.append(Arrival(t, history + rng.randint(40, 120), answer))
        history += answer + 80
        t += rng.uniform(3.0, 40.0)
    config = EngineConfig(kv_tokens=200_000, max_running=256, max_model_len=8192,
                          step=linear_step(base=0.011, per_seq=0.0001, per_prefill_token=1 / 30_000))
    return simulate_vllm_engine(arrivals, config)


def jsonl_waves(requests: int = 16, concurrency: int = 8, output: int = 256, step_s: float = 0.00656,
                prefill_s: float = 0.05, jitter: float = 0.02, seed: int = 3) -> list[dict[str, object]]:
    """A closed loop at ``concurrency`` whose requests all have one length: each slot sends
    its next request when its last one ends, and since they all end together the batch
    fills, holds and empties once per generation (a wave), with no idle gap between
    waves. Records as ``phases-record`` writes them."""
    import random

    rng = random.Random(seed)
    records: list[dict[str, object]] = []
    free = [1_700_000_000.0 + 0.002 * k for k in range(concurrency)]  # when each slot sends
    for index in range(requests):
        slot = index % concurrency
        submit = free[slot]
        chunks = [submit + prefill_s]
        for _ in range(output - 1):
            chunks.append(chunks[-1] + step_s * (1 + rng.uniform(-jitter, jitter)))
        records.append({"request_id": f"r{index}", "submit_time": submit, "chunk_times": chunks})
        free[slot] = chunks[-1]
    return records


def vllm_burst_that_never_holds(requests: int = 600, seed: int = 2) -> EngineLog:
    """A burst whose requests (60–2,400 output tokens) start finishing before the cache
    fills: the batch falls window after window from its peak, then the cache fills and the
    engine preempts, then the batch drains."""
    import random

    rng = random.Random(seed)
    arrivals = [Arrival(0.0, 600, rng.randint(60, 2400)) for _ in range(requests)]
    return simulate_vllm_engine(arrivals, EngineConfig(kv_tokens=requests * 950, max_running=1024))
