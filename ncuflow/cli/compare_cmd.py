"""`ncuflow compare BASE NEW`: the kernels of two reports, run folders or stores, against the noise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ncuflow.cli.options import (
    echo_notes,
    jobs_option,
    threshold_option,
    tolerance_options,
    tolerances_from,
)
from ncuflow.cli.selection import nvtx_option, selection_from
from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text
from ncuflow.read.options import WITH_FINDINGS


@click.command("compare")
@click.argument("base", type=click.Path(path_type=Path, exists=True))
@click.argument("new", type=click.Path(path_type=Path, exists=True))
@threshold_option(help="On-wall threshold of the max model (names each side's binding term).")
@tolerance_options
@nvtx_option
@click.option("--pair", "pairs", multiple=True, metavar="BASE=NEW",
              help="Pair kernel BASE of the first side with kernel NEW of the second (a renamed kernel); "
                   "each a name or a regular expression. Repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as one JSON object.")
@click.option("--markdown", "markdown_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write the tables as Markdown to this file.")
@jobs_option
def compare_command(
    base: Path, new: Path, threshold: float, tol_exact: float, tol_near_exact: float, tol_bytes: float,
    tol_rate: float, tol_time: float, field_tols: tuple[str, ...], kernel: str | None, nvtx: str | None,
    pairs: tuple[str, ...], as_json: bool, markdown_path: Path | None, jobs: int | None,
) -> None:
    """Compare the kernels of BASE and NEW (reports, run folders or stores).

    Kernels are matched by name and launch configuration (grid, block); a kernel whose
    name is the same and whose configuration changed is paired as "reconfigured" where
    that pairing is unique (its work compared per launch and per run in total); --pair
    pairs renamed kernels; those that match nothing are listed. Per field the change is judged against the field's noise band with
    explain's rules (changed / unchanged / ambiguous), and each pair gets explain's verdict
    (same work and time, work changed off or on the critical path, time without counted
    work, or ambiguous) with the binding term on each side. Replicas and repeated launches
    on a side make its noise known; a side measured once can only show large changes.
    """
    from ncuflow.analyze.arguments import parse_pair
    from ncuflow.analyze.compare import compare_loaded, comparison_document
    from ncuflow.output.markdown import compare_markdown, guard_markdown, write_markdown
    from ncuflow.read.jobs import resolve_jobs

    tolerances = tolerances_from(tol_exact, tol_bytes, tol_rate, tol_time, field_tols, tol_near_exact)
    if markdown_path is not None:  # refused before any work, as every Markdown output (issue 24)
        guard_markdown(markdown_path, title="compare", inputs=[base, new])
    named_pairs = [parse_pair(text) for text in pairs]
    selection = selection_from(kernel, nvtx)
    loaded_base = selection.load([base], jobs=resolve_jobs(jobs), options=WITH_FINDINGS)  # the Markdown's top findings
    loaded_new = selection.load([new], jobs=resolve_jobs(jobs), options=WITH_FINDINGS)
    echo_notes((*loaded_base.notes, *loaded_new.notes), tuple(dict.fromkeys((*loaded_base.damaged, *loaded_new.damaged))))
    comparison = compare_loaded(loaded_base, loaded_new, base_label=str(base), new_label=str(new),
                                tolerances=tolerances, threshold=threshold, pairs=named_pairs)
    if markdown_path is not None:
        write_markdown(f"# ncuflow compare {base} {new}\n\n" + "\n".join(compare_markdown(comparison)) + "\n",
                       markdown_path, title="compare", inputs=[base, new])
        click.echo(f"wrote {markdown_path}", err=True)
    if as_json:
        click.echo(json.dumps(comparison_document(comparison), indent=1))
        return
    _print_comparison(comparison, tolerances)


def _print_comparison(comparison: Any, tolerances: Any) -> None:
    """Each matched kernel's table (fields, change, state, why), then what matched nothing."""
    from ncuflow.files import make_console

    console = make_console()
    colours = {"no_effect": "blue", "off_critical_path": "green", "critical_path": "red",
               "time_without_work": "yellow", "ambiguous": "bright_black"}
    states = {"changed": "red", "unchanged": "green", "ambiguous": "yellow", "missing": "dim"}
    for k in comparison.matched:
        _print_kernel(console, k, colours[k.judged.verdict], states, comparison.threshold)
    for title, items in (("only in base", comparison.only_base), ("only in new", comparison.only_new)):
        if items:
            console.print(f"{title}: " + ", ".join(f"{safe_text(m.kernel, 'rich')} ({safe_text(m.spec(), 'rich')}; "
                                                   f"{measured_time(m)})" for m in items), highlight=False)
    _print_counts(console, comparison, tolerances)


