"""`ncuflow compare BASE NEW`: the kernels of two reports, run folders or stores, against the noise."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ncuflow.cli.options import jobs_option, threshold_option, tolerance_options, tolerances_from


@click.command("compare")
@click.argument("base", type=click.Path(path_type=Path, exists=True))
@click.argument("new", type=click.Path(path_type=Path, exists=True))
@threshold_option(help="On-wall threshold of the max model (names each side's binding term).")
@tolerance_options
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as one JSON object.")
@click.option("--markdown", "markdown_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write the tables as Markdown to this file.")
@jobs_option
def compare_command(
    base: Path, new: Path, threshold: float, tol_exact: float, tol_near_exact: float, tol_bytes: float,
    tol_rate: float, tol_time: float, field_tols: tuple[str, ...], kernel: str | None, as_json: bool,
    markdown_path: Path | None, jobs: int | None,
) -> None:
    """Compare the kernels of BASE and NEW (reports, run folders or stores).

    Kernels are matched by name and launch configuration (grid, block); those that match
    nothing are listed. Per field the change is judged against the field's noise band with
    explain's rules (changed / unchanged / ambiguous), and each pair gets explain's verdict
    (same work and time, work changed off or on the critical path, time without counted
    work, or ambiguous) with the binding term on each side. Replicas and repeated launches
    on a side make its noise known; a side measured once can only show large changes.
    """
    from rich.markup import escape
    from rich.table import Table

    from ncuflow.analyze.compare import compare_loaded, comparison_document
    from ncuflow.analyze.fields import FIELD_TABLE
    from ncuflow.files import make_console
    from ncuflow.output.markdown import compare_markdown, guard_markdown, write_markdown
    from ncuflow.read.pool import resolve_jobs
    from ncuflow.read.runs import load_paths

    tolerances = tolerances_from(tol_exact, tol_bytes, tol_rate, tol_time, field_tols, tol_near_exact)
    if markdown_path is not None:  # refused before any work, as every Markdown output (issue 24)
        guard_markdown(markdown_path, title="compare", inputs=[base, new])
    loaded_base = load_paths([base], kernel=kernel, jobs=resolve_jobs(jobs))
    loaded_new = load_paths([new], kernel=kernel, jobs=resolve_jobs(jobs))
    for line in dict.fromkeys((*loaded_base.damaged, *loaded_new.damaged)):
        click.echo(f"ncuflow: warning: {line}", err=True)
    for note in (*loaded_base.notes, *loaded_new.notes):
        click.echo(f"ncuflow: note: {note}", err=True)
    comparison = compare_loaded(loaded_base, loaded_new, base_label=str(base), new_label=str(new),
                                tolerances=tolerances, threshold=threshold)
    if markdown_path is not None:
        write_markdown(f"# ncuflow compare {base} {new}\n\n" + "\n".join(compare_markdown(comparison)) + "\n",
                       markdown_path, title="compare", inputs=[base, new])
        click.echo(f"wrote {markdown_path}", err=True)
    if as_json:
        click.echo(json.dumps(comparison_document(comparison), indent=1))
        return
    console = make_console()
    colours = {"no_effect": "blue", "off_critical_path": "green", "critical_path": "red",
               "time_without_work": "yellow", "ambiguous": "bright_black"}
    states = {"changed": "red", "unchanged": "green", "ambiguous": "yellow", "missing": "dim"}
    for k in comparison.matched:
        colour = colours[k.judged.verdict]
        table = Table(title=f"{escape(k.label)} — [{colour}]{escape(k.verdict_text)}[/{colour}]; bound "
                            f"{k.judged.baseline_model.bound} → {k.judged.value_model.bound} "
                            f"({len(k.base.launches)} vs {len(k.new.launches)} launches)", title_justify="left")
        for column in ("field", "base", "new", "change", "state", "why"):
            table.add_column(column, overflow="fold")
        for f in k.judged.fields:
            if f.state == "missing":
                continue
            spec = FIELD_TABLE[f.field]
            table.add_row(f.field, spec.format(f.baseline), spec.format(f.value),
                          f.delta_text() if f.state != "missing" else "—",
                          f"[{states[f.state]}]{f.state}[/{states[f.state]}]", escape(f.reason))
        console.print(table)
        missing = [f.field for f in k.judged.fields if f.state == "missing"]
        if missing:
            console.print(f"  missing on at least one side: {', '.join(missing)}")
        if k.judged.reasons:
            console.print("  why: " + escape("; ".join(k.judged.reasons)))
    for title, items in (("only in base", comparison.only_base), ("only in new", comparison.only_new)):
        if items:
            console.print(f"{title}: " + escape(", ".join(f"{m.kernel} ({m.spec()})" for m in items)))
    verdicts = [k.judged.verdict for k in comparison.matched]
    console.print(
        f"{len(comparison.matched)} matched, {len(comparison.only_base)} only in base, {len(comparison.only_new)} only in new"
        + (f" ({', '.join(f'{v} {verdicts.count(v)}' for v in dict.fromkeys(verdicts))})" if verdicts else "")
        + f". Tolerances used: {tolerances.describe()}."
    )
