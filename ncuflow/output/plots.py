"""PNG plots for the report (matplotlib, Agg backend: no display needed).

* ``plot_sweep``: for one swept parameter, the duration (median, min–max bars) and
  the work counters relative to the baseline against the parameter value, with each
  value's explain verdict marked.
* ``plot_terms``: the utilization of each model term as grouped bars per cell, with
  the on-wall threshold; a term that could not be computed is marked "n/a".
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ncuflow.analyze.classify import DEFAULT_THRESHOLD, TERM_NAMES
from ncuflow.analyze.explain import GroupExplanation
from ncuflow.analyze.fields import PLOT_WORK_FIELDS
from ncuflow.analyze.point import format_param
from ncuflow.analyze.study import PointSummary
from ncuflow.files import atomic_path

VERDICT_COLORS: dict[str, str] = {
    "baseline": "#444444",
    "no_effect": "#2c7fb8",
    "off_critical_path": "#41ab5d",
    "critical_path": "#d7301f",
    "time_without_work": "#fe9929",
    "ambiguous": "#969696",
}
VERDICT_LABELS: dict[str, str] = {
    "baseline": "baseline",
    "no_effect": "does not reach the kernel",
    "off_critical_path": "work off the critical path",
    "critical_path": "work on the critical path",
    "time_without_work": "time without counted work",
    "ambiguous": "ambiguous",
}
TERM_COLORS: dict[str, str] = {
    "dram": "#08519c",
    "l2": "#3182bd",
    "l1": "#9ecae1",
    "issue": "#e6550d",
    "math": "#fdae6b",
}
WORK_PLOT_FIELDS: tuple[str, ...] = PLOT_WORK_FIELDS  # the field table's choice


def _time_scale(values: Sequence[float]) -> tuple[float, str]:
    top = max(values) if values else 0.0
    if top >= 1e6:
        return 1e6, "ms"
    if top >= 1e3:
        return 1e3, "µs"
    return 1.0, "ns"


def plot_sweep(explained: GroupExplanation, path: Path) -> Path:
    """Duration and work counters against the swept parameter; verdicts as marker colors."""
    group = explained.group
    points = group.points
    x = list(range(len(points)))
    labels = [format_param(p.param(group.param)) for p in points]
    verdict_of = {format_param(r.value): r.verdict for r in explained.rows}
    base_label = format_param(explained.baseline.param(group.param))

    fig, (ax_time, ax_work) = plt.subplots(2, 1, figsize=(max(6.0, 1.1 * len(points) + 3), 7.0), sharex=True)
    durations = [p.values("duration_ns") for p in points]
    scale, unit = _time_scale([v for vs in durations for v in vs])
    medians = [p.stats("duration_ns").median for p in points]
    xs = [xi for xi, m in zip(x, medians, strict=True) if m is not None]
    if xs:
        meds = [m / scale for m in medians if m is not None]
        lows = [(m - min(vs)) / scale for m, vs in zip(medians, durations, strict=True) if m is not None]
        highs = [(max(vs) - m) / scale for m, vs in zip(medians, durations, strict=True) if m is not None]
        ax_time.errorbar(xs, meds, yerr=[lows, highs], color="#444444", capsize=4, linewidth=1.2, zorder=1)
        for xi, med, lab in zip(xs, meds, [labels[i] for i in xs], strict=True):
            code = "baseline" if lab == base_label else verdict_of.get(lab, "ambiguous")
            ax_time.scatter([xi], [med], s=70, color=VERDICT_COLORS[code], zorder=2, edgecolor="black", linewidth=0.5)
        low_all = min(m - lo for m, lo in zip(meds, lows, strict=True))
        high_all = max(m + hi for m, hi in zip(meds, highs, strict=True))
        pad = max((high_all - low_all) * 0.15, high_all * 0.02)
        ax_time.set_ylim(max(0.0, low_all - pad), high_all + pad)
    else:
        ax_time.text(0.5, 0.5, "duration not measured", ha="center", va="center", transform=ax_time.transAxes)
    ax_time.set_ylabel(f"duration ({unit})\nmedian, bars = min–max")
    ax_time.grid(axis="y", alpha=0.3)
    handles = [
        plt.Line2D([], [], marker="o", linestyle="", markersize=8, color=VERDICT_COLORS[c], markeredgecolor="black", label=VERDICT_LABELS[c])
        for c in ["baseline", *dict.fromkeys(verdict_of.values())]
    ]
    ax_time.legend(handles=handles, fontsize=8, loc="best", framealpha=0.8)

    base = explained.baseline
    plotted = 0
    ratios_all: list[float] = []
    missing: list[str] = []
    styles = [("o", 9, "-"), ("s", 7.5, "--"), ("^", 6.5, "-."), ("D", 5, ":"), ("v", 4, "-")]
    for name, (marker, size, line) in zip(WORK_PLOT_FIELDS, styles, strict=True):
        base_median = base.stats(name).median
        if base_median is None or base_median == 0:
            missing.append(name)
            continue
        ys = [(p.stats(name).median or math.nan) / base_median for p in points]
        if all(math.isnan(y) for y in ys):
            missing.append(name)
            continue
        ax_work.plot(x, ys, marker=marker, markersize=size, linestyle=line, label=name, alpha=0.9)
        ratios_all += [y for y in ys if not math.isnan(y)]
        plotted += 1
    ax_work.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
    if plotted:
        if ratios_all and max(ratios_all) / max(min(ratios_all), 1e-12) > 4:
            ax_work.set_yscale("log")
        ax_work.legend(fontsize=8, loc="best", framealpha=0.8)
    else:
        ax_work.text(0.5, 0.5, "no work counter measured", ha="center", va="center", transform=ax_work.transAxes)
    ax_work.set_ylabel(f"work counter / baseline\n(baseline {group.param}={base_label})")
    ax_work.grid(axis="y", alpha=0.3)
    if missing and plotted:
        note = "not plotted (missing, or 0 at the baseline): " + ", ".join(missing)
        ax_work.set_title(textwrap.fill(note, 90), fontsize=7, color="#555555")
    ax_work.set_xticks(x, labels)
    ax_work.set_xlabel(group.param)
    fixed = ", ".join(f"{k}={v}" for k, v in group.fixed)
    kernels = textwrap.shorten(f"kernel {group.kernel}", width=300, placeholder=" …")
    fig.suptitle(
        f"{group.cell}: {group.param} sweep" + (f" ({fixed})" if fixed else "") + "\n" + textwrap.fill(kernels, 110),
        fontsize=9,
    )
    fig.tight_layout()
    return save_figure(fig, Path(path))


def save_figure(fig: Figure, path: Path) -> Path:
    """Save a figure as PNG atomically (never a half-written plot), then close it."""
    try:
        with atomic_path(path) as temporary:
            fig.savefig(temporary, dpi=110, format="png", metadata={"Software": "ncuflow (Matplotlib)"})
    finally:
        plt.close(fig)
    return path


def _short_label(text: str, width: int = 30) -> str:
    """Shorten in the middle, so both a report's repository and its file name stay visible."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def plot_terms(summaries: Sequence[PointSummary], path: Path, threshold: float = DEFAULT_THRESHOLD) -> Path:
    """Grouped bars: u of each term per point, the on-wall threshold as a dashed line."""
    count = len(summaries)
    width = 0.16
    fig, ax = plt.subplots(figsize=(max(7.0, 0.9 * count + 3), 4.8))
    labelled: set[str] = set()
    for index, term in enumerate(TERM_NAMES):
        for position, summary in enumerate(summaries):
            u = summary.model.u(term)
            xpos = position + (index - 2) * width
            if u is None:
                ax.text(xpos, 0.02, "n/a", rotation=90, ha="center", va="bottom", fontsize=6, color="#777777")
                continue
            ax.bar(xpos, u, width=width, color=TERM_COLORS[term], edgecolor="black", linewidth=0.3,
                   label=None if term in labelled else f"u_{term}")
            labelled.add(term)
    ax.axhline(threshold, color="#d7301f", linestyle="--", linewidth=1, label=f"on-wall threshold {threshold:g}")
    labels = [
        f"{_short_label(s.point.spec())}\n{_short_label(s.point.kernel, 24)}\n→ {s.model.bound}" for s in summaries
    ]
    ax.set_xticks(range(count), labels, fontsize=7, rotation=30 if count > 4 else 0, ha="right" if count > 4 else "center")
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("utilization u = T_term / duration")
    ax.set_title("Critical-path terms per cell (median over launches); label → binding term", fontsize=10)
    ax.legend(fontsize=8, ncol=3, loc="upper right", framealpha=0.85)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, Path(path))
