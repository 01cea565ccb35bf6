"""NVIDIA's findings and source markers as ncuflow reads them, against ``ncu_report``'s own dicts.

    python analysis/check_findings.py [REPORT_OR_DIR ...]   # default: the shared corpus

For every launch of every report, ncuflow's own reader (``ReadOptions(findings=True)``) is
compared with what NVIDIA's ``ncu_report`` module returns for the same action, read straight
from its ``IAction.rule_results_as_dicts()`` and ``IAction.source_markers()`` (not through
ncuflow's mapping of them): the same findings in the same order, each with the same rule
identifier, name, section, title, message, type, focus metrics and speedup (values to 1e-9
relative), and the same markers with the same locations (SASS address, or file and line).
Prints one line per launch that differs and a summary line; exits 1 where any differs.
``analysis/check_against_nvidia.py`` runs it over the same reports.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from analysis.nvidia_actions import nvidia_actions  # noqa: E402
from ncuflow.read.extract import iter_launches  # noqa: E402
from ncuflow.read.findings import (  # noqa: E402
    MARKER_KINDS,
    MESSAGE_TYPES,
    SEVERITIES,
    SPEEDUP_TYPES,
    Finding,
    Marker,
    RuleResults,
)
from ncuflow.read.options import WITH_FINDINGS  # noqa: E402
from ncuflow.read.readers import reading_with  # noqa: E402
from ncuflow.read.reportfile import find_reports  # noqa: E402

RELATIVE = 1e-9


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return a == b or math.isclose(a, b, rel_tol=RELATIVE) or (math.isnan(a) and math.isnan(b))


def finding_gaps(mine: Finding, theirs: dict[str, Any]) -> list[str]:
    """What differs between one finding and NVIDIA's dict of it (empty: the same)."""
    message = theirs.get("rule_message") or {}
    speedup = theirs.get("speedup_estimation")
    focus = theirs.get("focus_metrics") or []
    gaps = [f"{name} {ours!r} != {nvidia!r}" for name, ours, nvidia in (
        ("rule", mine.rule, theirs["rule_identifier"]), ("name", mine.rule_name, theirs["name"]),
        ("section", mine.section, theirs["section_identifier"]), ("title", mine.title, message.get("title")),
        ("message", mine.message, message.get("message")),
        ("type", mine.type, MESSAGE_TYPES.get(message.get("type", -1))),
        ("speedup type", mine.speedup_type, None if speedup is None else SPEEDUP_TYPES.get(speedup["type"])),
    ) if ours != nvidia]
    if not _close(mine.speedup, None if speedup is None else float(speedup["speedup"])):
        gaps.append(f"speedup {mine.speedup} != {speedup}")
    if len(mine.focus_metrics) != len(focus):
        gaps.append(f"{len(mine.focus_metrics)} focus metrics != {len(focus)}")
    for ours, nvidia in zip(mine.focus_metrics, focus, strict=False):
        if (ours.name, ours.severity, ours.info) != (nvidia["name"], SEVERITIES.get(nvidia["severity"]),
                                                    nvidia["info"]) or not _close(ours.value, nvidia["value"]):
            gaps.append(f"focus metric {ours} != {nvidia}")
    return gaps


def marker_gaps(mine: Marker, theirs: dict[str, Any]) -> list[str]:
    """What differs between one marker and NVIDIA's dict of it (empty: the same)."""
    location = theirs.get("source_location") or {}
    expected = (theirs["rule_identifier"], theirs["section_identifier"], MARKER_KINDS.get(theirs["kind"]),
                MESSAGE_TYPES.get(theirs["message_type"]), theirs["message"], theirs.get("source_address"),
                location.get("file_name"), location.get("line"))
    ours = (mine.rule, mine.section, mine.kind, mine.type, mine.message, mine.address, mine.file, mine.line)
    return [] if ours == expected else [f"marker {ours} != {expected}"]


def launch_gaps(mine: RuleResults, action: Any) -> list[str]:
    """What differs between a launch's findings and markers and ``ncu_report``'s for its action."""
    findings, markers = action.rule_results_as_dicts(), action.source_markers()
    gaps = [f"{len(mine.findings)} findings != {len(findings)}"] if len(mine.findings) != len(findings) else []
    if len(mine.markers) != len(markers):
        gaps.append(f"{len(mine.markers)} markers != {len(markers)}")
    for ours, nvidia in zip(mine.findings, findings, strict=False):
        gaps += finding_gaps(ours, nvidia)
    for marker, expected in zip(mine.markers, markers, strict=False):
        gaps += marker_gaps(marker, expected)
    return gaps


@dataclass
class Tally:
    """What the check saw: reports, launches, findings with a speedup, markers, launches that differ."""

    reports: int = 0
    launches: int = 0
    with_results: int = 0
    findings: int = 0
    speedups: int = 0
    markers: int = 0
    rules: set[str] = field(default_factory=set)
    differing: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"findings against ncu_report: {self.reports} reports, {self.launches} launches "
                f"({self.with_results} with rule results), {self.findings} findings of {len(self.rules)} rules "
                f"({self.speedups} with an estimated speedup), {self.markers} markers: "
                + ("identical on every launch" if not self.differing
                   else f"{len(self.differing)} launches differ"))


def check_report(report: Path, tally: Tally) -> None:
    """Compare one report's launches, read by ncuflow's own reader, with ``ncu_report``'s actions."""
    with reading_with("ncuflow"):
        launches = {launch.key[1:]: launch for launch in iter_launches(report, options=WITH_FINDINGS)}
    tally.reports += 1
    for key, action in nvidia_actions(report):
        launch = launches.get(key)
        if launch is None or launch.rule_results is None:
            tally.differing.append(f"{report.name} {key}: not read by ncuflow")
            continue
        mine = launch.rule_results
        tally.launches += 1
        tally.with_results += mine.held
        tally.findings += len(mine.findings)
        tally.speedups += sum(f.speedup is not None for f in mine.findings)
        tally.markers += len(mine.markers)
        tally.rules.update(f.rule for f in mine.findings)
        gaps = launch_gaps(mine, action)
        if gaps:
            tally.differing.append(f"{report.name} {key}: " + "; ".join(gaps[:3]))


def main(roots: list[Path]) -> int:
    tally = Tally()
    for report in find_reports(roots):
        check_report(report, tally)
    for line in tally.differing:
        print(line)
    print(tally.line())
    return 1 if tally.differing else 0


if __name__ == "__main__":
    arguments = [Path(a) for a in sys.argv[1:]]
    sys.exit(main(arguments or [REPO.parent / "shared" / "ncu-reports"]))
