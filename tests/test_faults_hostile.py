"""Fault injection, hostile stores and inputs (issue 24): every case runs the real command line
under a time and a memory limit (``tests.hostile.run_limited``) and must end in a result or
one paragraph: no traceback, no hang, no healthy run hidden, nothing written where nothing
should be.

- stores: ``store check --repair`` and ``sweep`` pointed at ``profiles/``,
  ``profiles/reference``, a source tree, a cell or point folder, a store holding a link
  loop; a run whose report is cut short;
- files ncuflow reads: a manifest that is a FIFO, a link to ``/dev/zero`` or JSON nested
  100,000 deep, for the six commands that read a store; a pre-schema-3 ``escalation.json``
  holding ``[1]``, ``"x"``, deep nesting or a FIFO; sweep files that are FIFOs, devices,
  too large, 5000 arrays deep, 3000 × 3000 points, 2**63 replicas, or pass ``--export``
  to ncu; manifests whose cell escapes the store or whose content key is another point's;
- paths and work: a non-ASCII path under ``PYTHONIOENCODING=ascii``, a folder 1500 levels
  deep, ``--jobs 64`` on a small machine.

The figures are printed at the end of the module (``pytest -s``) for docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ncuflow import store
from ncuflow.profile.sweep import parse_sweep
from ncuflow.store import MANIFEST_NAME
from tests.hostile import FIGURES, REPO, fake_ncu_env, figures_line, make_special_file, run_limited

SMALL = "yzwang2000__cudaCode__profile.ncu-rep"
FAKE_NCU = Path(__file__).parent / "fake_ncu" / "ncu"
SEEN: Counter[str] = Counter()  # what this module found: runs hidden, files changed


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("hostile input figures", SEEN), figures_line("fault suite so far", FIGURES))


def _tree(root: Path) -> list[tuple[str, bool]]:
    """Every path below ``root`` (links not followed) and whether it is a link: what a repair may change."""
    found = []
    for folder, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = Path(folder) / name
            found.append((str(path.relative_to(root)), path.is_symlink()))
    return sorted(found)


def _complete(root: Path) -> int:
    return sum(1 for _ in store.iter_runs(root))


def _sweep_store(root: Path, corpus_dir: Path, mibs: list[int]) -> list[store.RunRecord]:
    plan = parse_sweep({"cell": "copy_bandwidth", "replicas": 1, "axes": {"mib": mibs}})
    return [store.write_run(root, point.spec, corpus_dir / SMALL) for point in plan.points]


def _sweep_file(folder: Path, mibs: list[int]) -> Path:
    path = folder / "sweep.toml"
    path.write_text(f'cell = "copy_bandwidth"\nreplicas = 1\n[axes]\nmib = {mibs}\n')
    return path


def _assert_clean(ran: object, *, codes: tuple[int, ...]) -> None:
    from tests.hostile import Ran

    assert isinstance(ran, Ran)
    assert not ran.traceback and not ran.timed_out, ran.output[-3000:]
    assert ran.code in codes, (ran.code, ran.output[-3000:])


# ----------------------------------------------------------------------------- repair never hides a healthy run


@pytest.fixture(scope="module")
def profiles_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the committed profiles/ folder (one store per GPU, one level down) and of the source tree."""
    base = tmp_path_factory.mktemp("profiles")
    shutil.copytree(REPO / "profiles", base / "profiles")
    shutil.copytree(REPO / "ncuflow", base / "ncuflow", ignore=shutil.ignore_patterns("__pycache__"))
    return base


@pytest.mark.parametrize(("target", "code", "named"), [
    ("profiles", 0, "profiles/reference/h200: "),  # a folder of stores: each store below checked, as report reads it
    ("profiles/reference", 0, "profiles/reference/h200: "),
    ("profiles/reference/h200/copy_bandwidth", 2, "inside the store"),
    ("profiles/reference/h200/copy_bandwidth/impltriton-mib16-seed0-519a9421", 2, "inside the store"),
    ("ncuflow", 0, "0 complete runs, 0 damaged"),
    ("ncuflow/phases", 0, "0 complete runs, 0 damaged"),
])
def test_repair_pointed_at_the_wrong_folder_moves_nothing(profiles_copy: Path, target: str, code: int,
                                                          named: str) -> None:
    before = _tree(profiles_copy)
    runs_before = _complete(profiles_copy / "profiles/reference/h200")
    ran = run_limited(["store", "check", target, "--repair"], cwd=profiles_copy, case="repair-wrong-folder")
    _assert_clean(ran, codes=(code,))
    assert named in ran.output
    if code == 2:
        assert "ncuflow store check profiles/reference/h200" in ran.stderr  # says which store to check
    hidden = runs_before - _complete(profiles_copy / "profiles/reference/h200")
    SEEN["healthy_runs_hidden"] += hidden
    assert hidden == 0 and _tree(profiles_copy) == before


