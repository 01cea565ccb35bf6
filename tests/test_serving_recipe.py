"""docs/serving-profiling.md, the LLM-server recipe, run as far as a machine without a GPU allows:
every `ncuflow profile` line of it is a valid command whose ncu command line carries what the
recipe says it does (with the fake ncu, as a --dry-run), and its first command runs end to end
(the fake ncu writes a real report, the run is stored and classified)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ncuflow import store

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "serving-profiling.md"
FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
REPORT = "yzwang2000__cudaCode__profile.ncu-rep"
# ncuflow's option -> what the ncu command then holds (the option's value after it, or these words)
PASSED_ON = {"--launch-skip": "--launch-skip", "--launch-count": "--launch-count",
             "--graph-profiling": "--graph-profiling", "--nvtx": "--nvtx-include"}


def recipe_commands() -> list[list[str]]:
    """The `ncuflow profile` command lines of the page, as argv after `ncuflow`."""
    lines = [line.strip() for line in PAGE.read_text().splitlines() if line.startswith("    ncuflow profile")]
    return [shlex.split(line)[1:] for line in lines]


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NCU_")}
    return subprocess.run([sys.executable, "-m", "ncuflow", *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={**clean, "COLUMNS": "200", **env})


def _with(argv: list[str], *extra: str) -> list[str]:
    """``extra`` options put before the program's own arguments (after `--` they would be its)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    return [*argv[:cut], *extra, *argv[cut:]]


def test_the_recipe_shows_every_part_it_promises() -> None:
    used = {word for argv in recipe_commands() for word in argv if word.startswith("--")}
    assert {"--kernel", "--launch-skip", "--launch-count", "--timeout", "--nvtx", "--graph-profiling",
            "--attach"} <= used


@pytest.mark.parametrize("argv", recipe_commands(), ids=lambda argv: " ".join(argv)[:60])
def test_each_recipe_command_gives_the_ncu_command_it_describes(argv: list[str], tmp_path: Path) -> None:
    ran = _run(_with(argv, "--dry-run", "--store", str(tmp_path / "p"), "--ncu", str(FAKE_NCU)),
               {"FAKE_NCU_VERSION": "2026.2.1.0"})
    assert ran.returncode == 0, ran.stderr
    ncu = shlex.split(ran.stdout.strip().splitlines()[0])
    mine = argv[:argv.index("--")] if "--" in argv else argv
    for option, flag in PASSED_ON.items():
        if option in mine:
            assert ncu[ncu.index(flag) + 1] == mine[mine.index(option) + 1]
    if "--kernel" in mine:
        assert ncu[ncu.index("--kernel-name") + 1] == "regex:" + mine[mine.index("--kernel") + 1]
    if "--attach" in mine:
        assert ncu[1:5] == ["--mode", "attach", "--process-id", mine[mine.index("--attach") + 1]]
    else:
        assert ncu[-len(argv[argv.index("--") + 1:]):] == argv[argv.index("--") + 1:]  # the program, as given
    assert ncu[ncu.index("--target-processes") + 1] == "all"  # the engine's workers are children
    assert not (tmp_path / "p").exists()


def test_the_first_recipe_command_runs_end_to_end_with_the_fake_ncu(corpus_dir: Path, tmp_path: Path) -> None:
    argv = recipe_commands()[0]
    calls = tmp_path / "calls.jsonl"
    ran = _run(_with(argv, "--store", str(tmp_path / "p")),
               {"NCU": str(FAKE_NCU), "FAKE_NCU_REPORT": str(corpus_dir / REPORT), "FAKE_NCU_CALLS": str(calls)})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (run,) = store.iter_runs(tmp_path / "p")
    assert run.manifest.collection.options.launch_skip == 200 and run.manifest.collection.options.launch_count == 40
    (profiled,) = [json.loads(line) for line in calls.read_text().splitlines() if "--export" in line]
    program = argv[argv.index("--") + 1:]
    assert profiled[-len(program):] == program
    assert "kernel_A" in ran.stdout  # the stored run's classify table
