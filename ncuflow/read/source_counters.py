"""Source counters: NVIDIA's per-instruction metrics of a launch, read where the source view asks.

ncu's ``SourceCounters`` section stores, per launch, metrics whose per-instance list is
keyed by instruction address (PC): warp samples at each instruction and their stall
reasons, executed instructions, the L2 sectors global accesses request and would request
ideally coalesced, shared-memory wavefronts. ``COUNTERS`` names those ncuflow reads (one row
each: its name, what it counts); ``STALL_PREFIX`` the stall-reason family.

A launch's counters come as ``PerPcSource``: ``counters()`` (the names it holds) and
``elements(name)`` ((address, value) pairs, streamed). Read from the file by ncuflow's reader
(``FileSource``: the metric's record streamed by ``ncuflow.read.metric_lists``; nothing of the
default read parses more) or through NVIDIA's ``ncu_report`` (``NcuReportSource``: ``IMetric``'s
``correlation_ids()`` and ``as_uint64(i)``/``as_double(i)``), the reader the process uses
(``ncuflow.read.readers``), as ``ncuflow.read.extract.iter_report`` chooses it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ncuflow.read.launch import KernelName
from ncuflow.read.metric_lists import Number, elements

SAMPLES = "smsp__pcsamp_sample_count"
STALL_PREFIX = "smsp__pcsamp_warps_issue_stalled_"  # + reason: the warp samples stalled for it
NOT_ISSUED_SUFFIX = "_not_issued"  # ... of them those where no instruction issued
EXECUTED = "inst_executed"


@dataclass(frozen=True)
class SectorPair:
    """The L2 sectors global accesses of an instruction requested, and ideally would have."""

    theoretical: str
    ideal: str


# ncu 2021.2 on, then the names of ncu 2020.x-2021.1; a launch's first pair held is used.
SECTOR_PAIRS = (
    SectorPair("memory_l2_theoretical_sectors_global", "memory_l2_theoretical_sectors_global_ideal"),
    SectorPair("memory_l2_sectors_global", "memory_l2_sectors_global_ideal"),
)

# The per-PC metrics the source view reads (besides the stall reasons), and what each counts.
COUNTERS: dict[str, str] = {
    EXECUTED: "warp-level SASS instructions executed at the address",
    "thread_inst_executed_true": "thread-level instructions executed there with a true predicate",
    SAMPLES: "warp samples at the address (every stall reason, 'selected' included)",
    **{pair.theoretical: "L2 sectors its global accesses requested" for pair in SECTOR_PAIRS},
    **{pair.ideal: "L2 sectors they would have requested ideally coalesced" for pair in SECTOR_PAIRS},
    "memory_l1_wavefronts_shared": "L1 wavefronts its shared-memory accesses took",
    "memory_l1_wavefronts_shared_ideal": "L1 wavefronts they would have taken without bank conflicts",
}

SECTION_LINE = ("collect them with `ncu --section SourceCounters` (warp-stall samples need "
                "`--section WarpStateStats` too); for file:line compile with `-lineinfo`, and add "
                "`--import-source yes` to keep the source text in the report")


def is_source_counter(name: str) -> bool:
    return name in COUNTERS or name.startswith(STALL_PREFIX)


def stall_reason(name: str) -> str | None:
    """The stall reason an all-samples counter counts ("long_scoreboard"); None for any other
    (the ``_not_issued`` counters included: they count a subset of the same samples)."""
    if not name.startswith(STALL_PREFIX) or name.endswith(NOT_ISSUED_SUFFIX):
        return None
    return name[len(STALL_PREFIX):] or None


class PerPcSource(Protocol):
    def counters(self) -> tuple[str, ...]: ...
    def elements(self, name: str) -> Iterator[tuple[int, Number]]: ...


class FileSource:
    """A launch read by ncuflow's reader (``ncuflow.read.fileaction.FileAction``)."""

    def __init__(self, action: Any) -> None:
        self._action = action

    def counters(self) -> tuple[str, ...]:
        return tuple(name for name in self._action.metric_names() if is_source_counter(name))

    def elements(self, name: str) -> Iterator[tuple[int, Number]]:
        record = self._action.record(name)
        return iter(()) if record is None else elements(record)


class NcuReportSource:
    """A launch read by ``ncu_report`` (an ``IAction``)."""

    def __init__(self, action: Any) -> None:
        self.action = action

    def counters(self) -> tuple[str, ...]:
        return tuple(name for name in self.action.metric_names() if is_source_counter(name))

    def elements(self, name: str) -> Iterator[tuple[int, Number]]:
        from ncuflow.read.ncureport import default_calls

        metric = self.action.metric_by_name(name)
        if metric is None or not metric.has_correlation_ids():
            return
        ids = metric.correlation_ids()
        read = metric.as_double if metric.kind() in default_calls().double_kinds else metric.as_uint64
        for index in range(metric.num_instances()):
            yield ids.as_uint64(index), read(index)


@dataclass(frozen=True)
class LaunchSource:
    """One launch of a report: who it is, and its per-PC counters (valid while its report is read)."""

    report: str
    range_index: int
    action_index: int
    kernel: KernelName
    nvtx: tuple[str, ...]
    source: PerPcSource


def iter_launch_sources(path: Path) -> Iterator[LaunchSource]:
    """Every intact launch of the report, with the reader this process uses."""
    from ncuflow.read.extract import iter_report
    from ncuflow.read.fileaction import FileAction

    for range_index, action_index, action in iter_report(path):
        source: PerPcSource = FileSource(action) if isinstance(action, FileAction) else NcuReportSource(
            getattr(action, "action", action))
        yield LaunchSource(str(path), range_index, action_index, action.kernel(), action.nvtx(), source)
