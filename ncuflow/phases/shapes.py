"""The shapes a server log's runs served: per run and per stretch (ramp, steady, drain, burst,
overload), the decode batch, the KV length per request and the prefill chunk sizes; per file,
the server's settings, each with the line that states it or "not in the log" and the flag that
states it instead.

It takes from the analysis only what it needs: each scheduler's statistics lines (line number,
time, ``#running-req``, ``#new-token``) and each run's segment boundaries (``stretches_of``).
A Decode line stands for the same number of decode steps as every other one
(``decode_log_interval``), so a distribution over Decode lines is one over decode steps, i.e.
over the attention kernel's launches. KV length per request is ``#token / #running-req``: the
KV slots in use over the requests using them (a prefix shared by several requests is held
once, so under prefix sharing it reads low).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ncuflow.phases.model import RunAnalysis, ServerTrace
from ncuflow.phases.model.capabilities import STATS_LINE
from ncuflow.phases.model.results import PhaseKind, Segment, SegmentKind
from ncuflow.phases.model.runs import split_server_runs
from ncuflow.phases.model.stats import Distribution, distribution
from ncuflow.phases.model.traces import BatchSample
from ncuflow.phases.shapes_scan import LogShapeLines
from ncuflow.serving import SETTINGS, ServingShape

KV_SOURCE = "#token / #running-req on Decode lines"


@dataclass(frozen=True)
class Stretch:
    """A named stretch of a run's clock: (start, end], both in seconds of the log's clock."""

    name: str  # "ramp", "steady", "drain", "burst", "overload"
    segment: int
    start_s: float
    end_s: float

    def within(self, samples: Sequence[BatchSample], times: Sequence[float]) -> Sequence[BatchSample]:
        """The lines of ``samples`` (``times``: their sorted times) on this stretch. A ramp ends
        at the plateau's first Decode line, a drain starts at its last: those lines are the
        plateau's, not theirs."""
        low = (bisect.bisect_right if self.name == "drain" else bisect.bisect_left)(times, self.start_s)
        high = (bisect.bisect_left if self.name == "ramp" else bisect.bisect_right)(times, self.end_s)
        return samples[low:high]


@dataclass(frozen=True)
class StretchShapes:
    """The shapes served over one stretch (or a whole run: ``name`` "run")."""

    name: str
    segment: int | None
    start_s: float | None
    end_s: float | None
    decode_lines: int
    first_line: int | None  # the first Decode (else Prefill) line of the stretch
    decode_batch: Distribution | None
    kv_len: Distribution | None
    prefill_chunk: Distribution | None
    cuda_graph_share: float | None  # Decode lines that say "cuda graph: True", where they say
    accept_len: Distribution | None = None  # speculative decoding: tokens accepted per step


@dataclass(frozen=True)
class RunShapes:
    run_label: str
    rank: str | None
    run: StretchShapes
    stretches: tuple[StretchShapes, ...]


@dataclass(frozen=True)
class Setting:
    """A server setting: stated (value and line, or the option that gave it) or not in the log."""

    shape: ServingShape
    value: str | None
    line: int | None
    source: str  # "log", "--setting", "Decode lines", "rank tags", or "not in the log"
    flag: str  # how to state it where the log does not


@dataclass(frozen=True)
class FileShapes:
    runs: tuple[RunShapes, ...]
    settings: tuple[Setting, ...]
    kv_len_source: str  # how KV length was read, or "not in the log"
    stats_line: str = STATS_LINE  # what the format calls the lines the shapes are counted on
    line_meaning: str = ""  # what one such line stands for: "a Decode line per 40 decode steps"

    def setting(self, shape: ServingShape) -> Setting | None:
        return next((s for s in self.settings if s.shape is shape), None)


def stretches_of(segments: Sequence[Segment]) -> tuple[Stretch, ...]:
    """The named stretches of a run's segments: a plateau's ramp, steady and drain, a burst
    and an overload stretch whole. The one place that reads segment boundaries."""
    found: list[Stretch] = []
    for seg in segments:
        if seg.kind is SegmentKind.PLATEAU:
            spans = (("ramp", seg.ramp), ("steady", seg.phase(PhaseKind.STEADY).span),
                     ("drain", seg.phase(PhaseKind.DRAIN).span))
            found.extend(Stretch(name, seg.index, span.start_s, span.end_s) for name, span in spans if span)
        else:
            found.append(Stretch(seg.kind.value, seg.index, seg.start_s, seg.end_s))
    return tuple(found)


def file_shapes(
    traces: Iterable[object],
    runs: Sequence[RunAnalysis],
    lines: LogShapeLines,
    given: Mapping[ServingShape, str],
) -> FileShapes:
    """Every server trace's runs' shapes, and the file's settings."""
    servers = [t for t in traces if isinstance(t, ServerTrace)]
    shaped: list[RunShapes] = []
    for trace in servers:
        for samples, run in _runs_of(trace, runs):
            shaped.append(_run_shapes(samples, run, lines))
    kv_source = KV_SOURCE if lines.kv_tokens else "not in the log"
    if not lines.kv_tokens and lines.kv_capacity is not None:
        kv_source = f"GPU KV cache usage × the KV cache's {lines.kv_capacity.value} tokens (line {lines.kv_capacity.line}) / Running"
    words = servers[0].capabilities.stats_line if servers else STATS_LINE
    meaning = _line_meaning(servers[0]) if servers else ""
    return FileShapes(tuple(shaped), _settings(servers, lines, given), kv_source, words, meaning)


