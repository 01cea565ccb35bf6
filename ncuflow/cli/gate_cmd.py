"""`ncuflow gate BASELINE NEW`: fail a CI job when a kernel does more work or gets slower than its baseline."""

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
from ncuflow.errors import UsageError
from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text


@click.command("gate")
@click.argument("inputs", nargs=-1, required=True, metavar="BASELINE [NEW]", type=click.Path(path_type=Path, exists=True))
@threshold_option(help="On-wall threshold of the max model (names each side's binding wall).")
@tolerance_options
@nvtx_option
@click.option("--pair", "pairs", multiple=True, metavar="BASE=NEW",
              help="Pair kernel BASE of the baseline with kernel NEW (a renamed kernel). Repeatable.")
@click.option("--rules", "rules_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="A TOML file of allowances, per-kernel rules and ignored kernels (docs/gate.md).")
@click.option("--ignore", "ignore", multiple=True, metavar="REGEX",
              help="Never gate kernels whose name matches (RE2). Repeatable.")
@click.option("--time-tolerance", type=click.FloatRange(min=0.0, max=1e6), default=None, metavar="PCT",
              help="Gate time without replicas: slower beyond this growth, %.")
@click.option("--fail-on-verdict", is_flag=True, help="A kernel whose binding wall moved fails the job.")
@click.option("--strict", is_flag=True, help="Exit 3 where a kernel is ambiguous or missing (and none regressed).")
@click.option("--other-gpu", type=click.Choice(["refuse", "work"]), default="refuse", show_default=True,
              help="A baseline from another GPU model: refuse it, or gate the work counters only.")
@click.option("--write-baseline", "baseline_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write the baseline of the one input given to this file (JSON) instead of gating.")
@click.option("--json", "as_json", is_flag=True, help="Print the gate as one JSON object.")
@click.option("--markdown", "markdown_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write the summary as Markdown (fits $GITHUB_STEP_SUMMARY).")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write JUnit XML: one test case per kernel.")
@jobs_option
def gate_command(inputs: tuple[Path, ...], threshold: float, tol_exact: float, tol_near_exact: float, tol_bytes: float,
                 tol_rate: float, tol_time: float, field_tols: tuple[str, ...], kernel: str | None, nvtx: str | None,
                 pairs: tuple[str, ...], rules_path: Path | None, ignore: tuple[str, ...], time_tolerance: float | None,
                 fail_on_verdict: bool, strict: bool, other_gpu: str, baseline_path: Path | None, as_json: bool,
                 markdown_path: Path | None, junit_path: Path | None, jobs: int | None) -> None:
    """Gate NEW against BASELINE (reports, run folders, stores or a baseline file) and exit with
    what it found: 0 pass, 1 regression, 2 bad input or usage, 3 undecidable under --strict.

    Kernels are paired and each field judged against its noise band as `ncuflow compare` does;
    each kernel gets one label: more work, slower, ambiguous, less work, faster, verdict moved,
    same, missing or new. More work (a work counter by its tolerance class) and slower (time,
    only where both sides carry noise or with --time-tolerance) fail the job; improvements never
    do. `ncuflow gate RUNS --write-baseline F` writes the baseline file to commit.
    """
    from ncuflow.analyze.arguments import parse_pair
    from ncuflow.analyze.compare import Judging
    from ncuflow.analyze.gate import GateRules
    from ncuflow.analyze.gate_rules import load_rules
    from ncuflow.analyze.gate_run import gate_measurements
    from ncuflow.files.patterns import kernel_pattern

    tolerances = tolerances_from(tol_exact, tol_bytes, tol_rate, tol_time, field_tols, tol_near_exact)
    if baseline_path is not None:
        _write_baseline(inputs, baseline_path, kernel, nvtx, jobs)
        return
    if len(inputs) != 2:
        raise UsageError(f"gate takes BASELINE and NEW; {len(inputs)} inputs were given.",
                         "The gate judges the kernels of NEW against those of BASELINE.",
                         "Pass two inputs, or one with --write-baseline F.")
    rules = GateRules(ignore=tuple(kernel_pattern(p, option="--ignore") for p in ignore),
                      time_tolerance=None if time_tolerance is None else time_tolerance / 100.0,
                      fail_on_verdict=fail_on_verdict, strict=strict)
    if rules_path is not None:
        rules, field_tolerances = load_rules(rules_path, rules)
        tolerances = tolerances.with_overrides(field_tolerances) if field_tolerances else tolerances
    _guard_outputs(markdown_path, junit_path, inputs)
    base, new = (_side(path, kernel, nvtx, jobs) for path in inputs)
    result = gate_measurements(base, new, labels=(str(inputs[0]), str(inputs[1])),
                               judging=Judging(tolerances, threshold=threshold),
                               pairs=[parse_pair(text) for text in pairs], rules=rules,
                               other_gpu="work" if other_gpu == "work" else "refuse")
    _write_outputs(result, markdown_path, junit_path, inputs)
    if as_json:
        from ncuflow.output.gate_doc import gate_document

        click.echo(json.dumps(gate_document(result), indent=1))
    else:
        _print_gate(result)
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)


