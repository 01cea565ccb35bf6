"""A point: the launches of one kernel at one parameter setting — a ``Measurement``.

``Point`` is the name the study and explain use; the type, its grouping rule and its
statistics live in ``ncuflow.analyze.measurement``.
"""

from __future__ import annotations

from collections.abc import Iterable

from ncuflow.analyze.measurement import Measurement, PointModel, format_param, point_model, sort_key

Point = Measurement

__all__ = ["Point", "PointModel", "format_param", "point_model", "sort_key", "sort_values"]


def sort_values(values: Iterable[object]) -> list[object]:
    """Numbers numerically (also numeric strings), then the rest alphabetically."""
    return sorted(values, key=sort_key)
