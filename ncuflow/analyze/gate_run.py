"""Gate two sides of measurements: check where each was measured, pair and judge them as compare
does, label each kernel (``ncuflow.analyze.gate``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ncuflow.analyze.baseline import OtherGpu, SideFacts, sides_compatible
from ncuflow.analyze.compare import Judging, compare_measurements
from ncuflow.analyze.gate import DEFAULT_GATE_RULES, GateResult, GateRules, gate
from ncuflow.analyze.measurement import Measurement


def gate_measurements(
    base: Sequence[Measurement],
    new: Sequence[Measurement],
    *,
    labels: tuple[str, str] = ("baseline", "new"),
    judging: Judging | None = None,
    pairs: Sequence[tuple[str, str]] = (),
    rules: GateRules = DEFAULT_GATE_RULES,
    other_gpu: OtherGpu = "refuse",
) -> GateResult:
    """The gate of ``new`` against ``base``: refused (``UsageError``) or downgraded to work counters
    where the GPUs differ, noted where the ncu versions or the collections do."""
    work_only, notes = sides_compatible(SideFacts.of(base), SideFacts.of(new), other_gpu)
    if work_only:
        rules = replace(rules, work_only=True)
    comparison = compare_measurements(base, new, labels=labels, judging=judging, pairs=pairs)
    return gate(comparison, rules, notes)
