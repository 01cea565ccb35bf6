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
    echo_notes,
    jobs_option,
    threshold_option,
    timeout_option,
    tolerance_options,
    tolerances_from,
)
from ncuflow.cli.selection import nvtx_option, selection_from
from ncuflow.errors import UsageError
from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text
from ncuflow.profile.ncu import CLOCK_CONTROLS
from ncuflow.read.jobs import resolve_jobs
from ncuflow.read.options import WITH_FINDINGS

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

        guard_markdown(markdown_path, title=table, inputs=inputs)
    if parquet_path is not None:
        from ncuflow.output.export import guard_parquet, refuse_other_format

        guard_parquet(parquet_path, table=table, inputs=inputs, option="--parquet")
        refuse_other_format(parquet_path, "--parquet")
    if markdown_path is not None and parquet_path is not None and markdown_path.absolute() == parquet_path.absolute():
        raise UsageError(f"--markdown and --parquet both name {markdown_path}.", "", "Give them different paths.")


def cell_defaults() -> dict[str, dict[str, object]]:
    """Each built-in cell's parameter defaults: a swept parameter's baseline where measured."""
    from ncuflow.cells.registry import parameter_defaults

    return parameter_defaults()


# ---------------------------------------------------------------------------
# stability


def print_stability(groups: Sequence[GroupStability], singles: Sequence[str], tolerances: Tolerances) -> None:
    from rich.table import Table

    from ncuflow.analyze.fields import FIELD_UNITS, format_value
    from ncuflow.analyze.stability import flat

    console = _console()
    shown_notes: set[str] = set()
    styles = {"stable": "green", "unstable": "red", "insufficient": "yellow", "different_work": "cyan"}
    for group in flat(groups):
        style = styles[group.verdict]
        console.print(
            f"[bold]{safe_text(group.label, 'rich')}[/bold] — [{style}]{group.verdict_text}[/{style}] "
            f"({group.source}: {_plural(group.launches, 'launch', 'launches')}, {_plural(group.runs, 'run', 'runs')}"
            + (f", {safe_text(group.device, 'rich')}" if group.device else "") + ")", highlight=False,
        )
        if group.verdict == "different_work":  # its parts follow, each judged on its own
            console.print(f"  → {safe_text(group.summary(), 'rich', limit=SENTENCE_CHARS)}\n", highlight=False)
            continue
        table = Table()
        for column, justify in (("field", "left"), ("class", "left"), ("tolerance", "left"), ("n", "right"),
                                ("median", "right"), ("min", "right"), ("max", "right"), ("spread", "right"),
                                ("verdict", "left")):
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        for item in group.fields:
            if item.verdict == "missing":
                continue
            off_path = item.verdict == "unstable" and not item.decides
            colour = "yellow" if off_path else {"stable": "green", "unstable": "red"}.get(item.verdict, "yellow")
            verdict = f"{item.verdict}, not binding" if off_path else item.verdict
            table.add_row(
                item.field, item.tolerance_class, item.tolerance_text(), str(item.n),
                f"{format_value(item.median)} {FIELD_UNITS.get(item.field, '')}", format_value(item.minimum),
                format_value(item.maximum), item.spread_text(), f"[{colour}]{verdict}[/{colour}]",
            )
        console.print(table)
        if group.missing_fields:
            console.print(f"  not measured: {', '.join(group.missing_fields)}")
        for note in group.notes:
            if note not in shown_notes:
                console.print(f"  note: {safe_text(note, 'rich', limit=SENTENCE_CHARS)}", highlight=False)
                shown_notes.add(note)
        console.print(f"  → {safe_text(group.summary(), 'rich', limit=SENTENCE_CHARS)}\n", highlight=False)
    if singles:
        console.print(f"Launched once, no spread: {', '.join(safe_text(s, 'rich') for s in singles)}", highlight=False)
    console.print(f"Tolerances used: {tolerances.describe()}.")
    console.print(stability_count_line(groups))


