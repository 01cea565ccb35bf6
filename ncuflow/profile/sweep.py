"""Sweeps: a TOML file names a cell, fixed parameters, axes and replicas; profile the product.

    cell = "paged_decode"
    replicas = 3
    timeout = 600                  # seconds per profile (optional)
    [fixed]
    batch = 32
    [axes]
    page = [16, 32, 64, 128]
    kv = ["shared", "distinct"]
    [ncu]                          # optional; NcuOptions fields
    replay_mode = "kernel"
    cache_control = "all"
    clock_control = "base"
    metric_set = "decisive"        # or "full", "basic", ...
    launch_count = 1

This module is the file: its schema, checked key by key with the line of a wrong value,
and the plan it expands to (every point of the product, each a ``CellSpec``). Running a
plan, resumably, here or on Ray, is ``ncuflow.profile.sweep_run``.
"""

from __future__ import annotations

import itertools
import math
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncuflow.cells.contract import CellSpec
from ncuflow.cells.source import CellSource
from ncuflow.errors import UsageError
from ncuflow.files import read_small_file
from ncuflow.files.patterns import pattern_problem
from ncuflow.profile import DEFAULT_TIMEOUT_S
from ncuflow.profile.ncu import (
    CACHE_CONTROLS,
    CLOCK_CONTROLS,
    DECISIVE,
    NAMED_SETS,
    REPLAY_MODES,
    NcuOptions,
)
from ncuflow.store.collection import GRAPH_PROFILING
from ncuflow.store.manifest import Sweep

MAX_REPLICAS = 1000
MAX_POINTS = 10_000  # each point is a profile of seconds to minutes: 10,000 is days of GPU time

NCU_KEYS = {
    "replay_mode": "replay_mode", "cache_control": "cache_control", "clock_control": "clock_control",
    "metric_set": "metric_set", "set": "metric_set", "sections": "sections", "metrics": "extra_metrics",
    "launch_count": "launch_count", "launch_skip": "launch_skip", "kernel": "kernel_regex",
    "nvtx": "nvtx_include", "graph_profiling": "graph_profiling",
}
Scalar = str | int | float | bool


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: its cell spec (every parameter, defaults filled) and the axes' values."""

    index: int
    spec: CellSpec
    axis_values: Mapping[str, Any]

    @property
    def spec_text(self) -> str:
        return self.spec.text()

    @property
    def content_key(self) -> str:
        return self.spec.content_key()

    @property
    def params(self) -> dict[str, Any]:
        return self.spec.as_dict()


@dataclass(frozen=True)
class SweepPlan:
    name: str
    cell: str
    fixed: Mapping[str, Any]
    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    replicas: int
    options: NcuOptions
    timeout: float
    points: tuple[SweepPoint, ...]
    source: Path | None = None

    def sweep(self) -> Sweep:
        """What each run of the sweep records of it: its name, file and axes."""
        return Sweep(name=self.name, file=str(self.source) if self.source else None,
                     axes={name: tuple(values) for name, values in self.axes})


def _bad(source: str, what: str, fix: str) -> UsageError:
    return UsageError(f"The sweep file {source} {what}.",
                      "A sweep file holds cell, replicas, timeout, [fixed], [axes] and [ncu].", fix)


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) and not (isinstance(value, float) and not math.isfinite(value))


# ----------------------------------------------------------------------------- the schema


@dataclass(frozen=True)
class Rule:
    """What one key of a sweep file must hold."""

    expected: str  # for messages: "an integer >= 1", "one of: kernel, application"
    check: Callable[[Any], bool]


def _is_int(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _is_seconds(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and value > 0)


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) and "\n" not in value and not value.lstrip().startswith("-")


def _is_names(value: Any) -> bool:
    return _is_name(value) or (isinstance(value, list) and all(_is_name(v) for v in value))


def _is_regex(value: Any) -> bool:
    if not _is_name(value):
        return False
    return pattern_problem(value) is None


def _one_of(values: Sequence[str]) -> Rule:
    return Rule(f"one of: {', '.join(values)}", lambda v: isinstance(v, str) and v in values)


