"""The FlashInfer/XQA study's points: its sweep files, their points and corners, the plan()
index lengths, and which specs the headline re-profiles and the why tier take.

What the device call profiles, read by its plan (`study_flashinfer.py`) and its steps
(`study_steps.py`) alike; standard library and ncuflow's cell registry only.
"""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SWEEPS = REPO / "analysis" / "sweeps" / "flashinfer"
# The sweeps by value: the positive control (XQA over a shared prefix) first.
SWEEP_ORDER = ("xqa_decode_shared", "flashinfer_decode_pages", "xqa_decode_distinct", "flashinfer_decode_layouts")
PLAN_INDEX_LENS = (64, 1024, 16384, 262144, 2097152)
CELLS = ("flashinfer_decode", "xqa_decode")
PLAN_CELL = "flashinfer_plan"


def sweep_files() -> list[Path]:
    """The sweep files in SWEEP_ORDER, then any other (sorted)."""
    found = {p.stem: p for p in SWEEPS.glob("*.toml")}
    ordered = [found.pop(stem) for stem in SWEEP_ORDER if stem in found]
    return ordered + [found[stem] for stem in sorted(found)]


def read_sweep(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads(path.read_text())
    return data


def sweep_points(path: Path) -> list[dict[str, Any]]:
    data = read_sweep(path)
    axes = list(data.get("axes", {}).items())
    return [{**data.get("fixed", {}), **dict(zip([n for n, _ in axes], combo, strict=True))}
            for combo in itertools.product(*(v for _, v in axes))]


def corner_points(path: Path) -> list[dict[str, Any]]:
    """The headline points of a sweep: every axis at its first or its last value."""
    data = read_sweep(path)
    axes = list(data.get("axes", {}).items())
    ends = [sorted({values[0], values[-1]}, key=values.index) for _, values in axes]
    return [{**data.get("fixed", {}), **dict(zip([n for n, _ in axes], combo, strict=True))}
            for combo in itertools.product(*ends)]


def spec_text(cell: str, params: dict[str, Any]) -> str:
    from ncuflow.cells.registry import make_spec

    return make_spec(cell, params).text()


def headline_specs(leave_out: frozenset[str] = frozenset()) -> list[str]:
    """Each sweep's corners as cell specs, once each, for the cells not in LEAVE_OUT."""
    specs: list[str] = []
    for path in sweep_files():
        cell = read_sweep(path)["cell"]
        if cell in leave_out:
            continue
        for params in corner_points(path):
            text = spec_text(cell, params)
            if text not in specs:
                specs.append(text)
    return specs


def why_specs(leave_out: frozenset[str] = frozenset()) -> list[str]:
    """The headline specs in the order the why tier takes them: each cell's first corner, then the
    other corners (one point of every cell before a second of any)."""
    specs = headline_specs(leave_out)
    firsts = list({spec.split(":", 1)[0]: spec for spec in reversed(specs)}.values())[::-1]
    return [*firsts, *(spec for spec in specs if spec not in firsts)]
