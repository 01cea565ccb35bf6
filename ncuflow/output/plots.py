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
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ncuflow.analyze.classify import DEFAULT_THRESHOLD, TERM_NAMES
from ncuflow.analyze.explain import GroupExplanation
from ncuflow.analyze.fields import PLOT_WORK_FIELDS
from ncuflow.analyze.point import format_param
from ncuflow.analyze.study import PointSummary
from ncuflow.files import atomic_path, plot_metadata
from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text
from ncuflow.terms import BOUND_COLORS

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
TERM_COLORS = BOUND_COLORS  # the one theme (``ncuflow.terms``)
WORK_PLOT_FIELDS: tuple[str, ...] = PLOT_WORK_FIELDS  # the field table's choice


def _time_scale(values: Sequence[float]) -> tuple[float, str]:
    top = max(values) if values else 0.0
    if top >= 1e6:
        return 1e6, "ms"
    if top >= 1e3:
        return 1e3, "µs"
    return 1.0, "ns"


# The work panel shows at least this far either side of the baseline (ratio 1): a counter
# that moves by 2e-5 must look flat, not fill the axis (or need an offset to be read).
MIN_RATIO_SPAN = 0.05


def _title(explained: GroupExplanation, width_inches: float) -> str:
    """The sweep's title, wrapped to the figure's width: cell and parameter, the fixed parameters, the kernel."""
    group = explained.group
    chars = max(40, int(width_inches * 13))
    fixed = ", ".join(f"{k}={format_param(v)}" for k, v in group.fixed)
    lines = [safe_text(f"{group.cell}: {group.param} sweep", "plot")]
    if fixed:
        lines += textwrap.wrap(safe_text(f"at {fixed}", "plot", limit=SENTENCE_CHARS), chars)
    lines += textwrap.wrap(textwrap.shorten(f"kernel {safe_text(group.kernel, 'plot')}", width=3 * chars,
                                            placeholder=" …"), chars)
    return "\n".join(lines)


def _mark_bounds(ax: Any, xs: Sequence[int], meds: Sequence[float], points: Sequence[Any], threshold: float) -> None:
    """Each point's binding wall and its utilization beside its marker (e.g. "dram (max u 0.87)"):
    above it in the lower half of the axis, below it in the upper half (never outside)."""
    low, high = ax.get_ylim()
    for xi, med, point in zip(xs, meds, points, strict=True):
        model = point.model(threshold)
        top = max((u for u in (model.u(t) for t in TERM_NAMES) if u is not None), default=None)
        text = model.bound if top is None else f"{model.bound}\n(max u {top:.2f})"
        above = med < (low + high) / 2
        ax.annotate(text, (xi, med), xytext=(9, 3 if above else -3), textcoords="offset points", ha="left",
                    va="bottom" if above else "top", fontsize=7, color="#333333")


def plot_sweep(explained: GroupExplanation, path: Path, threshold: float = DEFAULT_THRESHOLD,
               kind: str = "sweep") -> Path:
    """Duration and work counters against the swept parameter; verdicts as marker colors, each
    point's binding wall beside it (``sweep_figure``), saved as PNG (``kind`` in its metadata)."""
    return save_figure(sweep_figure(explained, threshold), Path(path), kind)


def sweep_figure(explained: GroupExplanation, threshold: float = DEFAULT_THRESHOLD) -> Figure:
    """The figure of ``plot_sweep``: the duration panel above the work panel."""
    group = explained.group
    labels = [safe_text(format_param(p.param(group.param)), "plot") for p in group.points]
    width_inches = max(8.5, 1.3 * len(group.points) + 4.5)  # the legends stand to the right
    fig, (ax_time, ax_work) = plt.subplots(2, 1, figsize=(width_inches, 7.6), sharex=True, layout="constrained")
    _duration_panel(ax_time, explained, labels, threshold)
    _work_panel(ax_work, explained)
    ax_work.set_xticks(list(range(len(labels))), labels)
    ax_work.set_xlim(-0.5, len(labels) - 0.5)
    ax_work.set_xlabel(safe_text(group.param, "plot"))
    fig.suptitle(_title(explained, width_inches), fontsize=9)
    return fig


