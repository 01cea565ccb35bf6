"""The run manifest contract: round trip, the H200 reference store, old schemas, damage, RunRef."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ncuflow import store
from ncuflow.read.extract import iter_launches
from ncuflow.read.runs import load_store, params_tuple
from ncuflow.store import DamagedRunWarning, write_run
from ncuflow.store.manifest import (
    REQUIRED_FIELDS,
    SCHEMA_VERSION,
    Manifest,
    ManifestError,
    new_manifest,
    read_manifest,
)
from tests.conftest import REFERENCE_DIR

H200 = REFERENCE_DIR / "h200"
H200_MANIFESTS = sorted(H200.rglob("manifest.json"))
KEY = "c" * 8 + "3" * 56
SILU = "AlpriElse__cs599k__silu_CUDA_ncu-reports_2025-04-21-77_06-MT.ncu-rep"  # 3 launches, 1 kernel
JESTES = "jestes15__EE384_FinalProject__profile_output.ncu-rep"  # 18 launches, 6 kernels


def _full_fields() -> dict[str, Any]:
    return {
        "cell": "paged_decode", "params": {"page": 16, "batch": 32}, "content_key": KEY,
        "run_id": "20261130T000000Z-abcdef", "created_utc": "2026-11-30T00:00:00Z",
        "command": ["ncu", "--kernel-name", "regex:decode.*"], "kernel_regex": "decode.*",
        "nvtx_include": ["ncuflow/paged_decode/"], "dropped_metrics": [], "exit_status": 0,
        "wall_time_s": 1.5, "replica": 0, "sweep": "pages", "sweep_file": "pages.toml",
        "sweep_axes": {"page": [1, 16, 128]}, "representation": {"pages": 3}, "check": {"passed": True},
        "a_key_from_a_newer_writer": {"kept": [1, 2]},
    }


def test_round_trip_keeps_every_field_and_unknown_keys() -> None:
    manifest = new_manifest(_full_fields())
    data = manifest.to_json()
    assert data["schema_version"] == SCHEMA_VERSION == 2
    assert set(store.MANIFEST_FIELDS) <= set(data)
    assert data["sweep_axes"] == {"page": [1, 16, 128]} and data["command"][2] == "regex:decode.*"
    assert data["a_key_from_a_newer_writer"] == {"kept": [1, 2]}  # forward compatible
    again = Manifest.from_json(json.loads(json.dumps(data)))
    assert again == manifest and again.to_json() == data
    assert manifest.sweep_axes == (("page", (1, 16, 128)),)
    assert manifest.ref() == store.RunRef("paged_decode", (("batch", 32), ("page", 16)), KEY,
                                          "20261130T000000Z-abcdef", 0, "pages", ("page",))


def test_a_stored_run_reads_back_as_written(tmp_path: Path, corpus_dir: Path) -> None:
    record = write_run(tmp_path, cell="silu", params={"flag": "on"}, content_key=KEY,
                       report_src=corpus_dir / SILU, manifest_extra={"replica": 1, "gpu_name": "A100"})
    assert read_manifest(record.path / "manifest.json") == record.manifest
    assert record.manifest.gpu_name == "A100" and record.manifest.replica == 1


def test_the_writer_is_held_to_the_contract(tmp_path: Path, corpus_dir: Path) -> None:
    with pytest.raises(store.StoreError, match="does not validate: replica is a string"):
        write_run(tmp_path, cell="silu", params={}, content_key=KEY, report_src=corpus_dir / SILU,
                  manifest_extra={"replica": "first"})
    assert list(tmp_path.rglob("manifest.json")) == [] and list(tmp_path.rglob(".tmp-*")) == []


# ----------------------------------------------------------------------------- the H200 reference store


def test_the_reference_store_is_there() -> None:
    assert len(H200_MANIFESTS) == 49


@pytest.mark.parametrize("path", H200_MANIFESTS, ids=lambda p: f"{p.parent.parent.parent.name}/{p.parent.name}")
def test_every_h200_manifest_validates_and_means_what_it_said(path: Path) -> None:
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == 1
    manifest = read_manifest(path)
    data = manifest.to_json()
    # Version 1 read into version 2: the same values, except the two that changed meaning.
    for key, value in raw.items():
        if key not in {"schema_version", "replica"}:
            assert data[key] == value, key
    assert manifest.kernel_name is None and manifest.kernel_regex is None and manifest.sweep_axes is None
    if "replicas" in raw:  # a stability re-profile, counted from 1 then
        assert manifest.replica == raw["replica"] - 1 and 0 <= manifest.replica < raw["replicas"]
    else:  # a sweep run, counted from 0 already
        assert manifest.replica == raw["replica"] == 0
    ref = manifest.ref()
    assert (ref.cell, ref.params, ref.content_key, ref.run_id, ref.sweep) == (
        raw["cell"], params_tuple(raw["params"]), raw["content_key"], raw["run_id"], raw.get("sweep"))


def test_the_h200_store_loads_every_launch_with_its_run(recwarn: pytest.WarningsRecorder) -> None:
    loaded = load_store(H200)
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
    assert (manifest.kernel_regex, manifest.kernel_name) == (regex, name)


@pytest.mark.parametrize(("fields", "replica"), [
    ({"replica": 0}, 0),  # profile --replicas / sweep
    ({"replica": 3}, 3),
    ({"replica": 1, "replicas": 3}, 0),  # stability re-profile, from 1
    ({"replica": 3, "replicas": 3}, 2),
])
def test_version_1_replicas_count_from_0(fields: dict[str, Any], replica: int) -> None:
    assert Manifest.from_json(_v1(**fields)).replica == replica


def test_version_2_takes_values_as_written() -> None:
    data = {**_v1(kernel_regex="copyGmem", replica=1, replicas=3), "schema_version": 2}
    manifest = Manifest.from_json(data)
    assert manifest.kernel_regex == "copyGmem" and manifest.kernel_name is None and manifest.replica == 1


# ----------------------------------------------------------------------------- damage


DAMAGE: list[tuple[str, str, str | None]] = [
    # (manifest text, problem in the message, field named)
    ('{"schema_version": 1, "cell": "c", "par', "not valid JSON", None),
    ("", "the file is empty", None),
    ("[1, 2]", "holds an array, not a JSON object", None),
    (json.dumps(_v1(params="batch=3")), 'params is a string ("batch=3"), not an object', "params"),
    (json.dumps(_v1(params=[1, 2])), "params is an array ([1, 2]), not an object", "params"),
    (json.dumps(_v1(cell=5)), "cell is an integer (5), not a non-empty string", "cell"),
    (json.dumps({k: v for k, v in _v1().items() if k != "content_key"}), "the required field content_key is missing", "content_key"),
    (json.dumps(_v1(schema_version="1")), "schema_version is a string, not an integer", "schema_version"),
    (json.dumps(_v1(schema_version=0)), "schema_version is 0", "schema_version"),
    (json.dumps(_v1(replica=True)), "replica is a boolean (true), not an integer", "replica"),
    (json.dumps(_v1(command="ncu -k x")), "command is a string", "command"),
    (json.dumps(_v1(sweep_axes={"page": 16})), "sweep_axes is an object", "sweep_axes"),
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


def test_required_fields_are_the_identity() -> None:
    assert REQUIRED_FIELDS == ("schema_version", "cell", "params", "content_key", "run_id")


# ----------------------------------------------------------------------------- bugs the contract fixed

FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
CONV = "Swagatam1812__hpca-gpu-memory-profiling__naive.ncu-rep"  # 4 launches of kernel_conv2d_baseline


def test_a_run_profiled_with_a_kernel_regex_loads_its_launches(corpus_dir: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`profile --kernel conv2d` stored the regex and the loader read it as an exact name: 0 launches."""
    import sys

    from ncuflow.profile.ncu import NcuOptions
    from ncuflow.profile.orchestrate import profile_command_line

    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / CONV))
    monkeypatch.delenv("FAKE_NCU_MODE", raising=False)
    root = tmp_path / "profiles"
    record = profile_command_line([sys.executable, "-c", "pass"], NcuOptions(kernel_regex="conv2d"), root,
                                  ncu=FAKE_NCU, timeout=60)
    assert record.manifest.kernel_regex == "conv2d" and "regex:conv2d" in (record.manifest.command or ())
    loaded = load_store(root)
    assert [len(run.launches) for run in loaded.runs] == [4]
    assert {launch.kernel.function for launch in loaded.runs[0].launches} == {"kernel_conv2d_baseline"}
    # the same run as an older ncuflow wrote it (schema 1) still loads its launches
    path = record.path / "manifest.json"
    old = {k: v for k, v in json.loads(path.read_text()).items() if k not in {"kernel_name", "sweep_axes"}}
    path.write_text(json.dumps({**old, "schema_version": 1}))
    assert [len(run.launches) for run in load_store(root).runs] == [4]


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
    assert sorted(r.manifest.replica for r in runs) == [0, 1, 2]
    assert all(r.manifest.replicas == 3 for r in runs)
    assert "replica 1/3" in result.output  # people still read them from 1


