"""The cell contract: parameters, specs (the canonical text and content key), the interface a cell implements, and value coercion."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Literal, Protocol, TypeVar, runtime_checkable

from ncuflow.errors import UsageError
from ncuflow.serving import ServingShape

ParamValue = str | int | float | bool
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class ParamSpec:
    """One typed parameter of a cell."""

    name: str
    type: type  # int, float, str or bool
    default: object
    choices: tuple[Any, ...] | None = None
    help: str = ""
    minimum: int | float | None = None  # inclusive; sizes declare 1, seeds 0
    maximum: int | float | None = None  # inclusive; e.g. 2**31 - 1 where a cell stores int32
    # the serving shape this parameter takes (``ncuflow.serving``), if any: what ``phases
    # --sweep-for`` sets it from; a parameter without one keeps its default there
    serves: ServingShape | None = None

    def bounds(self) -> tuple[int | float | None, int | float | None]:
        """The valid range: the declared one; an int without one must fit in 64 bits."""
        low, high = self.minimum, self.maximum
        if self.type is int:
            low = INT64_MIN if low is None else max(low, INT64_MIN)
            high = INT64_MAX if high is None else min(high, INT64_MAX)
        return low, high


@dataclass(frozen=True)
class CellInfo:
    """What ``ncuflow cells`` lists about one cell."""

    name: str
    params: tuple[ParamSpec, ...]
    description: str
    available: bool
    unavailable_reason: str | None
    needs_ncu: bool  # False for host-side cells such as plan_host


@dataclass(frozen=True)
class CellSpec:
    """A fully specified cell: every parameter present (defaults filled), sorted by name."""

    cell: str
    params: tuple[tuple[str, ParamValue], ...]

    @classmethod
    def of(cls, cell: str, params: Mapping[str, ParamValue] | None = None) -> CellSpec:
        """A spec of exactly these parameters (sorted by name; nothing filled or checked)."""
        return cls(cell, tuple(sorted((params or {}).items())))

    def text(self) -> str:
        """Canonical spec text, e.g. ``paged_decode:batch=32,kv=shared,kv_len=8192,page=16``."""
        if not self.params:
            return self.cell
        return self.cell + ":" + ",".join(f"{k}={format_value(v)}" for k, v in self.params)

    def slug(self) -> str:
        """Filesystem-safe parameter slug, e.g. ``batch32-kvshared-kv_len8192-page16``."""
        if not self.params:
            return "default"
        parts = [f"{k}{format_value(v)}" for k, v in self.params]
        return re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(parts))

    def content_key(self) -> str:
        """sha256 hex of the canonical JSON ``{"cell": ..., "params": {...}}``."""
        payload = json.dumps(
            {"cell": self.cell, "params": dict(self.params)},
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def param(self, name: str) -> object:
        for key, value in self.params:
            if key == name:
                return value
        known = ", ".join(k for k, _ in self.params) or "(none)"
        raise KeyError(f"cell {self.cell!r} has no parameter {name!r}; it has: {known}")

    def as_dict(self) -> dict[str, ParamValue]:
        return dict(self.params)


def nvtx_range_name(cell: str) -> str:
    """The NVTX range a cell's timed launch runs inside, as a path: ``ncuflow/<cell>``.

    ncu's ``--nvtx-include`` reads ``/`` as nesting (``ncuflow/<cell>/`` = range ``<cell>``
    pushed inside range ``ncuflow``), so the runner pushes the path's parts as nested
    push/pop ranges (see ``nvtx_range_stack``), which that expression matches.
    """
    return f"ncuflow/{cell}"


def nvtx_range_stack(cell: str) -> tuple[str, ...]:
    """The nested push/pop ranges, outermost first, whose path is ``nvtx_range_name(cell)``."""
    return tuple(nvtx_range_name(cell).split("/"))


@runtime_checkable
class CellInstance(Protocol):
    """A built cell: tensors allocated, ready to launch."""

    expected_bytes: int

    def run(self) -> None:
        """The timed operation (launch only; the caller synchronizes)."""

    def output(self) -> Any:
        """The result of the last ``run()``."""

    def reference(self) -> Any:
        """The same result computed with plain torch, for correctness."""

    def representation(self) -> dict[str, Any]:
        """JSON-able description of what reaches the timed operation."""


_PARAM_KEY = "ncuflow_param"
ParamsT = TypeVar("ParamsT", bound="CellParams")


@dataclass(frozen=True)
class _ParamMeta:
    help: str
    choices: tuple[Any, ...] | None
    minimum: int | float | None
    maximum: int | float | None
    serves: ServingShape | None


def param(
    default: ParamValue,
    help: str = "",
    choices: tuple[Any, ...] | None = None,
    minimum: int | float | None = None,
    maximum: int | float | None = None,
    serves: ServingShape | None = None,
) -> Any:
    """A field of a ``CellParams`` dataclass: its default, help, choices, inclusive range and
    the serving shape it takes (``serves``: one row per parameter, read by ``phases --sweep-for``)."""
    return field(default=default, metadata={_PARAM_KEY: _ParamMeta(help, choices, minimum, maximum, serves)})


class CellParams:
    """Base of a cell's typed parameters: a frozen dataclass whose fields are made with ``param()``.

    The fields are the cell's parameters (``param_specs()`` derives the ``ParamSpec`` list
    from them, so a parameter is declared once); ``from_spec`` builds the object once from a
    validated ``CellSpec``, and ``check`` holds the rules between parameters (e.g. heads a
    multiple of kv_heads), run when a spec is parsed, before any GPU is touched.
    """

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @classmethod
    def param_specs(cls) -> tuple[ParamSpec, ...]:
        hints = typing.get_type_hints(cls)
        specs = []
        for item in dataclasses.fields(cls):
            meta = item.metadata.get(_PARAM_KEY)
            if meta is None:
                raise TypeError(f"{cls.__name__}.{item.name} is not declared with ncuflow.cells.param()")
            specs.append(ParamSpec(item.name, hints[item.name], item.default, meta.choices, meta.help,
                                   meta.minimum, meta.maximum, meta.serves))
        return tuple(specs)

    @classmethod
    def from_spec(cls: type[ParamsT], spec: CellSpec) -> ParamsT:
        params = cls(**spec.as_dict())
        params.check()
        return params

    def check(self) -> None:
        """Raise ``UsageError`` when parameters disagree with each other; the default has no rule."""


BuildFunction = Callable[[Any, str], CellInstance]


@dataclass(frozen=True)
class CellDefinition:
    """A cell as a module declares it (see the module docstring).

    ``requires`` names what must be present: module names (``"torch"``, ``"triton"``,
    ``"flashinfer"``...) and ``"cuda"`` (a CUDA GPU visible to torch). ``timing`` is
    ``"cuda"`` (CUDA events around a GPU launch) or ``"host"`` (a host clock: the timed
    operation is host work). ``source`` is filled by the registry.

    ``params_type`` (a ``CellParams`` dataclass) makes ``build`` receive that typed object;
    ``params`` is then derived from its fields when left empty. Without it (cells of older
    user folders), ``build`` receives a read-only mapping name -> typed value.
    """

    name: str
    params: tuple[ParamSpec, ...]
    description: str
    build: BuildFunction
    requires: tuple[str, ...] = ("torch", "triton", "cuda")
    needs_ncu: bool = True
    timing: Literal["cuda", "host"] = "cuda"
    source: str = field(default="", compare=False)
    params_type: type[CellParams] | None = None

    def __post_init__(self) -> None:
        if self.params_type is not None and not self.params:
            object.__setattr__(self, "params", self.params_type.param_specs())

    def make_params(self, spec: CellSpec) -> Any:
        """What ``build`` receives for ``spec``: the typed object, or a read-only mapping."""
        if self.params_type is not None:
            return self.params_type.from_spec(spec)
        return MappingProxyType(spec.as_dict())

    def instantiate(self, spec: CellSpec, device: str) -> CellInstance:
        """Build the cell for ``spec`` on ``device`` (its parameters made once, then typed)."""
        return self.build(self.make_params(spec), device)

    def serving_rows(self) -> tuple[tuple[str, ServingShape], ...]:
        """(parameter, serving shape) for each parameter that declares the shape it takes."""
        return tuple((p.name, p.serves) for p in self.params if p.serves is not None)

    def param_spec(self, name: str) -> ParamSpec | None:
        for spec in self.params:
            if spec.name == name:
                return spec
        return None


_TRUE = {"true", "1", "yes", "on"}


_FALSE = {"false", "0", "no", "off"}


NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def format_value(value: object) -> str:
    """How a value is written in spec text (bools as true/false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _type_name(kind: type) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a word"}.get(
        kind, kind.__name__
    )


