"""Kernel cells: the registry, the spec grammar and the interface a cell implements.

A *cell* is the smallest decisive GPU workload of the study (a copy, a decode attention
kernel, a host-side planner), registered by name with typed parameters and defaults.
This module knows the cells only through their declarations; it never imports torch or
triton at module level, so ``ncuflow cells`` works on a machine without them.

Spec grammar (what ``ncuflow profile`` / ``ncuflow time`` take)::

    spec   := CELL [ ":" assign ( "," assign )* ]
    assign := NAME "=" VALUE

e.g. ``paged_decode:page=16,kv=shared,batch=32,kv_len=8192``. Parameters left out take
their defaults; values are checked against the parameter's type (int, float, str, bool:
``true``/``false``/``1``/``0``/``yes``/``no``) and its choices. ``CellSpec.text()`` is
the canonical form: every parameter, sorted by name.

Declaring a cell (built-in ones live in the ``kernels`` package; users put ``.py`` files
in a folder and pass ``--cells-dir DIR``): a module defines ``CELL`` (one
``CellDefinition``) or ``CELLS`` (a sequence of them) at module level::

    from ncuflow.cells import CellDefinition, ParamSpec

    def build(params, device):          # params: dict name -> typed value; device: "cuda"
        import torch                    # heavy imports inside build, never at module level
        ...
        return MyInstance(...)          # an object following the CellInstance protocol

    CELL = CellDefinition(
        name="my_cell",
        params=(ParamSpec("n", int, 1 << 20, None, "elements"),),
        description="what it measures",
        build=build,
        requires=("torch", "triton", "cuda"),   # what must be present for it to run
    )

``CellInstance`` (what ``build`` returns) has ``run()`` (the timed launch, asynchronous
on the GPU), ``output()`` (the result of the last ``run()``), ``reference()`` (the
same result computed by plain torch), ``expected_bytes`` (the bytes the operation must
move at least) and ``representation()`` (a JSON-able dict of what reaches the timed
operation: shapes, index-list length, page-table length, the effective page size...).
``build`` allocates and fills every tensor; warm-up is done by the runner, outside the
NVTX range ``ncuflow/<cell>``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import pkgutil
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, Protocol, runtime_checkable

from ncuflow.errors import NcuflowError, UsageError

ParamValue = str | int | float | bool

# ----------------------------------------------------------------------------- contract


@dataclass(frozen=True)
class ParamSpec:
    """One typed parameter of a cell."""

    name: str
    type: type  # int, float, str or bool
    default: object
    choices: tuple[Any, ...] | None = None
    help: str = ""


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


# ----------------------------------------------------------------------------- cell interface


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


BuildFunction = Callable[[Mapping[str, Any], str], CellInstance]


@dataclass(frozen=True)
class CellDefinition:
    """A cell as a module declares it (see the module docstring).

    ``requires`` names what must be present: module names (``"torch"``, ``"triton"``,
    ``"flashinfer"``...) and ``"cuda"`` (a CUDA GPU visible to torch). ``timing`` is
    ``"cuda"`` (CUDA events around a GPU launch) or ``"host"`` (a host clock: the timed
    operation is host work). ``source`` is filled by the registry.
    """

    name: str
    params: tuple[ParamSpec, ...]
    description: str
    build: BuildFunction
    requires: tuple[str, ...] = ("torch", "triton", "cuda")
    needs_ncu: bool = True
    timing: Literal["cuda", "host"] = "cuda"
    source: str = field(default="", compare=False)

    def param_spec(self, name: str) -> ParamSpec | None:
        for spec in self.params:
            if spec.name == name:
                return spec
        return None


# ----------------------------------------------------------------------------- values


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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


def coerce_value(cell: str, spec: ParamSpec, raw: object) -> ParamValue:
    """Turn ``raw`` (spec text or a Python value) into the parameter's type, or raise UsageError."""
    value: ParamValue
    try:
        if spec.type is bool:
            if isinstance(raw, bool):
                value = raw
            else:
                text = str(raw).strip().lower()
                if text in _TRUE:
                    value = True
                elif text in _FALSE:
                    value = False
                else:
                    raise ValueError(text)
        elif spec.type is int:
            if isinstance(raw, bool):
                raise ValueError(raw)
            value = raw if isinstance(raw, int) else int(str(raw).strip(), 10)
        elif spec.type is float:
            if isinstance(raw, bool):
                raise ValueError(raw)
            value = float(raw) if isinstance(raw, int | float) else float(str(raw).strip())
        elif spec.type is str:
            value = str(raw).strip()
            if not value:
                raise ValueError(raw)
        else:
            raise UsageError(
                f"Parameter {spec.name!r} of cell {cell!r} has an unsupported type "
                f"{spec.type!r}.",
                "A cell parameter must be int, float, str or bool.",
                "Fix the cell's ParamSpec.",
            )
    except ValueError:
        choices = f" (one of: {', '.join(map(format_value, spec.choices))})" if spec.choices else ""
        raise UsageError(
            f"Parameter {spec.name!r} of cell {cell!r} got {raw!r}, which is not "
            f"{_type_name(spec.type)}{choices}.",
            f"{spec.name}: {spec.help}" if spec.help else "",
            f"Write it as {spec.name}={format_value(spec.default)} (the default) or another valid value.",
        ) from None
    if spec.choices is not None and value not in spec.choices:
        raise UsageError(
            f"Parameter {spec.name!r} of cell {cell!r} got {format_value(value)!r}, "
            f"which is not one of its choices: {', '.join(map(format_value, spec.choices))}.",
            f"{spec.name}: {spec.help}" if spec.help else "",
            f"Pick one of the choices (the default is {format_value(spec.default)}).",
        )
    return value


