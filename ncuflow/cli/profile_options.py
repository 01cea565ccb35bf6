"""The options that make a ``ProfileSettings`` (built once, here, from the command line, and
passed down): the profile commands' shared options. Kept apart from ``options`` so that the
read commands never import the profiling path."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from ncuflow.cli.options import threshold_option, timeout_option
from ncuflow.profile import DEFAULT_TIMEOUT_S

F = TypeVar("F", bound=Callable[..., Any])


def settings_options(function: F | None = None, *, timeout_default: float | None = DEFAULT_TIMEOUT_S) -> Any:
    """--store, --cells-dir, --ncu, --timeout, --threshold, --chip and --escalate/--no-escalate:
    what ``profile_settings`` makes a ``ProfileSettings`` of."""
    def decorate(command: F) -> F:
        options = [
            click.option("--store", "store_root", type=click.Path(file_okay=False, path_type=Path),
                         default=Path("profiles"), show_default=True, help="Profile store root."),
            click.option("--cells-dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
                         help="Folder of user cells."),
            click.option("--ncu", "ncu_path",
                         help="The ncu executable (default: $NCU, PATH, /opt/nvidia/nsight-compute)."),
            timeout_option(default=timeout_default, help="Seconds per profile before ncu and its children are "
                           "stopped" + (" (default: the sweep file's)." if timeout_default is None else ".")),
            threshold_option(help="On-wall threshold of the tables and of escalation (a fraction in (0, 1])."),
            click.option("--chip", help="Predict passes (and drop unknown names) for this chip instead of the "
                         "GPU's, e.g. gh100."),
            click.option("--escalate/--no-escalate", default=True, show_default=True,
                         help="With the decisive set: profile tier 2 for a run whose launches tier 1 leaves "
                              "undecided (stored under STORE/.tier2, read together with the run)."),
        ]
        for option in reversed(options):
            command = option(command)
        return command

    return decorate(function) if function is not None else decorate


def profile_settings(given: Mapping[str, Any]) -> Any:
    """The ``ProfileSettings`` of what ``settings_options`` parsed (the options record passed down)."""
    from ncuflow.cells.source import CellSource
    from ncuflow.profile.settings import EscalationPolicy, ProfileSettings

    return ProfileSettings(
        store=given["store_root"], cells=CellSource(given["cells_dir"]), ncu=given["ncu_path"],
        timeout=given["timeout"] if given["timeout"] is not None else DEFAULT_TIMEOUT_S,
        escalation=EscalationPolicy(enabled=given["escalate"], threshold=given["threshold"], chip=given["chip"]),
    )
