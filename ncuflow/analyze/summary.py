"""Where the GPU time of a report goes: per kernel and launch configuration, its share and verdicts.

One ``ReportSummary`` per report (a store run is one report): its kernels grouped by full
name and launch configuration (grid, block), sorted by total duration, each with its
launches, total and median duration, share of the report's GPU time (the kernels' shares
sum to 1, the rest of a ``top`` cut included), the max model's verdicts with their counts,
the binding term's median utilization, and NVIDIA's top finding where the findings were read:
the largest estimated speedup among the findings about the kernel's binding wall (its most
common verdict), else the largest among the others, as ``classify --evidence`` ranks them
(``ncuflow.analyze.findings.top_ranked``). Launches without a duration are counted but carry no
time (and are named). ``roll_up`` sums many reports instead: one summary per GPU, each
kernel (name and configuration) over every report that holds it. Pure functions over loaded
runs; no I/O, no polars.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ncuflow.analyze.classify import (
    DEFAULT_THRESHOLD,
    TERM_NAMES,
    Verdict,
    check_threshold,
    classify,
)
from ncuflow.analyze.names import distinct_short_names
from ncuflow.read.launch import Launch

if TYPE_CHECKING:  # findings are read (and their modules imported) only where asked for
    from ncuflow.read.findings import Finding

KernelKey = tuple[str, float | None, float | None]


def kernel_key(launch: Launch) -> KernelKey:
    """The full (demangled) name and launch configuration (grid, block) a summary groups by."""
    name = launch.kernel.demangled or launch.kernel.function
    return (name, launch.value("grid_size"), launch.value("block_size"))


def config_text(grid: float | None, block: float | None) -> str:
    """``grid 2,048 × block 128`` (— where the report holds no launch configuration)."""
    if grid is None and block is None:
        return "—"
    def number(value: float | None) -> str:
        return "?" if value is None else f"{int(value):,}" if float(value).is_integer() else f"{value:g}"
    return f"{number(grid)} × {number(block)}"


@dataclass(frozen=True)
class KernelSummary:
    """One kernel at one launch configuration in one report."""

    kernel: str  # full demangled name
    function: str
    short_name: str
    grid_size: float | None
    block_size: float | None
    launches: int
    timed_launches: int
    total_ns: float | None
    median_ns: float | None
    share: float | None  # of the report's GPU time; None where no launch of the report has a duration
    verdicts: tuple[tuple[str, int], ...]  # (bound, launches), most common first
    binding_term: str | None  # the term of the most common verdict (the largest term when latency)
    binding_u: float | None  # its median utilization over the kernel's launches
    # NVIDIA's top finding over the kernel's launches (``findings.top_ranked``: the binding wall's largest
    # estimated speedup, else the largest); ``rules`` says whether its launches hold rule results (None:
    # not read, False: the report has none).
    top_finding: Finding | None = None
    rules: bool | None = None
    reports: int = 1  # how many reports its launches came from (more than one in a roll-up)
    tensor_pct: float | None = None  # the tensor pipes' median % of peak, where the launches hold it (in u_math)

    @property
    def bound(self) -> str:
        return self.verdicts[0][0] if self.verdicts else "unknown"

    @property
    def config(self) -> str:
        return config_text(self.grid_size, self.block_size)

    def verdict_text(self) -> str:
        """``dram 3`` or ``latency 2, l1 1``."""
        return ", ".join(f"{bound} {count}" for bound, count in self.verdicts)

    def binding_text(self) -> str:
        """``u_dram 0.85``; ``u_l1 0.44 (largest)`` for a latency-bound kernel; ``—``."""
        if self.binding_term is None or self.binding_u is None:
            return "—"
        largest = " (largest)" if self.bound != self.binding_term else ""
        tensor = f"; tensor {self.tensor_pct:.1f} %" if self.tensor_pct else ""
        return f"u_{self.binding_term} {self.binding_u:.2f}{largest}{tensor}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel, "function": self.function, "short_name": self.short_name,
            "grid_size": self.grid_size, "block_size": self.block_size, "launches": self.launches,
            "timed_launches": self.timed_launches, "total_ns": self.total_ns, "median_ns": self.median_ns,
            "share": self.share, "bound": self.bound, "verdicts": dict(self.verdicts),
            "binding_term": self.binding_term, "binding_u": self.binding_u, "reports": self.reports, "tensor_pct": self.tensor_pct,
            "rule_results": self.rules, "top_finding": None if self.top_finding is None else {
                "rule": self.top_finding.rule, "title": self.top_finding.heading,
                "speedup": self.top_finding.speedup, "speedup_type": self.top_finding.speedup_type},
        }


@dataclass(frozen=True)
class Rest:
    """The kernels a ``top`` cut leaves out, summed."""

    kernels: int
    launches: int
    total_ns: float | None
    share: float | None


@dataclass(frozen=True)
class ReportSummary:
    report: str
    label: str  # the report file name, or the store run's cell spec and run id
    device: str | None
    launches: int
    untimed: int  # launches without a duration
    total_ns: float | None
    kernels: tuple[KernelSummary, ...]
    rest: Rest | None = None
    reports: int = 1  # the reports it sums (more than one in a roll-up: ``roll_up``)

    def shares_total(self) -> float | None:
        """Sum of the shares (1 where the report has any duration)."""
        shares = [k.share for k in self.kernels if k.share is not None]
        if self.rest is not None and self.rest.share is not None:
            shares.append(self.rest.share)
        return math.fsum(shares) if shares else None

    def to_json(self) -> dict[str, Any]:
        return {
            "report": self.report, "label": self.label, "device": self.device, "reports": self.reports,
            "launches": self.launches,
            "untimed_launches": self.untimed, "total_ns": self.total_ns,
            "kernels": [k.to_json() for k in self.kernels],
            "other": None if self.rest is None else {"kernels": self.rest.kernels, "launches": self.rest.launches,
                                                     "total_ns": self.rest.total_ns, "share": self.rest.share},
        }


def _binding(verdicts: Sequence[Verdict], bound: str) -> tuple[str | None, float | None]:
    """The binding term and its median u: the verdict's term, or the largest one when latency-bound."""
    medians: dict[str, float] = {}
    for name in TERM_NAMES:
        values = [u for u in (v.utilization(name) for v in verdicts) if u is not None]
        if values:
            medians[name] = statistics.median(values)
    if bound in medians:
        return bound, medians[bound]
    if not medians:
        return None, None
    top = max(medians, key=lambda name: medians[name])
    return top, medians[top]


