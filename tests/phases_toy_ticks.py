"""A toy batch-statistics format whose lines are counted in steps, whole: one module (this) and
one registry row (added by the test that uses it). Its log has an ``ADMIT`` line per admitted
batch and a ``TICK`` line every ``tick_interval`` decode steps (a setting its server prints as
``TickArgs(tick_interval=N)`` and a ``FormatOption`` row here) — the shape of SGLang's log in
words of its own, so that no SGLang word may reach its report."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ncuflow.phases import TraceError
from ncuflow.phases.model.capabilities import Capabilities, RunBoundary
from ncuflow.phases.model.traces import BatchSample, ServerTrace
from ncuflow.phases.parse.format import FormatOption, LineFormat, LogReading, StatedSettings

LINE = re.compile(
    r"^T=(?P<t>[\d.]+) (?P<kind>ADMIT|TICK) batch=(?P<batch>\d+) wait=(?P<wait>\d+)"
    r"(?: n=(?P<n>\d+) tok=(?P<tok>\d+))?(?: rate=(?P<rate>[\d.]+))?$"
)
STEP_S = 0.02  # the decode step of the toy logs
TICK_INTERVAL = FormatOption(
    name="tick_interval", default=10, minimum=1,
    help="Ticker decode steps between two TICK lines.", stated_in="TickArgs(",
)
TICKS = Capabilities(
    name="ticks", title="Tick server log", server="Ticker", run_boundary=RunBoundary.ADMISSION_FROM_EMPTY,
    prefill_lines=True, step_counted_lines=True, stats_window_s=None, admission_evidence="an ADMIT line",
    queue=True, kv_usage=False, preemption_lines=True, preemption_word="eviction", arrival_lines=False,
    per_request_timings=False, batch_field="batch", throughput_field="rate", batch_cap_option="--tick-slots",
    stats_line="TICK line", admission_line="ADMIT line", queue_field="wait", line_interval="tick interval",
)


@dataclass
class TickReader:
    path: Path
    reading: LogReading
    samples: list[BatchSample] = field(default_factory=list)
    stated: StatedSettings = field(default_factory=lambda: StatedSettings((TICK_INTERVAL,)))

    def context(self, number: int, line: str) -> None:
        self.stated.read(number, line)

    def feed(self, number: int, line: str) -> None:
        self.stated.read(number, line)
        found = LINE.match(line)
        if not found:
            return
        admit = found["kind"] == "ADMIT"
        self.samples.append(BatchSample(
            float(found["t"]), "prefill" if admit else "decode", int(found["batch"]), number, int(found["wait"]),
            new_seqs=int(found["n"]) if admit else None, new_tokens=int(found["tok"]) if admit else None,
            gen_throughput=float(found["rate"]) if found["rate"] else None,
        ))

    def traces(self) -> tuple[ServerTrace, ...]:
        if not self.samples:
            raise TraceError(f"{self.path}: no TICK lines.", "", "")
        steps = self.stated.resolved(TICK_INTERVAL, self.reading)
        return (ServerTrace(str(self.path), TICKS, None, "", tuple(self.samples), (), 0.001, steps_per_line=steps),)


TICK_FORMAT = LineFormat(
    name="ticks", capabilities=TICKS, claims=lambda line: bool(LINE.match(line)), reader=TickReader,
    describe="a tick log ('T=… TICK batch=…' lines)", help="'T=… ADMIT …' / 'T=… TICK …' lines",
    options=(TICK_INTERVAL,),
)


def tick_log(*, steps: int, stated: bool, with_rate: bool = True, batch: int = 8, step_s: float = STEP_S) -> list[str]:
    """A run: four ADMIT lines over a second, twenty TICK lines every ``steps`` steps of
    ``step_s``, a drain; with ``stated``, the server's ``TickArgs`` line first."""
    lines = [f"TickArgs(model='toy', {TICK_INTERVAL.name}={steps})"] if stated else []
    per = batch // 4
    lines += [f"T={k / 3:.3f} ADMIT batch={k * per} wait={batch - (k + 1) * per} n={per} tok={per * 500}" for k in range(4)]
    t = 1.0
    for _ in range(20):
        t += steps * step_s
        rate = f" rate={batch / step_s:.1f}" if with_rate else ""
        lines.append(f"T={t:.3f} TICK batch={batch} wait=0{rate}")
    for left in (batch // 2, 0):
        t += steps * step_s
        rate = f" rate={left / step_s:.1f}" if with_rate else ""
        lines.append(f"T={t:.3f} TICK batch={left} wait=0{rate}")
    return lines
