"""The run manifest: the one contract between profiling (which writes it) and reading.

A manifest is ``manifest.json`` in a run folder. ``Manifest`` is its typed, frozen form;
``Manifest.from_json(data, source)`` validates what was read and raises ``ManifestError``
(one paragraph naming the file and the field) for anything it cannot trust, and
``to_json()`` gives the dict that is written. Every reader (the loader, export,
stability's re-profiles, sweeps counting what is done) goes through it.

Fields. Required: ``schema_version``, ``cell``, ``params``, ``content_key``, ``run_id``
(without them a report cannot be tied to what was measured, so the run is damaged).
Everything else is optional (None where unknown) but typed: a value of the wrong type
makes the manifest damaged too, never a guess. Keys this version does not know are kept
in ``extra`` and written back unchanged (a manifest from a newer minor writer still reads).

Schema versions:

- 1: ``kernel_regex`` held either the ``--kernel`` regular expression of a profile (ncu got
  ``--kernel-name regex:<it>``) or, for a run imported from a larger report, an exact
  kernel name or ``regex:EXPR``; ``replica`` counted from 0 in ``profile``/``sweep`` and
  from 1 in ``stability`` re-profiles (the manifests that also hold ``replicas``).
- 2: ``kernel_regex`` is always a regular expression (searched in the kernel's function
  and demangled names); an exact name is ``kernel_name``; ``replica`` counts from 0 (the
  first run a command makes of a point is replica 0); sweeps record ``sweep_axes``.

Version-1 manifests are read into the version-2 meaning: ``regex:EXPR`` -> regex EXPR; a
value the recorded ncu command passed as ``regex:<value>`` -> that regex; any other value
(an import, no ncu command) -> an exact ``kernel_name``; a stability re-profile's replica
minus 1. Plain data and JSON only: the GPU host imports this (no polars).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ncuflow import __version__
from ncuflow.errors import NcuflowError

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
MANIFEST_NAME = "manifest.json"

Scalar = str | int | float | bool
Params = tuple[tuple[str, object], ...]
Axes = tuple[tuple[str, tuple[Scalar, ...]], ...]

# Every manifest holds these keys (None where unknown). Durations are labelled by
# their clock: ``wall_time_s`` is the wall time of the whole ncu process (replay
# included), kernel durations measured by ncu live in the report (gpu__time_duration),
# and ``duration_unprofiled`` holds CUDA-event timings of the cell outside ncu, or None.
MANIFEST_FIELDS: tuple[str, ...] = (
    "schema_version", "cell", "params", "content_key", "run_id", "created_utc", "command",
    "ncu_path", "ncu_version", "driver_version", "gpu_name", "gpu_uuid", "torch_version",
    "triton_version", "replay_mode", "cache_control", "clock_control", "metric_set",
    "exit_status", "wall_time_s", "ncuflow_version", "representation", "expected_bytes",
    "duration_unprofiled",
)
REQUIRED_FIELDS: tuple[str, ...] = ("schema_version", "cell", "params", "content_key", "run_id")


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


@dataclass(frozen=True)
class RunRef:
    """Which stored run a launch comes from: what was measured, which replica, which sweep.

    ``params`` are sorted (name, value) pairs with hashable values; ``sweep_axes`` names
    the parameters the sweep varied, or is None when the run records none (not made by a
    sweep, or by an ncuflow that did not record axes: then explain infers them).
    """

    cell: str
    params: Params
    content_key: str
    run_id: str
    replica: int | None = None
    sweep: str | None = None
    sweep_axes: tuple[str, ...] | None = None


def _hashable(value: object) -> object:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return json.dumps(value, sort_keys=True, default=str)


def params_tuple(params: Mapping[str, object]) -> Params:
    """Parameters as sorted (name, value) pairs; non-scalar values as their JSON text."""
    return tuple(sorted((str(k), _hashable(v)) for k, v in params.items()))


# ---------------------------------------------------------------------------- field kinds

_JSON_NAMES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
               int: "an integer", float: "a number", type(None): "null"}


def _json_type(value: object) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _axes(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(values, list) and all(isinstance(v, str | int | float | bool) for v in values)
        for values in value.values()
    )


# key -> (check, what it must be)
_KINDS: dict[str, tuple[Any, str]] = {
    "text": (lambda v: isinstance(v, str), "a string"),
    "nonempty": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "int": (_is_int, "an integer"),
    "number": (_is_number, "a number"),
    "strings": (_str_list, "an array of strings"),
    "object": (lambda v: isinstance(v, dict), "an object"),
    "exit": (lambda v: _is_int(v) or isinstance(v, str), "an integer or a string"),
    "axes": (_axes, "an object of axis name -> array of values"),
    "any": (lambda v: True, "any JSON value"),
}


@dataclass(frozen=True)
class Manifest:
    """One run's manifest (schema version 2 in memory, whatever version was read)."""

    cell: str
    params: Mapping[str, Any]
    content_key: str
    run_id: str
    schema_version: int = SCHEMA_VERSION
    created_utc: str | None = None
    command: tuple[str, ...] | None = None
    ncu_path: str | None = None
    ncu_version: str | None = None
    driver_version: str | None = None
    gpu_name: str | None = None
    gpu_uuid: str | None = None
    torch_version: str | None = None
    triton_version: str | None = None
    replay_mode: str | None = None
    cache_control: str | None = None
    clock_control: str | None = None
    metric_set: str | None = None
    exit_status: int | str | None = None
    wall_time_s: float | None = None
    ncuflow_version: str | None = None
    representation: Any = None
    expected_bytes: float | None = None
    duration_unprofiled: Mapping[str, Any] | None = None
    nvtx_include: tuple[str, ...] | None = None
    kernel_regex: str | None = None  # a regular expression (ncu got --kernel-name regex:<it>)
    kernel_name: str | None = None  # an exact kernel name (a run imported from a larger report)
    launch_count: int | None = None
    timeout_s: float | None = None
    python: str | None = None
    spec: str | None = None
    dropped_metrics: tuple[str, ...] | None = None
    replica: int | None = None  # counted from 0
    replicas: int | None = None
    sweep: str | None = None
    sweep_file: str | None = None
    sweep_axes: Axes | None = None  # the sweep's axes and their values, in the sweep file's order
    actions: int | None = None
    check: Any = None
    nvtx_range: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this version does not know

    # ------------------------------------------------------------------ reading

    @classmethod
    def from_json(cls, data: object, source: Path | str = "<manifest>") -> Manifest:
        """Validate a parsed ``manifest.json`` (any readable schema version)."""
        if not isinstance(data, dict):
            raise ManifestError(source, None, f"it holds {_json_type(data)}, not a JSON object")
        version = data.get("schema_version")
        if "schema_version" not in data:
            raise ManifestError(source, "schema_version", "schema_version is missing")
        if not _is_int(version):
            raise ManifestError(source, "schema_version", f"schema_version is {_json_type(version)}, not an integer")
        if not isinstance(version, int) or version not in READABLE_VERSIONS:
            raise ManifestError(source, "schema_version", f"schema_version is {version}",
                                newer=isinstance(version, int) and version > SCHEMA_VERSION)
        for name in REQUIRED_FIELDS:
            if data.get(name) is None:
                raise ManifestError(source, name, f"the required field {name} is missing")
        values: dict[str, Any] = {}
        for name, kind in _FIELD_KINDS.items():
            value = data.get(name)
            if value is None:
                continue
            check, expected = _KINDS[kind]
            if not check(value):
                raise ManifestError(source, name, f"{name} is {_json_type(value)} ({_short(value)}), not {expected}")
            values[name] = _convert(name, value)
        values["extra"] = {k: v for k, v in data.items() if k not in _FIELD_KINDS}
        if version == 1:
            values.update(_from_version_1(data))
        values["schema_version"] = SCHEMA_VERSION
        return cls(**values)

    # ------------------------------------------------------------------ writing

    def to_json(self) -> dict[str, Any]:
        """The dict written to ``manifest.json`` (every known key, None where unknown; extras last)."""
        out: dict[str, Any] = {}
        for name in _FIELD_KINDS:
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = dict((k, list(v)) for k, v in value) if name == "sweep_axes" else list(value)
            elif isinstance(value, Mapping):
                value = dict(value)
            out[name] = value
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out

    def get(self, key: str, default: Any = None) -> Any:
        """The JSON value of ``key`` (for display and keys this version does not type)."""
        value = self.to_json().get(key)
        return default if value is None else value

    def __getitem__(self, key: str) -> Any:
        data = self.to_json()
        if key not in data:
            raise KeyError(key)
        return data[key]

    # ------------------------------------------------------------------ meaning

    def ref(self) -> RunRef:
        return RunRef(
            cell=self.cell, params=params_tuple(self.params), content_key=self.content_key,
            run_id=self.run_id, replica=self.replica, sweep=self.sweep,
            sweep_axes=tuple(name for name, _ in self.sweep_axes) if self.sweep_axes is not None else None,
        )


