"""The run record: what one stored run measured, how, where, and where it came from.

A manifest is ``manifest.json`` in a run folder; ``Manifest`` is its typed, frozen form,
made of parts, each a frozen record whose type annotations are the only statement of its
fields' types (``ncuflow.store.typed`` checks JSON against them):

- ``identity``: the ``CellSpec`` measured, its content key, the run id (``RunIdentity``);
- ``collection``: what ncu collected and how (``NcuOptions``), the exact command, ncu;
- ``machine``: GPU, driver, package versions, the node that ran it;
- ``outcome``: exit status, wall time, actions, the error of a failed run;
- ``cell``: what reached the kernel (the cell's representation, expected bytes, its check,
  timings outside ncu);
- ``provenance``: replica, sweep, and the run's place in an escalation (``Escalation``).

``Manifest.from_json(data, source)`` validates what was read and raises ``ManifestError``
(one paragraph naming the file and the field); ``to_json()`` gives what is written.
Keys a part does not know are kept in ``extra`` and written back unchanged.

Schema versions: 3 (parts, as above) is written. 1 and 2 (flat keys) are read into it:
in 1, ``kernel_regex`` held either a ``--kernel`` regular expression or, for a run
imported from a larger report, an exact kernel name or ``regex:EXPR``, and stability
re-profiles counted ``replica`` from 1; in 2 ``kernel_regex`` is always a regex and
``replica`` counts from 0; both stored the collection as a ``metric_set`` label
(``set;sections:…;+metrics:…;-metrics:…``), parsed here once. Plain data and JSON only:
the GPU host imports this (no polars).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ncuflow.cells.contract import CellSpec
from ncuflow.errors import NcuflowError, UsageError
from ncuflow.files import read_small_file
from ncuflow.files.inputs import deepest_nesting
from ncuflow.files.run_layout import MANIFEST_NAME
from ncuflow.store.collection import NcuOptions
from ncuflow.store.legacy import parts_of_flat
from ncuflow.store.record import (
    PART_TYPES,
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    CellFacts,
    Collection,
    Escalation,
    Machine,
    ManifestError,
    Outcome,
    Provenance,
    RunIdentity,
    RunRef,
    Sweep,
)
from ncuflow.store.typed import TypeMismatch, from_json, json_type, short, to_json

__all__ = [
    "MANIFEST_NAME", "READABLE_VERSIONS", "SCHEMA_VERSION", "CellFacts", "CellSpec", "Collection", "Escalation", "Machine",
    "Manifest", "ManifestError", "Outcome", "Provenance", "RunIdentity", "RunRef", "Sweep", "read_manifest",
]

MAX_MANIFEST_BYTES = 16 << 20  # a manifest is a few KB; a cell's representation at most a few hundred
MAX_JSON_DEPTH = 64


@dataclass(frozen=True)
class Manifest:
    """One run's record (schema 3 in memory, whatever version was read)."""

    identity: RunIdentity
    collection: Collection = field(default_factory=Collection)
    machine: Machine = field(default_factory=Machine)
    outcome: Outcome = field(default_factory=Outcome)
    cell_facts: CellFacts = field(default_factory=CellFacts)
    provenance: Provenance = field(default_factory=Provenance)
    schema_version: int = SCHEMA_VERSION  # the version the file was written in
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)  # keys no part knows

    @property
    def cell(self) -> str:
        return self.identity.cell

    @property
    def params(self) -> Mapping[str, Any]:
        return self.identity.params

    @property
    def content_key(self) -> str:
        return self.identity.content_key

    @property
    def run_id(self) -> str:
        return self.identity.run_id

    @property
    def spec(self) -> CellSpec:
        return self.identity.spec

    def ref(self) -> RunRef:
        sweep = self.provenance.sweep
        return RunRef(spec=self.spec, content_key=self.content_key, run_id=self.run_id,
                      replica=self.provenance.replica, sweep=sweep.name if sweep else None,
                      sweep_axes=sweep.axis_names() if sweep else None)

    def with_outcome(self, **changes: Any) -> Manifest:
        return replace(self, outcome=replace(self.outcome, **changes))

    # ------------------------------------------------------------------ JSON

    @classmethod
    def from_json(cls, data: object, source: Path | str = "<manifest>") -> Manifest:
        """Validate a parsed ``manifest.json`` (any readable schema version)."""
        if not isinstance(data, dict):
            raise ManifestError(source, None, f"it holds {json_type(data)}, not a JSON object")
        version = _schema_version(data, source)
        if version < 3:
            flat, unknown = parts_of_flat(data, version, source)
            return cls(**flat, schema_version=version, extra=unknown)
        try:
            if not isinstance(data.get("identity"), dict):
                raise TypeMismatch("identity", "the required part identity is missing or not an object")
            parts: dict[str, Any] = {name: from_json(kind, _object(data, name), name)
                                     for name, kind in PART_TYPES.items() if name != "collection"}
            parts["collection"] = _collection(_object(data, "collection"))
        except TypeMismatch as error:
            raise ManifestError(source, error.field, error.problem) from None
        extra = {k: v for k, v in data.items() if k not in PART_TYPES and k != "schema_version"}
        return cls(**parts, schema_version=version, extra=extra)

    def to_json(self) -> dict[str, Any]:
        """The dict written to ``manifest.json`` (schema 3; extras last)."""
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
        out.update({name: to_json(getattr(self, name)) for name in PART_TYPES})
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out




