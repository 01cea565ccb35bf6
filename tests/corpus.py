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


def full_set_reports(corpus_dir: Path) -> list[Path]:
    """Reports collected with ncu's full section set, as SOURCES.tsv says: `set:full...`, or (no
    command line recorded) every section of the full set of that ncu version, roofline chart included."""
    with (corpus_dir / "SOURCES.tsv").open(newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    sections = ("Roofline Chart", "Warp State Statistics", "Memory Workload Analysis Tables")
    return [
        corpus_dir / row["file"]
        for row in rows
        if row.get("loads") == "ok" and (row["collection"].startswith("set:full")
                                         or all(s in row["sections_first_action"] for s in sections))
    ]
