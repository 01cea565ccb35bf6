"""The run record contract: round trip, the H200 reference store, old schemas, damage, RunRef."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ncuflow import store
from ncuflow.cells.contract import CellSpec
from ncuflow.read.extract import iter_launches
from ncuflow.read.runs import load_paths
from ncuflow.store import DamagedRunWarning, write_run
from ncuflow.store.collection import NcuOptions
from ncuflow.store.manifest import (
    SCHEMA_VERSION,
    CellFacts,
    Collection,
    Escalation,
    Machine,
    Manifest,
    ManifestError,
    Outcome,
    Provenance,
    RunIdentity,
    Sweep,
    read_manifest,
)
from tests.conftest import REFERENCE_DIR
from tests.hostile import make_special_file

H200 = REFERENCE_DIR / "h200"
H200_MANIFESTS = sorted(H200.rglob("manifest.json"))
KEY = "c" * 8 + "3" * 56
SILU = "AlpriElse__cs599k__silu_CUDA_ncu-reports_2025-04-21-77_06-MT.ncu-rep"  # 3 launches, 1 kernel
JESTES = "jestes15__EE384_FinalProject__profile_output.ncu-rep"  # 18 launches, 6 kernels


def _full() -> Manifest:
    return Manifest(
        identity=RunIdentity("paged_decode", {"page": 16, "batch": 32}, KEY, "20261130T000000Z-abcdef",
                             "2026-11-30T00:00:00Z"),
        collection=Collection(NcuOptions(kernel_regex="decode.*", nvtx_include=("ncuflow/paged_decode/",),
                                         sections=("SpeedOfLight",), exclude_metrics=("x__y.sum",)),
                              command=("ncu", "--kernel-name", "regex:decode.*"), ncu_version="2025.3.1.0"),
        machine=Machine(gpu_name="NVIDIA H200", node="gpu-7"),
        outcome=Outcome(exit_status=0, wall_time_s=1.5, actions=3),
        cell_facts=CellFacts(representation={"pages": 3}, expected_bytes=1e9, check={"passed": True}),
        provenance=Provenance(replica=0, sweep=Sweep("pages", "pages.toml", {"page": (1, 16, 128)}),
                              escalation=Escalation(tier=1, undecided=2, launches=3)),
        extra={"a_key_from_a_newer_writer": {"kept": [1, 2]}},
    )


def test_round_trip_keeps_every_part_and_unknown_keys() -> None:
    manifest = _full()
    data = manifest.to_json()
    assert data["schema_version"] == SCHEMA_VERSION == 3
    assert list(data)[:7] == ["schema_version", "identity", "collection", "machine", "outcome", "cell_facts",
                              "provenance"]
    assert data["collection"]["options"]["sections"] == ["SpeedOfLight"]  # structured, not a label
    assert data["provenance"]["sweep"]["axes"] == {"page": [1, 16, 128]}
    assert data["a_key_from_a_newer_writer"] == {"kept": [1, 2]}  # forward compatible
    again = Manifest.from_json(json.loads(json.dumps(data)))
    assert again == manifest and again.to_json() == data
    assert manifest.ref() == store.RunRef(CellSpec("paged_decode", (("batch", 32), ("page", 16))), KEY,
                                          "20261130T000000Z-abcdef", 0, "pages", ("page",))
    assert manifest.provenance.escalation is not None and manifest.provenance.escalation.needed is True


def test_the_record_is_typed_parts_not_a_dict() -> None:
    """No dict-shaped access, and no second statement of the fields' types."""
    import ncuflow.store.manifest as module

    for name in ("get", "__getitem__"):
        assert not hasattr(Manifest, name)
    assert not hasattr(module, "_FIELD_KINDS") and not hasattr(module, "MANIFEST_FIELDS")


def test_a_stored_run_reads_back_as_written(tmp_path: Path, corpus_dir: Path) -> None:
    record = write_run(tmp_path, CellSpec.of("silu", {"flag": "on"}), corpus_dir / SILU, content_key=KEY,
                       provenance=Provenance(replica=1), machine=Machine(gpu_name="A100"))
    assert read_manifest(record.path / "manifest.json") == record.manifest
    assert record.manifest.machine.gpu_name == "A100" and record.manifest.provenance.replica == 1
    assert record.manifest.outcome.exit_status == 0 and record.manifest.identity.created_utc


