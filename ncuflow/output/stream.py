"""A table written as its rows come: one polars sink fed frame by frame, in bounded memory.

``export`` reads reports one after another and wants one launches file at the end. Holding
every row until then grows with the store; writing numbered parts and concatenating them
reads everything back. Here the rows of a few hundred launches become a frame, the frame
goes through a queue of ``QUEUE_FRAMES`` to one polars sink (parquet, or CSV) that runs in a
thread of its own, and the sink writes it as it comes. What is held is a batch of rows, the
queued frames and the row group the sink is filling, whatever the number of reports, plus
what polars' parquet writer keeps of each row group written until it closes the file (~4 KiB
a column, whatever the rows: measured with polars 2.1), so a row group should not be small.

The reading stays in the calling thread: its progress, warnings, errors and Ctrl-C are
the caller's as before. An error of the sink (a full disk) is raised in the caller at its
next ``extend`` or at ``close``; an error of the caller stops the sink, and the caller's
error is the one raised.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
from polars.io.plugins import register_io_source

from ncuflow.files.safe_text import FORMULA_PREFIX, FORMULA_START, PLAIN_NUMBER

Columns = dict[str, list[Any]]

# frames waiting for the sink: the reading runs ahead of the writing by at most this many
QUEUE_FRAMES = 2
_POLL_S = 0.1


class _End:
    """Put in the queue after the last frame."""


class _Stopped(Exception):
    """Put in the queue (as a class) when the caller failed: the sink stops without writing more."""


class TableStream:
    """Rows in (as columns), one file out, written by a polars sink as they come.

    ``batch`` rows make a frame; the parquet sink writes ``row_group_rows`` rows a row
    group with ``metadata`` in the file; ``csv`` writes CSV text instead, its list columns
    joined with "; ". Use through ``table_stream``, which ends or stops the sink.
    """

    def __init__(self, target: Path, schema: dict[str, Any], *, batch: int, row_group_rows: int,
                 metadata: dict[str, str], csv: bool = False) -> None:
        self.schema = schema
        self.batch = batch
        self.rows = 0
        self._pending: Columns = _empty(schema)
        self._queue: queue.Queue[pl.DataFrame | type[_End] | type[_Stopped]] = queue.Queue(maxsize=QUEUE_FRAMES)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._sink, args=(target, row_group_rows, metadata, csv),
                                        name="ncuflow-table-sink", daemon=True)
        self._thread.start()

    def extend(self, columns: Columns) -> None:
        """Add rows given as one list per column (every column of the schema, equally long)."""
        count = len(columns["report"]) if columns else 0
        start = 0
        while start < count:
            take = min(self.batch - len(self._pending["report"]), count - start)
            for column, values in self._pending.items():
                values.extend(columns[column][start:start + take])
            start += take
            if len(self._pending["report"]) >= self.batch:
                self._put_pending()

    def close(self) -> None:
        """Write what is pending, end the table and wait for the sink; its error, if it had one."""
        if self._pending["report"]:
            self._put_pending()
        self._put(_End)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Stop the sink after the caller failed (what it wrote is the caller's to remove)."""
        with contextlib.suppress(BaseException):
            self._put(_Stopped)
        self._thread.join()

    def _put_pending(self) -> None:
        frame = frame_of(self._pending, self.schema)
        self._pending = _empty(self.schema)
        self._put(frame)
        self.rows += frame.height

    def _put(self, item: pl.DataFrame | type[_End] | type[_Stopped]) -> None:
        """Queue ``item``, waiting while the queue is full, unless the sink has died meanwhile."""
        while True:
            if not self._thread.is_alive():
                raise self._error or RuntimeError("the table's writer stopped before the table was complete")
            try:
                self._queue.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                continue

    def _frames(self, with_columns: list[str] | None, predicate: Any, n_rows: int | None,
                batch_size: int | None) -> Iterator[pl.DataFrame]:
        """The IO source polars pulls from: the queued frames, in order (a sink asks for every
        column and row, so the projection and limits are honoured only for completeness)."""
        while True:
            item = self._queue.get()
            if item is _End:
                return
            if item is _Stopped:
                raise _Stopped("the export failed; the table is not written")
            assert isinstance(item, pl.DataFrame)
            yield item.select(with_columns) if with_columns is not None else item

    def _sink(self, target: Path, row_group_rows: int, metadata: dict[str, str], csv: bool) -> None:
        """Run the sink into ``target``, opened here: given a path, polars may create the file
        from a task of its own after the sink has already failed and returned (seen 4 times in
        600 failed streams), which would leave it behind its caller's clean-up."""
        try:
            lazy = register_io_source(self._frames, schema=self.schema)
            with target.open("wb") as handle:
                if csv:
                    lists = [name for name, dtype in self.schema.items() if isinstance(dtype, pl.List)]
                    joined = lazy.with_columns(pl.col(name).list.join("; ") for name in lists)
                    texts = [name for name, dtype in self.schema.items() if dtype == pl.String or name in lists]
                    joined.with_columns(_spreadsheet_cell(name) for name in texts).sink_csv(handle)
                else:
                    lazy.sink_parquet(handle, metadata=metadata, row_group_size=row_group_rows)
        except BaseException as error:  # raised in the caller's thread (close, or the next extend)
            self._error = error  # a caller waiting on the full queue sees the thread gone (_put)