def _line_meaning(trace: ServerTrace) -> str:
    """What one statistics line stands for, so what a distribution over lines is over: decode
    steps where lines are counted in steps, time where each averages a window."""
    words = trace.capabilities
    if trace.steps_between_lines:
        return f"a {words.stats_line} per {trace.steps_between_lines} decode steps"
    if words.stats_window_s:
        return f"a {words.stats_line} per {words.stats_window_s:g}-s window"
    return f"a {words.stats_line} per line the log printed"


def _runs_of(trace: ServerTrace, runs: Sequence[RunAnalysis]) -> list[tuple[tuple[BatchSample, ...], RunAnalysis]]:
    """Each run of ``trace`` with its statistics lines (matched by rank and first line's time)."""
    by_start: dict[float | None, list[RunAnalysis]] = {}
    for r in runs:
        if r.identity.rank == trace.rank and r.identity.path == trace.path:
            by_start.setdefault(r.shape.start_s, []).append(r)
    pairs = []
    for server_run in split_server_runs(trace):
        same_start = by_start.get(server_run.samples[0].time_s)
        if same_start:
            pairs.append((server_run.samples, same_start.pop(0)))
    return pairs


def _run_shapes(samples: Sequence[BatchSample], run: RunAnalysis, lines: LogShapeLines) -> RunShapes:
    times = [x.time_s for x in samples]  # a scheduler's lines are in time order
    return RunShapes(
        run_label=run.identity.run_label,
        rank=run.identity.rank,
        run=_shapes_over("run", None, samples, lines),
        stretches=tuple(_shapes_over(s.name, s, s.within(samples, times), lines) for s in stretches_of(run.shape.segments)),
    )


def _shapes_over(
    name: str, stretch: Stretch | None, samples: Sequence[BatchSample], lines: LogShapeLines
) -> StretchShapes:
    decodes = [s for s in samples if s.kind != "prefill" and s.running > 0]
    prefills = [s for s in samples if s.kind == "prefill" and s.new_tokens]
    kv = [kv_tokens / s.running for s in decodes if (kv_tokens := _kv_tokens(s, lines)) is not None]
    graphs = [lines.cuda_graph[s.line] for s in decodes if s.line in lines.cuda_graph]
    first = next(iter(decodes or prefills), None)
    return StretchShapes(
        name=name,
        segment=stretch.segment if stretch else None,
        start_s=stretch.start_s if stretch else (samples[0].time_s if samples else None),
        end_s=stretch.end_s if stretch else (samples[-1].time_s if samples else None),
        decode_lines=len(decodes),
        first_line=first.line if first is not None else None,
        decode_batch=distribution([float(s.running) for s in decodes]),
        kv_len=distribution(kv),
        prefill_chunk=distribution([float(s.new_tokens or 0) for s in prefills]),
        cuda_graph_share=sum(graphs) / len(graphs) if graphs else None,
        accept_len=distribution([s.accept_len for s in decodes if s.accept_len is not None]),
    )


def _kv_tokens(sample: BatchSample, lines: LogShapeLines) -> float | None:
    """KV tokens in use on a statistics line: SGLang's ``#token``; else, where vLLM stated its
    cache's size at start-up, the line's usage share of it (whole blocks: it reads high)."""
    if sample.line in lines.kv_tokens:
        return float(lines.kv_tokens[sample.line])
    if lines.kv_capacity is not None and sample.kv_usage is not None:
        return sample.kv_usage * int(lines.kv_capacity.value)
    return None


def _settings(
    traces: Sequence[ServerTrace], lines: LogShapeLines, given: Mapping[ServingShape, str]
) -> tuple[Setting, ...]:
    derived = _derived(traces)
    result = []
    for row in SETTINGS:
        stated = lines.settings.get(row.shape)
        if row.shape in given:
            result.append(Setting(row.shape, given[row.shape], None, "--setting", row.flag))
        elif stated is not None:
            result.append(Setting(row.shape, stated.value, stated.line, "log", row.flag))
        elif row.shape in derived:
            value, line, source = derived[row.shape]
            result.append(Setting(row.shape, value, line, source, row.flag))
        else:
            result.append(Setting(row.shape, None, None, "not in the log", row.flag))
    return tuple(result)


def _derived(traces: Sequence[ServerTrace]) -> dict[ServingShape, tuple[str, int, str]]:
    """Settings the statistics lines imply: speculative decoding (``accept len``), at least as
    many DP ranks as rank tags ``DPk``."""
    found: dict[ServingShape, tuple[str, int, str]] = {}
    accepting = [s for t in traces for s in t.samples if s.accept_len is not None]
    if accepting:
        first = min(accepting, key=lambda s: s.line)
        found[ServingShape.SPECULATIVE] = ("on (accept len on Decode lines)", first.line, "Decode lines")
    dp = [t for t in traces if t.rank and t.rank.startswith("DP") and t.samples]
    if dp:
        line = min(t.samples[0].line for t in dp)
        found[ServingShape.DP_SIZE] = (f">= {len(dp)} (rank tags DP0..)", line, "rank tags")
    return found
