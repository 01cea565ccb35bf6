"""What moved beyond the work fields between two measurements of a kernel, side by side.

Compare judges the work and time fields against their noise; beside them it shows what
explains a changed time without being work (``ncuflow.analyze.waiting``):

* the **u-terms** of the max model (median per term, and the binding wall), each side;
* the **top warp-stall shares** (each reason's median share of the warps' cycles between issues;
  the reasons that lead either side, up to ``TOP_STALLS``);
* **occupancy**: achieved and theoretical, % of the SM's warps (medians), and the limiter;
* **NVIDIA's findings that appeared or vanished** (by rule and heading, over the kernel's launches),
  where both sides were read for findings and hold rule results (``FindingsMoved``).

Shown, never judged: these are rates whose noise the field table does not class. Where a side
lacks them (a report without the stall or occupancy collection) they read ``—``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ncuflow.analyze.classify import DEFAULT_THRESHOLD, TERM_NAMES
from ncuflow.analyze.findings import held, says_something
from ncuflow.analyze.measurement import Measurement
from ncuflow.analyze.waiting import occupancy_of, stall_shares

TOP_STALLS = 3
Kind = Literal["u", "stall", "occupancy"]


@dataclass(frozen=True)
class SideBySide:
    """One quantity on each side: a u-term (0–1), a stall share (0–1) or an occupancy (%)."""

    kind: Kind
    name: str
    base: float | None
    new: float | None

    def text(self) -> str:
        """``dram 0.12 → 0.81``, ``long_scoreboard 45 % → 30 %``, ``achieved 41.2 % → 80.3 %``."""
        if self.kind == "u":
            shown = [("—" if v is None else f"{v:.2f}") for v in (self.base, self.new)]
        elif self.kind == "stall":
            shown = [("—" if v is None else f"{v:.0%}") for v in (self.base, self.new)]
        else:
            shown = [("—" if v is None else f"{v:.1f} %") for v in (self.base, self.new)]
        return f"{self.name} {shown[0]} → {shown[1]}"


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _stall_medians(m: Measurement) -> dict[str, float]:
    per_reason: dict[str, list[float]] = {}
    for launch in m.launches:
        for share in stall_shares(launch):
            per_reason.setdefault(share.reason, []).append(share.share)
    # a reason a launch lacks counts 0 there (the shares of a launch sum to 1)
    return {r: statistics.median(v + [0.0] * (len(m.launches) - len(v))) for r, v in per_reason.items()}


def stall_rows(base: Measurement, new: Measurement, top: int = TOP_STALLS) -> tuple[SideBySide, ...]:
    """The reasons that lead either side (its ``top`` largest median shares), largest on the base first."""
    b, n = _stall_medians(base), _stall_medians(new)
    leading = [r for side in (b, n) for r in sorted(side, key=lambda r: -side[r])[:top]]
    chosen = sorted(dict.fromkeys(leading), key=lambda r: (-b.get(r, 0.0), -n.get(r, 0.0)))
    return tuple(SideBySide("stall", r, b.get(r), n.get(r)) for r in chosen)


def occupancy_rows(base: Measurement, new: Measurement) -> tuple[SideBySide, ...]:
    rows = []
    for name, field_name in (("achieved", "occupancy_achieved_pct"), ("theoretical", "occupancy_theoretical_pct")):
        pair = (_median(base.values(field_name)), _median(new.values(field_name)))
        if pair != (None, None):
            rows.append(SideBySide("occupancy", name, *pair))
    return tuple(rows)


def limiter_text(m: Measurement) -> str | None:
    """The occupancy limiter of the measurement's first launch (the same for every launch of one configuration)."""
    occupancy = occupancy_of(m.launches[0]) if m.launches else None
    return " and ".join(occupancy.limiters) if occupancy is not None and occupancy.limiters else None


def u_rows(base: Measurement, new: Measurement, threshold: float = DEFAULT_THRESHOLD) -> tuple[SideBySide, ...]:
    mb, mn = base.model(threshold), new.model(threshold)
    return tuple(SideBySide("u", t, mb.u(t), mn.u(t)) for t in TERM_NAMES if (mb.u(t), mn.u(t)) != (None, None))


