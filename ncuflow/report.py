"""From a profile store (or plain reports) to stability, explain and a Markdown report.

Loading: every complete run of the store (``ncuflow.store.iter_runs``) is read with
``ncuflow.extract.iter_launches``; runs with the same content key are replicas; the
launches of one kernel (same name and launch signature) inside a run are pooled with
the replicas' as measurements of one point. A folder with reports but no store
manifests is read as one point per report (cell = report file name, no parameters),
which is enough for per-cell verdicts and in-report stability.

A run whose report cannot be read is skipped and named in the notes, never counted.
"""

from __future__ import annotations

import json
import statistics
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ncuflow.classify import DEFAULT_THRESHOLD, TERM_NAMES
from ncuflow.errors import NcuflowError, NoReportsFound
from ncuflow.explain import (
    VERDICT_TEXT,
    GroupExplanation,
    Point,
    PointModel,
    explain_group,
    format_param,
    point_model,
    swept_params,
    vary_groups,
)
from ncuflow.launch import Launch
from ncuflow.render import duration_text
from ncuflow.stability import (
    DEFAULT_TOLERANCES,
    FIELD_UNITS,
    GroupStability,
    Tolerances,
    format_pct,
    format_tolerance,
    format_value,
    group_by_signature,
    kernel_filter,
    repeated_launch_stability,
    signature_labels,
    stability_of,
)

# ---------------------------------------------------------------------------
# loading


@dataclass(frozen=True)
class LoadedRun:
    cell: str
    params: tuple[tuple[str, object], ...]
    content_key: str
    run_id: str
    report: Path
    launches: tuple[Launch, ...]


@dataclass(frozen=True)
class Loaded:
    """What was read: runs with their launches, and notes on what was skipped."""

    source: str  # "store" or "reports"
    runs: tuple[LoadedRun, ...]
    notes: tuple[str, ...] = ()


def _hashable(value: object) -> object:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return json.dumps(value, sort_keys=True, default=str)


def params_tuple(params: Mapping[str, object]) -> tuple[tuple[str, object], ...]:
    return tuple(sorted((str(k), _hashable(v)) for k, v in params.items()))


def manifest_kernel_filter(value: object) -> Callable[[Launch], bool]:
    """The kernel filter a run was profiled with (ncu ``-k``): ``regex:EXPR`` or an exact name.

    A report ncu wrote with ``-k`` holds only matching launches, so applying it again is
    a no-op; it lets a run imported from a larger report say which kernel it is about.
    """
    if not value:
        return lambda launch: True
    text = str(value)
    if text.startswith("regex:"):
        return kernel_filter(text[len("regex:"):])
    return lambda launch: text in (launch.kernel.function, launch.kernel.demangled, launch.kernel.mangled)


def _read_launches(
    report: Path, notes: list[str], kernel: str | None, manifest_kernel: object = None
) -> tuple[Launch, ...] | None:
    from ncuflow.extract import iter_launches

    user_keep = kernel_filter(kernel)
    run_keep = manifest_kernel_filter(manifest_kernel)

    def keep(launch: Launch) -> bool:
        return user_keep(launch) and run_keep(launch)

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            launches = tuple(launch for launch in iter_launches(report) if keep(launch))
        notes.extend(f"{report}: {w.message}" for w in caught)
    except NcuflowError as error:
        notes.append(f"skipped {report}: {error}")
        return None
    if not launches:
        notes.append(f"{report}: no launch" + (f" matches --kernel {kernel!r}" if kernel else ""))
    return launches


def load_store(root: Path, *, kernel: str | None = None) -> Loaded:
    """Every complete run of a store with its launches (unreadable runs are named in notes)."""
    from ncuflow.store import iter_runs

    notes: list[str] = []
    runs: list[LoadedRun] = []
    for record in iter_runs(Path(root)):
        launches = _read_launches(record.report_path, notes, kernel, record.manifest.get("kernel_regex"))
        if launches is None:
            continue
        runs.append(
            LoadedRun(record.cell, params_tuple(record.params), record.content_key, record.run_id, record.report_path, launches)
        )
    return Loaded("store", tuple(runs), tuple(notes))