def summarize_kernel(launches: Sequence[Launch], verdicts: Sequence[Verdict], short: str,
                     report_total: float | None) -> KernelSummary:
    durations = [d for d in (x.value("duration_ns") for x in launches) if d is not None and math.isfinite(d)]
    total = math.fsum(durations) if durations else None
    counts = Counter(v.bound for v in verdicts)
    ranked = tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    bound = ranked[0][0] if ranked else "unknown"
    term, u = _binding(verdicts, bound)
    name, grid, block = kernel_key(launches[0])
    share = (total or 0.0) / report_total if report_total else None
    results = [x.rule_results for x in launches]
    read = [r for r in results if r is not None]
    top = None
    if read:
        from ncuflow.analyze.findings import top_ranked

        top = top_ranked(results, bound)
    tensor = [t for t in (x.value("tensor_pipe_pct") for x in launches) if t is not None]
    return KernelSummary(
        kernel=name, function=launches[0].kernel.function, short_name=short, grid_size=grid, block_size=block,
        launches=len(launches), timed_launches=len(durations), total_ns=total,
        median_ns=statistics.median(durations) if durations else None, share=share,
        verdicts=ranked, binding_term=term, binding_u=u, reports=len({x.report for x in launches}),
        top_finding=top, rules=any(r.held for r in read) if read else None,
        tensor_pct=statistics.median(tensor) if tensor else None,
    )


def summarize_launches(launches: Sequence[Launch], *, report: str, label: str, threshold: float = DEFAULT_THRESHOLD,
                       top: int | None = None, width: int = 60) -> ReportSummary:
    """The summary of one report's launches (``top``: keep the N kernels with the most time)."""
    threshold = check_threshold(threshold)
    groups: dict[KernelKey, list[Launch]] = {}
    for launch in launches:
        groups.setdefault(kernel_key(launch), []).append(launch)
    durations = [d for d in (x.value("duration_ns") for x in launches) if d is not None and math.isfinite(d)]
    report_total = math.fsum(durations) if durations else None
    shorts = distinct_short_names((key[0] for key in groups), width)
    kernels = [
        summarize_kernel(members, [classify(x, threshold) for x in members], shorts[key[0]], report_total)
        for key, members in groups.items()
    ]
    kernels.sort(key=lambda k: (-(k.total_ns or 0.0), -k.launches, k.short_name))
    rest = None
    if top is not None and len(kernels) > top:
        cut = kernels[top:]
        kernels = kernels[:top]
        timed = [k.total_ns for k in cut if k.total_ns is not None]
        rest_total = math.fsum(timed) if timed else None
        rest = Rest(len(cut), sum(k.launches for k in cut), rest_total,
                    (rest_total or 0.0) / report_total if report_total else None)
    devices = sorted({x.device.name for x in launches if x.device.name})
    return ReportSummary(
        report=report, label=label, device=", ".join(devices) or None, launches=len(launches),
        untimed=len(launches) - len(durations), total_ns=report_total, kernels=tuple(kernels), rest=rest,
    )