def test_a_folder_of_stores_is_checked_store_by_store_as_report_reads_it(corpus_dir: Path, tmp_path: Path) -> None:
    """`report profiles/reference` read every run below it while `store check profiles/reference` was
    refused: now check visits each store below, names it, and finds a damaged run in one of them."""
    records = _sweep_store(tmp_path / "gpus" / "h200", corpus_dir, [16, 64])
    _sweep_store(tmp_path / "gpus" / "a100", corpus_dir, [32])
    (records[0].path / "manifest.json").write_text("{")
    ran = run_limited(["store", "check", str(tmp_path / "gpus")], case="check-folder-of-stores")
    _assert_clean(ran, codes=(1,))
    assert f"damaged\t{records[0].path}" in ran.stdout
    assert f"{tmp_path / 'gpus' / 'h200'}: 1 complete runs, 1 damaged" in ran.stderr
    assert f"{tmp_path / 'gpus' / 'a100'}: 1 complete runs, 0 damaged" in ran.stderr


def test_a_sweep_into_a_folder_of_stores_is_refused(profiles_copy: Path, corpus_dir: Path, tmp_path: Path) -> None:
    before = _tree(profiles_copy)
    ran = run_limited(["sweep", str(_sweep_file(tmp_path, [16])), "--store", "profiles/reference",
                       "--ncu", str(FAKE_NCU)], cwd=profiles_copy,
                      env=fake_ncu_env(corpus_dir / SMALL, tmp_path / "calls.jsonl"), case="sweep-folder-of-stores")
    assert ran.paragraph() and "profiles/reference/h200" in ran.stderr, ran.output
    assert _tree(profiles_copy) == before and not (tmp_path / "calls.jsonl").exists()


def test_a_link_loop_in_a_store_is_not_walked_and_no_run_is_moved(corpus_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "store"
    records = _sweep_store(root, corpus_dir, [16, 32, 64])
    (root / "copy_bandwidth" / "point-12345678").symlink_to(".")
    (records[0].path.parent / "20260101T000000Z-loop").symlink_to("..")
    before = _tree(root)
    ran = run_limited(["store", "check", str(root), "--repair"], case="link-loop-repair")
    _assert_clean(ran, codes=(0,))
    assert "3 complete runs, 0 damaged" in ran.output
    calls = tmp_path / "calls.jsonl"
    swept = run_limited(["sweep", str(_sweep_file(tmp_path, [16, 32, 64])), "--store", str(root),
                         "--ncu", str(FAKE_NCU)], env=fake_ncu_env(corpus_dir / SMALL, calls), case="link-loop-sweep")
    _assert_clean(swept, codes=(0,))
    assert "0 profiles to run" in swept.output and not calls.exists()  # 3 complete runs: nothing profiled again
    SEEN["healthy_runs_hidden"] += 3 - _complete(root)
    assert _tree(root) == before


def test_a_run_whose_report_is_cut_short_is_named_repaired_and_profiled_again(corpus_dir: Path,
                                                                              tmp_path: Path) -> None:
    root = tmp_path / "store"
    records = _sweep_store(root, corpus_dir, [16, 32])
    cut = records[1].report_path
    os.truncate(cut, cut.stat().st_size * 2 // 3)
    checked = run_limited(["store", "check", str(root)], case="cut-report-check")
    _assert_clean(checked, codes=(1,))
    assert str(records[1].path) in checked.stdout and "cut short" in checked.stdout
    assert "1 complete runs, 1 damaged" in checked.stderr
    for command in (["classify", str(root)], ["export", str(root), "-o", str(tmp_path / "x.parquet")]):
        read = run_limited(command, case="cut-report-read")  # the whole run is read, the cut one named
        _assert_clean(read, codes=(0,))
        assert "damaged run" in read.stderr and "cut short" in read.stderr
    calls = tmp_path / "calls.jsonl"
    swept = run_limited(["sweep", str(_sweep_file(tmp_path, [16, 32])), "--store", str(root), "--ncu",
                         str(FAKE_NCU)], env=fake_ncu_env(corpus_dir / SMALL, calls), case="cut-report-sweep")
    _assert_clean(swept, codes=(0,))
    assert "moved a damaged run aside" in swept.stdout and "1 profiles to run" in swept.stdout
    assert (records[1].path.parent / f".damaged-{records[1].path.name}").is_dir()  # kept for a look
    assert _complete(root) == 2


# ----------------------------------------------------------------------------- files that are not what they say


def _hostile_manifest(run: Path, kind: str) -> None:
    manifest = run / MANIFEST_NAME
    manifest.unlink()
    if make_special_file(manifest, kind):
        pass
    elif kind == "huge":  # 17 MiB: over the 16 MiB a manifest may hold
        manifest.write_text('{"pad": "' + "x" * (17 << 20) + '"}')
    else:
        manifest.write_text("[" * 100_000 + "]" * 100_000)


MANIFEST_COMMANDS = {
    "stability": lambda root, out: ["stability", str(root)],
    "report": lambda root, out: ["report", str(root), "-o", str(out / "report")],
    "store check": lambda root, out: ["store", "check", str(root)],
    "export": lambda root, out: ["export", str(root), "-o", str(out / "x.parquet")],
    "compare": lambda root, out: ["compare", str(root), str(root)],
    "gate": lambda root, out: ["gate", str(root), str(root)],
    "sweep": lambda root, out: ["sweep", str(_sweep_file(out, [16, 32])), "--store", str(root),
                                "--ncu", str(FAKE_NCU)],
}


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "nested"])
@pytest.mark.parametrize("command", list(MANIFEST_COMMANDS))
def test_a_hostile_manifest_is_one_damaged_run_for_every_command(corpus_dir: Path, tmp_path: Path, kind: str,
                                                                 command: str) -> None:
    root = tmp_path / "store"
    records = _sweep_store(root, corpus_dir, [16, 32])
    _hostile_manifest(records[1].path, kind)
    ran = run_limited(MANIFEST_COMMANDS[command](root, tmp_path), case=f"manifest-{kind}",
                      env=fake_ncu_env(corpus_dir / SMALL, tmp_path / "calls.jsonl"))
    _assert_clean(ran, codes=(1,) if command == "store check" else (0,))
    assert "manifest.json" in ran.output and str(records[1].path) in ran.output
    assert ran.peak_mib < 1024


