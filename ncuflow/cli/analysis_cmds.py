"""`ncuflow stability`, `ncuflow explain`, `ncuflow report`: the analysis side of the CLI.

Thin click layers over ``ncuflow.analyze.stability``, ``ncuflow.analyze.explain`` and ``ncuflow.output.report``.
Only ``stability CELL_SPEC`` and ``stability --headline`` re-profile (through
``ncuflow.profile.orchestrate``, imported when needed); everything else reads reports on disk.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from ncuflow.analyze.stability import GroupStability, Tolerances
from ncuflow.cli.options import (
    jobs_option,
    threshold_option,
    timeout_option,
    tolerance_options,
    tolerances_from,
)
from ncuflow.cli.selection import nvtx_option, selection_from
from ncuflow.errors import UsageError
from ncuflow.profile.ncu import CLOCK_CONTROLS
from ncuflow.read.pool import resolve_jobs

# The tolerance options live in ncuflow.cli.options (shared with explain and report).
_tolerance_options = tolerance_options
__all__ = ["explain_command", "print_stability", "report_command", "stability_command", "tolerances_from"]


def _console() -> Any:
    from ncuflow.files import make_console

    return make_console()


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _guard_outputs(markdown_path: Path | None, parquet_path: Path | None, table: str, inputs: Sequence[Path]) -> None:
    """Refuse --markdown/--parquet targets that are inputs or not earlier outputs, before any work."""
    if markdown_path is not None:
        from ncuflow.output.markdown import guard_markdown

        guard_markdown(markdown_path, inputs=inputs)
    if parquet_path is not None:
        from ncuflow.output.export import guard_parquet

        guard_parquet(parquet_path, table=table, inputs=inputs, option="--parquet")
    if markdown_path is not None and parquet_path is not None and markdown_path.absolute() == parquet_path.absolute():
        raise UsageError(f"--markdown and --parquet both name {markdown_path}.", "", "Give them different paths.")


def _echo_notes(notes: Sequence[str]) -> None:
    for note in notes:
        click.echo(f"ncuflow: note: {note}", err=True)


# ---------------------------------------------------------------------------
# stability


def print_stability(groups: Sequence[GroupStability], singles: Sequence[str], tolerances: Tolerances) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ncuflow.analyze.fields import FIELD_UNITS, format_value

    console = _console()
    shown_notes: set[str] = set()
    for group in groups:
        style = {"stable": "green", "unstable": "red", "insufficient": "yellow"}[group.verdict]
        console.print(
            f"[bold]{escape(group.label)}[/bold] — [{style}]{group.verdict}[/{style}] "
            f"({group.source}: {_plural(group.launches, 'launch', 'launches')}, {_plural(group.runs, 'run', 'runs')}"
            + (f", {escape(group.device)}" if group.device else "") + ")"
        )
        table = Table()
        for column, justify in (("field", "left"), ("class", "left"), ("tolerance", "left"), ("n", "right"),
                                ("median", "right"), ("min", "right"), ("max", "right"), ("spread", "right"),
                                ("verdict", "left")):
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        for item in group.fields:
            if item.verdict == "missing":
                continue
            colour = {"stable": "green", "unstable": "red"}.get(item.verdict, "yellow")
            table.add_row(
                item.field, item.tolerance_class, item.tolerance_text(), str(item.n),
                f"{format_value(item.median)} {FIELD_UNITS.get(item.field, '')}", format_value(item.minimum),
                format_value(item.maximum), item.spread_text(), f"[{colour}]{item.verdict}[/{colour}]",
            )
        console.print(table)
        if group.missing_fields:
            console.print(f"  not measured: {', '.join(group.missing_fields)}")
        for note in group.notes:
            if note not in shown_notes:
                console.print(f"  note: {escape(note)}")
                shown_notes.add(note)
        console.print(f"  → {escape(group.summary())}\n")
    if singles:
        console.print(escape(f"Launched once, no spread: {', '.join(singles)}"))
    console.print(f"Tolerances used: {tolerances.describe()}.")
    counts = {v: sum(1 for g in groups if g.verdict == v) for v in ("stable", "unstable", "insufficient")}
    console.print(f"{len(groups)} groups: {counts['stable']} stable, {counts['unstable']} unstable, {counts['insufficient']} insufficient.")


def _reprofile(specs: Sequence[tuple[str, Any]], replicas: int, store: Path, ncu: str | None, cells_dir: Path | None, timeout: float) -> list[Any]:
    """Profile each (spec, NcuOptions) ``replicas`` times in fresh ncu processes; returns the stored runs."""
    from ncuflow.cells.registry import parse_spec
    from ncuflow.profile.orchestrate import profile_cell

    parsed = [(parse_spec(text, cells_dir), options) for text, options in specs]  # every spec checked before any run
    records = []
    for spec, options in parsed:
        for replica in range(replicas):
            click.echo(f"ncuflow: profiling {spec.text()} (replica {replica + 1}/{replicas}; "
                       f"clocks {options.clock_control}, cache {options.cache_control})", err=True)
            records.append(
                profile_cell(spec, options, store, cells_dir=cells_dir, timeout=timeout, ncu=ncu,
                             manifest_extra={"replica": replica, "replicas": replicas})
            )
    return records


def _headline_options(store_root: Path) -> dict[str, Any]:
    """content key -> the NcuOptions its newest stored run was profiled with."""
    from ncuflow.profile.plan import recorded_options
    from ncuflow.store import iter_runs

    newest: dict[str, Any] = {}
    for record in iter_runs(store_root):
        newest[record.content_key] = record  # iter_runs sorts by path; run ids sort by time
    return {key: recorded_options(record.manifest) for key, record in newest.items()}


@click.command("stability")
@click.argument("targets", nargs=-1, metavar="CELL_SPEC|PATH...")
@click.option("--replicas", type=click.IntRange(min=1), default=3, show_default=True,
              help="Fresh ncu processes per cell spec (and per --headline cell).")
@click.option("--headline", "headline", type=click.Path(path_type=Path, exists=True, file_okay=False), default=None,
              help="Re-profile the cells of this store whose numbers carry an explain verdict "
                   "(each swept parameter's baseline and extremes).")
@click.option("--store", type=click.Path(path_type=Path, file_okay=False), default=Path("profiles"), show_default=True,
              help="Where re-profiled runs are stored.")
@click.option("--ncu", "ncu_path", default=None, help="The ncu executable (default: found on PATH or in CUDA installs).")
@click.option("--cells-dir", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
              help="Folder with your own cell definitions.")
@timeout_option(help="Seconds per ncu run.")
@click.option("--clock-control", type=click.Choice(CLOCK_CONTROLS), default="base", show_default=True,
              help="For cell specs: base locks clocks to base, none leaves them as found. "
                   "--headline cells always reuse the options their stored run was profiled with.")
@tolerance_options
@nvtx_option
@click.option("--markdown", "markdown_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write the tables as Markdown to this file.")
@click.option("--parquet", "parquet_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write the numbers (one row per group and field) as parquet.")
@click.option("--strict", is_flag=True, help="Exit with status 1 when any group is unstable (for CI).")
@jobs_option
def stability_command(
    targets: tuple[str, ...], replicas: int, headline: Path | None, store: Path, ncu_path: str | None,
    cells_dir: Path | None, timeout: float, clock_control: str, tol_exact: float, tol_near_exact: float,
    tol_bytes: float, tol_rate: float, tol_time: float, field_tols: tuple[str, ...], kernel: str | None, nvtx: str | None,
    markdown_path: Path | None, parquet_path: Path | None, strict: bool, jobs: int | None,
) -> None:
    """Replay stability: per field median, min, max, spread and verdict against its tolerance.

    Each TARGET is a path or a cell spec. A profile store (a folder of runs) gives one
    group per cell and kernel, its replicas being the runs with the same content key
    plus repeated launches inside them; report files or folders of reports give one
    group per kernel launched more than once in a report. A cell spec (e.g.
    paged_decode:page=16) is profiled --replicas times in fresh ncu processes first
    (needs a GPU and ncu). Verdict per group: stable, unstable (naming the fields and
    by how much) or insufficient (fewer than 2 launches).
    """
    from ncuflow.analyze.study import analyse, point_stability, points_of, reports_stability
    from ncuflow.output.markdown import stability_markdown
    from ncuflow.read.runs import Loaded, load_records, load_reports, load_store

    tolerances = tolerances_from(tol_exact, tol_bytes, tol_rate, tol_time, field_tols, tol_near_exact)
    selection = selection_from(kernel, nvtx)
    if not targets and headline is None:
        raise UsageError(
            "Nothing to check.",
            "stability needs cell specs, report files, store folders, or --headline STORE.",
            "Try `ncuflow stability profiles/` or `ncuflow stability paged_decode:page=16 --replicas 3`.",
        )
    from ncuflow.profile.ncu import NcuOptions

    default_options = NcuOptions(clock_control=clock_control)
    paths = [Path(t) for t in targets if Path(t).exists()]
    specs = [t for t in targets if not Path(t).exists()]
    for text in specs:
        if "/" in text or text.endswith((".ncu-rep", ".ncu-repz", ".nsight-cuprof-report")):
            raise UsageError(
                f"{text} does not exist.",
                "stability reads report files and store folders, or profiles cell specs such as "
                "paged_decode:page=16; this looks like a path.",
                "Check the path.",
            )
    inputs = [*paths, *([headline] if headline is not None else [])]
    _guard_outputs(markdown_path, parquet_path, "stability", inputs)
    to_profile: list[tuple[str, Any]] = [(text, default_options) for text in specs]
    groups: list[GroupStability] = []
    singles: list[str] = []
    notes: list[str] = []
    from ncuflow.read.runs import store_roots

    for path in paths:
        roots = store_roots(path)
        if roots:
            for root in roots:
                loaded = selection.apply(load_store(root, kernel=kernel, jobs=resolve_jobs(jobs)), strict=False)
                groups += point_stability(points_of(loaded, split_content_keys=True), tolerances)
                notes += loaded.notes
        else:
            loaded = selection.apply(load_reports([path], kernel=kernel, jobs=resolve_jobs(jobs)), strict=False)
            found, once = reports_stability(loaded, tolerances)
            groups += found
            singles += once
            notes += loaded.notes
    if headline is not None:
        headline_loaded = selection.apply(load_store(headline, kernel=kernel, jobs=resolve_jobs(jobs)), strict=False)
        analysis = analyse(headline_loaded, paths=[headline], tolerances=tolerances)
        from ncuflow.analyze.explain import headline_points

        chosen = headline_points([ge for groups_ in analysis.sweeps.values() for ge in groups_])
        if not chosen:
            raise UsageError(
                f"The store {headline} holds no cell with an explain verdict.",
                "Headline cells are the baseline and the extremes of each swept parameter; "
                "no parameter takes two values among its runs.",
                "Run a sweep first (`ncuflow sweep FILE.toml`), or name cell specs directly.",
            )
        recorded = _headline_options(headline)
        for point in chosen:
            options = next((recorded[k] for k in point.content_keys if k in recorded), default_options)
            if (point.spec(), options) not in to_profile:
                to_profile.append((point.spec(), options))
        click.echo(f"ncuflow: headline cells: {', '.join(dict.fromkeys(p.spec() for p in chosen))} "
                   "(each re-profiled with the options its stored run was profiled with)", err=True)
    if to_profile:
        records = _reprofile(to_profile, replicas, store, ncu_path, cells_dir, timeout)
        loaded_new: Loaded = selection.apply(load_records(records, kernel=kernel, jobs=resolve_jobs(jobs)), strict=False)
        groups += point_stability(points_of(loaded_new, split_content_keys=True), tolerances)
        notes += loaded_new.notes
    _echo_notes(notes)
    if not groups and not singles:
        raise UsageError("No launch to compare.", "The targets hold no readable launch" + (f" matching --kernel {kernel!r}" if kernel else "") + ".", "Check the paths and the --kernel filter.")
    print_stability(groups, singles, tolerances)
    if markdown_path is not None:
        from ncuflow.output.markdown import write_markdown

        write_markdown("# ncuflow stability\n\n" + "\n".join(stability_markdown(groups, tolerances, singles)) + "\n",
                       markdown_path, title="stability", inputs=inputs)
        click.echo(f"wrote {markdown_path}", err=True)
    if parquet_path is not None:
        from ncuflow.analyze.stability import stability_frame
        from ncuflow.output.export import write_parquet

        write_parquet(stability_frame(groups), parquet_path, table="stability", inputs=inputs, option="--parquet")
        click.echo(f"wrote {parquet_path}", err=True)
    if strict and any(g.verdict == "unstable" for g in groups):
        raise click.exceptions.Exit(1)


# ---------------------------------------------------------------------------
# explain


@click.command("explain")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--vary", "param", required=True, metavar="PARAM", help="The parameter whose effect to explain.")
@click.option("--baseline", default=None, metavar="VALUE",
              help="The value to compare against (default: the smallest, numerically or alphabetically).")
@threshold_option(help="On-wall threshold of the max model (names the binding term).")
@tolerance_options
@nvtx_option
@click.option("--markdown", "markdown_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write the tables as Markdown to this file.")
@click.option("--parquet", "parquet_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write one row per compared value as parquet.")
@jobs_option
def explain_command(
    paths: tuple[Path, ...], param: str, baseline: str | None, threshold: float, tol_exact: float,
    tol_near_exact: float, tol_bytes: float, tol_rate: float, tol_time: float, field_tols: tuple[str, ...],
    kernel: str | None, nvtx: str | None, markdown_path: Path | None, parquet_path: Path | None, jobs: int | None,
) -> None:
    """Does PARAM change the work that reaches the kernel, and is that work on the critical path?

    Groups the store's runs that differ only in PARAM and compares each value with the
    baseline: work (exact work counters and DRAM bytes) and time (duration), each
    against its noise band from the replicas. Verdicts: the parameter does not reach
    the kernel / work changes off the critical path / work reaches the critical path /
    time moved without counted work, or ambiguous where the noise is unknown or the
    replicas disagree, with the deltas that decided it.
    """
    from rich.markup import escape
    from rich.table import Table

    from ncuflow.analyze.explain import explain_group, explain_rows, swept_params, vary_groups
    from ncuflow.analyze.study import points_of
    from ncuflow.output.markdown import explain_markdown
    from ncuflow.read.runs import load_paths

    tolerances = tolerances_from(tol_exact, tol_bytes, tol_rate, tol_time, field_tols, tol_near_exact)
    _guard_outputs(markdown_path, parquet_path, "explain", paths)
    loaded = selection_from(kernel, nvtx).apply(load_paths(list(paths), kernel=kernel, jobs=resolve_jobs(jobs)))
    _echo_notes(loaded.notes)
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
            "Pick one of them, or leave --baseline out to use the smallest.",
        )
    explained = []
    for group in groups:
        requested = baseline if baseline is not None and any(str(v) == baseline for v in group.values) else None
        explained.append(explain_group(group, baseline=requested, tolerances=tolerances, threshold=threshold))
    console = _console()
    for ge in explained:
        g = ge.group
        table = Table(
            title=f"{escape(g.label())} — baseline {escape(param)}={escape(str(ge.baseline.param(param)))} "
                  f"({len(ge.baseline.launches)} launches, {ge.baseline.runs} runs)",
            title_justify="left",
        )
        for column in (param, "verdict", "work", "time", "evidence", "why / caveats"):
            table.add_column(column, overflow="fold")
        colours = {"no_effect": "blue", "off_critical_path": "green", "critical_path": "red",
                   "time_without_work": "yellow", "ambiguous": "bright_black"}
        for row in ge.rows:
            colour = colours[row.verdict]
            table.add_row(escape(str(row.value)), f"[{colour}]{escape(row.verdict_text)}[/{colour}]", row.work, row.time,
                          escape(row.deltas), escape("; ".join(row.reasons) or "—"))
        console.print(table)
    console.print(f"Tolerances used: {tolerances.describe()}. Without replicas a difference counts only beyond max(5 × tolerance, 1 %).")
    if markdown_path is not None:
        from ncuflow.output.markdown import write_markdown

        write_markdown(f"# ncuflow explain --vary {param}\n" + "\n".join(explain_markdown(explained)) + "\n",
                       markdown_path, title="explain", inputs=paths)
        click.echo(f"wrote {markdown_path}", err=True)
    if parquet_path is not None:
        import polars as pl

        from ncuflow.output.export import write_parquet

        write_parquet(pl.DataFrame(explain_rows(explained), infer_schema_length=None), parquet_path, table="explain",
                      inputs=paths, option="--parquet")
        click.echo(f"wrote {parquet_path}", err=True)


# ---------------------------------------------------------------------------
# report


def _check_baselines(chosen: dict[str, object], analysis: Any) -> None:
    """Every --baseline PARAM=VALUE names a swept parameter and a value measured in the store."""
    from ncuflow.analyze.point import format_param

    for param, value in chosen.items():
        if param not in analysis.sweeps:
            swept = ", ".join(analysis.sweeps) or "none"
            raise UsageError(
                f"--baseline {param}={value}: {param} is not a swept parameter of these runs.",
                f"The parameters that take several values here are: {swept}.",
                "Name one of them, or leave --baseline out.",
            )
        values = list(dict.fromkeys(format_param(v) for ge in analysis.sweeps[param] for v in ge.group.values))
        if format_param(value) not in values:
            raise UsageError(
                f"--baseline {param}={value}: no run has {param}={value}.",
                f"The values of {param} measured are: {', '.join(values)}.",
                "Pick one of them, or leave --baseline out to use the smallest.",
            )


@click.command("report")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Folder to write report.md, the PNG plots and the parquet tables into.")
@click.option("--baseline", "baselines", multiple=True, metavar="PARAM=VALUE",
              help="Baseline value of a swept parameter (repeatable; default: the smallest value).")
@threshold_option(help="On-wall threshold of the max model.")
@tolerance_options
@nvtx_option
@jobs_option
def report_command(
    paths: tuple[Path, ...], out_dir: Path, baselines: tuple[str, ...], threshold: float, tol_exact: float,
    tol_near_exact: float, tol_bytes: float, tol_rate: float, tol_time: float, field_tols: tuple[str, ...],
    kernel: str | None, nvtx: str | None, jobs: int | None,
) -> None:
    """Markdown report and PNG plots of a profile store (or of plain reports).

    Per cell: the verdict table (binding term and every u), stability; per swept
    parameter: the explain table, duration and work counters against the parameter;
    and the utilization terms as bars per cell; the hierarchical roofline, and why the
    latency-bound kernels wait (occupancy, stall reasons). The numbers go to parquet beside it.
    """
    from ncuflow.analyze.study import analyse
    from ncuflow.output.report import write_report
    from ncuflow.read.runs import load_paths

    tolerances = tolerances_from(tol_exact, tol_bytes, tol_rate, tol_time, field_tols, tol_near_exact)
    chosen: dict[str, object] = {}
    for item in baselines:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise UsageError(f"--baseline {item!r} is not PARAM=VALUE.", "", "Write it like --baseline page=64.")
        chosen[name.strip()] = value.strip()
    from ncuflow.output.report import guard_report_folder

    guard_report_folder(out_dir, paths)
    loaded = selection_from(kernel, nvtx).apply(load_paths(list(paths), kernel=kernel, jobs=resolve_jobs(jobs)))
    analysis = analyse(loaded, paths=list(paths), tolerances=tolerances, threshold=threshold, baselines=chosen)
    _echo_notes(analysis.notes)
    _check_baselines(chosen, analysis)
    written = write_report(analysis, out_dir, inputs=paths)
    click.echo(f"wrote {written.markdown}")
    for path in (*written.plots, *written.parquet):
        click.echo(f"wrote {path}")
    verdicts = [row.verdict for groups in analysis.sweeps.values() for ge in groups for row in ge.rows]
    click.echo(
        f"{len(analysis.points)} points, {sum(1 for s in analysis.points if s.stability.verdict == 'stable')} stable; "
        f"{len(analysis.sweeps)} swept parameters, {len(verdicts)} explained values"
        + (f" ({', '.join(f'{v} {verdicts.count(v)}' for v in dict.fromkeys(verdicts))})" if verdicts else "")
    )
