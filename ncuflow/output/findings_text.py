"""NVIDIA's findings as text: the lines under a verdict, a summary's top finding, JSON records.

Every string here comes from a report: the console and Markdown renderers pass each line
through ``ncuflow.files.safe_text`` for their target, as they do names. Plain strings and
dicts: no rich, no polars (the profiling path renders verdicts too).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

from ncuflow.analyze.findings import RankedFinding, concerns, held, ranked, top_ranked
from ncuflow.files.safe_text import shortened
from ncuflow.read.findings import NO_RULE_RESULTS, Finding, FocusMetric, Marker, RuleResults

REASON_CHARS = 180
FOCUS_SHOWN = 3
MARKERS_SHOWN = 3


def number_text(value: float) -> str:
    """A focus metric's value: a whole number with separators, else three significant digits."""
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.3g}"


def speedup_text(finding: Finding) -> str:
    """'est. 48.9 % global' ('' where the rule estimated none)."""
    if finding.speedup is None:
        return ""
    return f"est. {finding.speedup:.1f} %" + (f" {finding.speedup_type}" if finding.speedup_type else "")


def reason(finding: Finding, limit: int = REASON_CHARS) -> str:
    """The message's first sentence, in plain words, shortened to ``limit``."""
    text = " ".join(finding.text.split())
    end = text.find(". ")
    first = text if end < 0 else text[:end + 1]
    return shortened(first, limit)


def focus_text(metrics: tuple[FocusMetric, ...], shown: int = FOCUS_SHOWN) -> str:
    """'name 992 (high), name 0.158' for the first ``shown`` focus metrics."""
    parts = [f"{m.name} {number_text(m.value)}" + ("" if m.severity == "default" else f" ({m.severity})")
             for m in metrics[:shown]]
    more = len(metrics) - shown
    return ", ".join(parts) + (f", +{more} more" if more > 0 else "")


def finding_line(item: RankedFinding, bound: str) -> str:
    """One ranked finding: '[l1] Shared Load Bank Conflicts, est. 48.9 % global: <reason> | rests on …'."""
    finding = item.finding
    head = f"[{item.concerns(bound)}] {finding.heading}"
    estimate = speedup_text(finding)
    kind = "" if finding.type == "optimization" else f" ({finding.type})"  # most are optimizations
    line = f"{head}{', ' + estimate if estimate else ''}{kind}: {reason(finding)}"
    if finding.focus_metrics:
        line += f" | rests on {focus_text(finding.focus_metrics)}"
    return line


def marker_summary(markers: tuple[Marker, ...], shown: int = MARKERS_SHOWN) -> str | None:
    """'markers: 4 on SASS instructions, 4 on source lines (sharedMemory.cu:22 CPIStall, …)'."""
    if not markers:
        return None
    kinds = Counter(m.kind for m in markers)
    lines = list(dict.fromkeys(f"{PurePath(m.file or '?').name}:{m.line} {m.rule}"
                               for m in markers if m.kind == "source"))
    where = f" ({', '.join(lines[:shown])}{', …' if len(lines) > shown else ''})" if lines else ""
    counted = ", ".join(f"{count} on {'SASS instructions' if kind == 'sass' else kind + ' lines'}"
                        for kind, count in sorted(kinds.items()))
    return f"NVIDIA's source markers: {counted}{where}"


def evidence_lines(results: RuleResults | None, bound: str) -> list[str]:
    """What ``classify --evidence`` prints under a verdict about NVIDIA's findings ([] where not read)."""
    if results is None:
        return []
    if not results.held:
        return [NO_RULE_RESULTS]
    items = ranked(results, bound)
    lines = [f"NVIDIA's findings ({len(items)}; estimated first, the binding wall's before the others, "
             "by estimated speedup):"]
    lines += [f"  {finding_line(item, bound)}" for item in items]
    markers = marker_summary(results.markers)
    return [*lines, markers] if markers else lines


def top_text(finding: Finding | None, results_held: bool) -> str:
    """A summary cell: 'Shared Load Bank Conflicts 48.9 %'; '—' where no finding estimates a speedup,
    'no rules' where the report holds no rule results."""
    if not results_held:
        return "no rules"
    if finding is None:
        return "—"
    return f"{shortened(finding.heading, 40)} {finding.speedup:.1f} %"


def top_line(results: Sequence[RuleResults | None], bound: str) -> str | None:
    """A kernel's top finding where its verdict is ``bound`` (``findings.top_ranked``: the binding wall's
    largest estimated speedup, else the largest), 'Shared Load Bank Conflicts est. 48.9 % global', or why
    there is none; None where its findings were not read."""
    found = held(results)
    if found is None:
        return None
    top = top_ranked(results, bound)
    if top is None:
        return "no rule results" if not found else "no finding estimates a speedup"
    return f"{shortened(top.heading, 60)} {speedup_text(top)}"


def finding_record(finding: Finding) -> dict[str, Any]:
    """A finding as ``classify --json`` carries it (the message in plain words, its raw text beside it)."""
    return {
        "rule": finding.rule, "name": finding.rule_name, "section": finding.section, "title": finding.title,
        "type": finding.type, "speedup": finding.speedup, "speedup_type": finding.speedup_type,
        "message": finding.text, "message_raw": finding.message, "concerns": list(concerns(finding)),
        "focus_metrics": [{"name": m.name, "value": m.value, "severity": m.severity, "info": m.info}
                          for m in finding.focus_metrics],
    }


def marker_record(marker: Marker) -> dict[str, Any]:
    """A source marker as ``classify --json`` carries it."""
    return {"rule": marker.rule, "section": marker.section, "kind": marker.kind, "type": marker.type,
            "message": marker.message, "address": marker.address, "file": marker.file, "line": marker.line}