_FIELD_KINDS: dict[str, str] = {
    "schema_version": "int", "cell": "nonempty", "params": "object", "content_key": "nonempty",
    "run_id": "nonempty", "created_utc": "text", "command": "strings", "ncu_path": "text",
    "ncu_version": "text", "driver_version": "text", "gpu_name": "text", "gpu_uuid": "text",
    "torch_version": "text", "triton_version": "text", "replay_mode": "text",
    "cache_control": "text", "clock_control": "text", "metric_set": "text", "exit_status": "exit",
    "wall_time_s": "number", "ncuflow_version": "text", "representation": "any",
    "expected_bytes": "number", "duration_unprofiled": "object", "nvtx_include": "strings",
    "kernel_regex": "text", "kernel_name": "text", "launch_count": "int", "timeout_s": "number",
    "python": "text", "spec": "text", "dropped_metrics": "strings", "replica": "int",
    "replicas": "int", "sweep": "text", "sweep_file": "text", "sweep_axes": "axes",
    "actions": "int", "check": "any", "nvtx_range": "text",
}
assert set(_FIELD_KINDS) == {f.name for f in dataclasses.fields(Manifest)} - {"extra"}
assert set(MANIFEST_FIELDS) <= set(_FIELD_KINDS)


def field_accepts(name: str, value: object) -> bool:
    """Whether ``value`` may be written as the manifest field ``name`` (None always may)."""
    kind = _FIELD_KINDS.get(name)
    if kind is None or value is None:
        return True
    check, _ = _KINDS[kind]
    return bool(check(_jsonable(value)))


