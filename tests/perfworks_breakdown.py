"""NVIDIA's speed-of-light breakdowns for every chip Perfworks models (tests that need them skip without it)."""

from __future__ import annotations

import functools

import pytest

from ncuflow.profile import perfworks


@functools.lru_cache(maxsize=1)
def _library() -> perfworks.Perfworks | None:
    try:
        return perfworks.load()
    except perfworks.PerfworksUnavailable:
        return None


def chips_or_skip() -> tuple[str, ...]:
    library = _library()
    if library is None:
        pytest.skip("no Perfworks library (pip install 'ncuflow[passes]')")
    usable = []
    for chip in library.chips():
        try:
            with library.evaluator(chip):
                usable.append(chip.lower())
        except perfworks.UnsupportedChip:
            continue
    return tuple(usable)


@functools.lru_cache(maxsize=256)
def counters(chip: str, throughput: str) -> tuple[str, ...]:
    library = _library()
    assert library is not None
    with library.evaluator(chip) as evaluator:
        return evaluator.throughput_counters(throughput)