def test_the_writer_is_held_to_the_contract(tmp_path: Path, corpus_dir: Path) -> None:
    with pytest.raises(store.StoreError, match=r"does not validate: provenance\.replica is a string"):
        write_run(tmp_path, CellSpec.of("silu", {}), corpus_dir / SILU, content_key=KEY,
                  provenance=Provenance(replica="first"))  # type: ignore[arg-type]
    assert list(tmp_path.rglob("manifest.json")) == [] and list(tmp_path.rglob(".tmp-*")) == []


# ----------------------------------------------------------------------------- the H200 reference store


def test_the_reference_store_is_there() -> None:
    assert len(H200_MANIFESTS) == 49


# flat schema-1 key -> where schema 3 keeps it
_V1_PLACES: dict[str, str] = {
    "cell": "identity.cell", "params": "identity.params", "content_key": "identity.content_key",
    "run_id": "identity.run_id", "created_utc": "identity.created_utc", "command": "collection.command",
    "ncu_path": "collection.ncu_path", "ncu_version": "collection.ncu_version", "timeout_s": "collection.timeout_s",
    "driver_version": "machine.driver_version", "gpu_name": "machine.gpu_name", "gpu_uuid": "machine.gpu_uuid",
    "torch_version": "machine.torch_version", "triton_version": "machine.triton_version",
    "python": "machine.python", "ncuflow_version": "machine.ncuflow_version",
    "replay_mode": "collection.options.replay_mode", "cache_control": "collection.options.cache_control",
    "clock_control": "collection.options.clock_control", "metric_set": "collection.options.metric_set",
    "nvtx_include": "collection.options.nvtx_include", "launch_count": "collection.options.launch_count",
    "exit_status": "outcome.exit_status", "wall_time_s": "outcome.wall_time_s", "actions": "outcome.actions",
    "representation": "cell_facts.representation", "expected_bytes": "cell_facts.expected_bytes",
    "check": "cell_facts.check", "nvtx_range": "cell_facts.nvtx_range",
    "duration_unprofiled": "cell_facts.duration_unprofiled", "replicas": "provenance.replicas",
    "sweep": "provenance.sweep.name", "sweep_file": "provenance.sweep.file",
}


