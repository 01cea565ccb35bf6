"""The examples of the README and docs/compare.md are what ncuflow prints.

Every line under a `$ ncuflow ...` command in those pages must be a line of the command's
real output, in order (an excerpt may leave lines out, never reword or invent one); the
commands run where the page says (the repository, the reports' folder, or a `$ cd` before).
Every README example runs on the data that ships with the project (no shared corpus).
"""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.cli import cli

REPO = Path(__file__).resolve().parent.parent


def _examples(page: Path, command_name: str = "compare") -> list[tuple[str, Path, list[str]]]:
    """(command, where it runs, the lines shown under it) for every example of a page whose
    command starts with ``ncuflow COMMAND_NAME`` ("" for every ncuflow command)."""
    found: list[tuple[str, Path, list[str]]] = []
    text = page.read_text()
    fenced = re.findall(r"```\n(.*?)```", text, flags=re.S)
    indented = ["\n".join(line[4:] for line in block.splitlines()) for block in re.findall(r"(?m)(?:^    .*\n)+", text)]
    for block in (*fenced, *indented):
        lines = block.splitlines()
        where = REPO
        for index, line in enumerate(lines):
            if line.startswith("$ cd "):
                where = REPO / line[5:].strip()
            elif line.startswith(f"$ ncuflow {command_name}"):
                command, rest = line[2:], index + 1
                while command.endswith("\\"):
                    command, rest = command[:-1] + lines[rest].strip(), rest + 1
                shown = [x.rstrip() for x in lines[rest:] if x.strip() and not x.startswith("$ ")]
                found.append((command, where, shown))
    return found


def _run(command: str, where: Path, corpus_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    args = shlex.split(command)[1:]
    folder = where if any((where / a).exists() or glob.glob(str(where / a)) for a in args) else corpus_dir
    monkeypatch.chdir(folder)
    expanded = [match for a in args for match in (sorted(glob.glob(a)) or [a])]
    result = CliRunner().invoke(cli, expanded)
    assert result.exit_code == 0, result.output
    return [line.rstrip() for line in result.output.splitlines()]


def _check(page: str, examples: list[tuple[str, Path, list[str]]], corpus_dir: Path,
           monkeypatch: pytest.MonkeyPatch) -> None:
    assert examples, page
    for command, where, shown in examples:
        printed = _run(command, where, corpus_dir, monkeypatch)
        position = 0
        for line in shown:
            assert line in printed[position:], f"{page}: {command}: not printed (or out of order): {line!r}"
            position = printed.index(line, position) + 1


def test_compare_examples_are_what_compare_prints(corpus_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _check("docs/compare.md", _examples(REPO / "docs/compare.md"), corpus_dir, monkeypatch)


def test_every_readme_example_runs_as_written_on_committed_data(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Each `$ ncuflow ...` of the README, run from the repository (its paths are committed data:
    a missing corpus cannot be what it reads), prints the lines the README shows under it."""
    examples = _examples(REPO / "README.md", "")
    assert len(examples) >= 4
    for command, where, _ in examples:
        assert where == REPO and "../shared" not in command, command
    _check("README.md", examples, tmp_path / "no-corpus", monkeypatch)
