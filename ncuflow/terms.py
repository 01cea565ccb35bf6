"""The terms of the critical-path max model and the other verdicts: one row each, one theme.

A term is a lower bound on a launch's time from one kind of hardware unit, read as its
utilization u = T / duration. Its row holds everything that is said about it anywhere:
its name (the ``u_<name>`` key of every table, JSON and parquet column), the class NVIDIA's
speed-of-light rule puts its units in (``memory``: ``gpu__compute_memory_throughput``;
``compute``: ``sm__throughput``), its label, what hardware it reads, and its style in the
console (rich) and in pictures (matplotlib). Every renderer takes its colours from here.
Which counters feed a term is said by the counters' own rows
(``ncuflow.read.metrics.TERM_FIELDS`` is derived from them).

The terms split NVIDIA's two classes by unit, as NVIDIA's own breakdowns do (Perfworks'
``sm__throughput`` = max(``sm__instruction_throughput``, ``sm__memory_throughput``)):

- ``issue`` is the issue slots only (``sm__issue_active``, ``sm__inst_issued``,
  ``sm__inst_executed`` per cycle): how many of the schedulers' slots issued;
- ``pipe`` is the SM's memory-side instruction pipes (LSU, ADU, TEX, IPA, the MIO queues,
  the IDC, TMA): a pipe's utilization is reported as that pipe, never as issue slots;
- ``math`` is the arithmetic pipes (FMA, ALU, FP16, FP64, XU, uniform, tensor).

Plain data, importable by every stage (no project imports).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Category = Literal["memory", "compute"]

# Bumped whenever a change of the model can change a verdict on the same counters: stored
# with each escalation judgement (``Escalation.model``), so a store says which model decided.
MODEL_VERSION = 2


@dataclass(frozen=True)
class ModelTerm:
    """One term of the max model."""

    name: str  # the u_<name> key everywhere
    category: Category  # the class NVIDIA's SOLBottleneck rule puts its units in
    label: str  # short, for titles and legends: "DRAM"
    hardware: str  # what it reads, for evidence lines
    style: str  # rich style in console tables
    color: str  # matplotlib colour in every picture

    @property
    def bound_label(self) -> str:
        return f"{self.label}-bound"


@dataclass(frozen=True)
class OtherBound:
    """A verdict that is no term: off every wall, or nothing to compare."""

    name: str
    label: str
    style: str
    color: str

    @property
    def bound_label(self) -> str:
        return self.label


TERMS: tuple[ModelTerm, ...] = (
    ModelTerm("dram", "memory", "DRAM", "device memory (NVIDIA's gpu__dram_throughput)", "red", "#c0392b"),
    ModelTerm("l2", "memory", "L2", "the L2 sub-units that move data (tag and data stages, crossbar ports, "
              "fills, atomics)", "magenta", "#8e44ad"),
    ModelTerm("l1", "memory", "L1", "the L1/TEX cache (data pipe, banks, request ports)", "bright_magenta",
              "#d35fb7"),
    ModelTerm("issue", "compute", "issue", "the schedulers' issue slots", "yellow", "#e67e22"),
    ModelTerm("pipe", "compute", "SM pipe", "the SM's memory-side instruction pipes (LSU, ADU, TEX, MIO, "
              "IDC, TMA)", "bright_yellow", "#b8860b"),
    ModelTerm("math", "compute", "math", "the arithmetic pipes (FMA, ALU, FP16, FP64, XU, tensor)", "dark_orange",
              "#7b4a2a"),
)
OTHER_BOUNDS: tuple[OtherBound, ...] = (
    OtherBound("latency", "latency-bound", "cyan", "#17becf"),
    OtherBound("unknown", "unknown", "dim", "#7f7f7f"),
)

TERM_NAMES: tuple[str, ...] = tuple(t.name for t in TERMS)
TERMS_BY_NAME: Mapping[str, ModelTerm] = {t.name: t for t in TERMS}
BOUND_NAMES: tuple[str, ...] = (*TERM_NAMES, *(b.name for b in OTHER_BOUNDS))
MEMORY_TERMS: frozenset[str] = frozenset(t.name for t in TERMS if t.category == "memory")
COMPUTE_TERMS: frozenset[str] = frozenset(t.name for t in TERMS if t.category == "compute")

# The one theme: a verdict's console style and picture colour, whatever renders it.
_VERDICTS: tuple[ModelTerm | OtherBound, ...] = (*TERMS, *OTHER_BOUNDS)
BOUND_STYLES: Mapping[str, str] = {row.name: row.style for row in _VERDICTS}
BOUND_COLORS: Mapping[str, str] = {row.name: row.color for row in _VERDICTS}
BOUND_LABELS: Mapping[str, str] = {row.name: row.bound_label for row in _VERDICTS}


def category_of(bound: str) -> str:
    """memory / compute for a term; the verdict itself (latency, unknown) otherwise."""
    term = TERMS_BY_NAME.get(bound)
    return term.category if term is not None else bound


def check_term(name: str) -> str:
    """The name, refused (ValueError) where it is no term: a typo in a table, found at import."""
    if name not in TERMS_BY_NAME:
        raise ValueError(f"{name!r} is not a term of the max model ({', '.join(TERM_NAMES)})")
    return name
