"""Fault injection, the working directory (issue 31): run from a folder that holds a directory
named ``ncuflow`` (a clone beside one's work, an empty folder, one whose ``__init__`` fails),
every process ncuflow starts imports the installed package, and the output is the one the
same command gives anywhere else.

Before: the worker server (``python -c``, the current folder first on ``sys.path``) imported
the folder's ``ncuflow``; ``classify`` of the shared corpus exited 2 blaming a report, and the
cell runner under ncu (``python -m``) imported it too. Each case runs the ``ncuflow`` console
script, what a user types, under the fault suite's limits (``tests.hostile.run_limited``).
"""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from tests.hostile import FIGURES, fake_ncu_env, figures_line, run_limited

CONSOLE_SCRIPT = Path(sys.executable).parent / "ncuflow"
FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
SMALL = "yzwang2000__cudaCode__profile.ncu-rep"
TWO = [SMALL, "AveryClapp__ESMM-Research__profile.ncu-rep"]
SEEN: Counter[str] = Counter()
# What a folder's ``ncuflow/`` may hold: nothing, a package that fails on import, a copy of the source.
SHADOWS = ["empty", "failing", "clone"]


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("working-directory figures", SEEN), figures_line("fault suite so far", FIGURES))


def _shadowed_folder(base: Path, kind: str) -> Path:
    """A folder holding a directory named ``ncuflow`` of ``kind``."""
    folder = base / f"work-{kind}"
    shadow = folder / "ncuflow"
    if kind == "clone":
        shutil.copytree(Path(__file__).resolve().parent.parent / "ncuflow", shadow,
                        ignore=shutil.ignore_patterns("__pycache__"))
        (shadow / "__init__.py").write_text('raise SystemExit("the folder\'s own ncuflow was imported")\n')
    else:
        shadow.mkdir(parents=True)
        if kind == "failing":
            (shadow / "__init__.py").write_text('raise SystemExit("the folder\'s own ncuflow was imported")\n')
    return folder


def _commands(corpus_dir: Path, out: Path) -> dict[str, list[str]]:
    return {
        "classify corpus": ["classify", str(corpus_dir)],
        "classify ncu_report": ["classify", "--reader", "ncu_report", *(str(corpus_dir / name) for name in TWO)],
        "export corpus": ["export", str(corpus_dir), "-o", str(out / "x.parquet")],
    }


def _table(path: Path) -> pl.DataFrame:
    return pl.read_parquet(path)


@pytest.mark.skipif(not CONSOLE_SCRIPT.exists(), reason="the ncuflow console script is not installed beside python")
@pytest.mark.parametrize("shadow", SHADOWS)
def test_commands_from_a_folder_holding_ncuflow_give_the_same_output(corpus_dir: Path, tmp_path: Path,
                                                                     shadow: str) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    folder = _shadowed_folder(tmp_path, shadow)
    for name, argv in _commands(corpus_dir, tmp_path).items():
        reference = run_limited(argv, command=[str(CONSOLE_SCRIPT), *argv], cwd=plain, case="cwd-reference")
        assert reference.code == 0 and not reference.traceback, reference.output[-2000:]
        written = _table(tmp_path / "x.parquet") if name.startswith("export") else None
        ran = run_limited(argv, command=[str(CONSOLE_SCRIPT), *argv], cwd=folder, case=f"cwd-{shadow}")
        same = (ran.code, ran.stdout) == (reference.code, reference.stdout)
        if name.startswith("export"):
            same = same and written is not None and _table(tmp_path / "x.parquet").equals(written)
        SEEN["runs_from_a_folder_holding_ncuflow"] += 1
        SEEN["outputs_differing"] += not same
        assert not ran.traceback and "own ncuflow was imported" not in ran.output, ran.output[-3000:]
        assert same, (name, ran.code, ran.output[-3000:])


@pytest.mark.skipif(not CONSOLE_SCRIPT.exists(), reason="the ncuflow console script is not installed beside python")
def test_the_cell_runner_under_ncu_imports_the_installed_package(corpus_dir: Path, tmp_path: Path) -> None:
    """The fake ncu runs the program (``FAKE_NCU_RUN_APP``): without a GPU the installed cell runner
    says so in one paragraph; the folder's own ``ncuflow`` would fail on import instead."""
    folder = _shadowed_folder(tmp_path, "failing")
    argv = ["profile", "copy_bandwidth:mib=16", "--store", str(tmp_path / "store"), "--ncu", str(FAKE_NCU)]
    env = fake_ncu_env(corpus_dir / SMALL, tmp_path / "calls.jsonl", FAKE_NCU_RUN_APP="1")
    ran = run_limited(argv, command=[str(CONSOLE_SCRIPT), *argv], cwd=folder, env=env, case="cwd-cellrun")
    SEEN["runs_from_a_folder_holding_ncuflow"] += 1
    assert not ran.traceback and "own ncuflow was imported" not in ran.output, ran.output[-3000:]
    assert ran.paragraph() and "no CUDA GPU here" in ran.stderr, ran.output[-3000:]
