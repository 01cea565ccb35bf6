"""One row per model term, one theme for every renderer; one row per counter, every tier list derived."""

from __future__ import annotations

import matplotlib.colors
from rich.style import Style

from ncuflow.analyze.classify import BOUNDS, TERM_NAMES, model_terms
from ncuflow.read.metrics import (
    COUNTERS,
    DECISIVE_FIELDS,
    FIELDS_BY_NAME,
    TERM_FIELDS,
    decisive_metric_names,
)
from ncuflow.terms import BOUND_COLORS, BOUND_LABELS, BOUND_STYLES, TERMS, category_of


def test_every_term_and_verdict_has_a_style_a_colour_and_a_label() -> None:
    assert set(BOUND_STYLES) == set(BOUND_COLORS) == set(BOUND_LABELS) == set(BOUNDS)
    for name in BOUNDS:
        Style.parse(BOUND_STYLES[name])  # a rich style the console can print
        assert matplotlib.colors.is_color_like(BOUND_COLORS[name]), name
        assert BOUND_LABELS[name]
    assert len(set(BOUND_COLORS.values())) == len(BOUNDS)  # told apart in every picture
    assert {category_of(t.name) for t in TERMS} == {"memory", "compute"}


def test_every_renderer_takes_the_one_theme() -> None:
    from ncuflow.output import plots, render, roofline_plot, summary_table

    assert plots.TERM_COLORS is BOUND_COLORS and roofline_plot.BOUND_COLORS is BOUND_COLORS
    assert render.BOUND_STYLES is BOUND_STYLES and summary_table.BOUND_STYLES is BOUND_STYLES


def test_every_term_is_fed_by_a_row_and_computed_in_order() -> None:
    assert tuple(t.name for t in TERMS) == TERM_NAMES
    assert all(TERM_FIELDS[name] for name in TERM_NAMES)  # the rows say which fields feed each term
    for row in COUNTERS:
        assert all(term in TERM_NAMES for term in row.terms), row.name


def test_every_decisive_fields_first_choice_is_in_its_tier() -> None:
    tiers = {1: set(decisive_metric_names(1)), 2: set(decisive_metric_names(2))}
    assert DECISIVE_FIELDS
    for row in COUNTERS:
        if row.tier is not None:
            assert set(row.first_choice) <= tiers[row.tier], row.name
    for name in DECISIVE_FIELDS:
        row = FIELDS_BY_NAME[name]
        assert row.tier == 1 or row.tier == 2
    # a total of kinds is decided in tier 1 when each of its hardware kinds is
    total = FIELDS_BY_NAME["global_ld_inst"]
    assert all(set(FIELDS_BY_NAME[p.field].first_choice) <= tiers[1] for p in total.parts)
    # the mission's counters are all tier 1
    for name in ("duration_ns", "dram_bytes_read", "dram_throughput_pct", "l2_hit_rate_pct", "sectors_per_request",
                 "ldg_inst", "ldgsts_inst", "tma_ld_inst", "inst_executed", "inst_issued"):
        assert FIELDS_BY_NAME[name].tier == 1, name


def test_a_launch_with_no_counter_has_every_term_unavailable_and_says_why() -> None:
    from ncuflow.read.launch import DeviceInfo, KernelName, Launch
    from ncuflow.read.metrics import FIELDS

    launch = Launch("r", 0, 0, KernelName("k", "k", "k"), (), DeviceInfo(None, None, None), None,
                    {f.name: None for f in FIELDS}, {}, tuple(f.name for f in FIELDS))
    terms = model_terms(launch)
    assert [t.name for t in terms] == list(TERM_NAMES)
    assert all(t.utilization is None and t.unavailable for t in terms)
    # a unit-read term names the hardware it lacks in a sentence (it read "no the L2 sub-units ... unit")
    l2 = next(t for t in terms if t.name == "l2")
    assert l2.unavailable is not None and l2.unavailable.startswith("the report counts none of the L2 sub-units")