def stability_count_line(groups: Sequence[GroupStability]) -> str:
    """e.g. '52 groups: 4 stable, 9 unstable, 35 insufficient, 4 different work (judged apart in 3
    same-work groups).' (the same-work groups are among the groups counted)."""
    from ncuflow.analyze.stability import flat, verdict_counts

    counts = verdict_counts(groups)
    parts = len(flat(groups)) - len(groups)
    different = counts["different_work"]
    return (f"{_plural(len(groups) + parts, 'group', 'groups')}: {counts['stable']} stable, {counts['unstable']} unstable, "
            f"{counts['insufficient']} insufficient"
            + (f", {different} different work (judged apart in {_plural(parts, 'same-work group', 'same-work groups')})"
               if different else "") + ".")


@click.command("stability")
@click.argument("targets", nargs=-1, metavar="CELL_SPEC|PATH...")
@click.option("--replicas", type=click.IntRange(min=1, max=1000), default=3, show_default=True,
              help="Fresh ncu processes per cell spec (and per --headline cell).")
@click.option("--headline", "headline", type=click.Path(path_type=Path, exists=True, file_okay=False), default=None,
              help="Re-profile the cells of this store whose numbers carry an explain verdict "
                   "(each swept parameter's baseline and extremes).")
@click.option("--store", "store_root", type=click.Path(path_type=Path, file_okay=False), default=Path("profiles"),
              show_default=True, help="Where re-profiled runs are stored.")
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
def stability_command(targets: tuple[str, ...], replicas: int, headline: Path | None, markdown_path: Path | None,
                      parquet_path: Path | None, strict: bool, **given: Any) -> None:
    """Replay stability: per field median, min, max, spread and verdict against its tolerance.

    Each TARGET is a path or a cell spec. A profile store (a folder of runs) gives one
    group per cell and kernel, its replicas being the runs with the same content key
    plus repeated launches inside them; report files or folders of reports give one
    group per kernel launched more than once in a report. A cell spec (e.g.
    paged_decode:page=16) is profiled --replicas times in fresh ncu processes first
    (needs a GPU and ncu). Verdict per group: stable, unstable (naming the fields and
    by how much) or insufficient (fewer than 2 launches).
    """
    from ncuflow.analyze.stability import flat
    from ncuflow.analyze.stability_run import check_stability

    request = _stability_request(targets, headline, given)
    inputs = [*request.paths, *([headline] if headline is not None else [])]
    _guard_outputs(markdown_path, parquet_path, "stability", inputs)
    from ncuflow.cli.progress import progress_bar

    with progress_bar() as bar:
        findings = check_stability(request, _reprofiler(given, replicas) if request.specs or headline else None,
                                   progress=lambda found: bar.stage("reading", len(found.items)))
    if findings.headline:
        click.echo(f"ncuflow: headline cells: {', '.join(findings.headline)} "
                   "(each re-profiled with the options its stored run was profiled with)", err=True)
    echo_notes(findings.notes, findings.damaged)
    if not findings.groups and not findings.singles:
        kernel = request.kernel
        raise UsageError("No launch to compare.", "The targets hold no readable launch"
                         + (f" matching --kernel {kernel!r}" if kernel else "") + ".",
                         "Check the paths and the --kernel filter.")
    print_stability(findings.groups, findings.singles, request.tolerances)
    _write_stability(findings, request, markdown_path, parquet_path, inputs)
    if strict and any(g.verdict == "unstable" for g in flat(findings.groups)):
        raise click.exceptions.Exit(1)


