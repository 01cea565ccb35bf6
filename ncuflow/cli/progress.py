"""Progress of the reading commands' long work: a rich bar on stderr, nothing when piped.

``report`` (reading, then drawing a few dozen plots), ``export`` (reading, then writing the
tables), ``passes REPORT...``, ``classify``, ``explain`` and ``stability`` over folders can
take from a few seconds to minutes. While stderr is a terminal a transient bar says what is
being done and how far it is; when stderr is a file or a pipe nothing is written, so the
output a script reads is the same with or without it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

Step = Callable[[int, Path], None]  # (index of the item done, its path): what the library calls


def showing() -> bool:
    """Whether a bar is drawn: only on a terminal."""
    return sys.stderr.isatty()


class Bar:
    """One transient bar whose task can be renamed and re-sized between the stages of a command.
    Off a terminal it draws nothing and costs nothing (rich's progress is not even imported)."""

    def __init__(self, progress: Any) -> None:
        self._progress = progress
        self._task: Any = None

    def stage(self, description: str, total: int | None) -> Step:
        """Start a stage of ``total`` items; the returned step advances it (``label`` names the item)."""
        progress = self._progress
        if progress is None:
            return _no_step
        from ncuflow.files.safe_text import markup_text

        if self._task is not None:
            progress.remove_task(self._task)
        described = markup_text(description)  # the bar's text is rich markup: a file named r[x].ncu-rep shows so
        self._task = progress.add_task(described, total=total)
        task = self._task

        def step(index: int, path: Path) -> None:
            progress.update(task, completed=index + 1, description=f"{described}: {markup_text(Path(path).name)}")

        return step


def _no_step(index: int, path: Path) -> None:
    """What a stage's step does when no bar is drawn."""


@contextmanager
def progress_bar() -> Iterator[Bar]:
    """A ``Bar`` for the block: drawn on stderr only when it is a terminal, gone when the block ends."""
    if not showing():
        yield Bar(None)
        return
    from rich.console import Console

    with reading_progress(Console(stderr=True)) as progress:
        yield Bar(progress)


def reading_progress(console: Any) -> Any:
    """The bar's columns on ``console``: what is done (its description, rich markup), the bar, done/total,
    elapsed time; gone from the terminal when it stops."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)
