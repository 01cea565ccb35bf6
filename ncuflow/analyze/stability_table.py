"""Stability as tables: one plain row per (group, field), and the polars frame the parquet and the
Markdown report hold (``ncuflow stability --parquet``, ``ncuflow report``). polars is imported only by
``stability_frame``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ncuflow.analyze.stability import GroupStability, flat

if TYPE_CHECKING:  # pragma: no cover
    import polars as pl


STABILITY_COLUMNS: tuple[str, ...] = (
    "group", "kernel", "source", "device", "launches", "runs", "field", "tolerance_class",
    "tolerance", "n", "median", "min", "max", "spread", "field_verdict", "verdict",
    "noise_band", "noise_reference", "part_of", "decides",
)


def stability_rows(groups: Iterable[GroupStability]) -> list[dict[str, object]]:
    """One plain row per (group, field), a different-work group's parts after it (``part_of``
    names their group): what the parquet and the Markdown report hold."""
    rows: list[dict[str, object]] = []
    parent = {id(part): group.label for group in groups for part in group.parts}
    for group in flat(groups):
        for item in group.fields:
            rows.append(
                {
                    "group": group.label,
                    "kernel": group.kernel,
                    "source": group.source,
                    "device": group.device,
                    "launches": group.launches,
                    "runs": group.runs,
                    "field": item.field,
                    "tolerance_class": item.tolerance_class,
                    "tolerance": item.tolerance,
                    "n": item.n,
                    "median": item.median,
                    "min": item.minimum,
                    "max": item.maximum,
                    "spread": item.spread,
                    "field_verdict": item.verdict,
                    "verdict": group.verdict,
                    "noise_band": item.band,
                    "noise_reference": item.reference,
                    "part_of": parent.get(id(group)),
                    "decides": item.decides,
                }
            )
    return rows


def stability_frame(groups: Iterable[GroupStability]) -> pl.DataFrame:
    """The numbers as a polars frame (a spread is inf where the median is 0 but the values differ)."""
    import polars as pl

    schema = {
        "group": pl.Utf8, "kernel": pl.Utf8, "source": pl.Utf8, "device": pl.Utf8,
        "launches": pl.Int64, "runs": pl.Int64, "field": pl.Utf8, "tolerance_class": pl.Utf8,
        "tolerance": pl.Float64, "n": pl.Int64, "median": pl.Float64, "min": pl.Float64,
        "max": pl.Float64, "spread": pl.Float64, "field_verdict": pl.Utf8, "verdict": pl.Utf8,
        "noise_band": pl.Float64, "noise_reference": pl.Utf8, "part_of": pl.Utf8, "decides": pl.Boolean,
    }
    return pl.DataFrame(stability_rows(groups), schema=schema, orient="row")
