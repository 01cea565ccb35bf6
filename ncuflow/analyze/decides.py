"""What decides a group's stability: its time, its work, its verdict and the term that binds.

A user reads "unstable" as "don't trust the verdict". So a group's headline follows what the
verdict rests on: the time (``time`` class), the work counters (``exact`` and ``near_exact``
classes), each launch's verdict under the max model (``ncuflow.analyze.classify``), and the
fields that feed the binding term (a field row's ``terms``). A field outside these that moved
beyond its band (an L2 hit rate on a kernel bound by its L1) is off the critical path: it is
named as moved, "not binding", and the headline stays as the deciding fields make it. The
per-field verdicts themselves are unchanged (``FieldStability.verdict``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ncuflow.analyze.classify import classify
from ncuflow.analyze.fields import spec_of
from ncuflow.read.launch import Launch

DECIDING_CLASSES: tuple[str, ...] = ("time", "exact", "near_exact")  # time and work decide, whatever binds


@dataclass(frozen=True)
class Decision:
    """Each launch's verdict in a group, counted."""

    verdicts: tuple[tuple[str, int], ...]  # (bound, launches), most common first

    @property
    def agrees(self) -> bool:
        """Every launch reached one verdict."""
        return len(self.verdicts) <= 1

    @property
    def bounds(self) -> frozenset[str]:
        return frozenset(bound for bound, _ in self.verdicts)

    def text(self) -> str:
        """e.g. 'verdict l1 in all 4 launches', 'verdict differs: l1 in 3 launches, dram in 1'."""
        if not self.verdicts:
            return "no verdict"
        if self.agrees:
            bound, count = self.verdicts[0]
            return f"verdict {bound} in all {count} launches" if count > 1 else f"verdict {bound}"
        parts = ", ".join(f"{bound} in {count} launch{'' if count == 1 else 'es'}" for bound, count in self.verdicts)
        return f"verdict differs: {parts}"


def decision_of(launches: Sequence[Launch]) -> Decision:
    """Each launch classified (default threshold) and the verdicts counted."""
    counts = Counter(classify(launch).bound for launch in launches)
    return Decision(tuple(counts.most_common()))


def decides(field_name: str, decision: Decision) -> bool:
    """Whether a field is on the critical path: time or work, or a field feeding a binding term."""
    spec = spec_of(field_name)
    return spec.tolerance_class in DECIDING_CLASSES or bool(spec.terms & decision.bounds)
