"""NVIDIA's findings in the Markdown outputs: the report's section and compare's lines.

Every string from a report goes through ``ncuflow.output.markdown.markdown_text`` (the
names' safe-text rules, ``ncuflow.files.safe_text``), in table cells and in sentences.
"""

from __future__ import annotations

from collections.abc import Sequence

from ncuflow.analyze.findings import held, pooled
from ncuflow.analyze.study import Analysis
from ncuflow.output.findings_text import reason, speedup_text
from ncuflow.output.markdown import _name, _table, markdown_text
from ncuflow.read.findings import NO_RULE_RESULTS
from ncuflow.read.launch import Launch

SHOWN = 5


def _rows(launches: Sequence[Launch], bound: str) -> list[list[str]]:
    return [[item.item.concerns(bound), item.item.finding.heading, speedup_text(item.item.finding) or "—",
             f"{item.launches}/{len(launches)}", reason(item.item.finding)]
            for item in pooled([x.rule_results for x in launches], bound)[:SHOWN]]


def findings_markdown(analysis: Analysis) -> list[str]:
    """The report's section: per cell and kernel, NVIDIA's top findings ([] where none were read)."""
    points = [(s, [x.rule_results for x in s.point.launches]) for s in analysis.points]
    if all(held(results) is None for _, results in points):
        return []
    lines = ["", "## NVIDIA's findings", "",
             f"NVIDIA's rule results per cell, the binding wall's first, then by estimated speedup (at most {SHOWN})."]
    for summary, results in points:
        title = f"**{markdown_text(_name(summary.point.spec()))}** {markdown_text(_name(summary.point.kernel))}"
        if not held(results):
            lines += ["", f"{title}: {markdown_text(NO_RULE_RESULTS)}."]
            continue
        lines += ["", f"{title} ({summary.model.bound}):", ""]
        lines += _table(["wall", "finding", "estimate", "launches", "why"],
                        _rows(summary.point.launches, summary.model.bound))
    return lines