def _object(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeMismatch(name, f"{name} is {json_type(value)} ({short(value)}), not an object")
    return value


def _collection(data: Mapping[str, Any]) -> Collection:
    """The collection part; its options are validated as ``NcuOptions`` validates them."""
    raw = dict(data)
    options = raw.pop("options", None) or {}
    if not isinstance(options, dict):
        raise TypeMismatch("collection.options", f"collection.options is {json_type(options)}, not an object")
    try:
        typed_options = from_json(NcuOptions, options, "collection.options")
    except UsageError as error:
        raise TypeMismatch("collection.options", f"collection.options: {error.what}") from None
    return replace(from_json(Collection, raw, "collection"), options=typed_options)


def _schema_version(data: Mapping[str, Any], source: Path | str) -> int:
    if "schema_version" not in data:
        raise ManifestError(source, "schema_version", "schema_version is missing")
    version = data["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise ManifestError(source, "schema_version", f"schema_version is {json_type(version)}, not an integer")
    if version not in READABLE_VERSIONS:
        raise ManifestError(source, "schema_version", f"schema_version is {version}", newer=version > SCHEMA_VERSION)
    return version


# ---------------------------------------------------------------------------- files


def read_manifest(path: Path) -> Manifest:
    """Read and validate one ``manifest.json`` (raises ManifestError naming the file and field).

    The file must be a regular file of at most ``MAX_MANIFEST_BYTES`` (a FIFO, a device or a
    link to ``/dev/zero`` is refused before reading) and JSON nested at most
    ``MAX_JSON_DEPTH`` deep.
    """
    source = Path(path)
    text = read_small_file(source, MAX_MANIFEST_BYTES, what="manifest", error=lambda problem: ManifestError(
        source, None, problem))
    if not text.strip():
        raise ManifestError(source, None, "the file is empty")
    return Manifest.from_json(parse_json(text, source, lambda problem: ManifestError(source, None, problem)), source)


def parse_json(text: str, source: Path | str, error: Callable[[str], NcuflowError]) -> Any:
    """``json.loads`` with its failures (bad syntax, nesting past ``MAX_JSON_DEPTH``) as ``error(problem)``."""
    depth = deepest_nesting(text)
    if depth > MAX_JSON_DEPTH:
        raise error(f"it nests {depth} levels deep (at most {MAX_JSON_DEPTH} are read)")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as failure:
        raise error(f"it is not valid JSON ({str(failure)[:120]})") from None