def _at(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        data = data[part]
    return data


@pytest.mark.parametrize("path", H200_MANIFESTS, ids=lambda p: f"{p.parent.parent.parent.name}/{p.parent.name}")
def test_every_h200_manifest_validates_and_means_what_it_said(path: Path) -> None:
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == 1
    manifest = read_manifest(path)
    assert manifest.schema_version == 1 and not manifest.extra
    data = manifest.to_json()
    # Version 1 read into the parts of version 3: the same values, except the ones that changed meaning.
    for key, value in raw.items():
        if key in {"schema_version", "replica", "kernel_regex", "dropped_metrics", "spec"} or value is None:
            continue
        assert _at(data, _V1_PLACES[key]) == value, key
    assert manifest.collection.kernel_name is None and manifest.collection.options.kernel_regex is None
    if "replicas" in raw:  # a stability re-profile, counted from 1 then
        assert manifest.provenance.replica == raw["replica"] - 1 and 0 <= raw["replica"] - 1 < raw["replicas"]
    else:  # a sweep run, counted from 0 already
        assert manifest.provenance.replica == raw["replica"] == 0
    ref = manifest.ref()
    assert (ref.cell, ref.params, ref.content_key, ref.run_id, ref.sweep) == (
        raw["cell"], CellSpec.of(raw["cell"], raw["params"]).params, raw["content_key"], raw["run_id"], raw.get("sweep"))
    assert Manifest.from_json(json.loads(json.dumps(data))) == replace_version(manifest)  # and it writes as 3


def replace_version(manifest: Manifest) -> Manifest:
    from dataclasses import replace

    return replace(manifest, schema_version=SCHEMA_VERSION)


def test_the_h200_store_loads_every_launch_with_its_run(recwarn: pytest.WarningsRecorder) -> None:
    loaded = load_paths([H200])
    assert len(loaded.runs) == 49 and loaded.notes == ()
    assert not [w for w in recwarn if issubclass(w.category, DamagedRunWarning)]
    for run in loaded.runs:
        assert run.ref is not None and run.launches
        assert len(run.launches) == sum(1 for _ in iter_launches(run.report))  # no kernel filter recorded
        assert {launch.run for launch in run.launches} == {run.ref}
        assert (run.cell, run.params, run.content_key, run.run_id) == (
            run.ref.cell, run.ref.params, run.ref.content_key, run.ref.run_id)
    assert sum(len(r.launches) for r in loaded.runs) == 91
    replicas: dict[str, list[int | None]] = {}
    for run in loaded.runs:
        replicas.setdefault(run.content_key, []).append(run.ref.replica if run.ref else None)
    reprofiled = [sorted(r) for r in replicas.values() if len(r) == 3]
    assert reprofiled and all(r == [0, 0, 1] for r in reprofiled)  # sweep's 0, stability's 0 and 1


# ----------------------------------------------------------------------------- version 1 meanings


def _v1(**fields: Any) -> dict[str, Any]:
    base = {"schema_version": 1, "cell": "c", "params": {}, "content_key": KEY, "run_id": "r1"}
    return {**base, **fields}


@pytest.mark.parametrize(("fields", "regex", "name"), [
    ({"kernel_regex": "conv2d", "command": ["ncu", "--kernel-name", "regex:conv2d", "app"]}, "conv2d", None),
    ({"kernel_regex": "regex:uninitialized_fill"}, "uninitialized_fill", None),
    ({"kernel_regex": "copyGmem"}, None, "copyGmem"),  # an import: an exact name
    ({"kernel_regex": None}, None, None),
])
def test_version_1_kernel_filters(fields: dict[str, Any], regex: str | None, name: str | None) -> None:
    manifest = Manifest.from_json(_v1(**fields))
    assert (manifest.collection.options.kernel_regex, manifest.collection.kernel_name) == (regex, name)


@pytest.mark.parametrize(("fields", "replica"), [
    ({"replica": 0}, 0),  # profile --replicas / sweep
    ({"replica": 3}, 3),
    ({"replica": 1, "replicas": 3}, 0),  # stability re-profile, from 1
    ({"replica": 3, "replicas": 3}, 2),
])
def test_version_1_replicas_count_from_0(fields: dict[str, Any], replica: int) -> None:
    assert Manifest.from_json(_v1(**fields)).provenance.replica == replica


def test_version_2_takes_values_as_written() -> None:
    data = {**_v1(kernel_regex="copyGmem", replica=1, replicas=3), "schema_version": 2}
    manifest = Manifest.from_json(data)
    options = manifest.collection.options
    assert options.kernel_regex == "copyGmem" and manifest.collection.kernel_name is None
    assert manifest.provenance.replica == 1


@pytest.mark.parametrize(("label", "sections", "extra", "excluded"), [
    ("decisive", (), (), ()),
    ("full;sections:SpeedOfLight,Occupancy", ("SpeedOfLight", "Occupancy"), (), ()),
    ("decisive;+metrics:a__b.sum;-metrics:c__d.sum", (), ("a__b.sum",), ("c__d.sum",)),
])
def test_version_2_collection_labels_become_options(label: str, sections: tuple[str, ...], extra: tuple[str, ...],
                                                    excluded: tuple[str, ...]) -> None:
    options = Manifest.from_json({**_v1(metric_set=label, clock_control="none"), "schema_version": 2}).collection.options
    assert (options.metric_set, options.sections, options.extra_metrics, options.exclude_metrics) == (
        label.split(";")[0], sections, extra, excluded)
    assert options.clock_control == "none"


def test_version_2_dropped_metrics_and_tier_two_runs() -> None:
    data = {**_v1(metric_set="decisive-tier2", dropped_metrics=["x__y.sum"], escalation_of="r0", tier=2),
            "schema_version": 2}
    manifest = Manifest.from_json(data)
    assert manifest.collection.options.exclude_metrics == ("x__y.sum",)
    assert manifest.provenance.escalation == Escalation(tier=2, of_run="r0")


# ----------------------------------------------------------------------------- damage


DAMAGE: list[tuple[str, str, str | None]] = [
    # (manifest text, problem in the message, field named)
    ('{"schema_version": 1, "cell": "c", "par', "not valid JSON", None),
    ("", "the file is empty", None),
    ("[1, 2]", "holds an array, not a JSON object", None),
    (json.dumps(_v1(params="batch=3")), 'params is a string ("batch=3"), not an object', "params"),
    (json.dumps(_v1(params=[1, 2])), "params is an array ([1, 2]), not an object", "params"),
    (json.dumps(_v1(cell=5)), "cell is an integer (5), not a string", "cell"),
    (json.dumps(_v1(cell="")), "cell is empty", "cell"),
    (json.dumps({k: v for k, v in _v1().items() if k != "content_key"}), "the required field content_key is missing", "content_key"),
    (json.dumps(_v1(schema_version="1")), "schema_version is a string, not an integer", "schema_version"),
    (json.dumps(_v1(schema_version=0)), "schema_version is 0", "schema_version"),
    (json.dumps(_v1(replica=True)), "replica is a boolean (true), not an integer", "replica"),
    (json.dumps(_v1(command="ncu -k x")), "command is a string", "command"),
    (json.dumps(_v1(sweep="s", sweep_axes={"page": 16})), "sweep_axes.page is an integer", "sweep_axes"),
    (json.dumps(_v1(metric_set="everything")), "Unknown metric set 'everything'", "metric_set"),
    (json.dumps(_v1(nvtx_include=["--export=/x"])), "starts with '-'", "metric_set"),
    (json.dumps({"schema_version": 3}), "the required part identity is missing", "identity"),
    (json.dumps({"schema_version": 3, "identity": {"cell": "c", "params": {}, "content_key": KEY, "run_id": "r",
                                                    "created_utc": 5}}),
     "identity.created_utc is an integer (5), not a string", "identity.created_utc"),
    (json.dumps({"schema_version": 3, "identity": {"cell": "c", "params": {}, "content_key": KEY, "run_id": "r"},
                 "provenance": [1]}), "provenance is an array ([1]), not an object", "provenance"),
    (json.dumps({"schema_version": 3, "identity": {"cell": "c", "params": {}, "content_key": KEY, "run_id": "r"},
                 "collection": {"options": {"launch_count": 0}}}), "--launch-count 0 is out of range",
     "collection.options"),
    ("[" * 5000 + "]" * 5000, "nests 5000 levels deep", None),
    ('{"a": ' * 100 + "1" + "}" * 100, "nests 100 levels deep", None),
]


@pytest.mark.parametrize(("text", "problem", "field"), DAMAGE)
def test_damage_is_one_paragraph_naming_the_file_and_field(tmp_path: Path, text: str, problem: str,
                                                           field: str | None) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(text)
    with pytest.raises(ManifestError) as caught:
        read_manifest(path)
    error = caught.value
    assert problem in error.problem and error.field == field and not error.newer
    message = str(error)
    assert str(path) in message and "\n" not in message and "store check" in message


def test_a_newer_schema_is_not_damage(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(_v1(schema_version=SCHEMA_VERSION + 1)))
    with pytest.raises(ManifestError, match="written by a newer ncuflow") as caught:
        read_manifest(path)
    assert caught.value.newer


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "folder", "huge"])
def test_a_manifest_that_is_no_small_regular_file_is_refused_without_reading(tmp_path: Path, kind: str) -> None:
    """A FIFO must not block, /dev/zero must not be read to the end: refused by type and size first."""
    path = tmp_path / "manifest.json"
    if not make_special_file(path, kind):
        with path.open("wb") as handle:
            handle.truncate(17 << 20)
    with pytest.raises(ManifestError) as caught:
        read_manifest(path)
    expected = {"fifo": "it is a FIFO", "dev_zero": "it is a character device", "folder": "it is a folder",
                "huge": "larger than 16 MiB"}[kind]
    assert expected in caught.value.problem


