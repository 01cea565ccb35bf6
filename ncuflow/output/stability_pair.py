"""``stability --markdown`` and ``--parquet``: one stability table as a pair that carries one id.

Both files carry the same ``stability_id``: the Markdown in its closing line, the parquet
table as ``ncuflow.stability_id`` in its metadata, as an export's launches and metrics tables
carry one ``ncuflow.export_id`` and a report's plots and tables one ``report_id``. Given both,
they are written to temporary files and renamed together under their folder's lock
(``ncuflow.files.atomic_paths``): killed between the renames, the pair holds two ids, and
``read_stability_pair`` refuses it (``MismatchedPairError``) instead of pairing a table with
the numbers of another run. polars is imported only for the parquet table: ``--markdown``
alone runs where polars is not installed (the GPU host).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ncuflow.files import atomic_paths
from ncuflow.output.markdown import guard_markdown

ID_KEY = "ncuflow.stability_id"
_ID_LINE = re.compile(r"^Stability id: `([0-9a-f]+)`", re.M)


def _id_line(stability_id: str) -> str:
    return (f"Stability id: `{stability_id}` (as `{ID_KEY}` in the metadata of the parquet table written "
            "with this file).")


def write_stability_pair(markdown_text: str | None, frame: Any, *, markdown_path: Path | None,
                         parquet_path: Path | None, inputs: Sequence[Path] = ()) -> str:
    """Write the Markdown (``markdown_text``, starting ``# ncuflow stability``) and the parquet
    ``frame`` that were asked for, as one pair with one new id; returns the id."""
    stability_id = uuid.uuid4().hex[:8]
    targets: list[Path] = []
    if markdown_path is not None:
        guard_markdown(markdown_path, title="stability", inputs=inputs)
        targets.append(markdown_path)
    if parquet_path is not None:
        from ncuflow.output.export import guard_parquet

        guard_parquet(parquet_path, table="stability", inputs=inputs, option="--parquet")
        targets.append(parquet_path)
    with atomic_paths(targets) as temporaries:
        for target, temporary in zip(targets, temporaries, strict=True):
            if target == markdown_path and markdown_text is not None:
                temporary.write_text(markdown_text.rstrip("\n") + f"\n\n{_id_line(stability_id)}\n", encoding="utf-8")
            elif frame is not None:
                from ncuflow.output.export import _metadata

                frame.write_parquet(temporary, metadata={**_metadata("stability"), ID_KEY: stability_id})
    return stability_id


def markdown_stability_id(path: Path) -> str | None:
    """The id a stability Markdown file carries (None: none, an ncuflow before ids)."""
    found = _ID_LINE.search(Path(path).read_text(encoding="utf-8", errors="replace"))
    return found.group(1) if found else None


def read_stability_pair(markdown_path: Path, parquet_path: Path) -> tuple[str, Any]:
    """The Markdown text and the parquet table (a polars frame) of one ``stability`` run, checked
    to carry one id."""
    import polars as pl

    from ncuflow.output.export import MismatchedPairError, _parquet_metadata

    in_table = _parquet_metadata(parquet_path).get(ID_KEY)
    in_text = markdown_stability_id(markdown_path)
    if in_table is None or in_table != in_text:
        raise MismatchedPairError(
            f"Mismatched pair: {markdown_path} (stability id {in_text}) and {parquet_path} (stability id "
            f"{in_table}) were not written by one stability run.",
            "A run killed between renaming its two files, or two runs writing one of them, leaves files "
            "that describe different inputs.",
            "Run stability again with both --markdown and --parquet to write a matching pair.",
        )
    return Path(markdown_path).read_text(encoding="utf-8"), pl.read_parquet(parquet_path)
