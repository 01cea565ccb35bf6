"""docs/study.md's CPU-side steps run as written: log -> phases -> shapes -> sweep file -> sweep
--dry-run. Every line shown under a `$ ncuflow ...` command is a line of its real output, in
order (an excerpt may leave lines out, never reword or invent one)."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from tests.test_phases_shapes import phases

PAGE = Path(__file__).resolve().parent.parent / "docs" / "study.md"


def examples() -> list[tuple[str, list[str]]]:
    found = []
    for block in re.findall(r"```\n(.*?)```", PAGE.read_text(), flags=re.S):
        lines = block.splitlines()
        command = lines[0]
        assert command.startswith("$ ncuflow "), command
        found.append((command[2:], [x.rstrip() for x in lines[1:] if x.strip()]))
    return found


def run(command: str, logs: Path) -> tuple[int, str]:
    from click.testing import CliRunner

    from ncuflow.cli import cli
    from ncuflow.errors import NcuflowError

    args = shlex.split(command.replace("$LOGS", str(logs)))[1:]
    if args[0] == "phases":
        return phases(*args[1:])
    result = CliRunner().invoke(cli, args)
    if isinstance(result.exception, NcuflowError):
        return result.exception.exit_code, str(result.exception)
    return result.exit_code, result.output


def test_the_study_walk_runs_as_written(serving_logs_dir: Path, tmp_path: Path) -> None:
    walk = examples()
    commands = [c.split()[1] for c, _ in walk]
    assert commands == ["phases", "phases", "phases", "sweep"]  # log, shapes, sweep file, dry run
    os.chdir(tmp_path)  # the sweep file is written where the page says: sweep.toml here
    for command, shown in walk:
        code, out = run(command, serving_logs_dir)
        assert code == 0, (command, out)
        real = [line.rstrip() for line in out.splitlines()]
        position = 0
        for line in shown:
            assert line in real[position:], f"{command}: {line!r} is not in its output (in order)"
            position = real.index(line, position) + 1
    assert (tmp_path / "sweep.toml").read_text().startswith("# ncuflow sweep file")

