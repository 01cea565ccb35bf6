"""The ``ncuflow`` command line: a thin click layer over the library.

Commands live in small modules and are imported only when invoked, so that
``ncuflow profile`` on a GPU host never imports polars and ``ncuflow --help`` stays fast.
Every ``NcuflowError`` becomes its one-paragraph message on stderr and a non-zero exit,
never a traceback; so does click's own refusal of a command line (``usage_paragraph``, exit 2).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from typing import Any

import click

from ncuflow import __version__
from ncuflow.errors import NcuflowError

# command name -> "module:attribute" of its click command
COMMANDS: dict[str, str] = {
    "classify": "ncuflow.cli.read_cmds:classify_command",
    "export": "ncuflow.cli.read_cmds:export_command",
    "cells": "ncuflow.cli.cells_cmd:cells_command",
    "profile": "ncuflow.cli.profile_cmds:profile_command",
    "doctor": "ncuflow.cli.profile_cmds:doctor_command",
    "time": "ncuflow.cli.cells_cmd:time_command",
    "sweep": "ncuflow.cli.profile_cmds:sweep_command",
    "stability": "ncuflow.cli.analysis_cmds:stability_command",
    "explain": "ncuflow.cli.analysis_cmds:explain_command",
    "report": "ncuflow.cli.analysis_cmds:report_command",
    "compare": "ncuflow.cli.compare_cmd:compare_command",
    "gate": "ncuflow.cli.gate_cmd:gate_command",
    "summary": "ncuflow.cli.summary_cmd:summary_command",
    "source": "ncuflow.cli.source_cmd:source_command",
    "roofline": "ncuflow.cli.roofline_cmd:roofline_command",
    "phases": "ncuflow.cli.phases_cmd:phases_command",
    "phases-record": "ncuflow.cli.record_cmd:record_command",
    "store": "ncuflow.cli.store_cmd:store_group",
    "passes": "ncuflow.cli.passes_cmd:passes_command",
}

SHORT_HELP: dict[str, str] = {
    "classify": "Per-launch counters and the critical-path verdict of reports.",
    "export": "Write the launches table (and raw metrics) of reports to parquet.",
    "cells": "List the kernel cells, their parameters, defaults and availability.",
    "profile": "Run a cell (or any program) under ncu with replay and store the run.",
    "doctor": "Check ncu, ncu_report, the GPU, counter permission and versions.",
    "time": "Time a cell with CUDA events, without ncu.",
    "sweep": "Profile every point of a sweep file; resumable.",
    "stability": "Replay stability of cells or stored runs.",
    "explain": "Does a parameter change the work, and is it on the critical path?",
    "report": "Markdown report and plots of a profile store.",
    "compare": "Compare the kernels of two reports, runs or stores against the noise.",
    "gate": "Fail a CI job when a kernel does more work or gets slower than its baseline.",
    "summary": "Per report, the kernels that take the GPU time, with their verdicts.",
    "source": "Per launch, the hot SASS instructions and source lines from source counters.",
    "roofline": "Hierarchical roofline (DRAM, L2, L1) of reports as a PNG.",
    "phases": "Split serving traces into admission ramp, steady decode and drain.",
    "phases-record": "Record per-request streaming timestamps from an OpenAI-compatible server.",
    "store": "Check a profile store for damaged runs (and move them aside).",
    "passes": "Replay passes a collection costs on a chip (Perfworks, offline), or reports recorded.",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        module = importlib.import_module(module_name)
        command: click.Command = getattr(module, attribute)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, SHORT_HELP.get(name, "")) for name in COMMANDS]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ncuflow")
def cli() -> None:
    """Profile the smallest decisive kernel cell under Nsight Compute, check that
    re-profiling gives the same counters, and say which wall binds."""
    _store_warnings_as_lines()


def _store_warnings_as_lines() -> None:
    """Each warning about the user's input (``NcuflowWarning``: a damaged run a command skips, a
    report's cut-off action) is one ``ncuflow: warning:`` line on stderr (once)."""
    import warnings

    from ncuflow.errors import NcuflowWarning

    previous = warnings.showwarning
    if getattr(previous, "ncuflow_lines", False):
        return
    shown: set[str] = set()

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        if not issubclass(category, NcuflowWarning):
            previous(message, category, filename, lineno, file, line)
        elif str(message) not in shown:
            # imported here, not at start-up: --help and --version need none of ncuflow.files
            from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text

            shown.add(str(message))
            click.echo(f"ncuflow: warning: {safe_text(message, limit=SENTENCE_CHARS)}", err=True)

    show.ncuflow_lines = True  # type: ignore[attr-defined]
    warnings.showwarning = show
    warnings.simplefilter("always", NcuflowWarning)


