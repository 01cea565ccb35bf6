"""``ncuflow stability``'s work: the stability of stored runs and reports, and of cells profiled
again for it (named cell specs, or a store's headline cells with the options their stored
runs were profiled with).

Profiling is not analysis's to do: the caller passes a ``Reprofile`` function (the command
line passes ``ncuflow.profile.reprofile.reprofile``), which profiles each (spec, options)
and returns the stored runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ncuflow.analyze.explain import CellDefaults, headline_points
from ncuflow.analyze.selection import ALL, Selection
from ncuflow.analyze.stability import DEFAULT_TOLERANCES, GroupStability, Tolerances
from ncuflow.analyze.study import analyse, point_stability, points_of, reports_stability
from ncuflow.errors import UsageError
from ncuflow.read.runs import Loaded, Source, Sources, load_sources, sources, store_roots
from ncuflow.store import RunRecord, iter_runs
from ncuflow.store.collection import NcuOptions

Reprofile = Callable[[Sequence[tuple[str, NcuOptions]]], list[RunRecord]]


@dataclass(frozen=True)
class StabilityRequest:
    """What to judge: paths read as they are, cell specs and a store's headline cells profiled again."""

    paths: tuple[Path, ...] = ()
    specs: tuple[str, ...] = ()
    headline: Path | None = None
    spec_options: NcuOptions = field(default_factory=NcuOptions)  # how named cell specs are collected
    tolerances: Tolerances = DEFAULT_TOLERANCES
    kernel: str | None = None
    selection: Selection = ALL  # --kernel and --nvtx, applied to every launch read
    jobs: int | None = None
    defaults: CellDefaults | None = None  # cells' default values: the headline baselines

    def load(self, found: Sources, progress: Any = None) -> Loaded:
        loaded = load_sources(found, kernel=self.kernel, jobs=self.jobs, progress=progress)
        return self.selection.apply(loaded, strict=False)


@dataclass(frozen=True)
class StabilityFindings:
    groups: tuple[GroupStability, ...]
    singles: tuple[str, ...]  # kernels launched once in a report: no spread
    notes: tuple[str, ...]
    headline: tuple[str, ...] = ()  # the headline cells profiled again
    damaged: tuple[str, ...] = ()  # damaged runs skipped, one line each


def _loaded(loaded: Loaded, tolerances: Tolerances) -> tuple[list[GroupStability], list[str]]:
    """Store runs give replicas (runs of one content key); plain reports their repeated launches."""
    store_runs = Loaded(loaded.source, tuple(r for r in loaded.runs if r.ref is not None), loaded.notes)
    plain = Loaded(loaded.source, tuple(r for r in loaded.runs if r.ref is None))
    groups = point_stability(points_of(store_runs, split_content_keys=True), tolerances)
    found, singles = reports_stability(plain, tolerances)
    return groups + found, singles


def recorded_options(store_root: Path) -> dict[str, NcuOptions]:
    """content key -> the collection its newest stored run was profiled with."""
    newest: dict[str, RunRecord] = {}
    for record in iter_runs(store_root):
        newest[record.content_key] = record  # iter_runs sorts by path; run ids sort by time
    return {key: record.manifest.collection.options for key, record in newest.items()}


def headline_targets(request: StabilityRequest) -> list[tuple[str, NcuOptions]]:
    """The headline cells of ``request.headline``: each swept parameter's baseline and extremes,
    with the options their stored run was profiled with."""
    assert request.headline is not None
    loaded = request.load(sources([request.headline]))
    analysis = analyse(loaded, paths=[request.headline], tolerances=request.tolerances, defaults=request.defaults)
    chosen = headline_points([ge for groups in analysis.sweeps.values() for ge in groups])
    if not chosen:
        raise UsageError(
            f"The store {request.headline} holds no cell with an explain verdict.",
            "Headline cells are the baseline and the extremes of each swept parameter; "
            "no parameter takes two values among its runs.",
            "Run a sweep first (`ncuflow sweep FILE.toml`), or name cell specs directly.",
        )
    recorded = recorded_options(request.headline)
    targets: list[tuple[str, NcuOptions]] = []
    for point in chosen:
        options = next((recorded[k] for k in point.content_keys if k in recorded), request.spec_options)
        if (point.spec(), options) not in targets:
            targets.append((point.spec(), options))
    return targets


def check_stability(request: StabilityRequest, reprofile: Reprofile | None = None,
                    progress: Callable[[Sources], Callable[[int, Path], None]] | None = None) -> StabilityFindings:
    """Every group's stability: of the paths (each store and each folder of reports as it is),
    and of the cells profiled again (``reprofile``, needed only when there are any).
    ``progress(sources)`` gives the per-report step of each set of sources read."""
    groups: list[GroupStability] = []
    singles: list[str] = []
    notes: list[str] = []
    damaged: list[str] = []
    for path in request.paths:
        roots = store_roots(path)
        for found in ([sources([root]) for root in roots] if roots else [sources([path])]):
            loaded = request.load(found, progress(found) if progress else None)
            more, once = _loaded(loaded, request.tolerances)
            groups, singles, notes = groups + more, singles + once, notes + list(loaded.notes)
            damaged += loaded.damaged
    targets = [(text, request.spec_options) for text in request.specs]
    headline = headline_targets(request) if request.headline is not None else []
    targets += [target for target in headline if target not in targets]
    if targets:
        if reprofile is None:
            raise UsageError("Internal error: cells to profile again, and no way to profile.", "",
                             "Pass a reprofile function.")
        loaded = request.load(Sources(tuple(Source(r.report_path, r) for r in reprofile(targets))))
        groups += point_stability(points_of(loaded, split_content_keys=True), request.tolerances)
        notes += loaded.notes
    return StabilityFindings(tuple(groups), tuple(singles), tuple(notes),
                             tuple(dict.fromkeys(text for text, _ in headline)), tuple(dict.fromkeys(damaged)))
