"""Layers only point down: checked on the import graph of the source, transitively.

- the read side (extract, classify, stability, explain, export, report, phases) never
  imports torch, triton or subprocess;
- the profiling path (ncu, orchestrate, store, sweep, doctor, cells, cellrun, the
  profile commands and what they import) never imports polars: the GPU host has none;
- the library never imports the CLI; cells know nothing of analysis;
- the package root imports nothing of the project at import time: its public API
  (``ncuflow.launches`` ...) is a lazy attribute, ``ncuflow.output.api`` imported on first use.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ncuflow", "kernels")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "kernels":  # installed as ncuflow.kernels (package-dir)
        parts.insert(0, "ncuflow")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            modules[_module_name(path)] = path
    return modules


def _imports(path: Path, module: str, module_level_only: bool = False) -> set[str]:
    """Every module name imported anywhere in the file (function-level imports included, unless
    ``module_level_only``: what importing the module runs)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    nodes = list(ast.walk(tree)) if not module_level_only else [
        node for node in ast.walk(tree)
        if not any(isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) for parent in _parents(tree, node))
    ]
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1] if node.level > 1 else base
                prefix = ".".join(base)
                target = f"{prefix}.{node.module}" if node.module else prefix
            else:
                target = node.module or ""
            names.add(target)
            names.update(f"{target}.{alias.name}" for alias in node.names)
    return names


def _parents(tree: ast.AST, target: ast.AST) -> list[ast.AST]:
    """The nodes enclosing ``target`` in ``tree``."""
    path: list[ast.AST] = []

    def visit(node: ast.AST, trail: list[ast.AST]) -> bool:
        if node is target:
            path.extend(trail)
            return True
        return any(visit(child, [*trail, node]) for child in ast.iter_child_nodes(node))

    visit(tree, [])
    return path


SOURCES = _sources()
GRAPH = {module: _imports(path, module) for module, path in SOURCES.items()}
ROOT_PACKAGE = "ncuflow"
# The root's lazy public API (``__getattr__``): imported on first use, never by ``import ncuflow``.
LAZY_API = {"ncuflow.output.api", "ncuflow.output"}
# Importing the root runs only its module-level code; its lazy attribute is not imported with it.
GRAPH[ROOT_PACKAGE] = _imports(SOURCES[ROOT_PACKAGE], ROOT_PACKAGE, module_level_only=True)


def _closure(root: str) -> set[str]:
    """The root and every project module it reaches, plus every external name imported on the way."""
    seen: set[str] = set()
    stack = [root]
    while stack:
        module = stack.pop()
        if module in seen or module not in GRAPH:
            continue
        seen.add(module)
        for name in GRAPH[module]:
            if name.split(".")[0] in PACKAGES:
                candidates = [name, name.rpartition(".")[0]]
                stack.extend(c for c in candidates if c in GRAPH)
            # Importing ncuflow.x.y also runs the packages above it.
            parts = name.split(".")
            for i in range(1, len(parts)):
                parent = ".".join(parts[:i])
                if parent in GRAPH:
                    stack.append(parent)
    externals = {name for module in seen for name in GRAPH[module] if name.split(".")[0] not in PACKAGES}
    return seen | externals


def _top_levels(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names}


def _stage(module: str) -> str:
    """The stage a module belongs to: its subpackage below ``ncuflow`` (``core`` for top-level modules)."""
    parts = module.split(".")
    if module == "ncuflow.__main__":  # the entry point is part of the command line
        return "cli"
    if len(parts) == 1 or (len(parts) == 2 and SOURCES[module].name != "__init__.py") or parts[1] == "files":
        return "core"  # top-level modules, and ncuflow.files (atomic outputs, checked inputs)
    return parts[1]


# What each stage may import from the project (besides itself and ``core``): arrows point down.
ALLOWED_STAGES: dict[str, set[str]] = {
    "core": set(),
    "read": {"store"},
    # a stored run's identity is the cell spec it measured: the store names runs by ``CellSpec``
    # (``ncuflow.cells.contract``, plain data; never the registry, which asks the machine about its GPU)
    # ... and checks that a run's report is whole by its framing (``ncuflow.read.framing``, plain bytes)
    "store": {"cells", "read"},
    "analyze": {"read", "store"},
    "output": {"analyze", "read", "store"},
    # the serving shapes (``ncuflow.serving``): the vocabulary both halves share, one row per
    # shape; a log's shapes (phases) reach a cell's parameters (cells) only through it
    "serving": set(),
    "cells": {"serving"},
    "kernels": {"cells", "serving"},
    # profile escalates tier 1 to tier 2 for launches the model leaves undecided (issue 10),
    # so it may classify: analyze, never output (and never polars: tested below)
    "profile": {"cells", "store", "read", "analyze"},
    "phases": {"serving"},
    "cli": {"output", "analyze", "read", "store", "cells", "kernels", "profile", "phases", "serving"},
}
READ_SIDE = [m for m in SOURCES if _stage(m) in {"read", "analyze", "output", "phases"}]
PROFILING_PATH = [m for m in SOURCES if _stage(m) in {"profile", "store", "cells", "kernels"}
                  or m in {"ncuflow.cli.profile_cmds", "ncuflow.cli.cells_cmd"}]


