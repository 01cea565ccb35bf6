"""Functions stay short enough to read at once and take options as records, not by the dozen.

- no function outside ``ncuflow/cli/`` takes more than 8 parameters (``self``/``cls`` not
  counted); a Triton kernel (``@triton.jit``) is exempt: its parameters are its launch
  arguments, pointers and strides the GPU needs one by one;
- at most 6 functions in the package run over 60 lines (the whole ``def``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ncuflow", "kernels")
MAX_PARAMETERS = 8
LONG_LINES = 60
MAX_LONG_FUNCTIONS = 6

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions() -> Iterator[tuple[Path, Function]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield path, node


def _parameters(function: Function) -> list[str]:
    args = function.args
    named = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    return [a.arg for a in named if a.arg not in ("self", "cls")]


def _is_triton_kernel(function: Function) -> bool:
    return any(ast.unparse(d).startswith(("triton.jit", "jit")) for d in function.decorator_list)


def _where(path: Path, function: Function) -> str:
    return f"{path.relative_to(ROOT)}:{function.lineno} {function.name}"


def test_no_function_outside_the_cli_takes_more_than_eight_parameters() -> None:
    cli = ROOT / "ncuflow" / "cli"
    wide = [
        f"{_where(path, function)} ({len(_parameters(function))} parameters)"
        for path, function in _functions()
        if cli not in path.parents and not _is_triton_kernel(function)
        and len(_parameters(function)) > MAX_PARAMETERS
    ]
    assert not wide, "group these parameters into an options record:\n" + "\n".join(wide)


def test_at_most_six_functions_run_over_sixty_lines() -> None:
    long = sorted(
        (function.end_lineno - function.lineno + 1, _where(path, function))
        for path, function in _functions()
        if function.end_lineno is not None and function.end_lineno - function.lineno + 1 > LONG_LINES
    )
    assert len(long) <= MAX_LONG_FUNCTIONS, "split these functions:\n" + "\n".join(f"{n} lines: {w}" for n, w in long)


def test_the_rules_see_the_code() -> None:
    """The walk finds the package's functions, the kernels and the CLI's commands (a rule
    that reads nothing would pass forever)."""
    found = list(_functions())
    assert len(found) > 1000
    assert sum(_is_triton_kernel(f) for _, f in found) >= 5
    assert any(p.parent.name == "cli" and f.name == "profile_command" for p, f in found)