def load_reports(paths: Sequence[Path], *, kernel: str | None = None) -> Loaded:
    """Plain reports as one run each (cell = file name, no parameters)."""
    from ncuflow.extract import find_reports

    notes: list[str] = []
    runs: list[LoadedRun] = []
    for report in find_reports(paths):
        launches = _read_launches(report, notes, kernel)
        if launches is None:
            continue
        runs.append(LoadedRun(report.name, (), str(report), report.name, report, launches))
    return Loaded("reports", tuple(runs), tuple(notes))


def is_store(path: Path) -> bool:
    from ncuflow.store import iter_runs

    return Path(path).is_dir() and next(iter_runs(Path(path)), None) is not None


def store_roots(path: Path, depth: int = 2) -> list[Path]:
    """``path`` if it is a store, else the stores up to ``depth`` folders below it
    (``profiles/reference/`` holds one store per GPU, e.g. ``profiles/reference/h200``)."""
    folder = Path(path)
    if is_store(folder):
        return [folder]
    if depth == 0 or not folder.is_dir():
        return []
    found: list[Path] = []
    for child in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        found += store_roots(child, depth - 1)
    return found


def load_paths(paths: Sequence[Path], *, kernel: str | None = None) -> Loaded:
    """Stores and reports together: a folder with store runs (or stores just below it) is
    read as stores, anything else as plain reports."""
    runs: list[LoadedRun] = []
    notes: list[str] = []
    plain: list[Path] = []
    sources: set[str] = set()
    for path in paths:
        roots = store_roots(path)
        if roots:
            for root in roots:
                loaded = load_store(root, kernel=kernel)
                sources.add("store")
                runs += loaded.runs
                notes += loaded.notes
        else:
            plain.append(path)
    if plain:
        loaded = load_reports(plain, kernel=kernel)
        sources.add("reports")
        runs += loaded.runs
        notes += loaded.notes
    if not runs:
        raise NoReportsFound(
            f"Nothing readable in {', '.join(str(p) for p in paths)}.",
            "Every run or report there was skipped: " + ("; ".join(notes) if notes else "none was found") + ".",
            "Profile a cell first (`ncuflow profile ...`), or point at .ncu-rep files or a profile store.",
        )
    return Loaded(" + ".join(sorted(sources)), tuple(runs), tuple(notes))


# ---------------------------------------------------------------------------
# points and stability from loaded runs


def points_of(loaded: Loaded, *, split_content_keys: bool = False) -> list[Point]:
    """One point per (cell, parameters, kernel signature): replicas and repeats pooled.

    With ``split_content_keys`` runs of one parameter setting but different content keys
    (e.g. another ncu metric set) are different points: replicas are runs of one key.
    """
    # Labels are made per (cell, parameters): two kernels of one point that share a name are
    # told apart, while the same kernel name at another parameter value keeps its plain name.
    by_point: dict[tuple[str, tuple[tuple[str, object], ...]], list[LoadedRun]] = {}
    for run in loaded.runs:
        by_point.setdefault((run.cell, run.params), []).append(run)
    BucketKey = tuple[str, tuple[tuple[str, object], ...], str, str]
    buckets: dict[BucketKey, list[tuple[LoadedRun, list[Launch]]]] = {}
    for (cell, params), runs in by_point.items():
        labels = signature_labels(group_by_signature(launch for run in runs for launch in run.launches))
        for run in runs:
            key = run.content_key if split_content_keys else ""
            for sig, members in group_by_signature(run.launches).items():
                buckets.setdefault((cell, params, key, labels[sig]), []).append((run, members))
    points: list[Point] = []
    for (cell, params, _, kernel), items in buckets.items():
        points.append(
            Point(
                cell=cell,
                params=params,
                kernel=kernel,
                launches=tuple(launch for _, members in items for launch in members),
                runs=len({run.run_id for run, _ in items}),
                content_keys=tuple(sorted({run.content_key for run, _ in items})),
            )
        )
    points.sort(key=lambda p: (p.cell, [format_param(v) for _, v in p.params], p.kernel, p.content_keys))
    return points


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
        results.append(
            stability_of(p.launches, label=label, source=source, runs=p.runs, tolerances=tolerances, notes=notes)
        )
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


# ---------------------------------------------------------------------------
# the whole analysis of a store


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
    created_utc: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"))


