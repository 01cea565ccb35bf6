"""Real ncu on a real GPU (marked `gpu`: skipped without nvidia-smi and ncu)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncuflow import store
from ncuflow.cells.registry import parse_spec
from ncuflow.profile import doctor
from ncuflow.profile.ncu import NcuOptions
from ncuflow.profile.orchestrate import profile
from ncuflow.profile.plan import CellTarget, ProfileJob
from ncuflow.profile.settings import ProfileSettings
from ncuflow.read.extract import count_actions

pytestmark = pytest.mark.gpu


def test_doctor_can_profile_here() -> None:
    ok, sentence = doctor.verdict(doctor.run_checks())
    assert ok, sentence


def test_real_profile_of_copy_bandwidth(tmp_path: Path) -> None:
    spec = parse_spec("copy_bandwidth:mib=64")
    job = ProfileJob(CellTarget(spec), NcuOptions(clock_control="none"))
    record = profile(job, ProfileSettings(store=tmp_path, timeout=600)).record
    assert count_actions(record.report_path) > 0
    m = record.manifest
    assert m.outcome.exit_status == 0 and m.machine.gpu_name and m.machine.gpu_uuid and m.machine.driver_version
    assert m.collection.ncu_version and m.machine.torch_version and m.cell_facts.expected_bytes
    assert [r.path for r in store.iter_runs(tmp_path)] == [record.path]
    # NVTX filtering worked: every profiled launch ran inside the cell's range
    assert "==PROF== Profiling" in record.log_path.read_text()