# ----------------------------------------------------------------------------- registry


_BUILTIN_PACKAGE = "kernels"


def _definitions_of(module: ModuleType, source: str) -> list[CellDefinition]:
    found: list[CellDefinition] = []
    single = getattr(module, "CELL", None)
    many = getattr(module, "CELLS", None)
    if single is not None:
        found.append(single)
    if many is not None:
        found.extend(many)
    out: list[CellDefinition] = []
    for definition in found:
        if not isinstance(definition, CellDefinition):
            raise NcuflowError(
                f"{source} declares a cell that is not a CellDefinition ({type(definition).__name__}).",
                "CELL / CELLS must hold ncuflow.cells.CellDefinition objects.",
                "Build the declaration with `from ncuflow.cells import CellDefinition, ParamSpec`.",
            )
        _validate_definition(definition, source)
        out.append(_with_source(definition, source))
    return out


def _with_source(definition: CellDefinition, source: str) -> CellDefinition:
    from dataclasses import replace

    return replace(definition, source=source)


def _validate_definition(definition: CellDefinition, source: str) -> None:
    if not _NAME.match(definition.name):
        raise NcuflowError(
            f"{source} declares a cell named {definition.name!r}.",
            "A cell name must be a Python-style identifier (letters, digits, underscores).",
            "Rename the cell.",
        )
    seen: set[str] = set()
    for spec in definition.params:
        if not _NAME.match(spec.name) or spec.name in seen:
            raise NcuflowError(
                f"{source}: cell {definition.name!r} has a bad or repeated parameter name {spec.name!r}.",
                "Parameter names must be unique identifiers.",
                "Rename the parameter.",
            )
        seen.add(spec.name)
        if spec.type not in (int, float, str, bool):
            raise NcuflowError(
                f"{source}: parameter {spec.name!r} of cell {definition.name!r} has type {spec.type!r}.",
                "Cell parameters must be int, float, str or bool.",
                "Change the ParamSpec type.",
            )
        if not isinstance(spec.default, spec.type) or (
            spec.type is int and isinstance(spec.default, bool)
        ):
            raise NcuflowError(
                f"{source}: the default {spec.default!r} of parameter {spec.name!r} of cell "
                f"{definition.name!r} is not of its type {spec.type.__name__}.",
                "",
                "Fix the ParamSpec default.",
            )
        if spec.choices is not None and spec.default not in spec.choices:
            raise NcuflowError(
                f"{source}: the default {spec.default!r} of parameter {spec.name!r} of cell "
                f"{definition.name!r} is not among its choices {spec.choices!r}.",
                "",
                "Fix the ParamSpec default or choices.",
            )


@lru_cache(maxsize=1)
def _builtin_definitions() -> tuple[CellDefinition, ...]:
    package = importlib.import_module(_BUILTIN_PACKAGE)
    definitions: list[CellDefinition] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{_BUILTIN_PACKAGE}.{info.name}")
        definitions.extend(_definitions_of(module, f"{_BUILTIN_PACKAGE}/{info.name}.py"))
    return tuple(definitions)