def _duration_panel(ax: Any, explained: GroupExplanation, labels: list[str], threshold: float) -> None:
    """Median duration per value with min–max bars, markers colored by verdict, walls beside them."""
    points = explained.group.points
    verdict_of = {format_param(r.value): r.verdict for r in explained.rows}
    base_label = format_param(explained.baseline.param(explained.group.param))
    durations = [p.values("duration_ns") for p in points]
    scale, unit = _time_scale([v for vs in durations for v in vs])
    medians = [p.stats("duration_ns").median for p in points]
    xs = [xi for xi, m in enumerate(medians) if m is not None]
    if xs:
        meds = [m / scale for m in medians if m is not None]
        lows = [(m - min(vs)) / scale for m, vs in zip(medians, durations, strict=True) if m is not None]
        highs = [(max(vs) - m) / scale for m, vs in zip(medians, durations, strict=True) if m is not None]
        ax.errorbar(xs, meds, yerr=[lows, highs], color="#444444", capsize=4, linewidth=1.2, zorder=1)
        for xi, med, lab in zip(xs, meds, [labels[i] for i in xs], strict=True):
            code = "baseline" if lab == base_label else verdict_of.get(lab, "ambiguous")
            ax.scatter([xi], [med], s=70, color=VERDICT_COLORS[code], zorder=2, edgecolor="black", linewidth=0.5)
        low_all = min(m - lo for m, lo in zip(meds, lows, strict=True))
        high_all = max(m + hi for m, hi in zip(meds, highs, strict=True))
        pad = max((high_all - low_all) * 0.15, high_all * 0.02)
        ax.set_ylim(max(0.0, low_all - 2 * pad), high_all + 2 * pad)  # room for the walls beside the markers
        ax.ticklabel_format(axis="y", useOffset=False)
        _mark_bounds(ax, xs, meds, [points[i] for i in xs], threshold)
    else:
        ax.text(0.5, 0.5, "duration not measured", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel(f"duration ({unit})\nmedian, bars = min–max")
    ax.grid(axis="y", alpha=0.3)
    handles = [
        plt.Line2D([], [], marker="o", linestyle="", markersize=8, color=VERDICT_COLORS[c], markeredgecolor="black", label=VERDICT_LABELS[c])
        for c in ["baseline", *dict.fromkeys(verdict_of.values())]
    ]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.8)


_WORK_STYLES = [("o", 9, "-"), ("s", 7.5, "--"), ("^", 6.5, "-."), ("D", 5, ":"), ("v", 4, "-"), ("P", 6, "--"),
                ("X", 5, "-."), ("*", 7, ":")]  # at least one per plotted row of the counter table


def _work_panel(ax: Any, explained: GroupExplanation) -> None:
    """Each work counter's median over its baseline median, per value; what could not be plotted named."""
    points, base = explained.group.points, explained.baseline
    ratios_all: list[float] = []
    missing: list[str] = []
    for name, (marker, size, line) in zip(WORK_PLOT_FIELDS, _WORK_STYLES[:len(WORK_PLOT_FIELDS)], strict=True):
        base_median = base.stats(name).median
        ys = [] if not base_median else [(p.stats(name).median or math.nan) / base_median for p in points]
        if all(math.isnan(y) for y in ys):
            missing.append(name)
            continue
        ax.plot(list(range(len(points))), ys, marker=marker, markersize=size, linestyle=line, label=name, alpha=0.9)
        ratios_all += [y for y in ys if not math.isnan(y)]
    plotted = len(WORK_PLOT_FIELDS) - len(missing)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
    if plotted:
        _scale_ratio_axis(ax, ratios_all)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.8)
    else:
        ax.text(0.5, 0.5, "no work counter measured", ha="center", va="center", transform=ax.transAxes)
    base_label = format_param(base.param(explained.group.param))
    ax.set_ylabel(f"work counter / baseline\n(baseline {explained.group.param}={base_label})")
    ax.grid(axis="y", alpha=0.3)
    if missing and plotted:
        note = "not plotted (missing, or 0 at the baseline): " + ", ".join(missing)
        ax.set_title(textwrap.fill(note, 90), fontsize=7, color="#555555")