def _streams_never_fail() -> None:
    """A character the terminal's encoding lacks (a path with 'é' under ``PYTHONIOENCODING=ascii``,
    a name with a byte that is not UTF-8, a '≤' in a table) is written escaped, never a traceback."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # a TextIOWrapper's; a test's capture may lack it
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")


# polars' allocator (jemalloc, read from this variable when polars is first imported): give
# freed memory back at once, from one arena. Without it an export of a store ten times the
# size keeps what its frames freed: 1.22x the peak memory of the store once over the whole
# process tree (one process, its true peak: 1.20x); with it 1.11x (1.15x), for 3-14 % more
# time (docs/scaling.md).
POLARS_ALLOCATOR_VARIABLE = "_RJEM_MALLOC_CONF"
POLARS_ALLOCATOR = "narenas:1,tcache:false,dirty_decay_ms:0,muzzy_decay_ms:0"
# What polars writes into the variable as it is imported (its own defaults first, then what
# was there): a process started by one that imported polars inherits it.
_POLARS_OWN_DEFAULTS = "dirty_decay_ms:500,muzzy_decay_ms:1000"


def bound_polars_memory() -> None:
    """Set polars' allocator for this process, before anything imports polars. Options the
    user set in the variable come after ncuflow's, so theirs win (jemalloc takes the last);
    polars' own defaults inherited from a parent process are not the user's and are dropped."""
    inherited = os.environ.get(POLARS_ALLOCATOR_VARIABLE, "")
    users = inherited.removeprefix(_POLARS_OWN_DEFAULTS).lstrip(",")
    os.environ[POLARS_ALLOCATOR_VARIABLE] = ",".join(part for part in (POLARS_ALLOCATOR, users) if part)


def main(argv: list[str] | None = None) -> Any:
    bound_polars_memory()
    _streams_never_fail()
    try:
        return cli.main(args=argv, prog_name="ncuflow", standalone_mode=False)
    except NcuflowError as error:  # a paragraph may quote a kernel name or a file's content: shown safe
        from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text

        click.echo(f"ncuflow: {safe_text(error, limit=SENTENCE_CHARS)}", err=True)
        sys.exit(error.exit_code)
    except OSError as error:  # the last net: an OS error is a paragraph, never a traceback
        from ncuflow.files import os_error

        click.echo(f"ncuflow: {os_error(error, error.filename, 'use')}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("ncuflow: interrupted.", err=True)
        sys.exit(130)
    except click.UsageError as error:  # an unknown option, a bad value, a missing argument: click's own refusals
        if isinstance(error, _HELP_FOR_NO_ARGUMENTS):  # a bare `ncuflow` or `ncuflow store`: its help, as it was
            error.show()
        else:
            click.echo(f"ncuflow: {usage_paragraph(error)}", err=True)
        sys.exit(error.exit_code)
    except click.ClickException as error:
        from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text

        click.echo(f"ncuflow: {safe_text(error.format_message(), limit=SENTENCE_CHARS)}", err=True)
        sys.exit(error.exit_code)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)


# click 8.2 and newer: a group run without a command raises this (its help, shown on stderr); 8.1 exits.
_HELP_FOR_NO_ARGUMENTS: tuple[type[click.UsageError], ...] = tuple(
    getattr(click.exceptions, name) for name in ("NoArgsIsHelpError",) if hasattr(click.exceptions, name))


def usage_paragraph(error: click.UsageError) -> str:
    """Click's refusal of a command line as ncuflow's one paragraph: the command, what click says
    (the option or argument and what is wrong with it), and where its options are listed. Its
    exit status stays click's (2, as every ncuflow error of input or usage)."""
    from ncuflow.files.safe_text import SENTENCE_CHARS, safe_text

    command = error.ctx.command_path if error.ctx is not None else "ncuflow"
    said = safe_text(error.format_message(), limit=SENTENCE_CHARS)
    said = said[:1].lower() + said[1:]
    group = error.ctx is None or isinstance(error.ctx.command, click.Group)
    takes = "commands and options" if group else "options and arguments"
    return f"`{command}` cannot run as asked: {said} See `{command} --help` for the {takes} it takes."


# Where one of these is loaded, its own exit handlers matter (Ray's shutdown, CUDA's teardown).
_TEARDOWN_MODULES = ("ray", "torch", "triton")


def run() -> None:
    """The ``ncuflow`` console script: ``main``, then its exit status (``python -m ncuflow``, which
    code may also run in its own process through ``runpy``, exits as Python does).

    Once the command is done (its outputs written and renamed, its workers stopped) and nothing
    else runs (one thread, no child process, none of ``_TEARDOWN_MODULES``), the process ends as
    soon as stdout and stderr are flushed, without the interpreter's teardown of every module it
    imported: ~45 ms after an export (polars' modules), ~15 ms after classify, of a command that
    takes ~0.2 s on a small report. Elsewhere it exits as Python does."""
    try:
        code = main()
    except SystemExit as done:
        code = done.code
    # click's non-standalone mode returns the exit status of `raise Exit(n)` instead of exiting;
    # it is passed on, or `ncuflow doctor --strict` would always exit 0.
    if not _nothing_left_running():
        sys.exit(code)
    status = code if isinstance(code, int) else 0 if code is None else 1
    if not isinstance(code, int) and code is not None:
        print(code, file=sys.stderr)  # what sys.exit does with a message
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a reader that went away (`| head`): nothing more to say
            stream.flush()
    os._exit(status)


def _nothing_left_running() -> bool:
    import threading

    if threading.active_count() > 1 or any(name in sys.modules for name in _TEARDOWN_MODULES):
        return False
    multiprocessing = sys.modules.get("multiprocessing")
    return multiprocessing is None or not multiprocessing.active_children()
