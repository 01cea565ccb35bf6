"""Parquet parts: rows gathered in columns and flushed to numbered files of bounded size.

Both ``export`` (the launches table, in the driver) and the reading workers (the long
metrics table, written where it is read) write through ``PartWriter``; the final files
are assembled from the parts in name order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

METRICS_SCHEMA: dict[str, Any] = {
    "report": pl.String,
    "range": pl.Int32,
    "action": pl.Int32,
    "name": pl.String,
    "value": pl.Float64,
    "string_value": pl.String,
    "unit": pl.String,
}


class PartWriter:
    """Accumulates rows and flushes them to numbered parquet parts of at most ``chunk`` rows.

    Keeps memory bounded by the chunk, not by the size of the export: a report with
    thousands of launches never holds all its raw metrics at once. The rows wait as Python
    objects until ``chunk`` of them make a part. (Turning them into polars frames sooner was
    measured and not kept: where the workers' peak is measured, ``ncu_report``'s units
    dominate it; frames of 20,000 metric rows left the corpus x4's tree peak at 689 -> 698 MiB.)
    """

    def __init__(self, folder: Path, name: str, schema: dict[str, Any], chunk: int) -> None:
        self.folder = folder
        self.name = name
        self.schema = schema
        self.chunk = chunk
        self.columns: dict[str, list[Any]] = {column: [] for column in schema}
        self.parts: list[Path] = []
        self.rows = 0

    def add(self, record: dict[str, Any]) -> None:
        for column, values in self.columns.items():
            values.append(record[column])
        if len(self.columns["report"]) >= self.chunk:
            self.flush()

    def flush(self) -> None:
        """Write the rows gathered so far as the next part (an empty one only if none exists)."""
        pending = len(self.columns["report"])
        if pending == 0 and self.parts:
            return
        part = self.folder / f"{self.name}-{len(self.parts):05d}.parquet"
        pl.DataFrame(self.columns, schema=self.schema).write_parquet(part)
        self.columns = {column: [] for column in self.schema}
        self.rows += pending
        self.parts.append(part)

    def close(self) -> None:
        """Flush what is pending (no empty part: the assembly adds the schema when none exists)."""
        if self.columns["report"]:
            self.flush()