# ----------------------------------------------------------------------------- bugs the contract fixed

FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
CONV = "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep"  # 4 launches of kernel_conv2d_baseline


def test_a_run_profiled_with_a_kernel_regex_loads_its_launches(corpus_dir: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`profile --kernel conv2d` stored the regex and the loader read it as an exact name: 0 launches."""
    import sys

    from ncuflow.profile.orchestrate import profile
    from ncuflow.profile.plan import CommandTarget, ProfileJob
    from ncuflow.profile.settings import ProfileSettings

    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / CONV))
    monkeypatch.delenv("FAKE_NCU_MODE", raising=False)
    root = tmp_path / "profiles"
    job = ProfileJob(CommandTarget((sys.executable, "-c", "pass")), NcuOptions(kernel_regex="conv2d"))
    record = profile(job, ProfileSettings(store=root, ncu=str(FAKE_NCU), timeout=60)).record
    assert record.manifest.collection.options.kernel_regex == "conv2d"
    assert "regex:conv2d" in (record.manifest.collection.command or ())
    loaded = load_paths([root])
    assert [len(run.launches) for run in loaded.runs] == [4]
    assert {launch.kernel.function for launch in loaded.runs[0].launches} == {"kernel_conv2d_baseline"}
    # the same run as an older ncuflow wrote it (schema 1) still loads its launches
    path = record.path / "manifest.json"
    old = {"schema_version": 1, "cell": record.cell, "params": dict(record.manifest.params),
           "content_key": record.content_key, "run_id": record.run_id, "kernel_regex": "conv2d",
           "command": list(record.manifest.collection.command or ())}
    path.write_text(json.dumps(old))
    assert [len(run.launches) for run in load_paths([root]).runs] == [4]


def test_replicas_count_from_0_in_stability_reprofiles(corpus_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`profile` and `sweep` counted replicas from 0, `stability CELL_SPEC` from 1; now all from 0."""
    from click.testing import CliRunner

    from ncuflow.cli import cli

    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / SILU))
    root = tmp_path / "store"
    result = CliRunner().invoke(cli, ["stability", "copy_bandwidth:mib=64", "--replicas", "3",
                                      "--store", str(root), "--ncu", str(FAKE_NCU)])
    assert result.exit_code in (0, 1), result.output
    runs = list(store.iter_runs(root))
    assert sorted(r.manifest.provenance.replica or 0 for r in runs) == [0, 1, 2]
    assert all(r.manifest.provenance.replicas == 3 for r in runs)
    assert "replica 1/3" in result.output  # people still read them from 1


