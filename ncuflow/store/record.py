"""The parts of a run record (``ncuflow.store.manifest.Manifest``), each a frozen record.

Their type annotations are the only statement of their fields' types:
``ncuflow.store.typed`` checks JSON against them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ncuflow import __version__
from ncuflow.cells.contract import CellSpec, ParamValue
from ncuflow.errors import NcuflowError
from ncuflow.store.collection import NcuOptions

SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)

Scalar = str | int | float | bool


class ManifestError(NcuflowError):
    """A manifest that cannot be trusted: unreadable, not JSON, a field missing or of the wrong type.

    ``path`` is the file, ``field`` the key at fault (None for the whole file) and
    ``problem`` a short phrase for one-line warnings ("params is a string, not an object").
    """

    def __init__(self, path: Path | str, field_name: str | None, problem: str, *, newer: bool = False) -> None:
        self.path = Path(path)
        self.field = field_name
        self.problem = problem
        self.newer = newer  # written by a newer ncuflow: not damage, leave it alone
        if newer:
            super().__init__(
                f"The run manifest {self.path} cannot be read: {problem}.",
                f"This ncuflow ({__version__}) reads manifest schema versions "
                f"{', '.join(map(str, READABLE_VERSIONS))}; the run was written by a newer ncuflow.",
                "Upgrade ncuflow to read this run; it is left as it is.",
            )
        else:
            super().__init__(
                f"The run manifest {self.path} is damaged: {problem}.",
                "The manifest ties a stored report to its cell, parameters and content key; "
                "ncuflow does not guess them, so this run is not read.",
                "Run `ncuflow store check STORE --repair` to move it aside (as .damaged-<run-id>) "
                "and profile the point again.",
            )


# ---------------------------------------------------------------------------- the parts


@dataclass(frozen=True)
class RunIdentity:
    """Which point was measured (its cell spec and content key) and which run of it this is."""

    cell: str
    params: Mapping[str, Any]
    content_key: str
    run_id: str
    created_utc: str | None = None

    def __post_init__(self) -> None:
        for name in ("cell", "content_key", "run_id"):
            if not getattr(self, name):
                raise ValueError(f"{name} is empty")

    @property
    def spec(self) -> CellSpec:
        """The cell spec (parameters sorted; a non-scalar value as its JSON text)."""
        return CellSpec(self.cell, tuple(sorted((str(k), _param_value(v)) for k, v in self.params.items())))


@dataclass(frozen=True)
class Collection:
    """What ncu collected and how: the options as given, the exact command, which ncu."""

    options: NcuOptions = field(default_factory=NcuOptions)
    command: tuple[str, ...] | None = None
    ncu_path: str | None = None
    ncu_version: str | None = None
    timeout_s: float | None = None
    kernel_name: str | None = None  # an exact kernel name (a run imported from a larger report)


@dataclass(frozen=True)
class Machine:
    """Where the run was made."""

    gpu_name: str | None = None
    gpu_uuid: str | None = None
    driver_version: str | None = None
    torch_version: str | None = None
    triton_version: str | None = None
    python: str | None = None
    ncuflow_version: str | None = None
    node: str | None = None  # the host name of a Ray node that ran it
    cuda_visible_devices: str | None = None


@dataclass(frozen=True)
class Outcome:
    """How the ncu process ended, and what the report holds."""

    exit_status: int | str | None = None  # the exit code, or "timeout"
    wall_time_s: float | None = None  # the whole ncu process, replay included
    actions: int | None = None
    error: str | None = None  # a failed run's error paragraph (kept as .failed-<run-id>)


@dataclass(frozen=True)
class CellFacts:
    """What reached the kernel, as the cell described it (``CellInstance.representation``)."""

    representation: Any = None
    expected_bytes: float | None = None
    check: Any = None  # the output checked against the torch reference before profiling
    nvtx_range: str | None = None
    duration_unprofiled: Mapping[str, Any] | None = None  # CUDA-event timing outside ncu


@dataclass(frozen=True)
class Sweep:
    """The sweep a run belongs to: its name, file and axes (in the file's order)."""

    name: str
    file: str | None = None
    axes: Mapping[str, tuple[Scalar, ...]] | None = None

    def axis_names(self) -> tuple[str, ...] | None:
        return None if self.axes is None else tuple(self.axes)


@dataclass(frozen=True)
class Escalation:
    """A run's place in the decisive collection's escalation.

    Tier 1: ``undecided`` of ``launches`` the model left undecided when the run was
    stored (``needed`` when any), by the model of version ``model`` (``ncuflow.terms.MODEL_VERSION``;
    None before versions were stored: a judgement of another model is made again when the
    store is next swept); None where the report could not be read there (a GPU host without
    a reader): then it is decided when the store is next swept. Tier 2: ``of_run`` is the
    tier-1 run it escalates (stored under ``STORE/.tier2``). Tier 3, the why tier: ``of_run``
    is the tier-1 run it explains and ``wall`` the verdict whose sections it collected
    (``ncuflow.profile.why``; stored under ``STORE/.tier3``).
    """

    tier: int
    undecided: int | None = None
    launches: int | None = None
    of_run: str | None = None
    model: int | None = None
    wall: str | None = None

    @property
    def needed(self) -> bool | None:
        return None if self.undecided is None else self.undecided > 0


@dataclass(frozen=True)
class Provenance:
    """Where the run came from: its replica, sweep and escalation."""

    replica: int | None = None  # counted from 0
    replicas: int | None = None  # how many a stability re-profile asked for
    sweep: Sweep | None = None
    escalation: Escalation | None = None


@dataclass(frozen=True)
class RunRef:
    """Which stored run a launch comes from: what was measured, which replica, which sweep.

    ``sweep_axes`` names the parameters the sweep varied, or is None when the run records
    none (not made by a sweep, or by an ncuflow that did not record axes: then explain
    infers them).
    """

    spec: CellSpec
    content_key: str
    run_id: str
    replica: int | None = None
    sweep: str | None = None
    sweep_axes: tuple[str, ...] | None = None

    @property
    def cell(self) -> str:
        return self.spec.cell

    @property
    def params(self) -> tuple[tuple[str, ParamValue], ...]:
        return self.spec.params


# the parts of a manifest, by their key in manifest.json
PART_TYPES: dict[str, type] = {
    "identity": RunIdentity, "collection": Collection, "machine": Machine, "outcome": Outcome,
    "cell_facts": CellFacts, "provenance": Provenance,
}


def _param_value(value: object) -> ParamValue:
    if isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, sort_keys=True, default=str)
