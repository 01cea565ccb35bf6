"""The report's pictures read as a user reads them: labels that tell bars apart, titles inside
the figure, each point's binding wall, no offset axis making a 2e-5 wobble look like a drop."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from ncuflow.analyze.study import analyse
from ncuflow.cells.registry import parameter_defaults
from ncuflow.output.plots import (
    LABEL_GAP_INCHES,
    differing_params,
    sweep_figure,
    term_label,
    terms_figure,
)
from ncuflow.read.runs import load_sources, sources

H200 = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "h200"


@pytest.fixture(scope="module")
def analysis():  # type: ignore[no-untyped-def]
    return analyse(load_sources(sources([H200])), paths=[H200], defaults=parameter_defaults())


def _inside(fig, artist) -> bool:  # type: ignore[no-untyped-def]
    fig.canvas.draw()
    box, frame = artist.get_window_extent(), fig.bbox
    return box.x0 >= frame.x0 - 1 and box.x1 <= frame.x1 + 1 and box.y0 >= frame.y0 - 1 and box.y1 <= frame.y1 + 1


def test_terms_labels_name_the_parameter_that_differs(analysis) -> None:  # type: ignore[no-untyped-def]
    """Each flat_decode bar read 'flat_decode:ba…seed=0,splits=8': the spec cut in the middle,
    the same for all twelve. Now each says its kv_len and layout, and no two bars read the same."""
    shown = differing_params(analysis.points)
    assert shown["flat_decode"] == ("kv_len", "layout")
    labels = [term_label(s, shown.get(s.point.cell, ())) for s in analysis.points]
    assert len(set(labels)) == len(labels)
    flat = [label for label in labels if label.startswith("flat_decode\n")]
    assert len(flat) == 12 and all("kv_len=" in x and "layout=" in x and "…" not in x for x in flat)
    fig = terms_figure(analysis.points[:16], every=analysis.points)
    try:
        ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
        assert ticks == labels[:16]
        assert all(_inside(fig, t) for t in fig.axes[0].get_xticklabels())
    finally:
        plt.close(fig)


@pytest.mark.parametrize("chart", [slice(0, 16), slice(16, None)])
def test_terms_labels_do_not_run_into_each_other(analysis, chart: slice) -> None:  # type: ignore[no-untyped-def]
    """At 1.3 inches a bar group, 'paged_decode_split_kernel' below one group all but touched
    'merge_splits_kernel' below the next (0.21 inch apart): each group now has its widest label's
    room and a gap a reader sees."""
    fig = terms_figure(analysis.points[chart], every=analysis.points)
    try:
        fig.canvas.draw()
        boxes = sorted((label.get_window_extent() for label in fig.axes[0].get_xticklabels()), key=lambda b: b.x0)
        assert len(boxes) >= 2
        gaps = [(right.x0 - left.x1) / fig.dpi for left, right in pairwise(boxes)]
        assert min(gaps) >= LABEL_GAP_INCHES * 0.95, gaps
        assert all(_inside(fig, t) for t in fig.axes[0].get_xticklabels())
    finally:
        plt.close(fig)


def test_sweep_titles_fit_and_every_point_names_its_wall(analysis) -> None:  # type: ignore[no-untyped-def]
    for explained in [ge for groups in analysis.sweeps.values() for ge in groups]:
        fig = sweep_figure(explained)
        try:
            title = fig._suptitle  # type: ignore[attr-defined]
            assert _inside(fig, title), title.get_text()
            ax_time, ax_work = fig.axes[:2]
            walls = [a.get_text() for a in ax_time.texts]
            assert len(walls) == len(explained.group.points)
            bounds = {p.model().bound for p in explained.group.points}
            assert {w.split("\n")[0] for w in walls} == bounds
            assert ax_work.yaxis.get_offset_text().get_text() == ""  # no '1e-5+9.999e-1'
        finally:
            plt.close(fig)


def test_a_tiny_wobble_of_the_work_looks_flat(analysis) -> None:  # type: ignore[no-untyped-def]
    """flat_decode's layouts move dram_bytes by 2e-4 of the baseline: the axis drew that over its
    whole height, offset by +1."""
    (explained,) = [ge for ge in analysis.sweeps["layout"] if ge.group.kernel.startswith("flat_decode_split")
                    and dict(ge.group.fixed)["kv_len"] == 2048]
    fig = sweep_figure(explained)
    try:
        low, high = fig.axes[1].get_ylim()
        assert low <= 0.95 and high >= 1.05
        fig.canvas.draw()
        assert all("+" not in t.get_text() and "e" not in t.get_text() for t in fig.axes[1].get_yticklabels())
    finally:
        plt.close(fig)