def _short(value: object) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _convert(name: str, value: Any) -> Any:
    kind = _FIELD_KINDS[name]
    if kind == "strings":
        return tuple(value)
    if kind == "axes":
        return tuple((str(k), tuple(v)) for k, v in value.items())
    if kind == "object":
        return dict(value)
    return value


def _from_version_1(data: Mapping[str, Any]) -> dict[str, Any]:
    """What a version-1 manifest means in version 2 (see the module docstring)."""
    changed: dict[str, Any] = {}
    kernel = data.get("kernel_regex")
    if isinstance(kernel, str) and kernel:
        recorded = data.get("command")
        command: list[Any] = recorded if isinstance(recorded, list) else []
        if kernel.startswith("regex:"):
            changed["kernel_regex"] = kernel[len("regex:"):]
        elif f"regex:{kernel}" in command:
            changed["kernel_regex"] = kernel
        else:
            changed["kernel_regex"] = None
            changed["kernel_name"] = kernel
    replica = data.get("replica")
    if isinstance(replica, int) and _is_int(replica) and data.get("replicas") is not None and replica >= 1:
        changed["replica"] = replica - 1  # stability re-profiles counted from 1
    return changed


# ---------------------------------------------------------------------------- files


def read_manifest(path: Path) -> Manifest:
    """Read and validate one ``manifest.json`` (raises ManifestError naming the file and field)."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(source, None, "the file is missing") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ManifestError(source, None, f"it cannot be read ({getattr(error, 'strerror', None) or error})") from None
    if not text.strip():
        raise ManifestError(source, None, "the file is empty")
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ManifestError(source, None, f"it is not valid JSON ({error})") from None
    return Manifest.from_json(data, source)


def new_manifest(fields: Mapping[str, Any], source: Path | str = "<new manifest>") -> Manifest:
    """A version-2 manifest from the fields a writer collected (validated like a read one)."""
    data = {name: _jsonable(value) for name, value in fields.items()}
    data["schema_version"] = SCHEMA_VERSION
    data.setdefault("ncuflow_version", __version__)
    return Manifest.from_json(data, source)


def _jsonable(value: Any) -> Any:
    """Tuples as lists and mappings as dicts, so a writer may pass either."""
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def axes_json(axes: Sequence[tuple[str, Sequence[Scalar]]]) -> dict[str, list[Scalar]]:
    """A sweep's axes as the manifest's ``sweep_axes`` value."""
    return {name: list(values) for name, values in axes}