def analyse(
    loaded: Loaded,
    *,
    paths: Sequence[Path] = (),
    tolerances: Tolerances = DEFAULT_TOLERANCES,
    threshold: float = DEFAULT_THRESHOLD,
    baselines: Mapping[str, object] | None = None,
) -> Analysis:
    points = points_of(loaded)
    stabilities = point_stability(points, tolerances)
    summaries = tuple(
        PointSummary(
            p,
            point_model(p.launches, threshold),
            statistics.median(p.values("duration_ns")) if p.values("duration_ns") else None,
            s,
        )
        for p, s in zip(points, stabilities, strict=True)
    )
    sweeps: dict[str, tuple[GroupExplanation, ...]] = {}
    notes = list(loaded.notes)
    swept = swept_params(points)
    for param, value in (baselines or {}).items():
        if param not in swept:
            notes.append(f"--baseline {param}={value}: {param} is not a swept parameter here ({', '.join(swept) or 'none is'})")
        elif not any(_has_value(g.values, value) for g in vary_groups(points, param)):
            notes.append(f"--baseline {param}={value}: no run has {param}={value}; the smallest value is used")
    for param in swept:
        groups = vary_groups(points, param)
        requested = (baselines or {}).get(param)
        sweeps[param] = tuple(
            explain_group(g, baseline=requested if requested is not None and _has_value(g.values, requested) else None,
                          tolerances=tolerances, threshold=threshold)
            for g in groups
        )
    by_key = tuple(point_stability(points_of(loaded, split_content_keys=True), tolerances))
    return Analysis(
        source=loaded.source, paths=tuple(str(p) for p in paths), points=summaries, sweeps=sweeps,
        tolerances=tolerances, stability=by_key, notes=tuple(notes),
    )


def _has_value(values: Iterable[object], requested: object) -> bool:
    return any(format_param(v) == format_param(requested) for v in values)


# ---------------------------------------------------------------------------
# Markdown


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    return lines


def _u(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def stability_markdown(groups: Sequence[GroupStability], tolerances: Tolerances, singles: Sequence[str] = ()) -> list[str]:
    """The stability section: one summary table, then per-field tables for every group."""
    lines = [f"Tolerances used: {tolerances.describe()}. Spread = (max − min) / median.", ""]
    lines += _table(
        ["group", "source", "launches", "runs", "verdict"],
        [[g.label, g.source, str(g.launches), str(g.runs), g.summary()] for g in groups],
    )
    for g in groups:
        if g.launches < 2:
            continue
        lines += ["", f"**{g.label}** — {g.verdict}" + (f" ({g.device})" if g.device else ""), ""]
        lines += _table(
            ["field", "class", "tolerance", "n", "median", "min", "max", "spread", "verdict"],
            [
                [f.field, f.tolerance_class, format_tolerance(f.tolerance), str(f.n),
                 format_value(f.median) + f" {FIELD_UNITS.get(f.field, '')}", format_value(f.minimum),
                 format_value(f.maximum), format_pct(f.spread), f.verdict]
                for f in g.fields if f.verdict != "missing"
            ],
        )
        if g.missing_fields:
            lines += ["", "Not measured: " + ", ".join(g.missing_fields) + "."]
        for note in g.notes:
            lines += ["", f"Note: {note}."]
    if singles:
        lines += ["", f"Launched once (no spread): {', '.join(singles)}."]
    return lines


def explain_markdown(explained: Sequence[GroupExplanation]) -> list[str]:
    lines: list[str] = []
    for ge in explained:
        g = ge.group
        lines += [
            "",
            f"**{g.label()}**; baseline {g.param}={format_param(ge.baseline.param(g.param))} "
            f"({len(ge.baseline.launches)} launches, {ge.baseline.runs} runs)",
            "",
        ]
        lines += _table(
            [g.param, "verdict", "work", "time", "evidence", "why / caveats"],
            [
                [format_param(r.value), r.verdict_text, r.work, r.time, r.deltas, "; ".join(r.reasons) or "—"]
                for r in ge.rows
            ],
        )
    return lines


def report_markdown(analysis: Analysis, plots: Mapping[str, str] | None = None) -> str:
    """The whole report as Markdown; ``plots`` maps plot keys to file names beside it."""
    plots = plots or {}
    lines = [
        "# ncuflow report",
        "",
        f"Source: {', '.join(analysis.paths) or analysis.source} ({analysis.source}); "
        f"{len(analysis.points)} points (cell × parameters × kernel); generated {analysis.created_utc}.",
        "",
        "Verdicts use the critical-path max model T ≈ max(T_DRAM, T_L2, T_L1, T_issue, T_math): the term "
        "with the largest utilization u = T / duration binds; below the on-wall threshold the kernel is "
        "latency-bound. Each u is the median over the point's launches.",
        "",
        "## Verdict per cell",
        "",
    ]
    lines += _table(
        ["cell", "kernel", "GPU", "runs", "launches", "duration (median)", "bound",
         *[f"u_{t}" for t in TERM_NAMES], "stability"],
        [
            [s.point.spec(), s.point.kernel, s.point.device or "—", str(s.point.runs), str(len(s.point.launches)),
             duration_text(s.duration_median), s.model.bound, *[_u(s.model.u(t)) for t in TERM_NAMES], s.stability.verdict]
            for s in analysis.points
        ],
    )
    for key in sorted((k for k in plots if k == "terms" or k.startswith("terms:")), key=lambda k: int(k.partition(":")[2] or 1)):
        lines += ["", f"![utilization of each term per cell]({plots[key]})"]
    lines += ["", "## Stability", ""]
    lines += stability_markdown(list(analysis.stability) or [s.stability for s in analysis.points], analysis.tolerances)
    lines += ["", "## Parameters", ""]
    if not analysis.sweeps:
        lines += ["No parameter takes more than one value among the runs of a cell, so there is nothing to explain."]
    lines += [
        "Verdicts: " + "; ".join(f"`{code}` = {text}" for code, text in VERDICT_TEXT.items()) + ". "
        "Work = any exact work counter or byte counter changed beyond its noise band; time = the duration did. "
        "`(?)` marks a difference the noise cannot decide.",
    ] if analysis.sweeps else []
    for param, explained in analysis.sweeps.items():
        lines += ["", f"### {param}"]
        if not explained:
            lines += ["", f"No two runs differ only in {param}."]
        lines += explain_markdown(explained)
        for index, ge in enumerate(explained):
            key = f"sweep:{param}:{index}"
            if key in plots:
                lines += ["", f"![{ge.group.label()}]({plots[key]})"]
    if analysis.notes:
        lines += ["", "## Notes", ""] + [f"- {_md_escape(n)}" for n in analysis.notes]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# writing a report folder


@dataclass(frozen=True)
class WrittenReport:
    markdown: Path
    plots: tuple[Path, ...]
    parquet: tuple[Path, ...]


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:80] or "x"


