"""Launches that cannot both be measurements: different kernels of one report with bit-identical counters.

Two launches of different kernels (another function, or another grid or block) do not measure
the very same time, bytes, instructions and rates to the last bit. Where a report holds such
launches (a public report holds three kernels, grids of 1,025, 1,025 and 4,096 blocks, each at
1.224 ms with the same DRAM %: NVIDIA's reader reads the same), the file is wrong, not the
reading: each of them is named (``Launch.implausible`` gains ``counters``, with a note naming the
others), and its verdict is read with that note beside it, never silently.

The counters compared are the fields stability judges (a row's tolerance: the measurements of
time, work, bytes and rates, ``ncuflow.read.metrics``); a launch is compared only where it holds
its duration and at least ``MIN_COUNTERS`` of them, so that two launches that hold almost
nothing are never called identical. The same kernel at the same configuration may repeat its
counters exactly (a deterministic kernel timed at the timer's resolution): never flagged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ncuflow.read.launch import Launch
from ncuflow.read.metrics import FIELDS

MEASURED: tuple[str, ...] = tuple(f.name for f in FIELDS if f.tolerance is not None)
MIN_COUNTERS = 4
IDENTICAL_KEY = "counters"  # the key of the note and the ``implausible`` entry


def _counters(launch: Launch) -> tuple[tuple[str, float], ...] | None:
    held = tuple((name, value) for name in MEASURED if (value := launch.value(name)) is not None)
    if launch.value("duration_ns") is None or len(held) < MIN_COUNTERS:
        return None
    return held


def _kernel(launch: Launch) -> tuple[object, ...]:
    return (launch.kernel.function, launch.value("grid_size"), launch.value("block_size"))


def _label(launch: Launch) -> str:
    grid = launch.value("grid_size")
    return f"#{launch.action_index} {launch.kernel.function}" + (f" (grid {grid:,.0f})" if grid is not None else "")


def flag_identical_counters(launches: Sequence[Launch]) -> tuple[Launch, ...]:
    """The launches (of one report), those whose counters another kernel's repeat bit for bit named."""
    by_counters: dict[tuple[tuple[str, float], ...], list[int]] = {}
    for index, launch in enumerate(launches):
        counters = _counters(launch)
        if counters is not None:
            by_counters.setdefault(counters, []).append(index)
    flagged = list(launches)
    for counters, indices in by_counters.items():
        if len({_kernel(launches[i]) for i in indices}) < 2:
            continue
        for index in indices:
            launch = launches[index]
            others = ", ".join(_label(launches[i]) for i in indices if i != index)
            note = (f"the same {len(counters)} counters, bit for bit, as {others}: different kernels do not measure "
                    "alike, so the report is wrong here (NVIDIA's reader reads the same); the verdict is no measurement")
            flagged[index] = replace(launch, notes={**launch.notes, IDENTICAL_KEY: note},
                                     implausible=(*launch.implausible, IDENTICAL_KEY))
    return tuple(flagged)
