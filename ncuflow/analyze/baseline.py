"""A gate baseline that lives in a repository: what the gate needs of a set of runs, in one small file.

``ncuflow gate --write-baseline F`` keeps, per measurement (cell, parameters, kernel and launch
configuration), each launch's canonical field values and NVIDIA's speed-of-light breakdown: the
work counters, the durations whose spread is the noise band, and what the max model reads to name
the binding wall. Beside them: the GPU, the ncu version and the collection (the gated fields the
launches hold), so that a baseline taken elsewhere is refused or downgraded before it is gated.

JSON, not parquet: a baseline is committed and reviewed, so a change to it reads as a text diff
in a pull request; it is a few hundred kilobytes at most (the H200 store: ~31 kernels, ~100
launches); the standard library reads it on a CI runner with nothing else installed. The file
says what it is (``FORMAT``) and its version (``VERSION``); another version is refused with
what to do. Read with a size bound, written atomically (a kill halfway leaves the old file).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ncuflow.analyze.fields import WORK_FIELDS
from ncuflow.analyze.measurement import Measurement
from ncuflow.errors import UsageError
from ncuflow.files import atomic_write_text, guard_output, text_recogniser
from ncuflow.files.inputs import deepest_nesting, read_small_file
from ncuflow.files.safe_text import safe_text
from ncuflow.read.launch import DeviceInfo, KernelName, Launch
from ncuflow.read.metrics import FIELDS_BY_NAME

FORMAT = "ncuflow gate baseline"
VERSION = 1
MAX_BASELINE_BYTES = 64 << 20
MAX_NESTING = 16
PARAM_TYPES = (str, int, float, bool, type(None))  # what a cell parameter's value is
GATED_FIELDS: tuple[str, ...] = ("duration_ns", *WORK_FIELDS)


@dataclass(frozen=True)
class SideFacts:
    """Where a side was measured: GPU models, ncu versions, and the gated fields its launches hold."""

    gpus: tuple[str, ...]
    ncu_versions: tuple[str, ...]
    collection: tuple[str, ...]

    @classmethod
    def of(cls, members: Iterable[Measurement]) -> SideFacts:
        launches = [launch for m in members for launch in m.launches]
        return cls(
            tuple(sorted({launch.device.name for launch in launches if launch.device.name})),
            tuple(sorted({launch.ncu_version for launch in launches if launch.ncu_version})),
            tuple(f for f in GATED_FIELDS if any(launch.values.get(f) is not None for launch in launches)),
        )


def _launch_document(launch: Launch) -> dict[str, Any]:
    return {
        "values": {name: v for name, v in launch.values.items() if v is not None and math.isfinite(v)},
        "breakdown": {metric: v for metric, v in launch.breakdown.items() if math.isfinite(v)},
    }


def baseline_document(members: Sequence[Measurement]) -> dict[str, Any]:
    """The baseline of a set of measurements as JSON-ready data."""
    facts = SideFacts.of(members)
    return {
        "format": FORMAT, "version": VERSION,
        "gpu": list(facts.gpus), "ncu_version": list(facts.ncu_versions), "collection": list(facts.collection),
        "measurements": [
            {
                "cell": m.cell, "params": [[name, value] for name, value in m.params], "kernel": m.kernel,
                "function": m.function, "demangled": m.launches[0].kernel.demangled if m.launches else m.function,
                "runs": m.runs, "content_keys": list(m.content_keys),
                "device": _device(m.launches[0].device) if m.launches else None,
                "ncu_version": m.launches[0].ncu_version if m.launches else None,
                "launches": [_launch_document(launch) for launch in m.launches],
            }
            for m in members
        ],
    }


def _device(device: DeviceInfo) -> dict[str, Any]:
    return {"name": device.name, "compute_capability": device.compute_capability, "sm_count": device.sm_count}


def is_baseline_file(path: Path) -> bool:
    """A regular file whose first bytes say it is a gate baseline (``FORMAT``)."""
    return path.is_file() and text_recogniser('{\n "format": "' + FORMAT)(path)


def write_baseline(members: Sequence[Measurement], target: Path, inputs: Sequence[Path]) -> Path:
    """Write the baseline of ``members`` to ``target`` atomically (refused over anything but an earlier baseline)."""
    guard_output(target, kind="an ncuflow gate baseline", recognise=is_baseline_file, inputs=inputs,
                 option="--write-baseline")
    atomic_write_text(target, json.dumps(baseline_document(members), indent=1, sort_keys=False) + "\n")
    return target


def _refuse(path: Path, problem: str, fix: str = "Write it again with `ncuflow gate --write-baseline`.") -> UsageError:
    return UsageError(f"The baseline {safe_text(path)} cannot be read: {safe_text(problem)}.",
                      "A gate baseline is a JSON file written by `ncuflow gate --write-baseline`.", fix)


def _number(path: Path, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _refuse(path, f"a value is {safe_text(repr(value))[:80]}, not a finite number")
    return float(value)


def _launch(path: Path, entry: Mapping[str, Any], item: Any, index: int) -> Launch:
    values_in, breakdown_in = item.get("values", {}), item.get("breakdown", {})
    if not isinstance(values_in, dict) or not isinstance(breakdown_in, dict):
        raise _refuse(path, "a launch's values or breakdown is not an object")
    values = {name: (_number(path, values_in[name]) if name in values_in else None) for name in FIELDS_BY_NAME}
    device = entry.get("device") or {}
    return Launch(
        report=str(path), range_index=0, action_index=index,
        kernel=KernelName(str(entry["function"]), str(entry.get("demangled") or entry["function"]), ""),
        nvtx=(), device=DeviceInfo(device.get("name"), device.get("compute_capability"), device.get("sm_count")),
        ncu_version=entry.get("ncu_version"), values=values,
        provenance={name: "the gate baseline" for name, v in values.items() if v is not None},
        missing=tuple(name for name, v in values.items() if v is None),
        breakdown={str(metric): _number(path, v) for metric, v in breakdown_in.items()},
    )


def _measurement(path: Path, entry: Any, first: int) -> Measurement:
    if not isinstance(entry, dict) or not isinstance(entry.get("function"), str) or not isinstance(entry.get("launches"), list):
        raise _refuse(path, "a measurement lacks its function or its launches")
    params = entry.get("params", [])
    if not isinstance(params, list) or not all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], PARAM_TYPES) for p in params):
        raise _refuse(path, "a measurement's params are not [name, value] pairs of text, numbers or booleans")
    launches = tuple(_launch(path, entry, item, first + i) for i, item in enumerate(entry["launches"]) if isinstance(item, dict))
    runs = entry.get("runs", 1)
    return Measurement(
        cell=str(entry.get("cell", "")), params=tuple((name, value) for name, value in params),
        kernel=str(entry.get("kernel", entry["function"])), launches=launches,
        runs=runs if isinstance(runs, int) and runs >= 1 else 1,
        content_keys=tuple(str(k) for k in entry.get("content_keys", []) if isinstance(k, str)),
    )


def read_baseline(path: Path) -> list[Measurement]:
    """The measurements of a baseline file; one paragraph where it is not one, or of another version."""
    text = read_small_file(path, MAX_BASELINE_BYTES, what="baseline", error=lambda problem: _refuse(path, problem))
    if deepest_nesting(text) > MAX_NESTING:
        raise _refuse(path, f"it is nested deeper than {MAX_NESTING} levels, which no baseline is")
    def no_constant(name: str) -> None:
        raise _refuse(path, f"it holds {name}, which no baseline does")

    try:
        document = json.loads(text, parse_constant=no_constant)
    except (json.JSONDecodeError, RecursionError) as error:
        raise _refuse(path, f"it is not JSON ({error})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise _refuse(path, "it does not say it is one (no \"format\": \"ncuflow gate baseline\")")
    if document.get("version") != VERSION:
        raise _refuse(path, f"it is version {safe_text(document.get('version'))}; this ncuflow reads version {VERSION}",
                      "Write it again with this ncuflow's `ncuflow gate --write-baseline`, or gate with the ncuflow that wrote it.")
    entries = document.get("measurements")
    if not isinstance(entries, list):
        raise _refuse(path, "it holds no list of measurements")
    found: list[Measurement] = []
    for entry in entries:
        found.append(_measurement(path, entry, sum(len(m.launches) for m in found)))
    return found


# ---------------------------------------------------------------------------
# two sides measured in different places

OtherGpu = Literal["refuse", "work"]


def _listed(values: Sequence[str]) -> str:
    return ", ".join(values) or "not recorded"


def sides_compatible(base: SideFacts, new: SideFacts, other_gpu: OtherGpu) -> tuple[bool, list[str]]:
    """Whether only the work counters may be gated (another GPU, downgraded), and the notes to print.

    Another GPU model is refused (``other_gpu="refuse"``) or downgraded to work counters: time and
    the binding wall of one GPU say nothing of another's. Another ncu version is noted (its counters
    are the same names; its replay may differ). Another collection is noted with the gated fields
    one side lacks: those are not gated (compare's ``missing``).
    """
    notes: list[str] = []
    work_only = False
    if base.gpus and new.gpus and set(base.gpus) != set(new.gpus):
        if other_gpu == "refuse":
            raise UsageError(
                f"The baseline was measured on {safe_text(_listed(base.gpus))} and the new runs on "
                f"{safe_text(_listed(new.gpus))}.",
                "Time and the binding wall of one GPU model say nothing about another's, so the gate refuses to judge them.",
                "Profile the new runs on the baseline's GPU, write a baseline on this GPU, or pass --other-gpu work "
                "to gate the work counters only.",
            )
        work_only = True
        notes.append(f"baseline GPU {_listed(base.gpus)}, new GPU {_listed(new.gpus)}: downgraded to work counters "
                     f"(time and the binding wall not gated)")
    if base.ncu_versions and new.ncu_versions and set(base.ncu_versions) != set(new.ncu_versions):
        notes.append(f"ncu {_listed(base.ncu_versions)} in the baseline, {_listed(new.ncu_versions)} in the new runs: "
                     f"counters compared by name")
    only = sorted(set(base.collection) ^ set(new.collection))
    if only:
        notes.append(f"collected on one side only, not gated: {', '.join(only)}")
    return work_only, notes
