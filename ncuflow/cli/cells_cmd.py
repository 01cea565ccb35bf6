"""``ncuflow cells`` (list the cells) and ``ncuflow time`` (time a cell without ncu)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ncuflow.cells.contract import CellInfo, format_value
from ncuflow.cells.registry import NO_GPU_PREFIX, gpu_status, list_cells, parse_spec
from ncuflow.files import make_console
from ncuflow.files.safe_text import markup_text

CELLS_DIR_OPTION = click.option(
    "--cells-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder of your own cell modules (.py files declaring CELL or CELLS).",
)


def _param_text(info: CellInfo) -> str:
    lines = []
    for param in info.params:
        choices = f" [{'|'.join(map(format_value, param.choices))}]" if param.choices else ""
        lines.append(f"{param.name}={format_value(param.default)}{choices}")
    return "\n".join(lines) or "(none)"


def _info_dict(info: CellInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "description": info.description,
        "available": info.available,
        "unavailable_reason": info.unavailable_reason,
        "needs_ncu": info.needs_ncu,
        "params": [
            {
                "name": p.name,
                "type": p.type.__name__,
                "default": p.default,
                "choices": list(p.choices) if p.choices is not None else None,
                "help": p.help,
                "serves": p.serves.value if p.serves is not None else None,
            }
            for p in info.params
        ],
    }


@click.command("cells")
@CELLS_DIR_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def cells_command(cells_dir: Path | None, as_json: bool) -> None:
    """List the kernel cells, their parameters, defaults and availability."""
    infos = list_cells(cells_dir)
    has_gpu, gpu_line = gpu_status()
    if as_json:
        payload = {"gpu": {"available": has_gpu, "detail": gpu_line}, "cells": [_info_dict(i) for i in infos]}
        click.echo(json.dumps(payload, indent=2, default=str))
        return
    table = Table(title="ncuflow cells", show_lines=True)
    table.add_column("cell", min_width=max((len(i.name) for i in infos), default=4))
    table.add_column("parameters: default [choices]", overflow="fold")
    table.add_column("ncu")
    table.add_column("runs here")
    for info in infos:
        if info.available:
            available = "yes"
        else:
            clauses = (info.unavailable_reason or "").split("; ")
            short = ["no GPU" if c.startswith(NO_GPU_PREFIX) else c for c in clauses]
            available = "no: " + "; ".join(short)
        name = Text(info.name, style="bold")
        name.append("\n" + info.description, style="dim")
        table.add_row(
            name,
            Text(_param_text(info)),
            Text("yes" if info.needs_ncu else "no: host"),
            Text(available),
        )
    console = make_console()
    console.print(table)
    if has_gpu:
        console.print(f"GPU: {gpu_line}", markup=False, highlight=False)
    else:
        console.print(
            f"No GPU on this machine: {gpu_line}. GPU cells are listed, but only host cells "
            "(plan_host) can run here.",
            markup=False,
            highlight=False,
        )


@click.command("time")
@click.argument("cell_spec")
@click.option("--repeats", type=click.IntRange(min=1), default=100, show_default=True,
              help="Timed launches.")
@click.option("--warmup", type=click.IntRange(min=0), default=10, show_default=True,
              help="Untimed launches first.")
@click.option("--no-rotate", is_flag=True,
              help="Reuse one set of buffers even when the footprint fits in L2 (warm L2).")
@CELLS_DIR_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the full result as JSON.")
def time_command(
    cell_spec: str, repeats: int, warmup: int, no_rotate: bool, cells_dir: Path | None, as_json: bool
) -> None:
    """Time a cell with CUDA events, without ncu (host cells with a host clock).

    Durations here are unprofiled: clocks are not locked and caches are not flushed
    (small footprints rotate through copies instead), so they differ from ncu's
    gpu__time_duration; both are recorded, labelled.
    """
    from ncuflow.cells.timing import time_cell

    spec = parse_spec(cell_spec, cells_dir)
    result = time_cell(spec, repeats=repeats, warmup=warmup, rotate=not no_rotate, cells_dir=cells_dir)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
        return
    stats = result.stats
    console = make_console()
    console.print(f"[bold]{markup_text(result.spec)}[/bold]", highlight=False)
    table = Table(show_header=True)
    for column in ("median µs", "min µs", "max µs", "p10–p90 spread", "repeats", "achieved GB/s"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{stats.median_us:.2f}",
        f"{stats.min_us:.2f}",
        f"{stats.max_us:.2f}",
        f"{stats.spread_pct:.1f}%",
        str(result.repeats),
        f"{result.achieved_gbps:.1f}"
        if result.achieved_gbps is not None and result.clock == "cuda_events"
        else "—",
    )
    console.print(table)
    console.print(result.label, markup=False, highlight=False)
    reached = {
        key: result.representation[key]
        for key in ("index_len", "page_table_len", "effective_page_size", "dtype", "kernel_path")
        if key in result.representation
    }
    if reached:
        line = ", ".join(f"{key}={value}" for key, value in reached.items())
        console.print(f"reaches the timed operation: {line}", markup=False, highlight=False)
    footprint = result.footprint_bytes
    details = [f"expected bytes {result.expected_bytes:,}"]
    if footprint is not None:
        details.append(f"footprint {footprint:,} B")
    if result.device.get("gpu_name"):
        details.append(str(result.device["gpu_name"]))
    console.print("; ".join(details), markup=False, highlight=False)
