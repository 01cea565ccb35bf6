"""A study: the points of loaded runs, their stability and each swept parameter explained.

Runs with the same content key are replicas; the launches of one kernel (same name and
launch signature) inside a run are pooled with the replicas' as measurements of one point.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ncuflow.analyze.classify import DEFAULT_THRESHOLD, check_threshold
from ncuflow.analyze.explain import (
    CellDefaults,
    GroupExplanation,
    explain_group,
    swept_by_cell,
    swept_params,
    vary_groups,
)
from ncuflow.analyze.measurement import measurements
from ncuflow.analyze.point import Point, PointModel, format_param
from ncuflow.analyze.stability import (
    DEFAULT_TOLERANCES,
    GroupStability,
    Tolerances,
    measurement_stability,
    repeated_launch_stability,
)
from ncuflow.errors import UsageError
from ncuflow.read.runs import Loaded


def points_of(loaded: Loaded, *, split_content_keys: bool = False) -> list[Point]:
    """One point per (cell, parameters, kernel signature): replicas and repeats pooled
    (the grouping rule of ``ncuflow.analyze.measurement.measurements``)."""
    return measurements(loaded.runs, split_content_keys=split_content_keys)


def point_stability(points: Iterable[Point], tolerances: Tolerances = DEFAULT_TOLERANCES) -> list[GroupStability]:
    """Stability of every point: its replicas (runs of one content key) and repeated launches."""
    results: list[GroupStability] = []
    points = list(points)
    specs_seen: dict[tuple[str, str], int] = {}
    for p in points:
        specs_seen[(p.spec(), p.kernel)] = specs_seen.get((p.spec(), p.kernel), 0) + 1
    for p in points:
        source = "replicas" if p.runs > 1 else "repeated launches"
        notes = []
        if len(p.content_keys) > 1:
            notes.append(f"{len(p.content_keys)} content keys pooled under the same parameters")
        label = f"{p.spec()} [{p.kernel}]"
        if specs_seen[(p.spec(), p.kernel)] > 1 and len(p.content_keys) == 1:
            label += f" key {p.content_keys[0][:8]}"
        stored = any(launch.run is not None for launch in p.launches)  # runs of a cell setting: replicas
        results.append(measurement_stability(p, label=label, source=source, tolerances=tolerances, notes=notes,
                                             replicas_by_construction=stored))
    return results


def reports_stability(loaded: Loaded, tolerances: Tolerances = DEFAULT_TOLERANCES) -> tuple[list[GroupStability], list[str]]:
    """Repeated launches inside each report, per kernel signature; kernels launched once listed apart."""
    groups: list[GroupStability] = []
    singles: list[str] = []
    for run in loaded.runs:
        found, once = repeated_launch_stability(run.launches, report_label=run.report.name, tolerances=tolerances)
        groups += found
        singles += [f"{run.report.name}: {name}" for name in once]
    return groups, singles


@dataclass(frozen=True)
class PointSummary:
    point: Point
    model: PointModel
    duration_median: float | None
    stability: GroupStability


@dataclass(frozen=True)
class Analysis:
    source: str
    paths: tuple[str, ...]
    points: tuple[PointSummary, ...]
    sweeps: Mapping[str, tuple[GroupExplanation, ...]]  # param -> explained groups
    tolerances: Tolerances
    stability: tuple[GroupStability, ...] = ()  # replicas = runs of one content key
    notes: tuple[str, ...] = ()
    threshold: float = DEFAULT_THRESHOLD  # the on-wall threshold the verdicts and plots use
    created_utc: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"))


def analyse(
    loaded: Loaded,
    *,
    paths: Sequence[Path] = (),
    tolerances: Tolerances = DEFAULT_TOLERANCES,
    threshold: float = DEFAULT_THRESHOLD,
    baselines: Mapping[str, object] | None = None,
    defaults: CellDefaults | None = None,
) -> Analysis:
    """Points, their stability and every swept parameter explained against its baseline:
    ``baselines[param]`` where given, else the cell's default value (``defaults``), else the smallest."""
    threshold = check_threshold(threshold)
    points = points_of(loaded)
    stabilities = point_stability(points, tolerances)
    summaries = tuple(
        PointSummary(p, p.model(threshold), p.stats("duration_ns").median, s)
        for p, s in zip(points, stabilities, strict=True)
    )
    sweeps: dict[str, tuple[GroupExplanation, ...]] = {}
    notes = list(loaded.notes)
    swept_in = swept_by_cell(points)
    swept = swept_params(points)
    for param, value in (baselines or {}).items():
        if param not in swept:
            notes.append(f"--baseline {param}={value}: {param} is not a swept parameter here ({', '.join(swept) or 'none is'})")
        elif not any(_has_value(g.values, value) for g in vary_groups(points, param)):
            notes.append(f"--baseline {param}={value}: no run has {param}={value}; the cell's default "
                         "(else the smallest value) is used")
    for param in swept:
        groups = [g for g in vary_groups(points, param) if param in swept_in.get(g.cell, ())]
        requested = (baselines or {}).get(param)
        sweeps[param] = tuple(
            explain_group(g, baseline=requested if requested is not None and _has_value(g.values, requested) else None,
                          tolerances=tolerances, threshold=threshold, defaults=defaults)
            for g in groups
        )
    by_key = tuple(point_stability(points_of(loaded, split_content_keys=True), tolerances))
    return Analysis(
        source=loaded.source, paths=tuple(str(p) for p in paths), points=summaries, sweeps=sweeps,
        tolerances=tolerances, stability=by_key, notes=tuple(notes), threshold=threshold,
    )


def _has_value(values: Iterable[object], requested: object) -> bool:
    return any(format_param(v) == format_param(requested) for v in values)


def explain_parameter(loaded: Loaded, param: str, *, baseline: str | None = None,
                      tolerances: Tolerances = DEFAULT_TOLERANCES,
                      threshold: float = DEFAULT_THRESHOLD,
                      defaults: CellDefaults | None = None) -> list[GroupExplanation]:
    """``ncuflow explain --vary PARAM``: every group of runs that differ only in ``param``,
    explained against its baseline (``baseline`` where a group has that value, else the
    cell's default value from ``defaults`` where the group has it, else the smallest)."""
    points = points_of(loaded)
    groups = vary_groups(points, param)
    if not groups:
        swept = swept_params(points)
        known = sorted({name for p in points for name, _ in p.params})
        raise UsageError(
            f"No runs differ only in {param!r}.",
            (f"The parameters that take several values here are: {', '.join(swept)}."
             if swept else "No parameter takes more than one value among these runs.")
            + (f" Parameters seen: {', '.join(known)}." if known else " These runs carry no parameters (plain reports)."),
            "Pick one of those with --vary, or sweep the parameter first (`ncuflow sweep`).",
        )
    if baseline is not None and not any(str(v) == baseline for g in groups for v in g.values):
        raise UsageError(
            f"--baseline {baseline} is not a value of {param} in these runs.",
            "The values measured are: " + ", ".join(dict.fromkeys(str(v) for g in groups for v in g.values)) + ".",
            "Pick one of them, or leave --baseline out to use the cell's default (else the smallest).",
        )
    return [explain_group(group, tolerances=tolerances, threshold=threshold, defaults=defaults,
                          baseline=baseline if baseline is not None and any(str(v) == baseline for v in group.values)
                          else None)
            for group in groups]
