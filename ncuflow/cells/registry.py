"""The cell registry: built-in cells (``ncuflow.kernels``) and user folders, spec parsing, and whether a cell can run here."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pkgutil
import re
import sys
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from ncuflow.cells.contract import (
    NAME_PATTERN,
    CellDefinition,
    CellInfo,
    CellSpec,
    ParamValue,
    coerce_value,
    format_value,
)
from ncuflow.errors import NcuflowError, UsageError
from ncuflow.host import has_nvidia_smi, package_version

_BUILTIN_PACKAGE = "ncuflow.kernels"


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
    if not NAME_PATTERN.match(definition.name):
        raise NcuflowError(
            f"{source} declares a cell named {definition.name!r}.",
            "A cell name must be a Python-style identifier (letters, digits, underscores).",
            "Rename the cell.",
        )
    if definition.params_type is not None:
        declared = tuple((p.name, p.type) for p in definition.params)
        typed = tuple((p.name, p.type) for p in definition.params_type.param_specs())
        if declared != typed:
            raise NcuflowError(
                f"{source}: cell {definition.name!r} declares parameters {declared} but its "
                f"params_type {definition.params_type.__name__} has {typed}.",
                "build() receives the params_type object, so the two lists must be the same.",
                "Leave params empty: it is derived from params_type.",
            )
    seen: set[str] = set()
    for spec in definition.params:
        if not NAME_PATTERN.match(spec.name) or spec.name in seen:
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
        low, high = spec.bounds()
        if isinstance(spec.default, int | float) and not isinstance(spec.default, bool) and (
            (low is not None and spec.default < low) or (high is not None and spec.default > high)
        ):
            raise NcuflowError(
                f"{source}: the default {spec.default!r} of parameter {spec.name!r} of cell "
                f"{definition.name!r} is outside its range {low} ... {high}.",
                "",
                "Fix the ParamSpec default or its minimum/maximum.",
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


def parameter_defaults(cells_dir: Path | None = None) -> dict[str, dict[str, object]]:
    """cell -> parameter -> its default value, for every cell (what a spec that leaves a
    parameter out runs; ``explain`` and ``report`` take it as a swept parameter's baseline)."""
    return {name: {spec.name: spec.default for spec in definition.params}
            for name, definition in cell_definitions(cells_dir).items()}


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
    cell_spec = CellSpec(cell=definition.name, params=tuple(sorted(values.items())))
    definition.make_params(cell_spec)  # the rules between parameters, checked where the spec enters
    return cell_spec


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


def _module_present(module: str) -> str | None:
    """None when ``module`` can be found, else the reason it cannot."""
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as error:
        return f"{module} cannot be found ({error})"
    if found is None:
        extra = {"torch": "cells", "triton": "cells", "flashinfer": "flashinfer"}.get(module)
        hint = f" (pip install 'ncuflow[{extra}]')" if extra else ""
        if module == "flashinfer":
            hint = " (pip install 'ncuflow[flashinfer]'; on an offline GPU host, the GPU bundle: make gpu-bundle)"
        return f"{module} is not installed{hint}"
    return None


_TORCH_CUDA_LINE = re.compile(r"""^cuda\s*(?::[^=]*)?=\s*(?:['"]([^'"]*)['"]|None)""", re.MULTILINE)
_DRIVER_FILE = Path("/proc/driver/nvidia/version")
_GPU_INFO_GLOB = "/proc/driver/nvidia/gpus/*/information"


def _torch_build_cuda() -> tuple[str | None, str | None]:
    """(torch's version, the CUDA it was built with) read from its files, without importing it."""
    version = package_version("torch")
    found = importlib.util.find_spec("torch")
    origin = Path(found.origin).parent / "version.py" if found is not None and found.origin else None
    try:
        text = origin.read_text(encoding="utf-8", errors="replace")[:20_000] if origin else ""
    except OSError:
        text = ""
    match = _TORCH_CUDA_LINE.search(text)
    return version, (match.group(1) or None) if match else None


def _gpu_names() -> list[str]:
    """GPU models the NVIDIA driver lists in /proc (no CUDA call, no torch)."""
    import glob

    names = []
    for path in sorted(glob.glob(_GPU_INFO_GLOB))[:64]:
        try:
            for line in Path(path).read_text(errors="replace")[:4096].splitlines():
                if line.startswith("Model:"):
                    names.append(line.partition(":")[2].strip())
        except OSError:
            continue
    return names


@lru_cache(maxsize=1)
def gpu_status() -> tuple[bool, str]:
    """(a CUDA GPU looks usable by torch, one clause saying which or why not), without importing torch.

    Listing cells must stay fast (importing torch takes seconds), so this reads what the
    machine shows: torch's install and the CUDA it was built for (its version file), an
    NVIDIA driver (/proc/driver/nvidia, nvidia-smi) and CUDA_VISIBLE_DEVICES. Running a cell
    asks torch itself (``gpu_status_from_torch``). Never raises.
    """
    driver = _DRIVER_FILE.exists() or has_nvidia_smi()
    if _module_present("torch") is not None:
        if not driver:
            return False, "torch is not installed and no NVIDIA driver is present (no nvidia-smi)"
        return False, "torch is not installed (pip install 'ncuflow[cells]')"
    version, cuda = _torch_build_cuda()
    if cuda is None:
        return False, f"torch {version} is a CPU-only build"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not driver or (visible is not None and visible.strip() in {"", "-1"}):
        return False, (
            f"torch {version} (CUDA {cuda}) sees no CUDA device "
            "(no NVIDIA GPU, no driver, or CUDA_VISIBLE_DEVICES hides it)"
        )
    names = _gpu_names()
    return True, f"{names[0] if names else 'an NVIDIA GPU'} (torch {version}, CUDA {cuda})"


@lru_cache(maxsize=1)
def gpu_status_from_torch() -> tuple[bool, str]:
    """The honest test, for running a cell: torch itself says whether it sees a CUDA GPU."""
    if _module_present("torch") is not None:
        return gpu_status()
    try:
        import torch
    except Exception as error:  # a broken install says so instead of crashing
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


def unavailable_reasons(definition: CellDefinition, *, thorough: bool = False) -> list[str]:
    """Every reason the cell cannot run on this machine (empty when it can).

    By default nothing heavy is imported (``ncuflow cells``); ``thorough`` (before running a
    cell) imports torch to ask for the GPU and imports flashinfer to see that it loads.
    """
    reasons: list[str] = []
    for requirement in definition.requires:
        if requirement == "cuda":
            ok, why = gpu_status_from_torch() if thorough else gpu_status()
            if not ok:
                reasons.append(f"{NO_GPU_PREFIX}: {why}")
            continue
        missing = _module_present(requirement)
        if missing is None and requirement == "flashinfer" and thorough:
            missing = _flashinfer_import_error()
        if missing is not None and missing not in reasons:
            reasons.append(missing)
    if len(reasons) > 1:  # "torch is not installed" already explains a missing GPU
        reasons = [r for r in reasons if not r.startswith(f"{NO_GPU_PREFIX}: torch is not installed")]
    return reasons


def unavailable_reason(definition: CellDefinition, *, thorough: bool = False) -> str | None:
    """None when the cell can run on this machine, else why not (clauses joined by "; ")."""
    reasons = unavailable_reasons(definition, thorough=thorough)
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
    return package_version(module)
