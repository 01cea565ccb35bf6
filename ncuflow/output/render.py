"""Rows and rich tables of classified launches (no polars: the profiling path uses this)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ncuflow.analyze.classify import TERM_NAMES, Verdict
from ncuflow.analyze.fields import CLASSIFY_FIELDS, FIELD_TABLE, duration_text
from ncuflow.analyze.summary import config_text
from ncuflow.files import make_console
from ncuflow.files.safe_text import safe_text, shortened
from ncuflow.read.deep_metrics import DEEP_FIELD_NAMES
from ncuflow.read.launch import Launch
from ncuflow.read.metrics import FIELDS
from ncuflow.read.sanity import parts_on
from ncuflow.terms import BOUND_STYLES

# What a classify column shows, marked, where its own field is missing (the rows' ``stand_in``).
STAND_INS: dict[str, str] = {
    name: stand_in for name in CLASSIFY_FIELDS if (stand_in := FIELD_TABLE[name].canonical.display.stand_in)
}
# The keys that carry NVIDIA's findings (null where they were not read): whether the report holds rule
# results for the launch, the findings, the markers, and why there are none where it holds none.
FINDING_KEYS: tuple[str, ...] = ("rule_results", "findings", "markers", "findings_note")
# The keys of `ncuflow classify --json`, in order (the fields' JSON keys from the field table).
ROW_KEYS: tuple[str, ...] = (
    "report", "range", "action", "kernel", *(FIELD_TABLE[name].json_key for name in CLASSIFY_FIELDS),
    *(FIELD_TABLE[name].json_key for name in STAND_INS.values()),
    *(f"u_{name}" for name in TERM_NAMES), "bound", "nvidia_sol", "missing", "notes", *FINDING_KEYS,
)

__all__ = ["FINDING_KEYS", "ROW_KEYS", "duration_text", "launch_row", "note_lines", "print_launch_table"]


def launch_row(launch: Launch, verdict: Verdict) -> dict[str, Any]:
    """One launch as the plain row `classify --json` prints (null where unavailable)."""
    row: dict[str, Any] = {
        "report": launch.report,
        "range": launch.range_index,
        "action": launch.action_index,
        "kernel": launch.kernel.function,
    }
    for name in (*CLASSIFY_FIELDS, *STAND_INS.values()):
        row[FIELD_TABLE[name].json_key] = launch.value(name)
    for name in TERM_NAMES:
        row[f"u_{name}"] = verdict.utilization(name)
    row["bound"] = verdict.bound
    row["nvidia_sol"] = launch.nvidia_sol
    row["missing"] = list(launch.missing)
    row["notes"] = dict(launch.notes)
    row.update(_finding_keys(launch))
    return row


def _finding_keys(launch: Launch) -> dict[str, Any]:
    """``FINDING_KEYS``: all null where the findings were not read."""
    results = launch.rule_results
    if results is None:
        return dict.fromkeys(FINDING_KEYS)
    from ncuflow.output.findings_text import finding_record, marker_record
    from ncuflow.read.findings import NO_RULE_RESULTS

    return {"rule_results": results.held, "findings": [finding_record(f) for f in results.findings],
            "markers": [marker_record(m) for m in results.markers],
            "findings_note": None if results.held else NO_RULE_RESULTS}


def binding_utilization(verdict: Verdict) -> tuple[str | None, float | None]:
    """The binding term and its u; for a latency-bound launch, the largest term (what came closest)."""
    available = [t for t in verdict.terms if t.utilization is not None]
    if not available:
        return None, None
    if verdict.bound in TERM_NAMES:
        return verdict.bound, verdict.utilization(verdict.bound)
    top = max(available, key=lambda t: t.utilization or 0.0)
    return top.name, top.utilization


def note_lines(launches: Sequence[Launch]) -> list[str]:
    """What the tables' values do not say by themselves (``Launch.notes``), one line per note
    shared by several launches, and one line per launch whose counters ncu stored as NaN."""
    shared: dict[str, list[int]] = {}
    lines: list[str] = []
    for launch in launches:
        unread = [name for name, note in launch.notes.items() if "as NaN" in note]
        if len(unread) > 2:
            lines.append(f"#{launch.action_index} {shortened(launch.kernel.function)}: ncu stored "
                         f"{len(launch.not_numbers)} of its counters as NaN, so {len(unread)} fields are not "
                         f"measured ({', '.join(unread[:4])}{', …' if len(unread) > 4 else ''})")
        for name, note in launch.notes.items():
            if name in STAND_INS and launch.value(STAND_INS[name]) is not None:
                continue  # its column shows the stand-in, marked; --evidence says why
            if name not in unread or len(unread) <= 2:
                shared.setdefault(f"{name}: {note}", []).append(launch.action_index)
    for text, actions in shared.items():
        lines.append(f"{text} (#{', #'.join(str(a) for a in actions[:8])}{', …' if len(actions) > 8 else ''})")
    return lines


def cell_text(launch: Launch, name: str) -> str:
    """A classify column's cell: its field, or where that is missing its stand-in marked ˢ (SASS)."""
    value = launch.value(name)
    stand_in = STAND_INS.get(name)
    if value is None and stand_in is not None and launch.value(stand_in) is not None:
        return FIELD_TABLE[name].format(launch.value(stand_in)) + "ˢ"
    return FIELD_TABLE[name].format(value)


