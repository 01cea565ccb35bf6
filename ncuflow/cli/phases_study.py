"""The options of ``phases`` that carry a serving log on to a kernel study: the settings the log
does not state (``--setting``), the sweep file for a cell (``--sweep-for``, ``-o``, ``--vary``,
``--cells-dir``) and the client's result (``--bench-json``). One options record, parsed once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ncuflow.phases.harness import read_bench_json
from ncuflow.phases.study import StudyInputs
from ncuflow.serving import SETTINGS, ServingShape

MAX_VALUE = 200
SETTING_NAMES = {row.shape.value: row.shape for row in SETTINGS}


def _setting(text: str) -> tuple[ServingShape, str]:
    name, sep, value = text.partition("=")
    value = value.strip()
    if not sep or name.strip() not in SETTING_NAMES:
        raise click.BadParameter(
            f"{text[:80]!r} names no server setting. --setting takes NAME=VALUE, NAME one of: "
            f"{', '.join(SETTING_NAMES)}. Write e.g. --setting page_size=16.", param_hint="--setting")
    if not value or len(value) > MAX_VALUE or not value.isprintable():
        raise click.BadParameter(
            f"the value of {name.strip()} must be 1 to {MAX_VALUE} printable characters; "
            f"write e.g. --setting {name.strip()}=16.", param_hint="--setting")
    return SETTING_NAMES[name.strip()], value


def _vary(text: str) -> tuple[str, tuple[str, ...]]:
    name, sep, values = text.partition("=")
    parts = tuple(v.strip() for v in values.split(",") if v.strip())
    if not sep or not name.strip().isidentifier() or not parts or len(parts) > 64 or not values.isprintable():
        raise click.BadParameter(
            f"{text[:80]!r} is not PARAM=V1,V2,…: --vary names a cell parameter and 1 to 64 values "
            "(printable characters), e.g. --vary page=1,16,128.", param_hint="--vary")
    return name.strip(), parts


@dataclass(frozen=True)
class StudyOptions:
    settings: dict[ServingShape, str]
    sweep_cell: str | None
    sweep_path: Path | None
    vary: tuple[tuple[str, tuple[str, ...]], ...]
    cells_dir: Path | None
    bench_json: Path | None

    def inputs(self) -> StudyInputs:
        """What the analysis takes of these options (the client's JSON read here, once)."""
        client = read_bench_json(self.bench_json) if self.bench_json is not None else None
        return StudyInputs(self.settings, client)

    @classmethod
    def parse(cls, given: dict[str, Any]) -> StudyOptions:
        options = cls(
            settings=dict(_setting(t) for t in given["settings"]),
            sweep_cell=given["sweep_cell"],
            sweep_path=given["sweep_path"],
            vary=tuple(_vary(t) for t in given["vary"]),
            cells_dir=given["cells_dir"],
            bench_json=given["bench_json"],
        )
        if (options.sweep_cell is None) != (options.sweep_path is None):
            raise click.UsageError("--sweep-for CELL and -o PATH go together: name the cell and the "
                                   "sweep file to write, e.g. --sweep-for paged_decode -o sweep.toml.")
        if options.vary and options.sweep_cell is None:
            raise click.UsageError("--vary shapes a sweep file: give it with --sweep-for CELL -o PATH.")
        return options


def study_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options, applied to the ``phases`` command."""
    decorators = [
        click.option("--setting", "settings", multiple=True, metavar="NAME=VALUE",
                     help="A server setting the log does not state (page_size, attention_backend, "
                          "kv_dtype, tp_size, dp_size, cuda_graph_bs, speculative)."),
        click.option("--sweep-for", "sweep_cell", default=None, metavar="CELL",
                     help="Write a sweep file for this cell at the shapes that carried the log's time."),
        click.option("-o", "--output", "sweep_path", type=click.Path(path_type=Path), default=None,
                     help="The sweep file --sweep-for writes (.toml)."),
        click.option("--vary", "vary", multiple=True, metavar="PARAM=V1,V2",
                     help="A cell parameter varied across these values in the sweep file."),
        click.option("--cells-dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
                     default=None, help="Folder of user cells --sweep-for may name."),
        click.option("--bench-json", type=click.Path(path_type=Path, dir_okay=False), default=None,
                     help="The client's bench_serving result (JSON) for the harness check."),
    ]
    for decorate in reversed(decorators):
        command = decorate(command)
    return command
