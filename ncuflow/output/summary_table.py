"""``ncuflow summary`` as a console table, CSV text or JSON-ready data (no polars)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from ncuflow.analyze.fields import duration_text
from ncuflow.analyze.summary import ReportSummary, summary_rows
from ncuflow.files import make_console
from ncuflow.files.safe_text import safe_text, spreadsheet_cell
from ncuflow.output.findings_text import top_text
from ncuflow.terms import BOUND_STYLES

CSV_COLUMNS: tuple[str, ...] = (
    "report", "label", "device", "rank", "short_name", "grid_size", "block_size", "launches", "total_ns",
    "median_ns", "share", "bound", "verdicts", "binding_term", "binding_u", "tensor_pct", "top_finding", "top_speedup", "kernel",
    "function",
)


# What the "top finding" column shows (printed under the tables where a kernel has findings).
TOP_FINDING_LEGEND = ("top finding: NVIDIA's largest estimated speedup among the kernel's findings about its binding "
                      "wall (its most common verdict), else among all of them; as `classify --evidence` ranks them.")


def share_text(share: float | None) -> str:
    return "—" if share is None else f"{share * 100:.1f} %" if share >= 0.001 or share == 0 else f"{share * 100:.2g} %"


def _title(summary: ReportSummary) -> str:
    if summary.reports > 1:  # a roll-up: its label names the reports and the GPU
        kernels = len(summary.kernels) + (summary.rest.kernels if summary.rest else 0)
        return (f"{safe_text(summary.label, 'rich')}: {summary.launches:,} launches of {kernels} kernel"
                f"{'s' if kernels != 1 else ''}, GPU time {duration_text(summary.total_ns)}")
    device = summary.device or "unknown GPU"
    kernels = len(summary.kernels) + (summary.rest.kernels if summary.rest else 0)
    untimed = f", {summary.untimed} without a duration" if summary.untimed else ""
    return (f"{safe_text(summary.label, 'rich')}\n{safe_text(device, 'rich')}: {summary.launches} launch"
            f"{'es' if summary.launches != 1 else ''} of {kernels} kernel{'s' if kernels != 1 else ''}, "
            f"GPU time {duration_text(summary.total_ns)}{untimed}")


def print_summaries(summaries: Sequence[ReportSummary], console: Any = None) -> None:
    """One table per report: kernels by total time, their share, verdicts and binding utilization."""
    from rich.table import Table

    console = console or make_console()
    rolled = any(summary.reports > 1 for summary in summaries)
    for summary in summaries:
        table = Table(title=_title(summary), header_style="bold", title_justify="left")
        for header, justify in _columns(rolled):
            table.add_column(header, justify=justify, no_wrap=header != "kernel",  # type: ignore[arg-type]
                             max_width=64 if header == "kernel" else None, overflow="fold")
        for rank, k in enumerate(summary.kernels, start=1):
            style = BOUND_STYLES.get(k.bound, "")
            verdicts = safe_text(k.verdict_text(), "rich") or "—"
            table.add_row(str(rank), safe_text(k.short_name, "rich"), k.config, f"{k.launches:,}",
                          *([f"{k.reports:,}"] if rolled else []), duration_text(k.total_ns),
                          duration_text(k.median_ns), share_text(k.share),
                          f"[{style}]{verdicts}[/{style}]" if style else verdicts, k.binding_text(),
                          safe_text(top_text(k.top_finding, k.rules), "rich") if k.rules is not None else "")
        if summary.rest is not None:
            rest = summary.rest
            table.add_row("", f"[dim]{rest.kernels} other kernels[/dim]", "", f"{rest.launches:,}",
                          *([""] if rolled else []), duration_text(rest.total_ns), "", share_text(rest.share), "", "", "")
        console.print(table)
    console.print(_footer(summaries, rolled), highlight=False)
    if any(k.rules for summary in summaries for k in summary.kernels):
        console.print(TOP_FINDING_LEGEND, highlight=False, markup=False)


def _columns(rolled: bool) -> list[tuple[str, str]]:
    """(header, justify) of a summary table; a roll-up counts the reports each kernel is in."""
    return [("#", "right"), ("kernel", "left"), ("grid × block", "right"), ("launches", "right"),
            *([("reports", "right")] if rolled else []), ("total", "right"), ("median", "right"),
            ("share", "right"), ("verdicts", "left"), ("binding u", "left"), ("top finding", "left")]


def _footer(summaries: Sequence[ReportSummary], rolled: bool) -> str:
    """What the tables' shares are of (nothing to say for one report)."""
    total = duration_text(sum(s.total_ns or 0.0 for s in summaries))
    if rolled:
        reports = sum(s.reports for s in summaries)
        gpus = f"{len(summaries)} GPUs" if len(summaries) > 1 else "one GPU"
        return (f"{reports} reports rolled up by kernel and launch configuration on {gpus}, GPU time {total} in "
                "all; shares are of each GPU's time over its reports (--per-report: one table per report).")
    if len(summaries) > 1:
        return f"{len(summaries)} reports, GPU time {total} in all; shares are of each report's own GPU time."
    return ""


def summaries_csv(summaries: Sequence[ReportSummary]) -> str:
    """The flat rows as CSV text (one row per kernel of every report, full names included; a name
    that would start a spreadsheet formula is quoted: ``spreadsheet_cell``)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(CSV_COLUMNS), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in summary_rows(summaries):
        writer.writerow({key: "" if value is None else spreadsheet_cell(value) for key, value in row.items()})
    return buffer.getvalue()


def summaries_document(summaries: Sequence[ReportSummary], threshold: float) -> dict[str, Any]:
    """The summaries as JSON: ``rolled_up`` true where each entry sums the reports of one GPU."""
    return {"threshold": threshold, "rolled_up": any(s.reports > 1 for s in summaries),
            "reports": [s.to_json() for s in summaries]}