def _load_user_module(path: Path) -> ModuleType:
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"ncuflow_user_cells_{digest}.{path.stem}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise NcuflowError(f"Cannot load the cell file {path}.", "Python found no loader for it.", "")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise NcuflowError(
            f"The cell file {path} failed to import: {type(error).__name__}: {error}",
            "Cell modules are imported to read their CELL/CELLS declarations; "
            "heavy imports (torch, triton) belong inside build().",
            f"Fix the file, or run `python {path}` to see the full error.",
        ) from None
    return module


def _user_definitions(cells_dir: Path) -> list[CellDefinition]:
    if not cells_dir.is_dir():
        raise UsageError(
            f"The cells folder {cells_dir} does not exist or is not a folder.",
            "--cells-dir names a folder of .py files, each declaring CELL or CELLS.",
            "Check the path.",
        )
    definitions: list[CellDefinition] = []
    for path in sorted(cells_dir.glob("*.py")):
        if path.name.startswith("_"):
            continue
        definitions.extend(_definitions_of(_load_user_module(path), str(path)))
    return definitions


def cell_definitions(cells_dir: Path | None = None) -> dict[str, CellDefinition]:
    """All cells by name: the built-in ones, then those of ``cells_dir``."""
    registry: dict[str, CellDefinition] = {}
    sources = list(_builtin_definitions())
    if cells_dir is not None:
        sources.extend(_user_definitions(Path(cells_dir)))
    for definition in sources:
        if definition.name in registry:
            raise NcuflowError(
                f"Two cells are named {definition.name!r}: in {registry[definition.name].source} "
                f"and in {definition.source}.",
                "Cell names must be unique across the built-in cells and --cells-dir.",
                "Rename the cell in your folder.",
            )
        registry[definition.name] = definition
    return registry


def get_cell(name: str, cells_dir: Path | None = None) -> CellDefinition:
    registry = cell_definitions(cells_dir)
    definition = registry.get(name)
    if definition is None:
        raise UsageError(
            f"There is no cell named {name!r}.",
            f"Known cells: {', '.join(sorted(registry))}.",
            "Run `ncuflow cells` to list them with their parameters"
            + ("" if cells_dir else ", or pass --cells-dir DIR for cells of your own")
            + ".",
        )
    return definition


# ----------------------------------------------------------------------------- spec parsing


def _spec_from_definition(definition: CellDefinition, given: Mapping[str, object]) -> CellSpec:
    values: dict[str, ParamValue] = {}
    known = {spec.name: spec for spec in definition.params}
    for key, raw in given.items():
        param = known.get(key)
        if param is None:
            listing = ", ".join(
                f"{spec.name} (default {format_value(spec.default)})" for spec in definition.params
            )
            raise UsageError(
                f"Cell {definition.name!r} has no parameter {key!r}.",
                f"Its parameters: {listing or '(none)'}.",
                "Check the spelling; `ncuflow cells` lists every cell's parameters.",
            )
        values[key] = coerce_value(definition.name, param, raw)
    for spec in definition.params:
        if spec.name not in values:
            values[spec.name] = spec.default  # type: ignore[assignment]
    return CellSpec(cell=definition.name, params=tuple(sorted(values.items())))


def make_spec(
    cell: str, params: Mapping[str, object] | None = None, cells_dir: Path | None = None
) -> CellSpec:
    """A CellSpec from a name and Python values (defaults filled, values validated)."""
    return _spec_from_definition(get_cell(cell, cells_dir), params or {})


def parse_spec(text: str, cells_dir: Path | None = None) -> CellSpec:
    """Parse ``cell:key=value,...``: fills defaults, validates types and choices."""
    stripped = text.strip()
    if not stripped:
        raise UsageError(
            "The cell spec is empty.",
            "A spec names a cell and optionally its parameters, e.g. "
            "paged_decode:page=16,kv=shared,batch=32,kv_len=8192.",
            "Run `ncuflow cells` to list the cells.",
        )
    name, _, rest = stripped.partition(":")
    name = name.strip()
    definition = get_cell(name, cells_dir)
    given: dict[str, str] = {}
    if rest.strip():
        for item in rest.split(","):
            item = item.strip()
            if not item:
                raise UsageError(
                    f"The cell spec {text!r} has an empty item (two commas in a row, or a trailing comma).",
                    "Parameters are written key=value, separated by single commas.",
                    f"Write it like {definition.name}:key=value,key=value.",
                )
            key, equals, value = item.partition("=")
            key, value = key.strip(), value.strip()
            if not equals or not key or not value:
                raise UsageError(
                    f"The cell spec {text!r} has {item!r}, which is not key=value.",
                    "Parameters are written key=value, separated by commas.",
                    f"Write it like {definition.name}:key=value,key=value.",
                )
            if key in given:
                raise UsageError(
                    f"The cell spec {text!r} sets {key!r} twice.",
                    "Each parameter may be given once.",
                    "Remove one of them.",
                )
            given[key] = value
    return _spec_from_definition(definition, given)


