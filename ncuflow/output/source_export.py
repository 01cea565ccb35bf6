"""The source view as a parquet table: one row per launch and instruction shown (docs/source.md).

Each row: the launch's identity, the instruction's address, its rank by warp samples and by
excess global sectors (null where it is not in that top N), its samples and excess sectors,
SASS and file:line (null without them), then one column per source counter any launch
holds, by NVIDIA's metric name (Float64, null where the launch holds none at that address).
Written atomically, the table's kind (``source``) and schema version in its metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ncuflow.analyze.hotspots import LaunchHotspots, ReportHotspots, excess_in, samples_in
from ncuflow.output.export import refuse_other_format, write_parquet

SOURCE_TABLE = "source"

IDENTITY: dict[str, Any] = {
    "report": pl.String, "range": pl.Int64, "action": pl.Int64, "kernel": pl.String,
    "address": pl.UInt64, "rank_samples": pl.Int32, "rank_excess": pl.Int32,
    "samples": pl.Float64, "excess_sectors": pl.Float64,
    "sass": pl.String, "file": pl.String, "line": pl.Int64,
}


def _rows(launch: LaunchHotspots) -> list[dict[str, Any]]:
    by_samples = {i.address: n for n, i in enumerate(launch.by_samples, 1)}
    by_excess = {i.address: n for n, i in enumerate(launch.by_excess, 1)}
    rows = []
    for instruction in launch.instructions:
        place = launch.places.get(instruction.address)
        rows.append({
            "report": launch.report, "range": launch.range_index, "action": launch.action_index,
            "kernel": launch.kernel.function, "address": instruction.address,
            "rank_samples": by_samples.get(instruction.address), "rank_excess": by_excess.get(instruction.address),
            "samples": samples_in(instruction.counters) if launch.total_samples is not None else None,
            "excess_sectors": excess_in(instruction.counters, launch.pair),
            "sass": place.sass if place and place.sass else None,
            "file": place.file if place else None, "line": place.line if place else None,
            **instruction.counters,
        })
    return rows


def source_frame(reports: Sequence[ReportHotspots]) -> pl.DataFrame:
    """Every shown instruction of every launch, one row each."""
    launches = [launch for report in reports for launch in report.launches]
    counters = sorted({name for launch in launches for name in launch.counters})
    schema = {**IDENTITY, **dict.fromkeys(counters, pl.Float64)}
    rows = [row for launch in launches for row in _rows(launch)]
    columns = {name: [row.get(name) for row in rows] for name in schema}
    return pl.DataFrame(columns, schema=schema)


def write_source_table(reports: Sequence[ReportHotspots], target: Path, inputs: Sequence[Path]) -> int:
    """Write the table to ``target``; the rows written."""
    refuse_other_format(target, "--parquet")
    frame = source_frame(reports)
    write_parquet(frame, target, table=SOURCE_TABLE, inputs=inputs, option="--parquet")
    return frame.height
