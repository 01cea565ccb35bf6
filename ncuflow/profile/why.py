"""The why tier (tier 3): after the verdict, only the ncu sections whose rules explain the wall.

The decisive collection (tiers 1 and 2) names the binding wall; NVIDIA's rules say why it
binds, but only for the sections they belong to, and ``--set full`` collects every section
(~40 passes on GH100). ``WHY`` holds one row per verdict: the sections that explain that
wall and the rules (ncu's rule identifiers) those sections feed. Everything else is derived
from the row: the ncu options of the tier-3 run (``why_options``), what ``profile --why
--dry-run`` shows, the passes Perfworks predicts for it
(``ncuflow.profile.section_metrics`` asks the ncu that will run which metrics the sections
collect) and the docs' table (checked by a test).

Which row: the wall forced with ``--why WALL``, else the verdict of the decisive run
``profile`` just made (``binding_wall``: the wall that binds the most launch time; a run
whose launches are all ``unknown`` gets no why tier). The tier-3 run is stored under
``STORE/.tier3`` with ``Escalation(tier=3, of_run=…, wall=…)`` and merged with the run it
explains as tier 2 is (``ncuflow.read.escalation``).

Never imports polars (the GPU host has none).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ncuflow.errors import UsageError
from ncuflow.read.launch import Launch
from ncuflow.store import RunRecord, tiers
from ncuflow.store.collection import NcuOptions
from ncuflow.store.lock import point_lock
from ncuflow.store.manifest import Escalation
from ncuflow.terms import BOUND_NAMES

if TYPE_CHECKING:
    from ncuflow.profile.orchestrate import StoredRun
    from ncuflow.profile.plan import ProfileJob
    from ncuflow.profile.precheck import PassCheck

WHY_TIER = 3


@dataclass(frozen=True)
class WhyRow:
    """One verdict's why: the ncu sections collected for it, the NVIDIA rules they feed, and the
    metrics those rules read that the sections do not collect."""

    wall: str  # a verdict (``ncuflow.terms.BOUND_NAMES``)
    sections: tuple[str, ...]  # ncu section identifiers (``ncu --list-sections``)
    rules: tuple[str, ...]  # the rule identifiers those sections feed that explain the wall
    metrics: tuple[str, ...] = ()  # read by those rules, collected by no section of the row
    source: bool = False  # SourceCounters among them: ``--import-source yes`` (CUDA lines in the report)
    reason: str = ""

    def __post_init__(self) -> None:
        if self.wall not in BOUND_NAMES:
            raise ValueError(f"{self.wall!r} is no verdict ({', '.join(BOUND_NAMES)})")


# MemoryCacheAccessPattern (on the tables) reads the L2's read sectors from the texture unit and
# the DRAM read throughput, which ncu collects with MemoryWorkloadAnalysis' chart: those
# metrics alone, not the chart's whole group.
_TABLES = ("MemoryWorkloadAnalysis_Tables",)
_TABLE_RULES = ("MemoryCacheAccessPattern",)
_TABLE_RULE_METRICS = ("dram__bytes_read.sum.pct_of_peak_sustained_elapsed", "lts__t_sectors_srcunit_tex_op_read.sum",
                       "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum",
                       "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum")
_CHART = ("MemoryWorkloadAnalysis_Chart",)
_CHART_RULES = ("MemoryL2Compression", "MemoryApertureUsage")
_SOURCE = ("SourceCounters",)
_SOURCE_RULES = ("UncoalescedGlobalAccess", "UncoalescedSharedAccess")
_PIPES = ("InstructionStats", "ComputeWorkloadAnalysis")
_PIPE_RULES = ("FPInstructions", "HighPipeUtilization", "SlowPipeLimiter")

WHY: tuple[WhyRow, ...] = (
    WhyRow("dram", (*_TABLES, *_CHART), (*_TABLE_RULES, *_CHART_RULES), _TABLE_RULE_METRICS,
           reason="the access pattern per cache level, L2 compression, the memory apertures"),
    WhyRow("l2", (*_TABLES, *_CHART), (*_TABLE_RULES, *_CHART_RULES), _TABLE_RULE_METRICS,
           reason="the access pattern per cache level, L2 compression, the memory apertures"),
    WhyRow("l1", (*_TABLES, *_SOURCE), (*_TABLE_RULES, *_SOURCE_RULES), _TABLE_RULE_METRICS, source=True,
           reason="bank conflicts and uncoalesced accesses, down to the source line"),
    WhyRow("issue", ("InstructionStats", "SchedulerStats"), ("FPInstructions", "IssueSlotUtilization"),
           reason="the instruction mix and how the schedulers' issue slots are used"),
    WhyRow("pipe", _PIPES, _PIPE_RULES, reason="the instruction mix and the pipes it loads"),
    WhyRow("math", _PIPES, _PIPE_RULES, reason="the instruction mix and the pipes it loads"),
    WhyRow("latency", ("WarpStateStats", *_SOURCE, "Occupancy"),
           ("CPIStall", "ThreadDivergence", *_SOURCE_RULES, "PCSamplingData", "Occupancy",
            "AchievedOccupancy", "TheoreticalOccupancy"), source=True,
           reason="what the warps wait on, per source line, and how many warps there are"),
)
WHY_BY_WALL: Mapping[str, WhyRow] = {row.wall: row for row in WHY}
WHY_WALLS: tuple[str, ...] = tuple(row.wall for row in WHY)
FROM_VERDICT = "verdict"  # ``--why`` with no wall: the decisive run's verdict picks the row


def why_row(wall: str) -> WhyRow:
    """The row of a wall; a verdict without one (``unknown``) is a usage error."""
    row = WHY_BY_WALL.get(wall)
    if row is None:
        raise UsageError(f"There is no why tier for the verdict {wall!r}.",
                         f"The why tier collects the ncu sections that explain a wall: {', '.join(WHY_WALLS)}.",
                         "Name one of those with --why WALL, or leave WALL out to take the run's own verdict.")
    return row


def why_options(options: NcuOptions, wall: str) -> NcuOptions:
    """The tier-3 collection of ``wall``: its row's sections and metrics alone (no metric set, none
    of the run's own metrics), with the run's other options (replay, caches, clocks, filters)."""
    row = why_row(wall)
    return replace(options, metric_set="none", sections=row.sections, extra_metrics=row.metrics, exclude_metrics=(),
                   import_source=row.source)


def binding_wall(launches: Sequence[Launch], threshold: float) -> str | None:
    """The verdict that binds the most launch time among ``launches`` (each launch counted by its
    duration, or 1 where it has none); None where no launch has a row (all ``unknown``)."""
    from ncuflow.analyze.classify import classify

    time_by_wall: dict[str, float] = {}
    for launch in launches:
        bound = classify(launch, threshold).bound
        if bound in WHY_BY_WALL:
            duration = launch.value("duration_ns")
            time_by_wall[bound] = time_by_wall.get(bound, 0.0) + (duration if duration and duration > 0 else 1.0)
    if not time_by_wall:
        return None
    return max(time_by_wall, key=lambda wall: (time_by_wall[wall], -WHY_WALLS.index(wall)))


# ----------------------------------------------------------------------------- the tier-3 run


def why_check(options: NcuOptions, wall: str, chip: str | None, ncu: str | None) -> PassCheck:
    """The why tier of ``wall`` as it would run after ``options``' decisive run: its options (the
    row's metrics ``chip`` lacks dropped) and the passes Perfworks predicts for them and for what
    ncu (``ncu``; None: not found here) lists for its sections on ``chip`` (None: this machine's GPU)."""
    from ncuflow.profile.precheck import check_passes
    from ncuflow.profile.section_metrics import list_section_metrics

    chosen, own = why_options(options, wall), why_row(wall).metrics
    if ncu is None:
        return replace(check_passes(chosen, chip, own=own), note="passes not predicted: no ncu here lists the sections' metrics")
    listed = list_section_metrics(ncu, chosen.sections)
    if listed.problem is not None:
        return replace(check_passes(chosen, chip, own=own), note=f"passes not predicted: {listed.problem}")
    return check_passes(chosen, chip, listed.names, own)


def why_job(run: RunRecord, job: ProfileJob, wall: str, options: NcuOptions | None = None) -> ProfileJob:
    """The job that explains ``run`` (made by ``job``): the sections of ``wall``'s row (or
    ``options``, as checked for the chip), stored under ``STORE/.tier3`` naming the run."""
    provenance = replace(run.manifest.provenance,
                         escalation=Escalation(tier=WHY_TIER, of_run=run.run_id, wall=wall))
    return replace(job, options=options or why_options(job.options, wall), provenance=provenance,
                   store=tiers.tier_root(run.store_root, WHY_TIER))


def why_runs_of(record: RunRecord, wall: str) -> list[RunRecord]:
    """The why runs of ``record`` stored for ``wall``, oldest first."""
    return [run for run in tiers.escalation_runs_of(record, WHY_TIER)
            if run.manifest.provenance.escalation is not None and run.manifest.provenance.escalation.wall == wall]


def commit_why(record: RunRecord, wall: str, profile_why: Callable[[], StoredRun]) -> StoredRun | None:
    """Under the tier-1 point's lock, unless a why run of ``wall`` is stored for it meanwhile:
    profile it (``profile_why`` stores it)."""
    with point_lock(record.path.parent):
        if why_runs_of(record, wall):
            return None
        return profile_why()