def _print_kernel(console: Any, k: Any, colour: str, states: dict[str, str], threshold: float) -> None:
    from rich.table import Table

    from ncuflow.analyze.fields import FIELD_TABLE

    how = {"reconfigured": "reconfigured: ", "paired": "paired by --pair: "}.get(k.how, "")
    table = Table(title=f"{safe_text(how + k.label, 'rich')} — [{colour}]{safe_text(k.verdict_text, 'rich')}[/{colour}]; bound "
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
                      f"[{states[f.state]}]{f.state}[/{states[f.state]}]", safe_text(f.reason, "rich", limit=SENTENCE_CHARS))
    console.print(table)
    from ncuflow.analyze.beyond_work import beyond_work

    for line in beyond_work(k.base, k.new, threshold).lines():
        console.print("  " + safe_text(line, "rich", limit=SENTENCE_CHARS), highlight=False)
    missing = [f.field for f in k.judged.fields if f.state == "missing" and not f.reason.endswith("both sides")]
    if missing:
        console.print(f"  missing on one side: {', '.join(missing)}")
    if k.judged.reasons:
        console.print("  why: " + safe_text("; ".join(k.judged.reasons), "rich", limit=SENTENCE_CHARS), highlight=False)
    if k.how != "matched":
        console.print("  " + safe_text(totals_line(k), "rich", limit=SENTENCE_CHARS), highlight=False)


def _print_counts(console: Any, comparison: Any, tolerances: Any) -> None:
    verdicts = [k.judged.verdict for k in comparison.matched]
    reconfigured = sum(k.how == "reconfigured" for k in comparison.matched)
    paired = sum(k.how == "paired" for k in comparison.matched)
    console.print(
        f"{len(comparison.matched)} matched"
        + (f" ({reconfigured} reconfigured)" if reconfigured else "") + (f" ({paired} by --pair)" if paired else "")
        + f", {len(comparison.only_base)} only in base, {len(comparison.only_new)} only in new"
        + (f" ({', '.join(f'{v} {verdicts.count(v)}' for v in dict.fromkeys(verdicts))})" if verdicts else "")
        + f". Tolerances used: {tolerances.describe()}."
    )


def measured_time(m: object) -> str:
    """``3 launches, median 309.66 µs``: how long an unmatched kernel ran."""
    from ncuflow.analyze.fields import duration_text
    from ncuflow.analyze.measurement import Measurement

    assert isinstance(m, Measurement)
    median = m.stats("duration_ns").median
    count = len(m.launches)
    return f"{count} launch{'es' if count != 1 else ''}" + (f", median {duration_text(median)}" if median else "")


def bytes_text(value: float | None) -> str:
    """``538.9 MB``: a byte count in the unit that reads best (decimal, as ncu shows them)."""
    if value is None:
        return "—"
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(value) >= scale:
            return f"{value / scale:,.1f} {unit}"
    return f"{value:,.0f} B"


def totals_line(k: object) -> str:
    """The work of a reconfigured (or --pair) kernel per run in total: launches, time, instructions, bytes."""
    from ncuflow.analyze.compare import KernelComparison
    from ncuflow.analyze.fields import HEADLINE_WORK, duration_text, format_value

    assert isinstance(k, KernelComparison)
    per_base, per_new = k.launches_per_run
    parts = [f"per run in total: {per_base:g} → {per_new:g} launches"]
    for total in k.totals:
        if total.base is None or total.new is None:
            continue
        if total.field != "duration_ns" and total.field not in HEADLINE_WORK:
            continue
        show = duration_text if total.field == "duration_ns" else bytes_text if total.field == "dram_bytes" else format_value
        ratio = f" (×{total.ratio:.3g})" if total.ratio is not None else ""
        parts.append(f"{total.field} {show(total.base)} → {show(total.new)}{ratio}")
    return "; ".join(parts)
