"""click's own refusals of a command line (an unknown option or command, a value of the wrong type,
a missing argument) are one ``ncuflow:`` paragraph, as every ncuflow error: the command, what
is wrong (click's reason, naming the option or argument) and where its options are listed; exit 2,
the status of ncuflow's own usage errors. The cases are derived from the command list
(``ncuflow.cli.COMMANDS``, each group's subcommands) and each command's parameters."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from ncuflow.cli import COMMANDS, POLARS_ALLOCATOR_VARIABLE, cli, main
from ncuflow.errors import UsageError

NOT_A_VALUE = "abc"
# Option types that refuse NOT_A_VALUE while converting it (before any callback of the command runs).
_TYPED = (click.types.IntParamType, click.types.FloatParamType, click.Choice)


@dataclass(frozen=True)
class Case:
    path: tuple[str, ...]  # the command's words after `ncuflow`
    kind: str
    args: tuple[str, ...]  # after the command's words
    named: str  # the option, argument or command the paragraph must name

    @property
    def command(self) -> str:
        return " ".join(("ncuflow", *self.path))


def _commands() -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command and group under ``ncuflow`` (groups' subcommands included), by its words."""
    context = click.Context(cli, info_name="ncuflow")
    found: list[tuple[tuple[str, ...], click.Command]] = []
    pending: list[tuple[tuple[str, ...], click.Command]] = [
        ((name,), command) for name in COMMANDS if (command := cli.get_command(context, name)) is not None]
    while pending:
        path, command = pending.pop(0)
        found.append((path, command))
        if isinstance(command, click.Group):
            inner = click.Context(command, info_name=path[-1])
            pending += [((*path, name), sub) for name in command.list_commands(inner)
                        if (sub := command.get_command(inner, name)) is not None]
    return found


def _typed_option(command: click.Command) -> click.Option | None:
    """The first option whose type refuses NOT_A_VALUE (a number, a choice that does not hold it)."""
    for param in command.params:
        if isinstance(param, click.Option) and not param.is_flag and param.nargs == 1 \
                and isinstance(param.type, _TYPED) \
                and not (isinstance(param.type, click.Choice) and NOT_A_VALUE in param.type.choices):
            return param
    return None


def _cases() -> list[Case]:
    cases = [Case((), "unknown command", ("no-such-command",), "no-such-command")]
    for path, command in _commands():
        if isinstance(command, click.Group):
            cases.append(Case(path, "unknown command", ("no-such-command",), "no-such-command"))
            continue
        cases.append(Case(path, "unknown option", ("--no-such-option",), "--no-such-option"))
        required = [p for p in command.params if isinstance(p, click.Argument) and p.required]
        if required:
            cases.append(Case(path, "missing argument", (), required[0].human_readable_name))
        option = _typed_option(command)
        if option is not None:
            cases.append(Case(path, "bad value", (option.opts[-1], NOT_A_VALUE), option.opts[-1]))
    return cases


CASES = _cases()


def _click_says(argv: list[str]) -> str:
    """click's own reason for refusing ``argv`` (what its "Error:" line said)."""
    with pytest.raises(click.UsageError) as refused:
        cli.main(args=argv, prog_name="ncuflow", standalone_mode=False)
    return refused.value.format_message()


def test_the_cases_cover_every_kind_of_refusal() -> None:
    kinds = {case.kind for case in CASES}
    assert kinds == {"unknown command", "unknown option", "missing argument", "bad value"}
    assert {case.path[0] for case in CASES if case.path} == set(COMMANDS)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.command.removeprefix('ncuflow').strip() or '-'}:{c.kind}")
def test_a_refused_command_line_is_one_ncuflow_paragraph(case: Case, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(POLARS_ALLOCATOR_VARIABLE, "")  # main sets it for this process: restored after
    argv = [*case.path, *case.args]
    said = _click_says(argv)
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main(argv)
    out, err = capsys.readouterr()
    assert done.value.code == UsageError.exit_code == click.UsageError.exit_code
    assert out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"ncuflow: `{case.command}` ") and f"see `{case.command} --help`" in err.lower()
    assert case.named in err and said[:1].lower() + said[1:] in err
    assert "Usage:" not in err and "Error:" not in err and "Traceback" not in err


@pytest.mark.parametrize("command", [("passes",), ("classify",), ("classify", "--reader", "ncu_report"), ("summary",)])
def test_a_warning_about_the_input_is_one_ncuflow_line(
    command: tuple[str, ...], tmp_path: Path, corpus_dir: Path
) -> None:
    """A report cut off inside its last action: the commands that read it say so in one
    ``ncuflow: warning:`` line (``NcuflowWarning``), never Python's warning with a source path —
    not from the reading server's warm-up read either (its stderr is the user's)."""
    import subprocess
    import sys

    from ncuflow.read.reportfile import DamagedActionWarning

    source = min((p for p in corpus_dir.glob("*.ncu-rep")), key=lambda p: p.stat().st_size)
    cut = tmp_path / "cut.ncu-rep"
    cut.write_bytes(source.read_bytes()[: int(source.stat().st_size * 0.8)])
    done = subprocess.run([sys.executable, "-m", "ncuflow", *command, str(cut)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    warned = [line for line in done.stderr.splitlines() if "damaged" in line]
    assert warned and all(line.startswith(("ncuflow: warning: ", "ncuflow: note: ")) for line in warned), done.stderr
    assert DamagedActionWarning.__name__ not in done.stderr and ".py:" not in done.stderr, done.stderr
    assert len(warned) == len(set(warned)), done.stderr  # once
