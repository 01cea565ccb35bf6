"""The record one profiled kernel launch becomes: identity, canonical fields, provenance.

``Launch`` is the data contract between extraction and everything after it
(classify, stability, explain, export, report). It is plain data: no ncu_report
objects, no polars, so the profiling path (which has no polars) can use it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ncuflow.read.metrics import FIELDS_BY_NAME
from ncuflow.read.sanity import checked, checked_breakdown

if TYPE_CHECKING:  # a launch of a plain report carries none: reading one imports no store
    from ncuflow.read.findings import RuleResults  # imported where findings are read
    from ncuflow.store.manifest import RunRef


@dataclass(frozen=True)
class KernelName:
    function: str
    demangled: str
    mangled: str


@dataclass(frozen=True)
class DeviceInfo:
    name: str | None
    compute_capability: str | None  # "9.0"
    sm_count: int | None


@dataclass(frozen=True)
class Launch:
    """One action of one range of one report.

    ``values`` maps every canonical field of ``ncuflow.read.metrics.FIELDS`` to its value,
    or to None where the report holds no usable source for it (then the field is in
    ``missing``). ``provenance`` maps each present field to the raw metric (or the
    arithmetic over raw metrics) that supplied it.
    """

    report: str  # path as given
    range_index: int
    action_index: int
    kernel: KernelName
    nvtx: tuple[str, ...]  # push/pop ranges enclosing the launch, outermost first, "domain@name"
    device: DeviceInfo
    ncu_version: str | None
    values: Mapping[str, float | None]
    provenance: Mapping[str, str]
    missing: tuple[str, ...]
    # NVIDIA's speed-of-light breakdown: per-unit metric -> % of peak (may be empty).
    breakdown: Mapping[str, float] = field(default_factory=dict)
    # NVIDIA's SOLBottleneck rule result title where the report holds one, e.g. "Latency Issue".
    nvidia_sol: str | None = None
    # The stored run the launch was read from (None for a plain report outside a store).
    run: RunRef | None = None
    # Why a field holds what it holds where that is not plain data: field -> note, e.g. a hit
    # rate ncu stored above 100 % and clamped, or a field ncu stored as NaN (``read.sanity``).
    notes: Mapping[str, str] = field(default_factory=dict)
    # Raw metrics the report holds as NaN or infinite (read as absent; named in ``notes``).
    not_numbers: tuple[str, ...] = ()
    # NVIDIA's findings and source markers (``ncuflow.read.findings``); None where they were not
    # read (``ReadOptions.findings``), ``RuleResults()`` (not ``held``) where the report has none.
    rule_results: RuleResults | None = None

    def __post_init__(self) -> None:
        # The one check of impossible values, whatever reader built the launch (``read.sanity``).
        fixed = checked(self.values, self.provenance, self.missing, self.notes, self.not_numbers,
                        self.device.compute_capability)
        if fixed is not None:
            values, provenance, missing, notes = fixed
            object.__setattr__(self, "values", values)
            object.__setattr__(self, "provenance", provenance)
            object.__setattr__(self, "missing", missing)
            object.__setattr__(self, "notes", notes)
        unit_checked = checked_breakdown(self.breakdown) if self.breakdown else None
        if unit_checked is not None and self.notes.get("breakdown") != unit_checked[1]:
            object.__setattr__(self, "breakdown", unit_checked[0])
            object.__setattr__(self, "notes", {**self.notes, "breakdown": unit_checked[1]})

    def value(self, name: str) -> float | None:
        """The field's value, None where the report holds no usable source for it.

        A name that is no canonical field (a typo) raises ``KeyError``: it is never read as
        a missing value.
        """
        if name not in FIELDS_BY_NAME:
            raise KeyError(f"{name!r} is not a canonical field (ncuflow.read.metrics.FIELDS); "
                           f"did you mean one of: {', '.join(_close(name))}?")
        return self.values.get(name)

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.report, self.range_index, self.action_index)


def _close(name: str) -> list[str]:
    import difflib

    return difflib.get_close_matches(name, list(FIELDS_BY_NAME), n=3) or sorted(FIELDS_BY_NAME)[:3]
