"""Read vLLM server logs: the periodic ``Running: N reqs, Waiting: M reqs`` statistics lines.

vLLM (V0 and V1 engines) logs one line per ``--log-stats`` window (10 s by default) with the
average prompt and generation throughput over the window and the running/waiting counts at
its end (``Running`` counts requests still in prefill too: where a build also prints ``Avg
decode BS: X``, the window's decode batch, per-token time is read against that), and (with
speculative decoding) a ``SpecDecoding metrics`` line whose mean
acceptance length is attached to that window (V0: the growth of its ``Speculative metrics``
counts over the window; its ``Prefix cache hit rate: GPU: X%`` line, read as V1's inline
field). ANSI colour codes and ``(APIServer pid=…)``
prefixes are stripped. The log has no year, so times wrap at the new year (reported as an
error if it happens). Lines are read one at a time (``VllmReader.feed``), each in time linear
in its length, and the samples are kept in bounded memory (``parse.compact``).
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ncuflow.phases import TraceError
from ncuflow.phases.model.capabilities import Capabilities, RunBoundary
from ncuflow.phases.model.traces import BatchSample, LogEvent, ServerTrace
from ncuflow.phases.parse.compact import SampleStore, folding_note, share_cap
from ncuflow.phases.parse.format import LineFormat
from ncuflow.phases.parse.lines import strip_ansi
from ncuflow.phases.parse.service import ServiceLog, killed_after_client_event
from ncuflow.phases.parse.values import DECIMAL, BadValue, LogClock, count_value, rate_value

# vLLM prints no year (a build or plug-in with its own format may: kept for the clock origin's text
# only; times are reckoned in a stand-in year, so a line of another format never moves them)
STAMP = re.compile(r"(?:(?P<year>\d{4})-)?(?P<month>\d{2})-(?P<day>\d{2}) (?P<time>\d{2}:\d{2}:\d{2})(?:[.,](?P<frac>\d{1,6}))?")
ENGINE = re.compile(r"Engine (?P<engine>\d+):\s*$")
NUMBER = r"\d+(?:\.\d+)?"
STATS_TAIL = re.compile(
    rf"Avg prompt throughput: (?P<prompt>{NUMBER}) tokens/s, "
    rf"Avg generation throughput: (?P<gen>{NUMBER}) tokens/s, Running: (?P<running>\d+) reqs?"
    r"(?:, Swapped: (?P<swapped>\d+) reqs?)?, (?:Waiting|Pending): (?P<waiting>\d+) reqs?"
)
STATS_HINT = re.compile(r"Running: \d+ reqs?")
KV_USAGE = re.compile(rf"GPU KV cache usage: (?P<kv>{NUMBER})%")
HIT_RATE = re.compile(rf"[Pp]refix cache hit rate: (?P<rate>{NUMBER})%")
# V0 (0.6-0.8) states it on a line of its own after the statistics line, since the start:
# "Prefix cache hit rate: GPU: 62.26%, CPU: 0.00%"
V0_HIT_RATE = re.compile(rf"Prefix cache hit rate: GPU: (?P<rate>{NUMBER})%")
# V0's speculative decoding line, counts since the start: "Speculative metrics: Draft acceptance
# rate: 0.642, System efficiency: 0.598, Number of speculative tokens: 3, Number of accepted
# tokens: 8547, Number of draft tokens: 13311, Number of emitted tokens: 10616."
V0_SPEC = re.compile(
    r"Speculative metrics: .{0,200}?Number of speculative tokens: (?P<k>\d{1,4}), .{0,80}?"
    r"Number of draft tokens: (?P<drafted>\d{1,15}), Number of emitted tokens: (?P<emitted>\d{1,15})"
)
# a build that splits Running into prefill and decode (vLLM PR 25606): the window's averages
DECODE_BATCH = re.compile(rf"Avg decode BS: (?P<batch>{NUMBER})")
# vLLM V0 warns every 50th preemption: "Sequence group X is preempted by PreemptionMode.RECOMPUTE
# mode because there is not enough KV cache space. … total_num_cumulative_preemption=N"
PREEMPTED = "total_num_cumulative_preemption="
MARKER = "Avg prompt throughput:"
SPEC = "SpecDecoding metrics:"
ACCEPT = "Mean acceptance length: "
SHUTDOWNS = ("SIGTERM", "Shutting down", "Gracefully stopping")
WINDOW_S = 10.0  # --log-stats interval (VLLM_LOG_STATS_INTERVAL), 10 s by default


def claims_vllm(line: str) -> bool:
    return "throughput" in line and "Running:" in line and bool(STATS_HINT.search(line))


def _traceback_event(time_s: float | None, line: int, *, shutting_down: bool) -> LogEvent:
    if shutting_down:
        return LogEvent(
            time_s,
            line,
            "shutdown",
            "a traceback (EngineDeadError) after the shutdown began: the engine was stopped "
            "by the shutdown; the run was not aborted",
        )
    return LogEvent(time_s, line, "traceback", "the log contains a traceback")


def parse_vllm_log(
    path: Path, lines: Iterable[str], *, skip_malformed: bool = False
) -> tuple[ServerTrace, ...]:
    reader = VllmReader(path, skip_malformed)
    for number, line in enumerate(lines, start=1):
        reader.feed(number, line.rstrip("\n"))
    return reader.traces()


@dataclass
class VllmReader:
    """Line-by-line state of one vLLM log."""

    path: Path
    skip_malformed: bool = False
    clock: LogClock = field(default_factory=LogClock)
    any_fraction: bool = False
    stores: dict[str, SampleStore] = field(default_factory=dict)
    events: list[LogEvent] = field(default_factory=list)
    last_time: float | None = None
    last_line: int = 0
    last_engine: str | None = None
    shutting_down: bool = False
    skipped: int = 0
    first_skipped: int = 0
    preemptions: array = field(default_factory=lambda: array("d"))
    preempted: array = field(default_factory=lambda: array("q"))  # requests since the last warning
    preempted_total: int = 0
    hit_rate: float | None = None
    spec_counts: tuple[int, int] = (0, 0)  # V0's draft and emitted tokens at its last Speculative line
    prompt_tokens: float = 0.0
    origin_year: str | None = None  # the year the first stamp printed, if it printed one
    service: ServiceLog = field(init=False)

    def __post_init__(self) -> None:
        self.service = ServiceLog(self._traceback)

    def context(self, number: int, line: str) -> None:
        self._event(number, strip_ansi(line))

    def feed(self, number: int, raw: str) -> None:
        line = strip_ansi(raw)
        if self._event(number, line):
            return
        if SPEC in line:
            self._spec(line)
            return
        if "Prefix cache hit rate: GPU" in line or "Speculative metrics:" in line:
            self._v0_line(line)
            return
        if "Running:" not in line or not STATS_HINT.search(line):
            return
        try:
            sample, engine = self._sample(number, line)
        except BadValue as bad:
            if bad.key == "timestamp":  # the year is ncuflow's stand-in (vLLM prints none)
                self._malformed(number, line, f"has an impossible timestamp ({bad.text[5:]})")
            else:
                self._malformed(number, line, f"has '{bad.key}: {bad.text[:30]}', which is not {bad.expected}")
            return
        if sample is None:
            self._malformed(number, line, "cannot be read")
            return
        if self.last_time is not None and sample.time_s < self.last_time - 1.0:
            raise TraceError(
                f"{self.path}:{number}: time goes back from line {self.last_line} to this line.",
                "The file holds interleaved or concatenated runs (or crosses a new year, which vLLM "
                "timestamps cannot show).",
                "Split the file into one log per server run and pass each file.",
            )
        previous = self.stores[engine].samples[-1].time_s if engine in self.stores and self.stores[engine].samples else None
        window = min(sample.time_s - previous, WINDOW_S) if previous is not None else WINDOW_S
        self.prompt_tokens += (sample.prompt_throughput or 0.0) * window
        self.last_time, self.last_line, self.last_engine = sample.time_s, number, engine
        if sample.running or sample.queued:
            self.service.busy(number)
        store = self.stores.get(engine)
        if store is None:
            store = self.stores[engine] = SampleStore()
            share_cap(self.stores)
        store.append(sample)

    def _event(self, number: int, line: str) -> bool:
        if not self.shutting_down and any(marker in line for marker in SHUTDOWNS):
            self.shutting_down = True
            self.events.append(LogEvent(self.last_time, number, "shutdown", "the server was shut down"))
            return True
        if self.service.read(number, line, lambda: self._time_of_line(line)):
            return True
        if "EngineDeadError" in line:  # outside a traceback
            self._traceback(number, self.last_time, "EngineDeadError")
            return True
        if "is preempted by" in line:
            self._preemption(number, line)
            return True
        return False

    def _seconds(self, stamp: re.Match[str]) -> float:
        """A stamp's seconds since t = 0, in the stand-in year 2000 (a leap year: 02-29 is a date)."""
        if self.clock.origin_s is None:
            self.origin_year = stamp.group("year")
        return self.clock.seconds(f"2000-{stamp.group('month')}-{stamp.group('day')}", stamp.group("time"),
                                  stamp.group("frac"))

    def _time_of_line(self, line: str) -> float | None:
        """A line's own time where it has one (else the last statistics line's)."""
        stamp = STAMP.search(line)
        if stamp is None:
            return self.last_time
        try:
            return self._seconds(stamp)
        except BadValue:
            return self.last_time

    def _traceback(self, line: int, time_s: float | None, exception: str) -> None:
        if len(self.events) >= 1000:
            return
        if self.service.client_ended():
            self.events.append(killed_after_client_event(time_s, line, exception, self.service.client_aborts))
            return
        self.events.append(_traceback_event(time_s, line, shutting_down=self.shutting_down))

    def _preemption(self, number: int, line: str) -> None:
        at = line.find(PREEMPTED)
        digits = line[at + len(PREEMPTED) : at + len(PREEMPTED) + 12] if at >= 0 else ""
        digits = digits[: len(digits) - len(digits.lstrip("0123456789"))]
        time_s = self._time_of_line(line)
        if not digits or time_s is None:
            return
        total = int(digits)
        self.preemptions.append(time_s)
        self.preempted.append(max(total - self.preempted_total, 1))
        self.preempted_total = total
        if len(self.events) < 1000:
            self.events.append(LogEvent(time_s, number, "retraction", line.strip()[:200]))

    def _v0_line(self, line: str) -> None:
        """V0's lines after a statistics line: the prefix cache hit rate since the start, and
        the speculative counts since the start, whose growth over the window gives its mean
        acceptance length (emitted tokens per step; a step drafts k tokens per request)."""
        hit = V0_HIT_RATE.search(line)
        if hit is not None:
            self.hit_rate = rate_value("Prefix cache hit rate", hit.group("rate")) / 100
            return
        spec = V0_SPEC.search(line)
        store = self.stores.get(self.last_engine) if self.last_engine is not None else None
        if spec is None:
            return
        k, drafted, emitted = (int(spec.group(name)) for name in ("k", "drafted", "emitted"))
        before, self.spec_counts = self.spec_counts, (drafted, emitted)
        if store is None or not store.samples or not k or drafted <= before[0] or emitted < before[1]:
            return
        accept = (emitted - before[1]) * k / (drafted - before[0])
        store.samples[-1] = store.samples[-1]._replace(accept_len=accept or None)

    def _spec(self, line: str) -> None:
        at = line.find(ACCEPT, line.find(SPEC))
        store = self.stores.get(self.last_engine) if self.last_engine is not None else None
        if at < 0 or store is None or not store.samples:
            return
        value = DECIMAL.match(line, at + len(ACCEPT))
        if value is None:
            return
        try:
            accept = rate_value("Mean acceptance length", value.group())
        except BadValue:
            return
        store.samples[-1] = store.samples[-1]._replace(accept_len=accept or None)

    def _sample(self, number: int, line: str) -> tuple[BatchSample | None, str]:
        at = line.find(MARKER)
        if at < 0:
            return None, ""
        prefix = line[:at]
        stamp = STAMP.search(prefix)
        tail = STATS_TAIL.match(line, at)
        if stamp is None or tail is None:
            return None, ""
        frac = stamp.group("frac")
        time_s = self._seconds(stamp)
        self.any_fraction = self.any_fraction or bool(frac)
        engine = ENGINE.search(prefix)
        kv = KV_USAGE.search(line, tail.end())
        hit = HIT_RATE.search(line, tail.end())
        decoding = DECODE_BATCH.search(line, tail.end())
        if hit is not None:
            self.hit_rate = rate_value("Prefix cache hit rate", hit.group("rate")) / 100
        return BatchSample(
            time_s=time_s,
            kind="stats",
            running=count_value("Running", tail.group("running")),
            line=number,
            # V0's requests swapped out to the CPU for want of KV cache wait as well
            queued=count_value("Waiting", tail.group("waiting"))
            + (count_value("Swapped", tail.group("swapped")) if tail.group("swapped") else 0),
            gen_throughput=rate_value("Avg generation throughput", tail.group("gen")),
            prompt_throughput=rate_value("Avg prompt throughput", tail.group("prompt")),
            kv_usage=rate_value("GPU KV cache usage", kv.group("kv")) / 100 if kv else None,
            decoding=rate_value("Avg decode BS", decoding.group("batch")) if decoding else None,
        ), (engine.group("engine") if engine else "0")

    def _malformed(self, number: int, line: str, problem: str) -> None:
        if self.skip_malformed:
            self.skipped += 1
            self.first_skipped = self.first_skipped or number
            return
        raise TraceError(
            f"{self.path}:{number}: this vLLM statistics line {problem}: {line.strip()[:160]!r}.",
            "ncuflow phases expects 'MM-DD HH:MM:SS … Avg prompt throughput: X tokens/s, Avg "
            "generation throughput: Y tokens/s, Running: N reqs, Waiting: M reqs', with real "
            "dates and finite numbers.",
            "Pass the vLLM server log as written, or --skip-malformed to leave such lines out.",
        )

    def traces(self) -> tuple[ServerTrace, ...]:
        if not self.stores:
            raise TraceError(
                f"{self.path}: no vLLM 'Running: N reqs, Waiting: M reqs' statistics lines.",
                "Without them there is nothing to split into phases.",
                "Run the vLLM server without --disable-log-stats and pass its log.",
            )
        arrivals, service = self.service.finish()
        events = list(self.events)
        if self.skipped:
            events.append(LogEvent(None, self.first_skipped, "malformed",
                                   f"{self.skipped} malformed statistics line(s) left out "
                                   f"(first at line {self.first_skipped})"))
        for engine, store in self.stores.items():
            if store.folded or store.run_stride > 1:
                where = f" of engine {engine}" if len(self.stores) > 1 else ""
                events.append(LogEvent(None, 0, "note", folding_note(where, store)))
        clock = self.clock.origin_text[5:] if self.clock.origin_text else ""
        clock = f"{self.origin_year}-{clock}" if clock and self.origin_year else clock
        multi = len(self.stores) > 1
        service = replace(service, prompt_tokens=self.prompt_tokens, cache_hit_rate=self.hit_rate)
        return tuple(
            ServerTrace(
                path=str(self.path),
                capabilities=CAPABILITIES,
                rank=f"engine {engine}" if multi else None,
                clock_origin=clock,
                samples=tuple(store.samples),
                events=tuple(events),
                time_resolution_s=0.001 if self.any_fraction else 1.0,
                retraction_times_s=self.preemptions,
                arrivals=None if multi else arrivals,
                service=service,
                retracted_requests=self.preempted,
            )
            for engine, store in sorted(self.stores.items())
        )


CAPABILITIES = Capabilities(
    name="vllm",
    title="vLLM server log",
    server="vLLM",
    run_boundary=RunBoundary.BUSY_AFTER_IDLE,
    prefill_lines=False,
    step_counted_lines=False,
    stats_window_s=WINDOW_S,
    admission_evidence="prompt throughput above 10 % of the generation throughput",
    queue=True,
    kv_usage=True,
    preemption_lines=False,  # V0 warns every 50th preemption, V1 never: inferred
    preemption_word="preemption",
    arrival_lines=True,
    per_request_timings=False,
    batch_field="Running",
    throughput_field="Avg generation throughput",
    stats_line="stats line",
    queue_field="Waiting",
    batch_cap_option="--max-num-seqs",
)
FORMAT = LineFormat(
    name="vllm",
    capabilities=CAPABILITIES,
    claims=lambda line: claims_vllm(strip_ansi(line)),
    reader=lambda path, reading: VllmReader(path, reading.skip_malformed),
    describe="a vLLM server log ('Running: N reqs, Waiting: M reqs' lines)",
    help="'Running: N reqs, Waiting: M reqs' statistics lines",
)