def _side(path: Path, kernel: str | None, nvtx: str | None, jobs: int | None) -> list[Any]:
    """The measurements of one input: a baseline file as written, else its reports loaded and grouped."""
    from ncuflow.analyze.baseline import is_baseline_file, read_baseline
    from ncuflow.analyze.measurement import measurements
    from ncuflow.read.jobs import resolve_jobs

    if is_baseline_file(path):
        from ncuflow.files.patterns import kernel_pattern

        pattern = kernel_pattern(kernel) if kernel else None
        return [m for m in read_baseline(path) if pattern is None or pattern.search(m.function)]
    loaded = selection_from(kernel, nvtx).load([path], jobs=resolve_jobs(jobs))
    echo_notes(loaded.notes, loaded.damaged)
    return measurements(loaded.runs)


def _write_baseline(inputs: tuple[Path, ...], target: Path, kernel: str | None, nvtx: str | None, jobs: int | None) -> None:
    from ncuflow.analyze.baseline import write_baseline

    if len(inputs) != 1:
        raise UsageError(f"--write-baseline takes one input; {len(inputs)} were given.",
                         "The baseline is written from the runs of one report, run folder or store.",
                         "Pass the runs to keep as the baseline: ncuflow gate RUNS --write-baseline F.")
    members = _side(inputs[0], kernel, nvtx, jobs)
    if not members:
        raise UsageError(f"{safe_text(inputs[0])} holds no kernel launch to keep as a baseline.",
                         "A baseline is the launches the gate compares against.", "Give the runs of the cells you gate.")
    write_baseline(members, target, inputs)
    launches = sum(len(m.launches) for m in members)
    click.echo(f"wrote {safe_text(target)}: {len(members)} kernels, {launches} launches", err=True)


def _guard_outputs(markdown_path: Path | None, junit_path: Path | None, inputs: tuple[Path, ...]) -> None:
    """Each output refused before any work where it would replace what is not an earlier one."""
    from ncuflow.files import guard_output, text_recogniser
    from ncuflow.output.markdown import guard_markdown

    if markdown_path is not None and junit_path is not None and markdown_path.resolve() == junit_path.resolve():
        raise UsageError(f"--markdown and --junit are both {safe_text(markdown_path)}.",
                         "The second would replace the first.", "Give each its own file.")
    if markdown_path is not None:
        guard_markdown(markdown_path, title="gate", inputs=inputs)
    if junit_path is not None:
        guard_output(junit_path, kind="an ncuflow gate JUnit file", inputs=inputs, option="--junit",
                     recognise=lambda p: text_recogniser('<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="ncuflow gate"')(p))


def _write_outputs(result: Any, markdown_path: Path | None, junit_path: Path | None, inputs: tuple[Path, ...]) -> None:
    from ncuflow.files import atomic_write_text
    from ncuflow.output.gate_doc import gate_junit, gate_markdown
    from ncuflow.output.markdown import write_markdown

    if markdown_path is not None:
        write_markdown(gate_markdown(result), markdown_path, title="gate", inputs=inputs)
        click.echo(f"wrote {safe_text(markdown_path)}", err=True)
    if junit_path is not None:
        atomic_write_text(junit_path, gate_junit(result))
        click.echo(f"wrote {safe_text(junit_path)}", err=True)


def _print_gate(result: Any) -> None:
    """One table (the kernels that fail first), then the notes and the outcome."""
    from rich.table import Table

    from ncuflow.files import make_console
    from ncuflow.output.gate_doc import outcome, what_moved

    console = make_console()
    colours = {"always": "red", "verdict": "yellow", "strict": "yellow", "never": "green"}
    table = Table(title="ncuflow gate", title_justify="left")
    for column in ("kernel", "label", "what moved"):
        table.add_column(column, overflow="fold")
    for gate in result.kernels:
        colour = "red" if result.fails(gate) else colours[gate.label.fails] if gate.label.fails != "verdict" else "green"
        table.add_row(safe_text(gate.kernel, "rich"), f"[{colour}]{gate.label.text}[/{colour}]",
                      safe_text(what_moved(gate), "rich", limit=SENTENCE_CHARS))
    console.print(table)
    for note in result.notes:
        console.print("note: " + safe_text(note, "rich", limit=SENTENCE_CHARS), highlight=False)
    if result.ignored:
        console.print("ignored by the rules: " + safe_text(", ".join(result.ignored), "rich", limit=SENTENCE_CHARS),
                      highlight=False)
    console.print(safe_text(outcome(result), "rich", limit=SENTENCE_CHARS), highlight=False)