def test_every_module_has_a_stage_with_rules() -> None:
    assert {_stage(m) for m in SOURCES} <= set(ALLOWED_STAGES), sorted({_stage(m) for m in SOURCES} - set(ALLOWED_STAGES))


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_imports_point_down_the_stages(module: str) -> None:
    stage = _stage(module)
    allowed = ALLOWED_STAGES[stage] | {stage, "core"}
    names = _imports(SOURCES[module], module)  # function-level imports included
    lazy = LAZY_API if module == ROOT_PACKAGE else set()
    wrong = sorted(name for name in names if name in SOURCES and _stage(name) not in allowed and name not in lazy)
    assert not wrong, f"{module} ({stage}) imports {wrong}"


@pytest.mark.parametrize("module", [m for m in SOURCES if _stage(m) == "store"])
def test_the_store_knows_cells_only_by_their_contract(module: str) -> None:
    reached = {name for name in GRAPH[module] if name.startswith("ncuflow.cells")}
    assert reached <= {"ncuflow.cells.contract", "ncuflow.cells.contract.CellSpec", "ncuflow.cells.contract.ParamValue"}, reached


def test_the_root_imports_its_api_lazily_only() -> None:
    """``import ncuflow`` imports nothing of the project's stages; the API module only on first use."""
    every = _imports(SOURCES[ROOT_PACKAGE], ROOT_PACKAGE)
    assert {n for n in every if n.startswith("ncuflow.")} <= LAZY_API
    assert not {n for n in GRAPH[ROOT_PACKAGE] if n.startswith("ncuflow.")}


@pytest.mark.parametrize("module", [m for m in SOURCES if _stage(m) == "store"])
def test_the_store_reads_only_a_reports_framing(module: str) -> None:
    reached = {name for name in GRAPH[module] if name.startswith("ncuflow.read")}
    assert reached <= {"ncuflow.read.framing", "ncuflow.read.framing.framing_problem"}, reached


def _project_edges(module: str) -> set[str]:
    edges = set()
    for name in GRAPH[module]:
        if name in SOURCES:
            edges.add(name)
        elif name.rpartition(".")[0] in SOURCES:  # from package import name
            edges.add(name.rpartition(".")[0])
    return edges - {module}


def test_no_import_cycle() -> None:
    """No two modules import each other, directly or through others (lazy imports count too)."""
    edges = {m: {e for e in _project_edges(m) if not m.startswith(e + ".")} for m in SOURCES}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(edges[module]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt):], nxt] if nxt in path else [module, nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[module] = 2

    for module in sorted(SOURCES):
        if module not in state:
            visit(module, [module])
    assert not cycles, cycles


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_no_module_over_500_lines(module: str) -> None:
    lines = len(SOURCES[module].read_text().splitlines())
    assert lines <= 500, f"{module} has {lines} lines"


def test_at_most_six_top_level_modules() -> None:
    top = sorted(p.name for p in (ROOT / "ncuflow").glob("*.py"))
    assert len(top) <= 6, top


def test_the_layers_are_there() -> None:
    assert {"ncuflow.read.extract", "ncuflow.analyze.classify", "ncuflow.output.export"} <= set(READ_SIDE)


@pytest.mark.parametrize("module", READ_SIDE)
def test_read_side_never_imports_torch_triton_or_subprocess(module: str) -> None:
    reached = _top_levels(_closure(module))
    assert not reached & {"torch", "triton", "subprocess"}, sorted(reached & {"torch", "triton", "subprocess"})


@pytest.mark.parametrize("module", PROFILING_PATH)
def test_profiling_path_never_imports_polars(module: str) -> None:
    assert "polars" not in _top_levels(_closure(module))


@pytest.mark.parametrize("module", [m for m in SOURCES if not m.startswith("ncuflow.cli") and m != "ncuflow.__main__"])
def test_library_never_imports_the_cli(module: str) -> None:
    assert not any(name.startswith("ncuflow.cli") for name in GRAPH[module])


@pytest.mark.parametrize("module", [m for m in SOURCES if m.startswith("ncuflow.kernels")])
def test_cells_know_nothing_of_analysis(module: str) -> None:
    forbidden = {"ncuflow.read.extract", "ncuflow.analyze.classify", "ncuflow.output.export", "ncuflow.analyze.stability", "ncuflow.analyze.explain", "polars"}
    assert not {name for name in GRAPH[module] if name.split(".")[0] == "polars" or name in forbidden}


def test_profiling_modules_import_with_polars_blocked() -> None:
    """The same check at run time: the GPU host has no polars."""
    code = (
        "import sys; sys.modules['polars'] = None\n"
        + "".join(f"import {m}\n" for m in PROFILING_PATH
                  if m not in {"ncuflow.cells.cellrun", "ncuflow.kernels._flashinfer", "ncuflow.kernels._xqa"})  # the latter two need flashinfer
        + "import ncuflow.output.render, ncuflow.read.extract, ncuflow.analyze.classify\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr


def test_the_gpu_hosts_commands_run_without_polars(corpus_dir: Path) -> None:
    """The GPU host has no polars: the study script's stability and classify steps must run."""
    report = corpus_dir / "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep"
    for args in (["classify", str(report)], ["stability", str(report)]):
        code = "import sys; sys.modules['polars'] = None\nfrom ncuflow.cli import main\nmain(sys.argv[1:])"
        result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stderr
        assert "kernel_conv2d_baseline" in result.stdout
