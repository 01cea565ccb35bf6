"""Alias chains: the sources a canonical field can be resolved from, and how they combine.

Metric names change across architectures and Nsight Compute versions, so every
canonical field (``ncuflow.read.metrics``) is resolved through an ordered chain of
*sources*. The first source whose raw metrics all hold a value wins, and the record keeps
which one it was (provenance). A field with no usable source is missing: never 0.

This module is the machinery only (no field data); it imports nothing from ``ncu_report``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Literal

Combine = Literal["value", "sum", "ratio", "product", "formula"]


@dataclass(frozen=True)
class Source:
    """One way to obtain a canonical field from raw metrics.

    ``op`` says how the raw values combine: ``value`` takes the one metric, ``sum``
    adds them, ``ratio`` divides the first by the second, ``product`` multiplies
    them; the result is then multiplied by ``scale``. ``formula`` is a weighted sum
    of the first ``len(weights)`` metrics times the remaining metrics raised to
    ``powers`` (1 or -1), e.g. (fadd + fmul + 2 × ffma) × cycles, or bytes / pct / duration.
    """

    metrics: tuple[str, ...]
    op: Combine = "value"
    scale: float = 1.0
    weights: tuple[float, ...] = ()
    powers: tuple[float, ...] = ()
    text: str = dataclass_field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.op == "formula" and (not self.weights or len(self.weights) + len(self.powers) != len(self.metrics)):
            raise ValueError(f"a formula source needs one weight or power per metric: {self.metrics}")
        object.__setattr__(self, "text", _label(self))

    def label(self) -> str:
        """How the value was obtained, for provenance columns and evidence lines."""
        return self.text

    def combine(self, values: tuple[float, ...]) -> float | None:
        """Combine raw values; None where the arithmetic is undefined (division by 0)."""
        if self.op == "value":
            result = values[0]
        elif self.op == "sum":
            result = math.fsum(values)
        elif self.op == "product":
            result = math.prod(values)
        elif self.op == "formula":
            terms = len(self.weights)
            result = math.fsum(w * v for w, v in zip(self.weights, values[:terms], strict=True))
            for power, value in zip(self.powers, values[terms:], strict=True):
                if power < 0 and value == 0:
                    return None
                result *= value ** power
        else:
            if values[1] == 0:
                return None
            result = values[0] / values[1]
        return result * self.scale


def _weighted(weight: float, metric: str) -> str:
    return metric if weight == 1 else f"{weight:g} × {metric}"


def _label(source: Source) -> str:
    metrics, op, scale = source.metrics, source.op, source.scale
    if op == "formula":
        terms = len(source.weights)
        text = " + ".join(_weighted(w, m) for w, m in zip(source.weights, metrics[:terms], strict=True))
        if terms > 1 and source.powers:
            text = f"({text})"
        for power, metric in zip(source.powers, metrics[terms:], strict=True):
            text += f" {'×' if power > 0 else '/'} {metric}"
        return f"{text} × {scale:g}" if scale != 1.0 else text
    sep = {"value": "", "sum": " + ", "ratio": " / ", "product": " × "}[op]
    text = sep.join(metrics) if op != "value" else metrics[0]
    if scale != 1.0:
        text = f"({text}) × {scale:g}" if op != "value" else f"{text} × {scale:g}"
    return text


@dataclass(frozen=True)
class CanonicalField:
    name: str
    unit: str
    sources: tuple[Source, ...]
    description: str


def single_sources(*names: str, scale: float = 1.0) -> tuple[Source, ...]:
    """Each name as a single-metric source, in order."""
    return tuple(Source((n,), "value", scale) for n in names)


def resolve(
    field: CanonicalField, lookup: Callable[[str], float | None]
) -> tuple[float | None, str | None]:
    """Resolve one field through its alias chain.

    ``lookup`` returns a raw metric's value, or None where the report has no value
    for it. Returns ``(value, provenance)``, or ``(None, None)`` when no source in the
    chain is complete.
    """
    for source in field.sources:
        raw: list[float] = []
        for metric in source.metrics:
            value = lookup(metric)
            if value is None or not math.isfinite(value):
                break
            raw.append(value)
        else:
            combined = raw[0] * source.scale if source.op == "value" else source.combine(tuple(raw))
            if combined is not None and math.isfinite(combined):
                return combined, source.text
    return None, None
