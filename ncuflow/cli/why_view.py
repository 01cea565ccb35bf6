"""What the why tier will collect, for people: ``profile --why --dry-run`` and ``profile --why``.

Every line is derived from the rows of ``ncuflow.profile.why.WHY`` and the passes Perfworks
predicts for what ncu lists for their sections. Never imports polars (the GPU host has none).
"""

from __future__ import annotations

from ncuflow.profile.precheck import PassCheck
from ncuflow.profile.why import WhyRow


def row_line(row: WhyRow) -> str:
    """``dram: MemoryWorkloadAnalysis, … (rules: MemoryCacheAccessPattern, …)``."""
    metrics = f" + {len(row.metrics)} metrics they read" if row.metrics else ""
    source = "; --import-source yes" if row.source else ""
    return (f"{row.wall}: sections {', '.join(row.sections)}{metrics}{source} "
            f"(rules {', '.join(row.rules)}: {row.reason})")


def passes_line(check: PassCheck) -> str:
    """The predicted passes of a why run, or why they are not predicted."""
    if check.passes is None:
        return check.note or "passes not predicted"
    return (f"{check.passes} passes predicted on {check.chip} ({check.counter_passes} counter + {check.sass_passes} "
            f"SASS-patching; ncu records about {check.recorded_expected} per kernel launch)")


def row_lines(row: WhyRow, check: PassCheck) -> list[str]:
    """A row, its passes and what the prediction leaves out."""
    lines = [row_line(row), f"  {passes_line(check)}"]
    if check.passes is not None and check.note:
        lines.append(f"  {check.note}")
    return lines