TOP_RULES: dict[str, Rule] = {
    "cell": Rule("the name of a cell (a string, see `ncuflow cells`)", _is_name),
    "replicas": Rule(f"an integer from 1 to {MAX_REPLICAS}", lambda v: _is_int(v, 1) and v <= MAX_REPLICAS),
    "timeout": Rule("a finite number of seconds > 0", _is_seconds),
    "fixed": Rule("a table ([fixed] then name = value lines)", lambda v: isinstance(v, dict)),
    "axes": Rule("a table ([axes] then name = [values] lines)", lambda v: isinstance(v, dict)),
    "ncu": Rule("a table ([ncu] then option = value lines)", lambda v: isinstance(v, dict)),
    "description": Rule("a string", lambda v: isinstance(v, str)),
    "name": Rule("a non-empty string", _is_name),
}
NCU_RULES: dict[str, Rule] = {
    "replay_mode": _one_of(REPLAY_MODES),
    "cache_control": _one_of(CACHE_CONTROLS),
    "clock_control": _one_of(CLOCK_CONTROLS),
    "metric_set": _one_of((DECISIVE, *NAMED_SETS, "none")),
    "set": _one_of((DECISIVE, *NAMED_SETS, "none")),
    "sections": Rule("a section name or a list of section names (strings)", _is_names),
    "metrics": Rule("a metric name or a list of metric names (strings)", _is_names),
    "launch_count": Rule("an integer >= 1", lambda v: _is_int(v, 1)),
    "launch_skip": Rule("an integer >= 0", lambda v: _is_int(v, 0)),
    "kernel": Rule("one regular expression ncuflow can search in linear time (RE2: no backreference, "
                   "no lookaround)", _is_regex),
    "nvtx": Rule("an NVTX expression or a list of them (strings)", _is_names),
    "graph_profiling": _one_of(GRAPH_PROFILING),
}


def key_line(text: str | None, table: str | None, key: str) -> int | None:
    """The line (1-based) where ``key`` is set in ``[table]`` (None: top level), if it can be found."""
    if not text:
        return None
    current: str | None = None
    pattern = re.compile(rf"""^\s*(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')\s*=""")
    for number, line in enumerate(text.splitlines(), start=1):
        header = re.match(r"^\s*\[\s*([^\]]+?)\s*\]", line)
        if header:
            current = header.group(1).strip("\"'")
            continue
        if current == table and pattern.match(line):
            return number
    return None


