"""The gate's outputs for CI: a Markdown summary, JUnit XML, JSON (``ncuflow.analyze.gate``).

* Markdown fits ``$GITHUB_STEP_SUMMARY``: the outcome in one line, one table (the kernels that
  fail the job first), the notes; every name through ``safe_text`` (``markdown_text``).
* JUnit XML: one ``testsuite`` (``ncuflow gate``), one ``testcase`` per kernel; a kernel that fails
  the job carries a ``failure`` whose message names the fields that moved, an ambiguous or missing
  one under ``--strict`` an ``error``, an ignored kernel a ``skipped``. Written by ``xml.etree``
  (it escapes what XML must); characters XML 1.0 cannot hold are shown escaped (``safe_text``).
* JSON: the labels, the fields that moved, the exit status and the label table.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from ncuflow.analyze.gate import EXIT_CODES, GATE_LABELS, GateResult, KernelGate
from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text
from ncuflow.output.markdown import markdown_text


def outcome(result: GateResult) -> str:
    """One line: pass / regression / undecidable, and how many kernels got each label."""
    meaning = next(e.meaning for e in EXIT_CODES if e.code == result.exit_code).split(":")[0]
    counts = ", ".join(f"{n} {text}" for text, n in result.counts().items()) or "no kernel"
    ignored = f"; {len(result.ignored)} ignored by the rules" if result.ignored else ""
    return f"exit {result.exit_code}, {meaning} ({counts}{ignored})"


def what_moved(gate: KernelGate, detail: bool = False) -> str:
    """The fields that decided the label (with why, ``detail``), then the notes ('' where nothing moved)."""
    parts = [m.detail() if detail else m.text() for m in gate.moved]
    if gate.replicas is not None:
        parts.append(f"about {gate.replicas} launches a side would decide it")
    parts += list(gate.notes)
    return "; ".join(parts)


def gate_markdown(result: GateResult) -> str:
    """The gate as one Markdown document (title, outcome, one table, notes)."""
    lines = [f"# ncuflow gate {markdown_text(result.base)} {markdown_text(result.new)}", "",
             f"**{markdown_text(outcome(result))}**", ""]
    lines += ["| | kernel | label | what moved |", "| --- | --- | --- | --- |"]
    for gate in result.kernels:
        mark = "❌" if result.fails(gate) else "⚠️" if gate.label.fails == "strict" else "✅"
        lines.append(f"| {mark} | {markdown_text(gate.kernel)} | {gate.label.text} | "
                     f"{markdown_text(what_moved(gate)) or '—'} |")
    lines += [""] + [f"- {markdown_text(note)}" for note in result.notes]
    if result.ignored:
        lines.append(f"- ignored by the rules: {markdown_text(', '.join(result.ignored))}")
    return "\n".join(lines).rstrip() + "\n"


def _xml_text(text: str) -> str:
    """Text XML 1.0 can hold: controls and other hidden characters shown escaped."""
    return safe_text(text, limit=SENTENCE_CHARS)


def gate_junit(result: GateResult) -> str:
    """The gate as JUnit XML: one test case per kernel."""
    failing = len(result.failing)
    errors = sum(1 for g in result.kernels if result.rules.strict and g.label.fails == "strict" and not result.fails(g))
    suite = ET.Element("testsuite", name="ncuflow gate", tests=str(len(result.kernels) + len(result.ignored)),
                       failures=str(failing), errors=str(errors), skipped=str(len(result.ignored)))
    for gate in result.kernels:
        case = ET.SubElement(suite, "testcase", classname="ncuflow.gate", name=_xml_text(gate.kernel))
        detail = _xml_text(what_moved(gate, detail=True))
        if result.fails(gate):
            moved = ", ".join(f"{m.field} {m.change}" for m in gate.moved if m.direction == "up") or gate.label.text
            ET.SubElement(case, "failure", message=_xml_text(f"{gate.label.text}: {moved}"), type=gate.label.code).text = detail
        elif result.rules.strict and gate.label.fails == "strict":
            ET.SubElement(case, "error", message=_xml_text(gate.label.text), type=gate.label.code).text = detail
        else:
            ET.SubElement(case, "system-out").text = f"{gate.label.text}" + (f": {detail}" if detail else "")
    for name in result.ignored:
        case = ET.SubElement(suite, "testcase", classname="ncuflow.gate", name=_xml_text(name))
        ET.SubElement(case, "skipped", message="ignored by the rules")
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def _moved(gate: KernelGate) -> list[dict[str, Any]]:
    return [{"field": m.field, "direction": m.direction, "base": m.base, "new": m.new, "change": m.change,
             "reason": m.reason} for m in gate.moved]


def gate_document(result: GateResult) -> dict[str, Any]:
    """The gate as JSON-ready data."""
    return {
        "base": result.base, "new": result.new, "exit_code": result.exit_code, "outcome": outcome(result),
        "kernels": [
            {"kernel": g.kernel, "function": g.function, "label": g.label.code, "label_text": g.label.text,
             "fails": result.fails(g), "moved": _moved(g), "replicas_to_decide": g.replicas, "notes": list(g.notes)}
            for g in result.kernels
        ],
        "ignored": list(result.ignored),
        "notes": list(result.notes),
        "labels": [{"code": label.code, "text": label.text, "fails": label.fails, "meaning": label.meaning}
                   for label in GATE_LABELS],
        "exit_codes": {str(e.code): e.meaning for e in EXIT_CODES},
    }
