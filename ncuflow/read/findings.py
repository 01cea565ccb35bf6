"""NVIDIA's rule results of one launch ("findings") and their source markers, as plain records.

ncu's rules (``--apply-rules yes``, the default) run on the sections a collection holds and
write what they found into each result (``ProfileResult`` field 19, ``RuleResult``): per rule
its identifier, name and section, a body of items and the source markers it attached to SASS
addresses or source lines. ``ncu_report`` (2026.3) gives one ``IRuleResult`` per body item:
its message (title, text, type), that item's focus metrics and that item's speedup estimation;
a rule with an empty body gives none, an item without a message gives an empty message. Both
readers build the records below so (``FileAction.rule_results``, ``NcuReportAction.rule_results``);
``analysis/check_against_nvidia.py`` and ``tests/test_findings.py`` check them against
``ncu_report`` on every shared report.

The numbers ncu writes are named here, once, as ``ncu_report`` names them: a message's type
in the file follows the schema's enum (``RuleResultMessageType``: 2 warning, 3 error,
4 optimization) and ``ncu_report`` renumbers it (``MsgType``: 2 optimization, 3 warning, 4
error); a marker's type is written in ``MsgType``'s numbering already and passed through.

Messages carry ncu's link markup (``@section:ID:text@``, ``@url:text:link@``,
``@sass:address:text@``, ``@source:file:line:text@``); ``plain_words`` renders it as its
text, in time linear in the message (no regular expression), and the raw text is kept.
Plain data: no project imports beyond the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# What each number means, as ``ncu_report`` names it.
MESSAGE_TYPES: Mapping[int, str] = {0: "none", 1: "ok", 2: "optimization", 3: "warning", 4: "error"}  # MsgType
FILE_MESSAGE_TYPES: Mapping[int, str] = {0: "none", 1: "ok", 2: "warning", 3: "error", 4: "optimization"}
SPEEDUP_TYPES: Mapping[int, str] = {0: "unknown", 1: "local", 2: "global"}
SEVERITIES: Mapping[int, str] = {0: "default", 1: "low", 2: "high"}
MARKER_KINDS: Mapping[int, str] = {0: "sass", 1: "source", 2: "none"}

# Why a launch has no rule results: what to collect to get them.
NO_RULE_RESULTS = ("no rule results in this report: ncu ran without rules (--apply-rules no) or without the "
                   "sections its rules read (a --metrics or --section-only collection); collect a section set "
                   "(--set detailed or full) to get NVIDIA's findings")


def named(table: Mapping[int, str], number: int) -> str:
    """A number's name in ``table``; one no table holds is kept as its number ("type 7")."""
    return table.get(number, f"type {number}")


@dataclass(frozen=True)
class FocusMetric:
    """A metric a finding rests on: its name, value, severity and ncu's advice about it."""

    name: str
    value: float
    severity: str  # SEVERITIES
    info: str


@dataclass(frozen=True)
class Finding:
    """One message of one rule (one item of its body), as ``ncu_report``'s ``IRuleResult`` gives it."""

    rule: str  # the rule's identifier, e.g. "SharedMemoryConflicts"
    rule_name: str  # its display name, "Shared Memory Conflicts"
    section: str  # the section it belongs to, "MemoryWorkloadAnalysis_Tables"
    title: str  # the message's title ("" where the rule gave none)
    message: str  # the message as ncu wrote it, link markup included
    type: str  # MESSAGE_TYPES
    focus_metrics: tuple[FocusMetric, ...] = ()
    speedup: float | None = None  # estimated speedup, % (None where the rule estimated none)
    speedup_type: str | None = None  # SPEEDUP_TYPES: "local" (of its unit) or "global" (of the kernel)

    @property
    def text(self) -> str:
        """The message with ncu's link markup rendered as plain words."""
        return plain_words(self.message)

    @property
    def heading(self) -> str:
        """Its title, or the rule's name where the message has none."""
        return self.title or self.rule_name or self.rule


@dataclass(frozen=True)
class Marker:
    """A note a rule attached to a SASS instruction (``address``) or a source line (``file``, ``line``)."""

    rule: str
    section: str
    kind: str  # MARKER_KINDS
    type: str  # MESSAGE_TYPES
    message: str
    address: int | None = None  # kind "sass"
    file: str | None = None  # kind "source"
    line: int | None = None

    @property
    def location(self) -> str:
        """'0x7fa0…' for an instruction, 'file:line' for a source line."""
        if self.kind == "sass":
            return "—" if self.address is None else f"{self.address:#x}"
        return f"{self.file or '?'}:{self.line if self.line is not None else '?'}"


@dataclass(frozen=True)
class RuleResults:
    """A launch's findings and markers, in the report's order (both empty: ncu applied no rule)."""

    findings: tuple[Finding, ...] = ()
    markers: tuple[Marker, ...] = ()

    @property
    def held(self) -> bool:
        """Whether the report holds any rule result for the launch."""
        return bool(self.findings or self.markers)


NO_RESULTS = RuleResults()


# --------------------------------------------------------------------------- link markup

_LINK_KINDS = ("section:", "url:", "sass:", "source:")


def _link_text(body: str) -> str | None:
    """The words of one link (what lies between its two '@'), None where it is no link."""
    kind = next((k for k in _LINK_KINDS if body.startswith(k)), None)
    if kind is None:
        return None
    rest = body[len(kind):]
    if kind == "url:":  # @url:<text>:<link>@: the link holds ':' itself
        return rest.partition(":")[0]
    if kind == "source:":  # @source:<file>:<line>:<text>@: the file may hold ':', the line is digits
        parts = rest.split(":")
        line_at = next((i for i in range(1, len(parts) - 1) if parts[i].isdigit()), None)
        return None if line_at is None else ":".join(parts[line_at + 1:])
    text = rest.partition(":")[2]  # @section:<id>:<text>@, @sass:<address>:<text>@
    return text if ":" in rest else None


def plain_words(text: str) -> str:
    """``text`` with each of ncu's links replaced by its words; an '@' that opens no link is kept."""
    parts = text.split("@")
    words = [parts[0]]
    index = 1
    while index < len(parts):
        link = _link_text(parts[index]) if index + 1 < len(parts) else None
        if link is None:
            words.append("@" + parts[index])
            index += 1
        else:
            words.extend((link, parts[index + 1]))
            index += 2
    return "".join(words)