# ----------------------------------------------------------------------------- swept axes


def _copy_store(root: Path, corpus_dir: Path, axes: dict[str, list[int]] | None) -> None:
    """copy_bandwidth at mib 64 and 128 (seed 0) from a sweep over mib, and one unrelated run at seed 1."""
    from ncuflow.cells.registry import make_spec

    for mib, seed, sweep in ((64, 0, True), (128, 0, True), (64, 1, False)):
        spec = make_spec("copy_bandwidth", {"mib": mib, "seed": seed})
        recorded = Sweep("sizes", axes={k: tuple(v) for k, v in axes.items()}) if sweep and axes is not None else None
        write_run(root, spec, corpus_dir / SILU, provenance=Provenance(sweep=recorded))


def test_explain_reads_the_swept_axes_from_the_manifests(corpus_dir: Path, tmp_path: Path) -> None:
    from ncuflow.analyze.explain import swept_by_cell
    from ncuflow.analyze.study import analyse, points_of

    _copy_store(tmp_path / "recorded", corpus_dir, {"mib": [64, 128]})
    _copy_store(tmp_path / "old", corpus_dir, None)
    recorded, old = load_paths([tmp_path / "recorded"]), load_paths([tmp_path / "old"])
    assert swept_by_cell(points_of(recorded)) == {"copy_bandwidth": ("mib",)}
    assert set(analyse(recorded).sweeps) == {"mib"}
    # without recorded axes (older manifests) the parameters that vary are inferred: seed too
    assert swept_by_cell(points_of(old)) == {"copy_bandwidth": ("mib", "seed")}
    assert set(analyse(old).sweeps) == {"mib", "seed"}


def test_a_cell_fact_of_the_wrong_type_is_left_out_not_the_run(corpus_dir: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from ncuflow.cells.registry import parse_spec
    from ncuflow.profile.orchestrate import profile
    from ncuflow.profile.plan import CellTarget, ProfileJob
    from ncuflow.profile.settings import ProfileSettings

    facts = tmp_path / "representation_src.json"
    facts.write_text(json.dumps({"expected_bytes": "lots", "gpu_name": "NVIDIA H200", "gpu_uuid": "GPU-1",
                                 "driver_version": "580", "check": {"passed": True}}))
    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / SILU))
    monkeypatch.setenv("FAKE_NCU_REPRESENTATION", str(facts))
    monkeypatch.delenv("FAKE_NCU_MODE", raising=False)
    job = ProfileJob(CellTarget(parse_spec("copy_bandwidth:mib=16")))
    record = profile(job, ProfileSettings(store=tmp_path / "p", ncu=str(FAKE_NCU), timeout=60)).record
    assert record.manifest.cell_facts.expected_bytes is None and record.manifest.machine.gpu_name == "NVIDIA H200"
    assert record.manifest.cell_facts.check == {"passed": True}
    assert read_manifest(record.path / "manifest.json") == record.manifest
