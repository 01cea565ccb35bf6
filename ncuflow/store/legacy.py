"""Manifests of schema 1 and 2 (one flat object) read into the parts of schema 3.

Each flat key belongs to one field of one part; its value is checked against that field's
annotation, and a wrong one is named by its flat key, as the file spells it. What the old
versions meant differently is translated once, here: the ``metric_set`` label becomes
``NcuOptions``; in schema 1 a ``kernel_regex`` that was an exact kernel name becomes
``kernel_name`` and a stability re-profile's ``replica`` (counted from 1) counts from 0; a
tier-2 run's ``escalation_of`` becomes its ``Escalation``.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from ncuflow.errors import UsageError
from ncuflow.store.collection import NcuOptions, options_from_label
from ncuflow.store.record import (
    PART_TYPES,
    CellFacts,
    Collection,
    Escalation,
    Machine,
    ManifestError,
    Outcome,
    Provenance,
    RunIdentity,
    Sweep,
)
from ncuflow.store.typed import TypeMismatch, convert, from_json

# flat key -> (part, field) of the fields that map one to one
_FLAT: dict[str, tuple[str, str]] = {
    **{k: ("identity", k) for k in ("cell", "params", "content_key", "run_id", "created_utc")},
    **{k: ("collection", k) for k in ("command", "ncu_path", "ncu_version", "timeout_s", "kernel_name")},
    **{k: ("machine", k) for k in ("gpu_name", "gpu_uuid", "driver_version", "torch_version", "triton_version",
                                    "python", "ncuflow_version", "cuda_visible_devices")},
    "ray_node": ("machine", "node"),
    **{k: ("outcome", k) for k in ("exit_status", "wall_time_s", "actions", "error")},
    **{k: ("cell_facts", k) for k in ("representation", "expected_bytes", "check", "nvtx_range",
                                       "duration_unprofiled")},
    **{k: ("provenance", k) for k in ("replica", "replicas")},
}
# flat keys of the collection options and the sweep, checked by the annotation they end up in
_OPTION_KEYS: dict[str, str] = {"replay_mode": "replay_mode", "cache_control": "cache_control",
                                "clock_control": "clock_control", "launch_count": "launch_count",
                                "kernel_regex": "kernel_regex", "nvtx_include": "nvtx_include"}
_KNOWN = {*_FLAT, *_OPTION_KEYS, "schema_version", "metric_set", "dropped_metrics", "sweep", "sweep_file",
          "sweep_axes", "escalation_of", "escalation_of_path", "tier", "spec"}
_REQUIRED = ("cell", "params", "content_key", "run_id")


def parts_of_flat(data: Mapping[str, Any], version: int, source: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A schema-1 or -2 manifest as the parts of a schema-3 ``Manifest`` and the keys no part
    knows (raises ``ManifestError``)."""
    for name in _REQUIRED:
        if data.get(name) is None:
            raise ManifestError(source, name, f"the required field {name} is missing")
        if data[name] == "":
            raise ManifestError(source, name, f"{name} is empty")
    try:
        parts = _checked_parts(data)
        kernel_regex, kernel_name = _kernel_filter(data, version)
        options = _options(data, kernel_regex)
        sweep = _sweep(data)
    except TypeMismatch as error:
        raise ManifestError(source, error.field, error.problem) from None
    if kernel_name is not None:
        parts["collection"]["kernel_name"] = kernel_name
    replica = parts["provenance"].get("replica")
    if version == 1 and isinstance(replica, int) and data.get("replicas") is not None and replica >= 1:
        parts["provenance"]["replica"] = replica - 1  # stability re-profiles counted from 1
    try:
        identity = RunIdentity(**parts["identity"])
    except ValueError as error:
        raise ManifestError(source, None, str(error)) from None
    escalation = Escalation(tier=2, of_run=str(data["escalation_of"])) if data.get("escalation_of") else None
    typed = {
        "identity": identity,
        "collection": Collection(options=options, **parts["collection"]),
        "machine": Machine(**parts["machine"]),
        "outcome": Outcome(**parts["outcome"]),
        "cell_facts": CellFacts(**parts["cell_facts"]),
        "provenance": Provenance(sweep=sweep, escalation=escalation, **parts["provenance"]),
    }
    return typed, {k: v for k, v in data.items() if k not in _KNOWN}


def _checked_parts(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    parts: dict[str, dict[str, Any]] = {name: {} for name in PART_TYPES}
    for key, (part, name) in _FLAT.items():
        value = data.get(key)
        if value is not None:
            parts[part][name] = convert(typing.get_type_hints(PART_TYPES[part])[name], value, key)
    return parts


def _kernel_filter(data: Mapping[str, Any], version: int) -> tuple[str | None, str | None]:
    """(kernel regex, exact kernel name): schema 1 held either in ``kernel_regex``."""
    kernel = data.get("kernel_regex")
    name = data.get("kernel_name")
    if kernel is not None and not isinstance(kernel, str):
        raise TypeMismatch("kernel_regex", f"kernel_regex is {type(kernel).__name__}, not a string")
    if version != 1 or not kernel:
        return kernel or None, name
    recorded = data.get("command")
    command = recorded if isinstance(recorded, list) else []
    if kernel.startswith("regex:"):
        return kernel[len("regex:"):], name
    if f"regex:{kernel}" in command:
        return kernel, name
    return None, kernel


def _options(data: Mapping[str, Any], kernel_regex: str | None) -> NcuOptions:
    given: dict[str, Any] = {}
    hints = typing.get_type_hints(NcuOptions)
    for key, name in _OPTION_KEYS.items():
        if data.get(key) is not None and key != "kernel_regex":
            given[name] = convert(hints[name], data[key], key)
    label = data.get("metric_set")
    if label is not None and not isinstance(label, str):
        raise TypeMismatch("metric_set", f"metric_set is {type(label).__name__}, not a string")
    dropped = convert(tuple[str, ...], data.get("dropped_metrics") or [], "dropped_metrics")
    try:
        options = options_from_label(label, kernel_regex=kernel_regex, **given)
    except UsageError as error:
        raise TypeMismatch("metric_set", f"the recorded collection is not valid: {error.what}") from None
    if dropped and not options.exclude_metrics:
        options = NcuOptions(**{**_option_fields(options), "exclude_metrics": dropped})
    return options


def _option_fields(options: NcuOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in typing.get_type_hints(NcuOptions)}


def _sweep(data: Mapping[str, Any]) -> Sweep | None:
    if data.get("sweep") is None:
        return None
    found = {"name": data["sweep"], "file": data.get("sweep_file"), "axes": data.get("sweep_axes")}
    try:
        return from_json(Sweep, found)
    except TypeMismatch as error:  # named by the flat key the file spells
        part, dot, rest = error.field.partition(".")
        flat = {"name": "sweep", "file": "sweep_file", "axes": "sweep_axes"}.get(part, part)
        raise TypeMismatch(flat, error.problem.replace(error.field, flat + dot + rest, 1)) from None