def run_label(cell: str, params: Sequence[tuple[str, object]], run_id: str, report: Path, is_store_run: bool) -> str:
    """How a summary names a report: the file name, or a store run's cell spec and run id."""
    if not is_store_run:
        return report.name
    spec = cell + (":" + ",".join(f"{k}={v}" for k, v in params) if params else "")
    return f"{spec} (run {run_id})"


class SummaryRun(Protocol):
    """What ``summarize`` needs of a run (``ncuflow.read.runs.LoadedRun`` has it)."""

    @property
    def cell(self) -> str: ...
    @property
    def params(self) -> tuple[tuple[str, object], ...]: ...
    @property
    def run_id(self) -> str: ...
    @property
    def report(self) -> Path: ...
    @property
    def launches(self) -> tuple[Launch, ...]: ...
    @property
    def ref(self) -> object: ...


def summarize(runs: Iterable[SummaryRun], *, threshold: float = DEFAULT_THRESHOLD, top: int | None = None,
              width: int = 60) -> tuple[ReportSummary, ...]:
    """One summary per loaded run (``ncuflow.read.runs.LoadedRun``), in load order."""
    found: list[ReportSummary] = []
    runs = [run for run in runs if run.launches]
    names = [Path(run.report).name for run in runs]
    for run in runs:
        label = run_label(run.cell, run.params, run.run_id, Path(run.report), run.ref is not None)
        if run.ref is None and names.count(Path(run.report).name) > 1:
            label = str(run.report)  # plain reports that share a file name are told apart by their path
        found.append(summarize_launches(run.launches, report=str(run.report), label=label, threshold=threshold,
                                        top=top, width=width))
    return tuple(found)


UNKNOWN_GPU = "unknown GPU"


def roll_up(runs: Iterable[SummaryRun], *, threshold: float = DEFAULT_THRESHOLD, top: int | None = None,
            width: int = 60) -> tuple[ReportSummary, ...]:
    """One summary per GPU over every loaded run: each kernel (full name and launch configuration)
    summed across the reports that hold it, its share of that GPU's time in all of them. GPUs are
    told apart by name (a kernel's time on two chips does not add up), the one with most time first."""
    by_gpu: dict[str, list[Launch]] = {}
    reports: dict[str, set[str]] = {}
    for run in runs:
        for launch in run.launches:
            gpu = launch.device.name or UNKNOWN_GPU
            by_gpu.setdefault(gpu, []).append(launch)
            reports.setdefault(gpu, set()).add(str(run.report))
    found = []
    for gpu, launches in by_gpu.items():
        count = len(reports[gpu])
        label = f"{count} report{'s' if count != 1 else ''} on {gpu}"
        rolled = summarize_launches(launches, report=label, label=label, threshold=threshold, top=top, width=width)
        found.append(replace(rolled, reports=count))
    return tuple(sorted(found, key=lambda summary: (-(summary.total_ns or 0.0), summary.label)))


def summary_rows(summaries: Sequence[ReportSummary]) -> list[dict[str, Any]]:
    """Flat rows, one per kernel of every report (what ``--csv`` writes and the API's frame holds)."""
    rows: list[dict[str, Any]] = []
    for summary in summaries:
        for rank, k in enumerate(summary.kernels, start=1):
            rows.append({
                "report": summary.report, "label": summary.label, "device": summary.device, "rank": rank,
                "short_name": k.short_name, "kernel": k.kernel, "function": k.function,
                "grid_size": k.grid_size, "block_size": k.block_size, "launches": k.launches,
                "total_ns": k.total_ns, "median_ns": k.median_ns, "share": k.share, "bound": k.bound,
                "verdicts": k.verdict_text(), "binding_term": k.binding_term, "binding_u": k.binding_u,
                "tensor_pct": k.tensor_pct, "top_finding": k.top_finding.heading if k.top_finding else None,
                "top_speedup": k.top_finding.speedup if k.top_finding else None,
            })
    return rows