# ----------------------------------------------------------------------------- availability


def _module_present(module: str) -> str | None:
    """None when ``module`` can be found, else the reason it cannot."""
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as error:
        return f"{module} cannot be found ({error})"
    if found is None:
        extra = {"torch": "cells", "triton": "cells", "flashinfer": "flashinfer"}.get(module)
        hint = f" (pip install 'ncuflow[{extra}]')" if extra else ""
        return f"{module} is not installed{hint}"
    return None


@lru_cache(maxsize=1)
def gpu_status() -> tuple[bool, str]:
    """(a CUDA GPU is usable by torch, one clause saying which or why not).

    Imports torch when it is installed (that is the only honest test); never raises.
    """
    if _module_present("torch") is not None:
        if shutil.which("nvidia-smi") is None:
            return False, "torch is not installed and no NVIDIA driver is present (no nvidia-smi)"
        return False, "torch is not installed (pip install 'ncuflow[cells]')"
    try:
        import torch
    except Exception as error:  # a broken install says so instead of crashing the listing
        return False, f"torch fails to import ({type(error).__name__}: {error})"
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        return True, f"{name} (torch {torch.__version__}, CUDA {torch.version.cuda})"
    if torch.version.cuda is None:
        return False, f"torch {torch.__version__} is a CPU-only build"
    return False, (
        f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device "
        "(no NVIDIA GPU, no driver, or CUDA_VISIBLE_DEVICES hides it)"
    )


NO_GPU_PREFIX = "no CUDA GPU here"


def _flashinfer_import_error() -> str | None:
    try:
        importlib.import_module("flashinfer")
    except Exception as error:
        return f"flashinfer is installed but fails to import ({type(error).__name__}: {error})"
    return None


def unavailable_reasons(definition: CellDefinition) -> list[str]:
    """Every reason the cell cannot run on this machine (empty when it can)."""
    reasons: list[str] = []
    for requirement in definition.requires:
        if requirement == "cuda":
            ok, why = gpu_status()
            if not ok:
                reasons.append(f"{NO_GPU_PREFIX}: {why}")
            continue
        missing = _module_present(requirement)
        if missing is None and requirement == "flashinfer":
            missing = _flashinfer_import_error()
        if missing is not None and missing not in reasons:
            reasons.append(missing)
    if len(reasons) > 1:  # "torch is not installed" already explains a missing GPU
        reasons = [r for r in reasons if not r.startswith(f"{NO_GPU_PREFIX}: torch is not installed")]
    return reasons


def unavailable_reason(definition: CellDefinition) -> str | None:
    """None when the cell can run on this machine, else why not (clauses joined by "; ")."""
    reasons = unavailable_reasons(definition)
    return "; ".join(reasons) if reasons else None


def info_of(definition: CellDefinition) -> CellInfo:
    reason = unavailable_reason(definition)
    return CellInfo(
        name=definition.name,
        params=definition.params,
        description=definition.description,
        available=reason is None,
        unavailable_reason=reason,
        needs_ncu=definition.needs_ncu,
    )


def list_cells(cells_dir: Path | None = None) -> list[CellInfo]:
    """Every cell with its parameters and whether it can run here (and why not)."""
    return [info_of(d) for d in sorted(cell_definitions(cells_dir).values(), key=lambda d: d.name)]


def module_version(module: str) -> str | None:
    """Installed distribution version of a module, without importing it."""
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return None


__all__: Sequence[str] = (
    "CellDefinition",
    "CellInfo",
    "CellInstance",
    "CellSpec",
    "ParamSpec",
    "cell_definitions",
    "coerce_value",
    "format_value",
    "get_cell",
    "gpu_status",
    "list_cells",
    "make_spec",
    "module_version",
    "nvtx_range_name",
    "nvtx_range_stack",
    "parse_spec",
    "unavailable_reason",
)