TERMS_PER_PLOT = 16  # cells per utilization bar chart (more would not read at a glance)


def write_report(analysis: Analysis, out_dir: Path, *, with_parquet: bool = True) -> WrittenReport:
    """report.md, PNG plots and the numbers as parquet in ``out_dir``."""
    from ncuflow.plots import plot_sweep, plot_terms

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots: dict[str, str] = {}
    written: list[Path] = []
    points = list(analysis.points)
    for index in range(0, len(points), TERMS_PER_PLOT):
        name = "terms.png" if index == 0 else f"terms-{index // TERMS_PER_PLOT + 1}.png"
        written.append(plot_terms(points[index : index + TERMS_PER_PLOT], out / name))
        plots["terms" if index == 0 else f"terms:{index // TERMS_PER_PLOT + 1}"] = name
    for param, explained in analysis.sweeps.items():
        for index, ge in enumerate(explained):
            name = f"sweep-{_slug(param)}-{index}-{_slug(ge.group.cell)}.png"
            written.append(plot_sweep(ge, out / name))
            plots[f"sweep:{param}:{index}"] = name
    markdown = out / "report.md"
    markdown.write_text(report_markdown(analysis, plots), encoding="utf-8")
    parquet: list[Path] = []
    if with_parquet:
        parquet = write_tables(analysis, out)
    return WrittenReport(markdown, tuple(written), tuple(parquet))


def write_tables(analysis: Analysis, out_dir: Path) -> list[Path]:
    """stability.parquet and explain.parquet (the numbers behind the report)."""
    import polars as pl

    from ncuflow.explain import explain_rows
    from ncuflow.export import write_parquet
    from ncuflow.stability import stability_frame

    out = Path(out_dir)
    paths = [out / "stability.parquet"]
    groups = list(analysis.stability) or [s.stability for s in analysis.points]
    write_parquet(stability_frame(groups), paths[0], table="stability")
    rows = explain_rows([ge for groups in analysis.sweeps.values() for ge in groups])
    if rows:
        paths.append(out / "explain.parquet")
        write_parquet(pl.DataFrame(rows, infer_schema_length=None), paths[1], table="explain")
    return paths