@dataclass(frozen=True)
class FindingsMoved:
    """NVIDIA's findings one side of a pair gives and the other does not, by rule and heading
    (each with its largest estimated speedup over the side's launches, None where none is estimated)."""

    appeared: tuple[tuple[str, float | None], ...]
    vanished: tuple[tuple[str, float | None], ...]

    def text(self) -> str:
        """``appeared: Rule: Title (est. 38.0 %); vanished: …``, or that both sides give the same."""
        parts = []
        for word, found in (("appeared", self.appeared), ("vanished", self.vanished)):
            if found:
                parts.append(f"{word}: " + ", ".join(_finding_text(heading, speedup) for heading, speedup in found))
        return "; ".join(parts) if parts else "the same on both sides"


def _finding_text(heading: str, speedup: float | None) -> str:
    return heading if speedup is None else f"{heading} (est. {speedup:.1f} %)"


def _headings(m: Measurement) -> dict[str, float | None]:
    """Each finding that says something, by 'rule: heading', with its largest estimate over the launches."""
    found: dict[str, float | None] = {}
    for launch in m.launches:
        for finding in launch.rule_results.findings if launch.rule_results is not None else ():
            if says_something(finding):
                key = f"{finding.rule}: {finding.heading}"
                estimates = [v for v in (found.get(key), finding.speedup) if v is not None]
                found[key] = max(estimates) if estimates else None
    return found


def findings_moved(base: Measurement, new: Measurement) -> FindingsMoved | None:
    """The findings that appeared or vanished; None where either side was not read for findings or
    holds no rule result (a decisive collection applies no rule: nothing can be said)."""
    if not (held([x.rule_results for x in base.launches]) and held([x.rule_results for x in new.launches])):
        return None
    b, n = _headings(base), _headings(new)
    return FindingsMoved(tuple((h, n[h]) for h in n if h not in b), tuple((h, b[h]) for h in b if h not in n))


@dataclass(frozen=True)
class BeyondWork:
    """The u-terms, top stall shares and occupancy of a pair of measurements, side by side."""

    u: tuple[SideBySide, ...]
    stalls: tuple[SideBySide, ...]
    occupancy: tuple[SideBySide, ...]
    limiters: tuple[str | None, str | None]
    findings: FindingsMoved | None = None

    def lines(self) -> list[str]:
        """One line per group that either side holds."""
        found = []
        if self.u:
            found.append("u: " + ", ".join(row.text() for row in self.u))
        if self.stalls:
            found.append("warp stalls: " + ", ".join(row.text() for row in self.stalls))
        if self.occupancy:
            limit = (f" (limited by {self.limiters[0] or '—'} → {self.limiters[1] or '—'})"
                     if any(self.limiters) else "")
            found.append("occupancy: " + ", ".join(row.text() for row in self.occupancy) + limit)
        if self.findings is not None:
            found.append("NVIDIA's findings: " + self.findings.text())
        return found

    def document(self) -> dict[str, object]:
        return {
            "u": {row.name: {"base": row.base, "new": row.new} for row in self.u},
            "stall_shares": {row.name: {"base": row.base, "new": row.new} for row in self.stalls},
            "occupancy_pct": {row.name: {"base": row.base, "new": row.new} for row in self.occupancy},
            "occupancy_limiter": {"base": self.limiters[0], "new": self.limiters[1]},
            "findings": None if self.findings is None else {
                "appeared": [{"finding": h, "speedup": s} for h, s in self.findings.appeared],
                "vanished": [{"finding": h, "speedup": s} for h, s in self.findings.vanished]},
        }


def beyond_work(base: Measurement, new: Measurement, threshold: float = DEFAULT_THRESHOLD) -> BeyondWork:
    return BeyondWork(u_rows(base, new, threshold), stall_rows(base, new), occupancy_rows(base, new),
                      (limiter_text(base), limiter_text(new)), findings_moved(base, new))