def _parsed(cell: str, spec: ParamSpec, raw: object) -> ParamValue:
    """``raw`` as the parameter's type (raises ValueError for a value that is not of it)."""
    if spec.type is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ValueError(text)
    if spec.type is int:
        if isinstance(raw, bool):
            raise ValueError(raw)
        return raw if isinstance(raw, int) else int(str(raw).strip(), 10)
    if spec.type is float:
        if isinstance(raw, bool):
            raise ValueError(raw)
        return float(raw) if isinstance(raw, int | float) else float(str(raw).strip())
    if spec.type is str:
        value = str(raw).strip()
        if not value:
            raise ValueError(raw)
        return value
    raise UsageError(
        f"Parameter {spec.name!r} of cell {cell!r} has an unsupported type {spec.type!r}.",
        "A cell parameter must be int, float, str or bool.",
        "Fix the cell's ParamSpec.",
    )


def _refused(cell: str, spec: ParamSpec, raw: object, problem: str, fix: str) -> UsageError:
    return UsageError(f"Parameter {spec.name!r} of cell {cell!r} got {raw}, which {problem}.",
                      f"{spec.name}: {spec.help}" if spec.help else "", fix)


def coerce_value(cell: str, spec: ParamSpec, raw: object) -> ParamValue:
    """Turn ``raw`` (spec text or a Python value) into the parameter's type, or raise UsageError:
    of the type, finite, within the declared range and among the choices."""
    default = format_value(spec.default)
    try:
        value = _parsed(cell, spec, raw)
    except ValueError:
        choices = f" (one of: {', '.join(map(format_value, spec.choices))})" if spec.choices else ""
        raise _refused(cell, spec, repr(raw), f"is not {_type_name(spec.type)}{choices}",
                       f"Write it as {spec.name}={default} (the default) or another valid value.") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise _refused(cell, spec, repr(raw), "is not a finite number",
                       f"Write it as {spec.name}={default} (the default) or another finite number.")
    low, high = spec.bounds()
    if isinstance(value, int | float) and not isinstance(value, bool) and (
        (low is not None and value < low) or (high is not None and value > high)
    ):
        valid = (f"{format_value(low)} ... {format_value(high)}" if low is not None and high is not None
                 else f">= {format_value(low)}" if low is not None else f"<= {format_value(high)}")
        raise _refused(cell, spec, format_value(value), f"is out of range: the valid range is {valid}",
                       f"Give a value in that range (the default is {default}).")
    if spec.choices is not None and value not in spec.choices:
        raise _refused(cell, spec, repr(format_value(value)),
                       f"is not one of its choices: {', '.join(map(format_value, spec.choices))}",
                       f"Pick one of the choices (the default is {default}).")
    return value
