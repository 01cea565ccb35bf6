"""The hierarchical roofline as a PNG: one panel per GPU, its own ceilings, points coloured by verdict.

Each point (a kernel, or a launch) is drawn three times at its achieved FLOP/s, once per
memory level at its arithmetic intensity to that level (DRAM ○, L2 □, L1 △), the three
joined by a line; the colour is the max model's verdict, the marker area its share of
the GPU time drawn. The ceilings come from the reports' own peak metrics. A table under
the chart names every numbered point, and a footer every kernel left out and why.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from ncuflow.analyze.names import shorten_middle
from ncuflow.analyze.roofline import (
    LEVEL_TITLES,
    LEVELS,
    NO_FLOPS,
    PRECISION_TITLES,
    Ceiling,
    Roofline,
    describe_point,
    panels,
)
from ncuflow.files.safe_text import safe_text
from ncuflow.output.plots import save_figure
from ncuflow.terms import BOUND_COLORS, BOUND_LABELS

LEVEL_MARKERS: dict[str, str] = {"dram": "o", "l2": "s", "l1": "^"}
LineStyle = Literal["-", "--", ":"]
LEVEL_STYLES: dict[str, LineStyle] = {"dram": "-", "l2": "--", "l1": ":"}
POINTS_LISTED = 12


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _roofs(line: Roofline) -> list[Ceiling]:
    """The compute roofs to draw: the precisions the points executed (those counted where none
    executed any, all the reports hold where none counted any)."""
    wanted = line.executed or line.counted
    return [c for c in line.compute if c.name in wanted] if wanted else list(line.compute)


def _limits(line: Roofline) -> tuple[float, float, float, float]:
    xs = [i for p in line.points for i in (p.intensity(level) for level in LEVELS) if i]
    ys = [p.flop_rate for p in line.points]
    roofs = [c.value for c in _roofs(line)]
    ridges = [c.value / b.value for c in _roofs(line) for b in line.bandwidth]
    x_low = min([*xs, *ridges, 1.0]) / 8 if xs or ridges else 1e-2
    x_high = max([*xs, *ridges, 10.0]) * 8
    top = max([*roofs, *ys, 1.0])
    low_candidates = [*ys, *(b.value * x_low for b in line.bandwidth)]
    y_low = min(low_candidates) / 4 if low_candidates else top / 1e4
    return x_low, x_high, max(y_low, top / 1e7), top * 3


def _slope_degrees(ax: Axes) -> float:
    """The on-screen angle of a line of slope 1 in log-log axes (for labels along the memory roofs)."""
    x0, x1 = ax.get_xlim()
    y0, y1 = ax.get_ylim()
    box = ax.get_window_extent()
    decades_x = math.log10(x1 / x0)
    decades_y = math.log10(y1 / y0)
    return math.degrees(math.atan2(box.height / decades_y, box.width / decades_x))


def _draw_ceilings(ax: Axes, line: Roofline, x_low: float, x_high: float) -> None:
    roofs = _roofs(line)
    roof = max((c.value for c in roofs), default=None)
    angle = _slope_degrees(ax)
    span = math.log10(x_high / x_low)
    for index, bandwidth in enumerate(line.bandwidth):
        x_end = roof / bandwidth.value if roof else x_high
        xs = [x_low, min(x_end, x_high)]
        ax.plot(xs, [bandwidth.value * x for x in xs], color="#333333", linestyle=LEVEL_STYLES[bandwidth.name],
                linewidth=1.4, zorder=2)
        x_text = x_low * 10 ** (0.03 * span + 0.12 * span * index)  # staggered: close roofs' labels apart
        ax.annotate(f"{LEVEL_TITLES[bandwidth.name]} {_si(bandwidth.value, 'B/s')}", (x_text, bandwidth.value * x_text),
                    textcoords="offset points", xytext=(0, 4), rotation=angle, rotation_mode="anchor",
                    fontsize=8, color="#333333")
    strongest = max((b.value for b in line.bandwidth), default=None)
    for index, compute in enumerate(sorted(roofs, key=lambda c: -c.value)):
        x_start = compute.value / strongest if strongest else x_low
        ax.plot([max(x_start, x_low), x_high], [compute.value] * 2, color="#333333",
                linestyle="-" if index == 0 else "-.", linewidth=1.4 if index == 0 else 1.0, zorder=2)
        ax.annotate(f"{PRECISION_TITLES[compute.name]} peak {_si(compute.value, 'FLOP/s')}", (x_high, compute.value),
                    textcoords="offset points", xytext=(-4, 4), ha="right", fontsize=8, color="#333333")


def _draw_points(ax: Axes, line: Roofline) -> None:
    for number, point in enumerate(line.points, start=1):
        color = BOUND_COLORS.get(point.bound, "#7f7f7f")
        size = 36 + 300 * math.sqrt(point.share)
        placed = [(level, i) for level in LEVELS if (i := point.intensity(level))]
        if len(placed) > 1:
            ax.plot([i for _, i in placed], [point.flop_rate] * len(placed), color=color, linewidth=1.0,
                    alpha=0.7, zorder=3)
        for level, intensity in placed:
            hollow = point.tensor_uncounted
            ax.scatter([intensity], [point.flop_rate], s=size, marker=LEVEL_MARKERS[level],
                       edgecolor=color if hollow else "black", linewidth=1.6 if hollow else 0.6, zorder=4,
                       facecolor="white" if hollow else color)
        if placed and number <= POINTS_LISTED:
            ax.annotate(str(number), (placed[0][1], point.flop_rate), textcoords="offset points", xytext=(6, 6),
                        fontsize=9, fontweight="bold", color="black", zorder=5)


def _legend(ax: Axes, line: Roofline) -> None:
    handles: list[Line2D] = [
        Line2D([], [], marker=LEVEL_MARKERS[level], linestyle=LEVEL_STYLES[level], color="#333333",
               markerfacecolor="white", markeredgecolor="black", markersize=8,
               label=f"{LEVEL_TITLES[level]}: intensity (marker) and its roof (line)") for level in LEVELS
    ]
    for bound in dict.fromkeys(p.bound for p in line.points):
        handles.append(Line2D([], [], marker="o", linestyle="", color=BOUND_COLORS.get(bound, "#7f7f7f"),
                              markeredgecolor="black", markersize=8, label=f"ncuflow: {BOUND_LABELS.get(bound, bound)}"))
    ax.legend(handles=handles, fontsize=8, loc="lower right", framealpha=0.9)


def _table_lines(line: Roofline, width: int = 165) -> list[str]:
    lines = []
    for number, point in enumerate(line.points[:POINTS_LISTED], start=1):
        group = shorten_middle(safe_text(point.group, "plot"), 46)
        note = "; tensor work not counted (hollow)" if point.tensor_uncounted else ""
        text = (f"{number:>2}. {textwrap.shorten(safe_text(point.label, 'plot'), 58, placeholder='…')}  [{group}]  "
                f"{point.share:.0%} of the time drawn, {BOUND_LABELS.get(point.bound, point.bound)}: "
                f"{describe_point(point, line)}{note}")
        lines += textwrap.wrap(text, width, subsequent_indent="      ")
    if len(line.points) > POINTS_LISTED:
        lines.append(f"    … and {len(line.points) - POINTS_LISTED} more points, unnumbered")
    reasons = Counter(why for _, why in line.left_out)
    for why, count in reasons.most_common():
        lines += textwrap.wrap(f"not drawn: {count} {'kernel' if count == 1 else 'kernels'} — {why}", width,
                               subsequent_indent="      ")
        if why == NO_FLOPS:  # the way to collect them, under the reason it answers
            lines += textwrap.wrap("to collect them: ncu --section SpeedOfLight_RooflineChart (in --set full), or "
                                   "`ncuflow passes --collection roofline --chip CHIP` for the cost of the counters "
                                   "alone", width, initial_indent="      ", subsequent_indent="      ")
    return lines


def _panel(ax: Axes, line: Roofline) -> None:
    if not line.points and line.without_flops:
        _bandwidth_panel(ax, line)
        return
    x_low, x_high, y_low, y_high = _limits(line)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_low, x_high)
    ax.set_ylim(y_low, y_high)
    _draw_ceilings(ax, line, x_low, x_high)
    _draw_points(ax, line)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved at that level)")
    ax.set_ylabel("achieved performance (FLOP/s)")
    ax.grid(which="major", alpha=0.3)
    clock = f", SM clock {line.sm_clock_hz / 1e9:.2f} GHz" if line.sm_clock_hz else ""
    counted = "+".join(PRECISION_TITLES[p] for p in line.counted) or "none"
    ax.set_title(f"{safe_text(line.device, 'plot')}: hierarchical roofline, {len(line.points)} point"
                 f"{'s' if len(line.points) != 1 else ''} (FLOPs counted: {counted}{clock})", fontsize=10)
    if line.points:
        _legend(ax, line)
    else:
        reasons = Counter(why for _, why in line.left_out)
        text = "; ".join(f"{count} × {why}" for why, count in reasons.most_common(2)) or "no launch"
        ax.text(0.5, 0.5, "No point can be drawn:\n" + "\n".join(textwrap.wrap(text, 80)),
                transform=ax.transAxes, ha="center", va="center", fontsize=10,
                bbox={"boxstyle": "round", "facecolor": "#fff3cd", "edgecolor": "#b8860b"})


BANDWIDTH_BARS = 40


def _bandwidth_panel(ax: Axes, line: Roofline) -> None:
    """No FLOP counts: each kernel's achieved bandwidth per level against the levels' ceilings."""
    shown = sorted(line.without_flops, key=lambda b: -b.seconds)[:BANDWIDTH_BARS]
    rows = list(range(len(shown)))[::-1]
    for row, item in zip(rows, shown, strict=True):
        color = BOUND_COLORS.get(item.bound, "#7f7f7f")
        dram = item.rates.get("dram")
        if dram is not None:
            ax.barh(row, dram / 1e12, color=color, edgecolor="black", linewidth=0.4, height=0.7)
            ceiling = line.ceiling("dram")
            if ceiling is not None:
                ax.text(dram / 1e12, row, f" {dram / ceiling.value:.0%}", va="center", fontsize=7)
        for level in ("l2", "l1"):
            rate = item.rates.get(level)
            if rate is not None:
                ax.scatter([rate / 1e12], [row], marker=LEVEL_MARKERS[level], color=color, edgecolor="black", zorder=3)
    for ceiling in line.bandwidth:
        ax.axvline(ceiling.value / 1e12, color="#333333", linestyle=LEVEL_STYLES[ceiling.name], linewidth=1.2)
        ax.annotate(f"{LEVEL_TITLES[ceiling.name]} peak {_si(ceiling.value, 'B/s')}", (ceiling.value / 1e12, 1.0),
                    xycoords=("data", "axes fraction"), textcoords="offset points", xytext=(0, 3), ha="center",
                    va="bottom", fontsize=8)
    ax.set_yticks(rows, [_bar_tick(b.label, b.group) for b in shown], fontsize=7)
    if not any(rate is not None for item in shown for rate in item.rates.values()):
        ax.text(0.5, 0.5, "No bandwidth to draw either: these kernels have no bytes counted\n"
                "(or no duration) at DRAM, L2 or L1", transform=ax.transAxes, ha="center", va="center",
                fontsize=10, bbox={"boxstyle": "round", "facecolor": "#fff3cd", "edgecolor": "#b8860b"})
    ax.set_xlabel("achieved bandwidth over the kernel's duration (TB/s); bar = DRAM, % = of the DRAM peak")
    ax.set_ylim(-0.8, len(shown) - 0.2)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title("\n".join(textwrap.wrap(
        f"{safe_text(line.device, 'plot')}: no FLOP counts, so no roofline point; achieved bandwidth per kernel instead "
        f"({len(line.without_flops)} kernels, by GPU time)", 90)), fontsize=10, pad=16)
    handles = [Line2D([], [], marker="s", linestyle="", color=BOUND_COLORS.get(bound, "#7f7f7f"),
                      markeredgecolor="black", markersize=8, label=f"ncuflow: {BOUND_LABELS.get(bound, bound)}")
               for bound in dict.fromkeys(b.bound for b in shown)]
    ax.legend(handles=handles, fontsize=8, loc="lower right", framealpha=0.9)


# A bar's tick: the kernel (at most 34 characters) and its cell and parameters in what the left
# margin holds besides (the parameter that tells two bars apart is often the first one).
BAR_TICK_CHARACTERS = 70


def _bar_tick(label: str, group: str) -> str:
    kernel = shorten_middle(safe_text(label, "plot"), 34)
    return f"{kernel}  [{shorten_middle(safe_text(group, 'plot'), max(30, BAR_TICK_CHARACTERS - 4 - len(kernel)))}]"


def _chart_height(line: Roofline) -> float:
    if not line.points and line.without_flops:
        return max(3.5, 0.24 * min(len(line.without_flops), BANDWIDTH_BARS) + 1.6)
    return 6.0


# Vertical room, in inches: under a chart for its tick labels and axis label, a line of the
# 7.5 pt notes under it, and between two panels for the next one's title.
GAP_UNDER_CHART = 0.75
NOTE_LINE = 0.135
GAP_BETWEEN_PANELS = 0.9


def plot_rooflines(lines: Sequence[Roofline], path: Path, *, title: str | None = None,
                   kind: str = "roofline") -> Path:
    """One panel per GPU (at most 6, chosen by what they hold: ``panels``; the caller names the
    rest) with its table of points."""
    shown = list(panels(lines)[0])
    bars = any(not line.points and line.without_flops for line in shown)
    width = 120 if bars else 165
    tables = [_table_lines(line, width) for line in shown]
    notes = [NOTE_LINE * max(2, len(table)) + 0.1 for table in tables]
    charts = [_chart_height(line) for line in shown]
    heights = [chart + GAP_UNDER_CHART + note for chart, note in zip(charts, notes, strict=True)]
    top_inches = 0.55 + (0.4 if title else 0.0)
    between = GAP_BETWEEN_PANELS * (len(shown) - 1)
    fig = plt.figure(figsize=(12.5, sum(heights) + between + top_inches + 0.2))
    fig.subplots_adjust(left=0.33 if bars else 0.07, right=0.98, top=1 - top_inches / fig.get_figheight(),
                        bottom=0.2 / fig.get_figheight())
    grid = fig.add_gridspec(len(shown), 1, height_ratios=heights,
                            hspace=GAP_BETWEEN_PANELS / (sum(heights) / len(shown)))
    for index, line in enumerate(shown):
        sub = grid[index].subgridspec(2, 1, height_ratios=[charts[index], notes[index]],
                                      hspace=GAP_UNDER_CHART / ((charts[index] + notes[index]) / 2))
        ax = fig.add_subplot(sub[0])
        _panel(ax, line)
        text_ax = fig.add_subplot(sub[1])
        text_ax.axis("off")
        text_ax.text(0.0, 1.0, "\n".join(tables[index]), va="top", ha="left", fontsize=7.5, family="monospace",
                     transform=text_ax.transAxes)
    if title:
        fig.suptitle(title, fontsize=11)
    return save_figure(fig, Path(path), kind)
