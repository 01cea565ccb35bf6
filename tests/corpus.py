"""Helpers for tests that read the corpus of real reports (never copied into the project)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CorpusEntry:
    file: str
    total_actions: int
    gpu_name: str
    collection: str


def read_sources(corpus_dir: Path) -> list[CorpusEntry]:
    with (corpus_dir / "SOURCES.tsv").open(newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return [
        CorpusEntry(row["file"], int(row["total_actions"]), row["gpu_name"], row["collection"])
        for row in rows
        if row.get("loads") == "ok"
    ]
