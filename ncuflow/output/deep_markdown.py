"""The report's pages after the verdict: the roofline, and why latency-bound kernels wait."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

from ncuflow.analyze.roofline import LEVEL_TITLES, LEVELS, PRECISION_TITLES, Roofline, attainable
from ncuflow.analyze.study import Analysis
from ncuflow.analyze.waiting import why_waiting
from ncuflow.files.safe_text import DISPLAY_CHARS
from ncuflow.output.markdown import markdown_text


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def roofline_markdown(lines: Sequence[Roofline], plots: Sequence[str]) -> list[str]:
    """``## Roofline``: the chart, each GPU's ceilings, a row per point, and what was left out."""
    out = ["", "## Roofline", "",
           "Achieved FLOP/s against arithmetic intensity to DRAM, L2 and L1 (FLOPs over the bytes moved at "
           "each level), under the chip's ceilings from the reports' own peak metrics; colour = the max "
           "model's verdict. A kernel far below every roof is not limited by FLOPs or bytes (see the "
           "latency section)."]
    for plot in plots:  # one picture a page of at most 6 GPUs
        out += ["", f"![hierarchical roofline]({plot})"]
    for line in lines:
        roofs = [f"{LEVEL_TITLES[c.name]} {_si(c.value, 'B/s')}" for c in line.bandwidth]
        roofs += [f"{PRECISION_TITLES[c.name]} {_si(c.value, 'FLOP/s')}" for c in line.compute]
        clock = f" at an SM clock of {line.sm_clock_hz / 1e9:.2f} GHz" if line.sm_clock_hz else ""
        out += ["", f"### {markdown_text(line.device, DISPLAY_CHARS)}", "", f"Ceilings{clock}: {', '.join(roofs) or 'none in the reports'}."]
        if line.points:
            out += ["", "| # | kernel | where | verdict | FLOP/s | " + " | ".join(f"I {LEVEL_TITLES[lv]}" for lv in LEVELS)
                    + " | of its roof |", "|" + "---|" * (6 + len(LEVELS))]
            for number, point in enumerate(line.points, start=1):
                top = attainable(point, line)
                roof = f"{point.flop_rate / top:.0%}" if top else "—"
                intensities = [f"{i:.3g}" if (i := point.intensity(level)) is not None else "—" for level in LEVELS]
                out.append(f"| {number} | {markdown_text(point.label, DISPLAY_CHARS)} | {markdown_text(point.group, DISPLAY_CHARS)} | {point.bound} | "
                           f"{_si(point.flop_rate, 'FLOP/s')} | " + " | ".join(intensities) + f" | {roof} |")
        for why, count in Counter(why for _, why in line.left_out).most_common():
            out += ["", f"Not drawn: {count} kernel{'s' if count != 1 else ''}: {markdown_text(why)}."]
    return out


def waiting_markdown(analysis: Analysis) -> list[str]:
    """``## Why latency-bound kernels wait``: occupancy, its limiter and the top stall reasons per point."""
    out = ["", "## Why latency-bound kernels wait", ""]
    latency = [s for s in analysis.points if s.model.bound == "latency"]
    if not latency:
        return [*out, "No point is latency-bound."]
    out += ["Per latency-bound point, its median-duration launch: occupancy (theoretical, achieved, the "
            "resource that limits it) and the warps' top stall reasons (share of a warp's cycles between two "
            "issued instructions), as far as the reports hold them.", "",
            "| cell | kernel | occupancy | top stall reasons |", "|---|---|---|---|"]
    absent: Counter[str] = Counter()
    for summary in latency:
        launches = [x for x in summary.point.launches if x.value("duration_ns") is not None] or list(summary.point.launches)
        median = statistics.median_low([x.value("duration_ns") or 0.0 for x in launches])
        waiting = why_waiting(next(x for x in launches if (x.value("duration_ns") or 0.0) == median))
        absent.update(waiting.absent)
        occupancy = waiting.occupancy.text() if waiting.occupancy is not None else "—"
        stalls = ", ".join(f"{s.reason} {s.share:.0%}" for s in waiting.stalls[:3]) or "—"
        out.append(f"| {markdown_text(summary.point.spec(), DISPLAY_CHARS)} | {markdown_text(summary.point.kernel, DISPLAY_CHARS)} | {markdown_text(occupancy)} | "
                   f"{markdown_text(stalls)} |")
    for text, count in absent.most_common():
        out += ["", f"Not in the reports of {count} of these point{'s' if count != 1 else ''}: {markdown_text(text)}."]
    return out