def _spreadsheet_cell(name: str) -> pl.Expr:
    """A text column whose cells that would start a spreadsheet formula are quoted
    (``safe_text.spreadsheet_cell``, as a polars expression)."""
    column = pl.col(name)
    formula = column.str.contains(FORMULA_START) & ~column.str.contains(PLAIN_NUMBER)
    return pl.when(formula).then(pl.lit(FORMULA_PREFIX) + column).otherwise(column).alias(name)


def frame_of(columns: Columns, schema: dict[str, Any]) -> pl.DataFrame:
    """``pl.DataFrame(columns, schema=schema)``, its columns of lists of structs built from their items'
    fields (polars builds one from Python dicts ~7x slower: ``export --findings``' focus metrics)."""
    nested = [name for name, dtype in schema.items() if isinstance(dtype, pl.List) and isinstance(dtype.inner, pl.Struct)]
    if not nested:
        return pl.DataFrame(columns, schema=schema)
    frame = pl.DataFrame({name: columns[name] for name in schema if name not in nested},
                         schema={name: dtype for name, dtype in schema.items() if name not in nested})
    return frame.with_columns(_list_of_structs(columns[name], schema[name]).alias(name)
                              for name in nested).select(list(schema))


def _list_of_structs(values: list[Any], dtype: Any) -> pl.Series:
    """A list-of-structs column from its rows (each a list of dicts, or None): the items as flat columns,
    gathered back into one list per row; a row with no item an empty list, a None row null."""
    fields = {field.name: field.dtype for field in dtype.inner.fields}
    items = [item for row in values if row for item in row]
    flat = pl.DataFrame({name: [item.get(name) for item in items] for name in fields}, schema=fields)
    grouped = flat.select(pl.Series("row", [i for i, row in enumerate(values) if row for _ in row], dtype=pl.UInt32),
                          pl.struct(list(fields)).alias("items")).group_by("row", maintain_order=True).agg("items")
    rows = pl.DataFrame({"row": pl.Series(range(len(values)), dtype=pl.UInt32),
                         "absent": pl.Series([row is None for row in values], dtype=pl.Boolean)})
    joined = rows.join(grouped, on="row", how="left", maintain_order="left")
    empty = pl.lit([], dtype=dtype)
    return joined.select(pl.when(pl.col("absent")).then(pl.lit(None, dtype=dtype))
                         .when(pl.col("items").is_null()).then(empty).otherwise(pl.col("items")).alias("column"))["column"]


def _empty(schema: dict[str, Any]) -> Columns:
    return {column: [] for column in schema}


@contextlib.contextmanager
def table_stream(target: Path, schema: dict[str, Any], *, batch: int, row_group_rows: int,
                 metadata: dict[str, str], csv: bool = False) -> Iterator[TableStream]:
    """A ``TableStream`` writing ``target``: complete when the block ends, stopped if it fails."""
    stream = TableStream(target, schema, batch=batch, row_group_rows=row_group_rows, metadata=metadata, csv=csv)
    try:
        yield stream
    except BaseException:
        stream.stop()
        raise
    stream.close()