def _stability_request(targets: tuple[str, ...], headline: Path | None, given: dict[str, Any]) -> Any:
    """The targets split into paths and cell specs (a missing path is refused), and the options."""
    from ncuflow.analyze.stability_run import StabilityRequest
    from ncuflow.profile.ncu import NcuOptions

    tolerances = tolerances_from(given["tol_exact"], given["tol_bytes"], given["tol_rate"], given["tol_time"],
                                 given["field_tols"], given["tol_near_exact"])
    selection = selection_from(given["kernel"], given["nvtx"])
    if not targets and headline is None:
        raise UsageError(
            "Nothing to check.",
            "stability needs cell specs, report files, store folders, or --headline STORE.",
            "Try `ncuflow stability profiles/` or `ncuflow stability paged_decode:page=16 --replicas 3`.",
        )
    paths = tuple(Path(t) for t in targets if Path(t).exists())
    specs = tuple(t for t in targets if not Path(t).exists())
    for text in specs:
        if "/" in text or text.endswith((".ncu-rep", ".ncu-repz", ".nsight-cuprof-report")):
            raise UsageError(
                f"{text} does not exist.",
                "stability reads report files and store folders, or profiles cell specs such as "
                "paged_decode:page=16; this looks like a path.",
                "Check the path.",
            )
    return StabilityRequest(paths=paths, specs=specs, headline=headline,
                            spec_options=NcuOptions(clock_control=given["clock_control"]), tolerances=tolerances,
                            kernel=given["kernel"], selection=selection, jobs=resolve_jobs(given["jobs"]),
                            defaults=cell_defaults() if headline is not None else None)


def _reprofiler(given: dict[str, Any], replicas: int) -> Any:
    from ncuflow.cells.source import CellSource
    from ncuflow.profile.reprofile import reprofiler
    from ncuflow.profile.settings import ProfileSettings

    settings = ProfileSettings(store=given["store_root"], cells=CellSource(given["cells_dir"]), ncu=given["ncu_path"],
                               timeout=given["timeout"])
    return reprofiler(settings, replicas, lambda line: click.echo(f"ncuflow: {line}", err=True))


def _write_stability(findings: Any, request: Any, markdown_path: Path | None, parquet_path: Path | None,
                     inputs: Sequence[Path]) -> None:
    """The Markdown and the parquet asked for, as one pair carrying one id (``output.stability_pair``)."""
    if markdown_path is None and parquet_path is None:
        return
    from ncuflow.analyze.stability_table import stability_frame
    from ncuflow.output.markdown import stability_markdown
    from ncuflow.output.stability_pair import write_stability_pair

    text = None
    if markdown_path is not None:
        text = "# ncuflow stability\n\n" + "\n".join(stability_markdown(findings.groups, request.tolerances,
                                                                        findings.singles)) + "\n"
    frame = stability_frame(findings.groups) if parquet_path is not None else None
    write_stability_pair(text, frame, markdown_path=markdown_path, parquet_path=parquet_path, inputs=inputs)
    for path in (markdown_path, parquet_path):
        if path is not None:
            click.echo(f"wrote {path}", err=True)


# ---------------------------------------------------------------------------
# explain


@click.command("explain")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--vary", "param", required=True, metavar="PARAM", help="The parameter whose effect to explain.")
@click.option("--baseline", default=None, metavar="VALUE",
              help="The value to compare against (default: the cell's default value where it was measured, "
                   "else the smallest, numerically or alphabetically).")
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
    from ncuflow.analyze.study import explain_parameter
    from ncuflow.read.runs import load_paths

    tolerances = tolerances_from(tol_exact, tol_bytes, tol_rate, tol_time, field_tols, tol_near_exact)
    _guard_outputs(markdown_path, parquet_path, "explain", paths)
    from ncuflow.cli.progress import progress_bar

    with progress_bar() as bar:
        loaded = selection_from(kernel, nvtx).apply(load_paths(
            list(paths), kernel=kernel, jobs=resolve_jobs(jobs),
            progress=lambda found: bar.stage("reading", len(found.items))))
    echo_notes(loaded.notes, loaded.damaged)
    explained = explain_parameter(loaded, param, baseline=baseline, tolerances=tolerances, threshold=threshold,
                                  defaults=cell_defaults())
    _print_explained(explained, param, tolerances)
    _write_explained(explained, param, paths, markdown_path, parquet_path)


