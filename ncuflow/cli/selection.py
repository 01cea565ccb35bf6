"""``--kernel REGEX`` and ``--nvtx RANGE``: the launch selection every reading command takes.

Commands with the tolerance options already get ``--kernel`` there (``ncuflow.cli.options``)
and take ``nvtx_option`` alone; the others take ``selection_options``. Either way the
values become one ``ncuflow.analyze.selection.Selection`` where they enter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

KERNEL_HELP = "Only launches whose kernel name matches this regular expression."
NVTX_HELP = ("Only launches inside this NVTX range: a range name (domain@name for a named domain) at any depth, "
             "or OUTER/INNER for a range nested in another.")


def nvtx_option(function: F) -> F:
    return click.option("--nvtx", default=None, metavar="RANGE", help=NVTX_HELP)(function)


def selection_options(function: F) -> F:
    """``--kernel REGEX`` and ``--nvtx RANGE``."""
    function = nvtx_option(function)
    return click.option("--kernel", default=None, metavar="REGEX", help=KERNEL_HELP)(function)


def selection_from(kernel: str | None, nvtx: str | None) -> Any:
    """The options as one ``Selection`` (a bad regular expression or empty range refused here)."""
    from ncuflow.analyze.selection import Selection

    return Selection(kernel=kernel, nvtx=nvtx)