def load_line(launch: Launch) -> str | None:
    """Global loads by kind, each family the report counts: 'hardware: LDG 16,384, LDGSTS —, TMA —;
    total — (…)'; None where it counts no kind."""
    parts = []
    for total in (row for row in FIELDS if row.parts):
        kinds = [(part, launch.value(part.field)) for part in parts_on(total, launch.device.compute_capability)]
        if all(value is None for _, value in kinds):
            continue
        counted = ", ".join(f"{part.kind.split()[0]} {FIELD_TABLE[part.field].format(value)}" for part, value in kinds)
        note = launch.notes.get(total.name)
        family = "SASS-patched" if "sass" in total.name else "hardware"
        parts.append(f"{family}: {counted}; total {FIELD_TABLE[total.name].format(launch.value(total.name))}"
                     + (f" ({note})" if note else ""))
    return "global loads, " + " | ".join(parts) if parts else None


def _u(value: float | None) -> str:
    return "—" if value is None else f"{value:,.2f}"


def print_launch_table(
    launches: Sequence[Launch],
    verdicts: Sequence[Verdict],
    console: Any = None,
    *,
    title: str | None = None,
    evidence: bool = False,
) -> None:
    """A readable rich table, one row per launch, NVIDIA's verdict beside ours."""
    from rich.table import Table

    console = console or make_console()
    table = Table(title=title, show_lines=False, header_style="bold")
    field_columns = [(FIELD_TABLE[name].label or name, "right") for name in CLASSIFY_FIELDS]
    for header, justify in (
        ("#", "right"), ("kernel", "left"), ("grid × block", "right"), *field_columns,
        ("bound", "left"), ("u", "right"), ("NVIDIA", "left"),
    ):
        table.add_column(header, justify=justify, no_wrap=True, max_width=44 if header == "kernel" else None)  # type: ignore[arg-type]
    notes: list[str] = []
    for launch, verdict in zip(launches, verdicts, strict=True):
        nvidia = "—"
        if verdict.nvidia is not None:
            mark = "✓" if verdict.nvidia.agrees else "✗"
            nvidia = f"{mark} {verdict.nvidia.category}"
            if not verdict.nvidia.agrees:
                notes.append(f"{Path(launch.report).name} #{launch.action_index}: NVIDIA says {verdict.nvidia.category}, ncuflow {verdict.bound}: {verdict.nvidia.reason}")
        style = BOUND_STYLES.get(verdict.bound, "")
        term, u = binding_utilization(verdict)
        table.add_row(
            str(launch.action_index),
            safe_text(launch.kernel.function, "rich", limit=44),
            config_text(launch.value("grid_size"), launch.value("block_size")),
            *(cell_text(launch, name) for name in CLASSIFY_FIELDS),
            f"[{style}]{verdict.bound}[/{style}]" if style else verdict.bound,
            "—" if u is None else (f"{_u(u)}" if term == verdict.bound else f"{term} {_u(u)}"),
            safe_text(nvidia, "rich"),
        )
    console.print(table)
    for line in note_lines(launches):
        console.print(f"[yellow]note[/yellow] {safe_text(line, 'rich', limit=None)}", highlight=False)
    for note in notes:
        console.print(f"[yellow]disagreement[/yellow] {safe_text(note, 'rich', limit=None)}", highlight=False)
    if evidence:
        from ncuflow.analyze.waiting import why_waiting
        from ncuflow.output.findings_text import evidence_lines

        for launch, verdict in zip(launches, verdicts, strict=True):
            console.print(f"[bold]#{launch.action_index}[/bold] {verdict.bound}: "
                          f"{safe_text(verdict.evidence(), 'rich', limit=None)}", highlight=False)
            for extra in (*verdict.evidence_lines(), load_line(launch)):
                if extra:
                    console.print(f"   {safe_text(extra, limit=None)}", highlight=False, markup=False)
            if verdict.bound == "latency":
                for line in why_waiting(launch).lines():
                    console.print(f"   why it waits, {safe_text(line, limit=None)}", highlight=False, markup=False)
            for line in evidence_lines(launch.rule_results, verdict.bound):
                console.print(f"   {safe_text(line, limit=None)}", highlight=False, markup=False)
            core = [name for name in launch.missing if name not in DEEP_FIELD_NAMES]
            deep = len(launch.missing) - len(core)
            if core or deep:
                more = f"{' and ' if core else ''}{deep} roofline/occupancy/stall fields" if deep else ""
                console.print(f"   missing: {', '.join(core)}{more}", highlight=False)