def _scale_ratio_axis(ax: Any, ratios: list[float]) -> None:
    """Log scale for ratios over 4x apart; else a plain axis at least ``MIN_RATIO_SPAN`` either side of 1."""
    if ratios and max(ratios) / max(min(ratios), 1e-12) > 4:
        ax.set_yscale("log")
        return
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    low, high = min(ratios, default=1.0), max(ratios, default=1.0)
    margin = (high - low) * 0.1
    ax.set_ylim(min(low - margin, 1 - MIN_RATIO_SPAN), max(high + margin, 1 + MIN_RATIO_SPAN))


def save_figure(fig: Figure, path: Path, kind: str) -> Path:
    """Save a figure as PNG atomically (never a half-written plot), then close it; the PNG names
    ncuflow and what it plots (``files.plot_metadata``: how a later run knows it as its own)."""
    try:
        with atomic_path(path) as temporary:
            fig.savefig(temporary, dpi=110, format="png", metadata=plot_metadata(kind))
    finally:
        plt.close(fig)
    return path


def _short_label(text: str, width: int = 30) -> str:
    """Shorten in the middle, so both a report's repository and its file name stay visible."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def differing_params(summaries: Sequence[PointSummary]) -> dict[str, tuple[str, ...]]:
    """Per cell, the parameters whose value is not the same in every one of its points: what
    tells two bars of one cell apart (the parameters they share say nothing)."""
    values: dict[str, dict[str, set[str]]] = {}
    for summary in summaries:
        point = summary.point
        for name, value in point.params:
            values.setdefault(point.cell, {}).setdefault(name, set()).add(format_param(value))
    return {cell: tuple(name for name, seen in by_name.items() if len(seen) > 1) for cell, by_name in values.items()}


def term_label(summary: PointSummary, shown: Sequence[str]) -> str:
    """A bar group's label: cell, the parameters that differ within the cell, kernel, bound."""
    point = summary.point
    params = [safe_text(f"{name}={format_param(point.param(name))}", "plot") for name in shown]
    return "\n".join([safe_text(point.cell, "plot"), *params, _short_label(safe_text(point.function, "plot"), 26),
                      f"→ {summary.model.bound}"])


def plot_terms(summaries: Sequence[PointSummary], path: Path, threshold: float = DEFAULT_THRESHOLD,
               every: Sequence[PointSummary] = (), kind: str = "terms") -> Path:
    """Grouped bars: u of each term per point, the on-wall threshold as a dashed line. ``every``:
    all the points of the report (a chart may show some), which decide what tells a cell's apart."""
    return save_figure(terms_figure(summaries, threshold, every), Path(path), kind)


def terms_figure(summaries: Sequence[PointSummary], threshold: float = DEFAULT_THRESHOLD,
                 every: Sequence[PointSummary] = ()) -> Figure:
    """The figure of ``plot_terms``."""
    count = len(summaries)
    width = 0.16
    fig, ax = plt.subplots(figsize=(max(7.0, 1.3 * count + 2), 5.6))
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
    shown = differing_params(every or summaries)
    labels = [term_label(s, shown.get(s.point.cell, ())) for s in summaries]
    ax.set_xticks(range(count), labels, fontsize=7)
    ax.set_xlim(-0.6, count - 0.4)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("utilization u = T_term / duration")
    ax.set_title("Critical-path terms per cell (median over launches); label: the parameters that differ "
                 "within the cell, the kernel, → the binding term", fontsize=10)
    ax.legend(fontsize=8, ncol=6, loc="upper left", framealpha=0.85)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    _fit_tick_labels(fig, ax, count)
    return fig


LABEL_GAP_INCHES = 0.3  # the least blank between two neighbouring bar groups' labels (checked by eye)


def _fit_tick_labels(fig: Figure, ax: Any, count: int) -> None:
    """Widen the figure until each bar group has room for its widest x label and a gap: at 1.3 inches
    a group, kernel names (``paged_decode_split_kernel``, up to 26 characters) ran into their
    neighbours' or all but touched them."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    widest = max((label.get_window_extent(renderer).width for label in ax.get_xticklabels()), default=0.0) / fig.dpi
    span = ax.get_position().width * fig.get_figwidth()  # the axes' width in inches
    # the groups lie at 0 .. count-1 inside the limits -0.6 .. count-0.4: one unit per group
    needed = count * (widest + LABEL_GAP_INCHES)
    if span < needed:
        fig.set_figwidth(fig.get_figwidth() + needed - span)
        fig.tight_layout()
