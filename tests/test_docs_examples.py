"""The compare examples of the README and docs/compare.md are what `ncuflow compare` prints.

Every line under a `$ ncuflow compare ...` command in those pages must be a line of the
command's real output, in order (an excerpt may leave lines out, never reword or invent
one); the commands run where the page says (the reports' folder, or a `$ cd` before).
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


def _examples(page: Path) -> list[tuple[str, Path, list[str]]]:
    """(command, where it runs, the lines shown under it) for every compare example of a page."""
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
            elif line.startswith("$ ncuflow compare"):
                command, rest = line[2:], index + 1
                while command.endswith("\\"):
                    command, rest = command[:-1] + lines[rest].strip(), rest + 1
                shown = [x.rstrip() for x in lines[rest:] if x.strip() and not x.startswith("$ ")]
                found.append((command, where, shown))
    return found


def _run(command: str, where: Path, corpus_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    args = shlex.split(command)[2:]
    folder = where if any((where / a).exists() or glob.glob(str(where / a)) for a in args) else corpus_dir
    monkeypatch.chdir(folder)
    expanded = [match for a in args for match in (sorted(glob.glob(a)) or [a])]
    result = CliRunner().invoke(cli, ["compare", *expanded])
    assert result.exit_code == 0, result.output
    return [line.rstrip() for line in result.output.splitlines()]


@pytest.mark.parametrize("page", ["README.md", "docs/compare.md"])
def test_compare_examples_are_what_compare_prints(page: str, corpus_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    examples = _examples(REPO / page)
    assert examples, page
    for command, where, shown in examples:
        printed = _run(command, where, corpus_dir, monkeypatch)
        position = 0
        for line in shown:
            assert line in printed[position:], f"{page}: {command}: not printed (or out of order): {line!r}"
            position = printed.index(line, position) + 1