# ----------------------------------------------------------------------------- swept axes


def _copy_store(root: Path, corpus_dir: Path, axes: dict[str, list[int]] | None) -> None:
    """copy_bandwidth at mib 64 and 128 (seed 0) from a sweep over mib, and one unrelated run at seed 1."""
    from ncuflow.cells.registry import make_spec

    for mib, seed, sweep in ((64, 0, True), (128, 0, True), (64, 1, False)):
        spec = make_spec("copy_bandwidth", {"mib": mib, "seed": seed})
        extra: dict[str, Any] = {"sweep": "sizes", "sweep_axes": axes} if sweep and axes is not None else {}
        write_run(root, cell=spec.cell, params=dict(spec.params), content_key=spec.content_key(),
                  report_src=corpus_dir / SILU, manifest_extra=extra)


def test_explain_reads_the_swept_axes_from_the_manifests(corpus_dir: Path, tmp_path: Path) -> None:
    from ncuflow.analyze.explain import swept_by_cell
    from ncuflow.analyze.study import analyse, points_of

    _copy_store(tmp_path / "recorded", corpus_dir, {"mib": [64, 128]})
    _copy_store(tmp_path / "old", corpus_dir, None)
    recorded, old = load_store(tmp_path / "recorded"), load_store(tmp_path / "old")
    assert swept_by_cell(points_of(recorded)) == {"copy_bandwidth": ("mib",)}
    assert set(analyse(recorded).sweeps) == {"mib"}
    # without recorded axes (older manifests) the parameters that vary are inferred: seed too
    assert swept_by_cell(points_of(old)) == {"copy_bandwidth": ("mib", "seed")}
    assert set(analyse(old).sweeps) == {"mib", "seed"}


def test_a_cell_fact_of_the_wrong_type_is_left_out_not_the_run(corpus_dir: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from ncuflow.cells.registry import parse_spec
    from ncuflow.profile.ncu import NcuOptions
    from ncuflow.profile.orchestrate import profile_cell

    facts = tmp_path / "representation_src.json"
    facts.write_text(json.dumps({"expected_bytes": "lots", "gpu_name": "NVIDIA H200", "gpu_uuid": "GPU-1",
                                 "driver_version": "580", "check": {"passed": True}}))
    monkeypatch.setenv("FAKE_NCU_REPORT", str(corpus_dir / SILU))
    monkeypatch.setenv("FAKE_NCU_REPRESENTATION", str(facts))
    monkeypatch.delenv("FAKE_NCU_MODE", raising=False)
    record = profile_cell(parse_spec("copy_bandwidth:mib=16"), NcuOptions(), tmp_path / "p", ncu=FAKE_NCU, timeout=60)
    assert record.manifest.expected_bytes is None and record.manifest.gpu_name == "NVIDIA H200"
    assert read_manifest(record.path / "manifest.json") == record.manifest
