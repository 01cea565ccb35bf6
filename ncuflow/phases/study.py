"""What ``phases`` adds to a server log's analysis for a kernel study: the shapes its runs
served (``shapes``) and the harness check (``harness``), from the log's lines, the runs'
segment boundaries and what the user states (``StudyInputs``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ncuflow.phases.harness import ClientResult, HarnessCheck, harness_check
from ncuflow.phases.model import RunAnalysis, ServerTrace
from ncuflow.phases.shapes import FileShapes, file_shapes
from ncuflow.phases.shapes_scan import LogShapeLines, scan_log
from ncuflow.serving import ServingShape


@dataclass(frozen=True)
class StudyInputs:
    """What the user states beside the log: server settings, the client's result."""

    settings: Mapping[ServingShape, str] = field(default_factory=dict)
    client: ClientResult | None = None


@dataclass(frozen=True)
class FileStudy:
    shapes: FileShapes
    harness: HarnessCheck | None


def study_of_file(
    path: Path, traces: Sequence[object], runs: Sequence[RunAnalysis], given: StudyInputs | None
) -> FileStudy | None:
    """None for a file without a server log (request traces have no scheduler lines)."""
    servers = [t for t in traces if isinstance(t, ServerTrace)]
    if not servers:
        return None
    given = given or StudyInputs()
    lines = scan_log(path, {s.line for t in servers for s in t.samples if s.kind == "decode"})
    harness = None
    client, end = _client(lines, servers, given)
    if client is not None and end is not None:
        harness = harness_check(client, runs, end)
    return FileStudy(file_shapes(servers, runs, lines, given.settings), harness)


def _client(
    lines: LogShapeLines, servers: Sequence[ServerTrace], given: StudyInputs
) -> tuple[ClientResult | None, float | None]:
    """The client's result (given, else the log's result block) and where its window ends."""
    if given.client is not None:
        return given.client, max((t.samples[-1].time_s for t in servers if t.samples), default=None)
    duration = lines.client_duration
    if duration is None or not float(duration.value) > 0:  # a zero-length window times nothing
        return None, None
    bench = next((t.bench for t in servers if t.bench is not None), None)
    tpot = bench.mean_tpot_ms / 1e3 if bench is not None and bench.mean_tpot_ms else None
    before = [s.time_s for t in servers for s in t.samples if s.line < duration.line]
    client = ClientResult(f"bench_serving result block, line {duration.line}", float(duration.value), tpot)
    return client, max(before, default=None)