def test_a_manifest_larger_than_16_mib_is_not_read(corpus_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "store"
    records = _sweep_store(root, corpus_dir, [16, 32])
    _hostile_manifest(records[1].path, "huge")
    ran = run_limited(["store", "check", str(root)], case="manifest-huge")
    _assert_clean(ran, codes=(1,))
    assert "larger than 16 MiB" in ran.stdout and ran.peak_mib < 1024


@pytest.mark.parametrize("content", ["[1]", '"x"', "[" * 100_000, "FIFO"])
@pytest.mark.parametrize("command", ["classify", "export"])
def test_a_hostile_escalation_sidecar_is_one_paragraph(corpus_dir: Path, tmp_path: Path, content: str,
                                                       command: str) -> None:
    root = tmp_path / "store"
    records = _sweep_store(root, corpus_dir, [16])
    sidecar = records[0].path / "escalation.json"
    if content == "FIFO":
        os.mkfifo(sidecar)
    else:
        sidecar.write_text(content)
    argv = [command, str(root)] + (["-o", str(tmp_path / "x.parquet")] if command == "export" else [])
    ran = run_limited(argv, case="escalation-sidecar")
    _assert_clean(ran, codes=(0, 2))
    assert "escalation.json" in ran.output


def _bad_sweep(folder: Path, kind: str) -> Path:
    path = folder / "bad.toml"
    if make_special_file(path, kind):
        pass
    elif kind == "huge":
        path.write_text('cell = "copy_bandwidth"\n' + "# padding\n" * 200_000)
    elif kind == "deep":
        path.write_text('cell = "copy_bandwidth"\n[axes]\nmib = ' + "[" * 5000 + "]" * 5000 + "\n")
    elif kind == "points":
        path.write_text('cell = "copy_bandwidth"\n[axes]\n'
                        f"mib = {list(range(1, 3001))}\nseed = {list(range(3000))}\n")
    elif kind == "replicas":
        path.write_text('cell = "copy_bandwidth"\nreplicas = 9223372036854775807\n')
    else:  # a value that would be an option of ncu's own
        path.write_text('cell = "copy_bandwidth"\n[ncu]\nnvtx = "--export=/x"\n')
    return path


@pytest.mark.parametrize(("kind", "words"), [
    ("fifo", "FIFO"), ("dev_zero", "character device"), ("huge", "larger than"), ("deep", "nests arrays"),
    ("points", "9,000,000 points"), ("replicas", "replicas"), ("option", "--export=/x"),
])
def test_a_hostile_sweep_file_is_one_paragraph(corpus_dir: Path, tmp_path: Path, kind: str, words: str) -> None:
    calls = tmp_path / "calls.jsonl"
    ran = run_limited(["sweep", str(_bad_sweep(tmp_path, kind)), "--dry-run", "--store", str(tmp_path / "s"),
                       "--ncu", str(FAKE_NCU)], env=fake_ncu_env(corpus_dir / SMALL, calls), case=f"sweep-{kind}")
    assert ran.paragraph() and words in ran.stderr, ran.output[-2000:]
    assert ran.peak_mib < 1024 and not calls.exists() and not (tmp_path / "s").exists()


def test_manifests_that_escape_the_store_or_name_another_point_are_damaged(corpus_dir: Path,
                                                                           tmp_path: Path) -> None:
    root = tmp_path / "store"
    records = _sweep_store(root, corpus_dir, [16, 32, 64])
    for record, change in ((records[0], {"cell": "../../../../etc/passwd"}),
                           (records[1], {"content_key": records[2].content_key})):
        data = json.loads((record.path / MANIFEST_NAME).read_text())
        data["identity"].update(change)
        (record.path / MANIFEST_NAME).write_text(json.dumps(data))
    ran = run_limited(["store", "check", str(root)], case="manifest-misplaced")
    _assert_clean(ran, codes=(1,))
    assert "1 complete runs, 2 damaged" in ran.stderr
    assert "'../../../../etc/passwd'" in ran.stdout and "content key" in ran.stdout


# ----------------------------------------------------------------------------- paths and work


def test_a_non_ascii_path_under_an_ascii_console_is_no_traceback(corpus_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "café"
    folder.mkdir()
    report = folder / "rapport-é.ncu-rep"
    shutil.copyfile(corpus_dir / SMALL, report)
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    for argv, code in ((["classify", str(report)], 0), (["stability", str(report)], 0),
                       (["export", str(report), "-o", str(folder / "x.parquet")], 0),
                       (["report", str(report), "-o", str(folder / "rep")], 0), (["store", "check", str(folder)], 0),
                       (["classify", str(folder / "absent-é.ncu-rep")], 2)):
        ran = run_limited(argv, env=env, case="ascii-console")  # tables hold '≤', 'µs' and the path's 'é'
        _assert_clean(ran, codes=(code,))


def test_a_folder_1500_levels_deep_is_walked_without_recursion(corpus_dir: Path, tmp_path: Path) -> None:
    deep = tmp_path / "deep"
    folders = [deep]
    for _ in range(1500):  # os.makedirs itself recurses: one level at a time
        folders.append(folders[-1] / "d")
    for folder in folders:
        folder.mkdir()
    try:
        ran = run_limited(["classify", str(deep)], case="deep-folder")
        assert ran.paragraph() and "holds no Nsight Compute report" in ran.stderr, ran.output[-2000:]
        shutil.copyfile(corpus_dir / SMALL, folders[-1] / "r.ncu-rep")
        found = run_limited(["classify", str(deep), "--json"], case="deep-folder")
        _assert_clean(found, codes=(0, 2))
    finally:  # shutil.rmtree recurses too
        (folders[-1] / "r.ncu-rep").unlink(missing_ok=True)
        for folder in reversed(folders):
            folder.rmdir()


def _descendants(pid: int) -> int:
    parents: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    tree, grew = {pid}, True
    while grew:
        grew = False
        for child, parent in parents.items():
            if parent in tree and child not in tree:
                tree.add(child)
                grew = True
    return len(tree) - 1


def test_jobs_far_above_the_cores_are_bounded_where_they_enter(corpus_dir: Path) -> None:
    from ncuflow.cli.options import jobs_bound

    bound, _ = jobs_bound()
    process = subprocess.Popen([sys.executable, "-m", "ncuflow", "classify", "--jobs", "64", str(corpus_dir)],
                               cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    while process.poll() is None:
        peak = max(peak, _descendants(process.pid))
        time.sleep(0.05)
    stderr = process.communicate(timeout=120)[1]
    FIGURES["cases"] += 1
    SEEN["jobs_64_peak_processes"] = peak
    assert process.returncode == 0 and "Traceback" not in stderr
    assert f"--jobs 64 lowered to {bound}" in stderr
    # the workers and, at worst, a replacement overlapping each retiring one (ncuflow.read.pool), the forkserver
    # that starts them and the resource tracker; before the bound, 42 processes here
    assert peak <= 2 * bound + 2, peak
