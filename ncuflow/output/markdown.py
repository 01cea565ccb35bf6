"""Markdown tables of stability, explain and the whole study report."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ncuflow.analyze.classify import TERM_NAMES
from ncuflow.analyze.compare import Comparison
from ncuflow.analyze.explain import VERDICT_TEXT, GroupExplanation
from ncuflow.analyze.fields import FIELD_UNITS, duration_text, format_value
from ncuflow.analyze.point import format_param
from ncuflow.analyze.stability import GroupStability, Tolerances, flat
from ncuflow.analyze.study import Analysis
from ncuflow.files import atomic_write_text, guard_output, text_recogniser
from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text, shortened
from ncuflow.output.findings_text import top_line


def markdown_text(text: object, limit: int | None = SENTENCE_CHARS) -> str:
    """Text from a report, a log or a store as Markdown shows it (``safe_text``); names are
    shortened by the caller (``_name``), sentences that hold them kept to ``SENTENCE_CHARS``."""
    return safe_text(text, "markdown", limit=limit)


def _name(text: object) -> str:
    return shortened(str(text))


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(markdown_text(h) for h in header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(markdown_text(c) for c in row) + " |" for row in rows]
    return lines


def _u(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def stability_markdown(groups: Sequence[GroupStability], tolerances: Tolerances, singles: Sequence[str] = ()) -> list[str]:
    """The stability section: one summary table, then per-field tables for every group."""
    groups = flat(groups)  # a different-work group's same-work groups follow it
    lines = [f"Tolerances used: {tolerances.describe()}. Spread = (max − min) / median; for a percentage, "
             "max − min in percentage points.", ""]
    lines += _table(
        ["group", "source", "launches", "runs", "verdict"],
        [[_name(g.label), g.source, str(g.launches), str(g.runs), g.summary()] for g in groups],
    )
    for g in groups:
        if g.launches < 2 or g.verdict == "different_work":
            continue
        lines += ["", f"**{markdown_text(_name(g.label))}** — {markdown_text(g.verdict_text)}"
                  + (f" ({markdown_text(_name(g.device))})" if g.device else ""), ""]
        lines += _table(
            ["field", "class", "tolerance", "n", "median", "min", "max", "spread", "verdict"],
            [
                [f.field, f.tolerance_class, f.tolerance_text(), str(f.n),
                 format_value(f.median) + f" {FIELD_UNITS.get(f.field, '')}", format_value(f.minimum),
                 format_value(f.maximum), f.spread_text(), f.verdict]
                for f in g.fields if f.verdict != "missing"
            ],
        )
        if g.missing_fields:
            lines += ["", "Not measured: " + markdown_text(", ".join(g.missing_fields)) + "."]
        for note in g.notes:
            lines += ["", f"Note: {markdown_text(note)}."]
    if singles:
        lines += ["", f"Launched once (no spread): {', '.join(markdown_text(_name(s)) for s in singles)}."]
    return lines


def explain_markdown(explained: Sequence[GroupExplanation]) -> list[str]:
    lines: list[str] = []
    for ge in explained:
        g = ge.group
        lines += [
            "",
            f"**{markdown_text(_name(g.label()))}**; baseline {markdown_text(g.param)}={markdown_text(format_param(ge.baseline.param(g.param)))} "
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


def report_markdown(analysis: Analysis, plots: Mapping[str, str] | None = None, extra: Sequence[str] = ()) -> str:
    """The whole report as Markdown; ``plots`` maps plot keys to file names beside it; ``extra``
    lines (the roofline and latency sections) go before the notes."""
    plots = plots or {}
    lines = [
        "# ncuflow report",
        "",
        f"Source: {markdown_text(', '.join(analysis.paths) or analysis.source)} ({analysis.source}); "
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
            [_name(s.point.spec()), _name(s.point.kernel), _name(s.point.device or "—"), str(s.point.runs),
             str(len(s.point.launches)),
             duration_text(s.duration_median), s.model.bound, *[_u(s.model.u(t)) for t in TERM_NAMES], s.stability.verdict_text]
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
        lines += ["", f"### {markdown_text(param)}"]
        if not explained:
            lines += ["", f"No two runs differ only in {markdown_text(param)}."]
        lines += explain_markdown(explained)
        for index, ge in enumerate(explained):
            key = f"sweep:{param}:{index}"
            if key in plots:
                lines += ["", f"![{markdown_text(_name(ge.group.label()))}]({plots[key]})"]
    lines += list(extra)
    if analysis.notes:
        lines += ["", "## Notes", ""] + [f"- {markdown_text(n)}" for n in analysis.notes]
    return "\n".join(lines) + "\n"


def compare_markdown(comparison: Comparison) -> list[str]:
    """The comparison: one summary table, a field table per matched kernel (and the u-terms, stall
    shares and occupancy beside it), the unmatched ones."""
    from ncuflow.analyze.beyond_work import beyond_work
    from ncuflow.analyze.fields import FIELD_TABLE

    lines = [
        f"Base: {markdown_text(comparison.base)}; new: {markdown_text(comparison.new)}. Each field is judged against its noise band "
        f"({comparison.tolerances.describe()}); verdicts as in explain.",
        "",
    ]
    lines += _table(
        ["kernel", "verdict", "work", "time", "bound base → new", "evidence"],
        [[_name(k.label), k.verdict_text, k.judged.work, k.judged.time,
          f"{k.judged.baseline_model.bound} → {k.judged.value_model.bound}", k.judged.deltas]
         for k in comparison.matched],
    ) if comparison.matched else ["No kernel matches by name and launch configuration."]
    for k in comparison.matched:
        lines += ["", f"**{markdown_text(_name(k.label))}** — {markdown_text(k.verdict_text)}"
                  + (f" ({markdown_text(_name(k.base.device))} → {markdown_text(_name(k.new.device))})" if k.base.device != k.new.device
                     else f" ({markdown_text(_name(k.base.device))})"), ""]
        lines += _table(
            ["field", "base", "new", "change", "state", "why"],
            [[f.field, FIELD_TABLE[f.field].format(f.baseline), FIELD_TABLE[f.field].format(f.value),
              f.delta_text(), f.state, f.reason]
             for f in k.judged.fields if f.state != "missing"],
        )
        beyond = beyond_work(k.base, k.new, comparison.threshold).lines()
        if beyond:
            lines += [""] + [f"- {markdown_text(line)}" for line in beyond]
        missing = [f.field for f in k.judged.fields if f.state == "missing"]
        if missing:
            lines += ["", "Missing on at least one side: " + markdown_text(", ".join(missing)) + "."]
        if k.judged.reasons:
            lines += ["", "Why: " + markdown_text("; ".join(k.judged.reasons)) + "."]
        tops = [top_line([x.rule_results for x in side.launches], model.bound)
                for side, model in ((k.base, k.judged.baseline_model), (k.new, k.judged.value_model))]
        if any(tops):
            lines += ["", "NVIDIA's top finding: base " + markdown_text(tops[0] or "not read") + "; new "
                      + markdown_text(tops[1] or "not read") + "."]
    for title, items in (("Only in base", comparison.only_base), ("Only in new", comparison.only_new)):
        if items:
            lines += ["", f"{title}: " + ", ".join(f"{markdown_text(_name(m.kernel))} ({markdown_text(_name(m.spec()))})" for m in items) + "."]
    return lines


def guard_markdown(target: Path, *, title: str, inputs: Sequence[Path] = (), option: str = "--markdown") -> None:
    """Refuse ``target`` unless it is new or an earlier ncuflow Markdown output of the same kind:
    its first line is ``# ncuflow <title>`` (a stability table is not replaced by a comparison)."""
    guard_output(target, kind=f"an ncuflow {title} Markdown file", recognise=text_recogniser(f"# ncuflow {title}"),
                 inputs=inputs, option=option)


def write_markdown(text: str, target: Path, *, title: str, inputs: Sequence[Path] = (),
                   option: str = "--markdown") -> Path:
    """Write a Markdown document atomically; its first line is ``# ncuflow <title>``.

    Every Markdown output goes through here (or ``guard_markdown`` first, for a folder of
    files): refused where the target is an input or an existing file that is not an earlier
    ncuflow Markdown output of the same title (recognised by that first line).
    """
    guard_markdown(target, title=title, inputs=inputs, option=option)
    heading = f"# ncuflow {title}"
    body = text if text.startswith(heading) else f"{heading}\n\n{text}"
    atomic_write_text(target, body)
    return target
