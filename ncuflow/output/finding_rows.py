"""One launch's NVIDIA findings and source markers as rows of the findings table (``export --findings``).

One row per finding (``kind`` "finding"), one per source marker ("marker"), and, for a launch
whose report holds no rule results, one row saying so ("none", its message the reason): a
launch is never absent from the table for want of findings. ``order`` is the finding's or
marker's place in the report (what ``ncu_report`` lists first is 0). Plain dicts, no polars:
built in the reading workers beside the launch rows (``ncuflow.output.launch_rows``); the
table's schema is ``ncuflow.output.export.FINDINGS_SCHEMA``.
"""

from __future__ import annotations

from typing import Any

from ncuflow.analyze.classify import Verdict
from ncuflow.analyze.findings import concerns, terms_of
from ncuflow.read.findings import NO_RULE_RESULTS, Finding, Marker
from ncuflow.read.launch import Launch

ROW_KINDS = ("finding", "marker", "none")
_EMPTY: dict[str, Any] = {
    "rule": None, "rule_name": None, "section": None, "type": None, "title": None, "message": None,
    "message_raw": None, "speedup": None, "speedup_type": None, "concerns": [], "on_binding": None,
    "focus_metrics": [], "marker_kind": None, "address": None, "file": None, "line": None,
}


def _launch_part(launch: Launch, verdict: Verdict, run_id: str | None) -> dict[str, Any]:
    return {"report": launch.report, "range": launch.range_index, "action": launch.action_index,
            "kernel_function": launch.kernel.function, "bound": verdict.bound,
            "run_id": run_id if run_id is not None else launch.run.run_id if launch.run else None}


def _finding_part(finding: Finding, bound: str) -> dict[str, Any]:
    terms = concerns(finding)
    return {
        "rule": finding.rule, "rule_name": finding.rule_name, "section": finding.section, "type": finding.type,
        "title": finding.title, "message": finding.text, "message_raw": finding.message,
        "speedup": finding.speedup, "speedup_type": finding.speedup_type, "concerns": list(terms),
        "on_binding": bound in terms,
        "focus_metrics": [{"name": m.name, "value": m.value, "severity": m.severity, "info": m.info}
                          for m in finding.focus_metrics],
    }


def _marker_part(marker: Marker) -> dict[str, Any]:
    return {"rule": marker.rule, "section": marker.section, "type": marker.type, "message": marker.message,
            "message_raw": marker.message, "concerns": list(terms_of(marker.rule)), "marker_kind": marker.kind,
            "address": marker.address, "file": marker.file, "line": marker.line}


def finding_rows(launch: Launch, verdict: Verdict, run_id: str | None = None) -> list[dict[str, Any]]:
    """The launch's rows of the findings table ([] where its findings were not read); ``run_id``: its
    store run's (else the one the launch carries, if any)."""
    results = launch.rule_results
    if results is None:
        return []
    base = _launch_part(launch, verdict, run_id)
    if not results.held:
        return [{**base, "kind": "none", "order": 0, **_EMPTY, "message": NO_RULE_RESULTS}]
    rows = [{**base, "kind": "finding", "order": order, **_EMPTY, **_finding_part(finding, verdict.bound)}
            for order, finding in enumerate(results.findings)]
    rows += [{**base, "kind": "marker", "order": order, **_EMPTY, **_marker_part(marker)}
             for order, marker in enumerate(results.markers)]
    return rows