def _print_explained(explained: Sequence[Any], param: str, tolerances: Tolerances) -> None:
    from rich.table import Table

    console = _console()
    for ge in explained:
        g = ge.group
        table = Table(
            title=f"{safe_text(g.label(), 'rich')} — baseline {safe_text(param, 'rich')}="
                  f"{safe_text(ge.baseline.param(param), 'rich')} "
                  f"({len(ge.baseline.launches)} launches, {ge.baseline.runs} runs)",
            title_justify="left",
        )
        for column in (safe_text(param, "rich"), "verdict", "work", "time", "evidence", "why / caveats"):
            table.add_column(column, overflow="fold")
        colours = {"no_effect": "blue", "off_critical_path": "green", "critical_path": "red",
                   "time_without_work": "yellow", "ambiguous": "bright_black"}
        for row in ge.rows:
            colour = colours[row.verdict]
            table.add_row(safe_text(row.value, "rich"), f"[{colour}]{safe_text(row.verdict_text, 'rich')}[/{colour}]",
                          row.work, row.time, safe_text(row.deltas, "rich", limit=SENTENCE_CHARS),
                          safe_text("; ".join(row.reasons) or "—", "rich", limit=SENTENCE_CHARS))
        console.print(table)
    console.print(f"Tolerances used: {tolerances.describe()}. Without replicas a difference counts only beyond max(5 × tolerance, 1 %).")


def _write_explained(explained: Sequence[Any], param: str, paths: Sequence[Path], markdown_path: Path | None,
                     parquet_path: Path | None) -> None:
    from ncuflow.analyze.explain import explain_rows
    from ncuflow.output.markdown import explain_markdown

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
                "Pick one of them, or leave --baseline out to use the cell's default (else the smallest).",
            )


@click.command("report")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Folder to write report.md, the PNG plots and the parquet tables into.")
@click.option("--baseline", "baselines", multiple=True, metavar="PARAM=VALUE",
              help="Baseline value of a swept parameter (repeatable; default: the cell's default value "
                   "where it was measured, else the smallest).")
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
    from ncuflow.cli.progress import progress_bar
    from ncuflow.output.report import guard_report_folder, plot_count

    guard_report_folder(out_dir, paths)
    with progress_bar() as bar:
        loaded = selection_from(kernel, nvtx).apply(load_paths(
            list(paths), kernel=kernel, jobs=resolve_jobs(jobs), options=WITH_FINDINGS,
            progress=lambda found: bar.stage("reading", len(found.items))))
        analysis = analyse(loaded, paths=list(paths), tolerances=tolerances, threshold=threshold, baselines=chosen,
                           defaults=cell_defaults())
        echo_notes(analysis.notes, loaded.damaged)
        _check_baselines(chosen, analysis)
        written = write_report(analysis, out_dir, inputs=paths, progress=bar.stage("drawing plots", plot_count(analysis)))
    click.echo(f"wrote {written.markdown}, {_plural(len(written.plots), 'plot', 'plots')} and "
               f"{_plural(len(written.parquet), 'parquet table', 'parquet tables')} "
               f"({', '.join(p.name for p in written.parquet)}) beside it")
    verdicts = [row.verdict for groups in analysis.sweeps.values() for ge in groups for row in ge.rows]
    click.echo(
        f"{len(analysis.points)} points, {sum(1 for s in analysis.points if s.stability.verdict == 'stable')} stable; "
        f"{len(analysis.sweeps)} swept parameters, {len(verdicts)} explained values"
        + (f" ({', '.join(f'{v} {verdicts.count(v)}' for v in dict.fromkeys(verdicts))})" if verdicts else "")
    )
