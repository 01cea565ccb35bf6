"""A launch's rule results (``ncuflow.read.findings``) from either reader: the file's messages, or ``ncu_report``.

ncuflow's reader parses a result's rule results with the default schema's short ``RuleResult``
(the identifier and the messages' titles: all ``nvidia_sol`` needs); the rest of each stays in
the message as the bytes it was (the protobuf library keeps the fields a schema does not name).
Where findings are asked for (``ReadOptions.findings``), each is written back to its bytes and
parsed whole (``schema.finding_rule_class``): only then, so the default reading pays nothing.
``ncu_report``'s are read through its ``IRuleResult`` and ``IAction.source_markers()``. Both are
mapped onto the same records the same way: one finding per body item.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ncuflow.read.findings import (
    FILE_MESSAGE_TYPES,
    MARKER_KINDS,
    MESSAGE_TYPES,
    NO_RESULTS,
    SEVERITIES,
    SPEEDUP_TYPES,
    Finding,
    FocusMetric,
    Marker,
    RuleResults,
    named,
)
from ncuflow.read.layout import text_of

_SASS, _SOURCE = 0, 1


# --------------------------------------------------------------------------- ncuflow's reader


def file_rule_results(rules: Iterable[Any]) -> RuleResults:
    """The findings and markers of a result's rule results (the default schema's ``RuleResult`` messages)."""
    from ncuflow.read.schema import finding_rule_class

    whole = finding_rule_class()
    findings: list[Finding] = []
    markers: list[Marker] = []
    for short in rules:
        try:
            rule = whole.FromString(short.SerializeToString())
        except Exception:  # a rule result that does not parse whole (a damaged file): nothing of it
            continue
        identifier, section = text_of(rule.identifier), text_of(rule.section)
        findings.extend(_file_finding(identifier, text_of(rule.display_name), section, item)
                        for item in rule.body.items)
        markers.extend(_file_marker(identifier, section, marker) for marker in rule.markers)
    return RuleResults(tuple(findings), tuple(markers)) if findings or markers else NO_RESULTS


def _file_finding(rule: str, name: str, section: str, item: Any) -> Finding:
    message = item.message
    speedup = item.speedup if item.HasField("speedup") else None
    return Finding(
        rule=rule, rule_name=name, section=section, title=text_of(message.title), message=text_of(message.message),
        type=named(FILE_MESSAGE_TYPES, message.type),
        focus_metrics=tuple(FocusMetric(text_of(m.name), float(m.value), named(SEVERITIES, m.severity),
                                        text_of(m.info)) for m in item.focus_metrics),
        speedup=None if speedup is None else float(speedup.value),
        speedup_type=None if speedup is None else named(SPEEDUP_TYPES, speedup.type),
    )


def _file_marker(rule: str, section: str, marker: Any) -> Marker:
    kind = marker.kind
    return Marker(
        rule=rule, section=section, kind=named(MARKER_KINDS, kind), type=named(MESSAGE_TYPES, marker.type),
        message=text_of(marker.tooltip),
        address=int(marker.address) if kind == _SASS else None,
        file=text_of(marker.file_name) if kind == _SOURCE else None,
        line=int(marker.line) if kind == _SOURCE else None,
    )


# --------------------------------------------------------------------------- ncu_report


def ncu_report_rule_results(action: Any) -> RuleResults:
    """The findings and markers of an ``ncu_report`` ``IAction``."""
    findings = tuple(_reported_finding(result) for result in action.rule_results())
    markers = tuple(_reported_marker(marker) for marker in action.source_markers())
    return RuleResults(findings, markers) if findings or markers else NO_RESULTS


def _reported_finding(result: Any) -> Finding:
    message = result.rule_message() or {}
    speedup = result.speedup_estimation() if result.has_speedup_estimation() else None
    return Finding(
        rule=result.rule_identifier() or "", rule_name=result.name() or "",
        section=result.section_identifier() or "", title=message.get("title") or "",
        message=message.get("message") or "", type=named(MESSAGE_TYPES, int(message.get("type", 0))),
        focus_metrics=tuple(FocusMetric(m["name"] or "", float(m["value"]), named(SEVERITIES, int(m["severity"])),
                                        m["info"] or "") for m in result.focus_metrics()),
        speedup=None if speedup is None else float(speedup["speedup"]),
        speedup_type=None if speedup is None else named(SPEEDUP_TYPES, int(speedup["type"])),
    )


def _reported_marker(marker: dict[str, Any]) -> Marker:
    location = marker.get("source_location") or {}
    address = marker.get("source_address")
    return Marker(
        rule=marker["rule_identifier"] or "", section=marker["section_identifier"] or "",
        kind=named(MARKER_KINDS, int(marker["kind"])), type=named(MESSAGE_TYPES, int(marker["message_type"])),
        message=marker["message"] or "",
        address=None if address is None else int(address),
        file=location.get("file_name") if location else None,
        line=int(location["line"]) if location else None,
    )