def _type_word(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number" if math.isfinite(value) else f"the non-finite number {value}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


class _Where:
    def __init__(self, source: Path | None, text: str | None) -> None:
        self.name = str(source) if source else "(inline)"
        self.text = text

    def wrong(self, table: str | None, key: str, value: Any, expected: str) -> UsageError:
        line = key_line(self.text, table, key)
        dotted = f"{table}.{key}" if table else key
        where = f"{self.name}, line {line}" if line else self.name
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return UsageError(
            f"The sweep file {where}: {dotted} = {shown} is {_type_word(value)}; it must be {expected}.",
            "Sweep files are checked key by key before anything runs.",
            f"Write {dotted} as {expected}.",
        )


def _check_table(where: _Where, table: str | None, data: Mapping[str, Any], rules: Mapping[str, Rule]) -> None:
    for key, value in data.items():
        rule = rules.get(key)
        if rule is None:
            label = f"[{table}] key" if table else "key"
            line = key_line(where.text, table, key)
            raise _bad(where.name + (f", line {line}," if line else ""), f"has unknown {label} {key!r}",
                       f"Use only {', '.join(sorted(rules))}.")
        if not rule.check(value):
            raise where.wrong(table, key, value, rule.expected)


def parse_sweep(data: Mapping[str, Any], *, source: Path | None = None,
                cells: CellSource | None = None, text: str | None = None) -> SweepPlan:
    """Check a sweep file's content against the schema (key, type, allowed values, line) and expand it."""
    cells = cells or CellSource()
    where = _Where(source, text)
    _check_table(where, None, data, TOP_RULES)
    cell = data.get("cell")
    if not isinstance(cell, str) or not cell:
        raise _bad(where.name, "names no cell", 'Add e.g. cell = "flat_decode" (see `ncuflow cells`).')
    replicas = data.get("replicas", 1)
    timeout = data.get("timeout", DEFAULT_TIMEOUT_S)
    fixed = dict(data.get("fixed", {}))
    axes_table = data.get("axes", {})
    axes: list[tuple[str, tuple[Any, ...]]] = []
    for name, values in axes_table.items():
        if not isinstance(values, list) or not values or not all(_scalar(v) for v in values):
            raise where.wrong("axes", name, values, "a non-empty list of single finite values, e.g. [16, 32, 64]")
        if name in fixed:
            raise _bad(where.name, f"sets {name!r} both in [fixed] and in [axes]", "Keep it in one place.")
        axes.append((name, tuple(values)))
    count = math.prod(len(values) for _, values in axes)
    if count > MAX_POINTS:
        shape = " × ".join(f"{name}[{len(values)}]" for name, values in axes)
        raise _bad(where.name, f"expands to {count:,} points ({shape}), more than the {MAX_POINTS:,} a sweep may hold",
                   "Split it into several sweep files, or take fewer values per axis.")
    for name, value in fixed.items():
        if not _scalar(value):
            raise where.wrong("fixed", name, value, "one finite value (a number, a string or true/false)")
    ncu_table = dict(data.get("ncu", {}))
    _check_table(where, "ncu", ncu_table, NCU_RULES)
    option_args: dict[str, Any] = {}
    for key, value in ncu_table.items():
        target = NCU_KEYS[key]
        if target in ("sections", "extra_metrics", "nvtx_include"):
            value = tuple([value] if isinstance(value, str) else value)
        option_args[target] = value
    options = NcuOptions(**option_args)
    points: list[SweepPoint] = []
    seen: set[str] = set()
    names = [n for n, _ in axes]
    for combo in itertools.product(*(values for _, values in axes)) if axes else [()]:
        axis_values = dict(zip(names, combo, strict=True))
        spec = cells.make(cell, {**fixed, **axis_values})
        key = spec.content_key()
        if key in seen:
            continue
        seen.add(key)
        points.append(SweepPoint(index=len(points), spec=spec, axis_values=axis_values))
    name = str(data.get("name") or (source.stem if source else cell))
    return SweepPlan(name=name, cell=cell, fixed=fixed, axes=tuple(axes), replicas=replicas,
                     options=options, timeout=float(timeout), points=tuple(points), source=source)


MAX_SWEEP_FILE_BYTES = 1 << 20  # a sweep file is a few lines


def load_sweep(path: Path, cells: CellSource | None = None) -> SweepPlan:
    """Read, check and expand a sweep file (a regular file of at most 1 MiB: a FIFO or
    ``/dev/zero`` is refused before reading)."""
    def refuse(problem: str) -> UsageError:
        if problem == "the file is missing":
            return UsageError(f"The sweep file {path} does not exist.", "", "Check the path.")
        return UsageError(f"The sweep file {path} cannot be read: {problem}.", "",
                          "Name the sweep's .toml file (a regular file), and check its permissions.")

    try:
        text = read_small_file(Path(path), MAX_SWEEP_FILE_BYTES, what="sweep", error=refuse)
    except UsageError as error:
        if "not UTF-8" in error.what:
            raise UsageError(error.what, "TOML files are UTF-8.", "Save the file as UTF-8.") from None
        raise
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"The sweep file {path} is not valid TOML: {error}.", "",
                         "Fix the syntax (https://toml.io).") from None
    except RecursionError:
        raise UsageError(f"The sweep file {path} nests arrays or tables too deeply to read.", "",
                         "A sweep file holds flat tables of values; remove the nesting.") from None
    return parse_sweep(data, source=Path(path), cells=cells, text=text)


def axes_summary(axes: Sequence[tuple[str, tuple[Any, ...]]]) -> str:
    return " × ".join(f"{name}[{len(values)}]" for name, values in axes) or "(no axes)"
