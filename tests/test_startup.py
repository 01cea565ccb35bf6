"""Start-up is paid only for what a command uses (issue 33): the import graph of a reading
command on one small report, measured with ``python -X importtime``.

What each command must not import there (a pool, the store, polars where no frame is built,
protobuf's pure-Python layer) is checked by name; how long its imports take is bounded against
the third-party modules it cannot do without, measured side by side in the same test (the
smallest of a few runs of each, taken in turn), so that a shared machine's load falls on both.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ncuflow.read.reportfile import find_reports

_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)")
RUNS = 5
# Never imported to read one report: workers (the pool decides on the reports' work first), the
# store (a plain report is no run), protobuf's pure-Python layer (upb makes the classes), and
# what only other commands or the reference reader need.
NOT_FOR_ONE_REPORT = (
    "multiprocessing", "concurrent.futures", "ncuflow.read.server", "ncuflow.read.worker", "ncuflow.store",
    "google.protobuf.descriptor_pb2", "google.protobuf.text_format", "google.protobuf.internal.python_message",
    "rich.progress", "ncu_report", "numpy", "pandas", "pyarrow", "matplotlib", "torch", "ray",
)
# The reading commands' imports, bounded against the modules they cannot do without, measured as
# this test does (the best of 5 of each, in turn): classify 2.2x click and rich's console and table
# (before issue 33, 3.2x); export 1.2x those and polars (before, 1.6x).
CLASSIFY_BOUND = 2.7
EXPORT_BOUND = 1.45


def _import_times(argv: list[str]) -> tuple[int, set[str]]:
    """(total import microseconds, every module imported) of one run of ``python -X importtime ARGV``."""
    result = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    total, modules = 0, set()
    for line in result.stderr.splitlines():
        found = _LINE.match(line)
        if found is not None:
            modules.add(found.group(4))
            if not found.group(3):  # top level: its time holds its imports'
                total += int(found.group(2))
    return total, modules


def _smallest(corpus_dir: Path) -> Path:
    return min(find_reports([corpus_dir]), key=lambda report: report.stat().st_size)


@pytest.fixture(scope="module")
def one_report(corpus_dir: Path) -> Path:
    return _smallest(corpus_dir)


def _best(command: list[str], reference: list[str]) -> tuple[int, int, set[str]]:
    """The smallest total of ``RUNS`` runs of each, taken in turn, and the modules the command
    imports beyond those the reference does (polars, say, imports ``concurrent.futures`` itself)."""
    ours, theirs = [], []
    modules: set[str] = set()
    theirs_modules: set[str] = set()
    for _ in range(RUNS):
        total, modules = _import_times(command)
        ours.append(total)
        reference_total, theirs_modules = _import_times(reference)
        theirs.append(reference_total)
    return min(ours), min(theirs), modules - theirs_modules


def test_classify_of_one_report_imports_only_what_it_uses(one_report: Path) -> None:
    ours, theirs, modules = _best(["-m", "ncuflow", "classify", str(one_report)],
                                  ["-c", "import click, rich.console, rich.table"])
    assert not {m for m in modules if m.startswith(NOT_FOR_ONE_REPORT)}, sorted(
        m for m in modules if m.startswith(NOT_FOR_ONE_REPORT))
    assert "polars" not in {m.split(".")[0] for m in modules}
    assert {"ncuflow.read.plan", "ncuflow.output.render"} <= modules  # what was measured is the command
    assert ours <= CLASSIFY_BOUND * theirs, (
        f"classify of one report imports for {ours / 1e3:.0f} ms, {ours / theirs:.2f}x the {theirs / 1e3:.0f} ms of "
        f"click and rich alone (bound {CLASSIFY_BOUND}x): something heavy joined its import graph")


def test_export_of_one_report_imports_polars_but_no_pool_or_store(one_report: Path, tmp_path: Path) -> None:
    ours, theirs, modules = _best(["-m", "ncuflow", "export", str(one_report), "-o", str(tmp_path / "one.parquet")],
                                  ["-c", "import click, rich.console, rich.table, polars"])
    assert "ncuflow.output.stream" in modules  # the frames' sink: polars is in the reference's imports
    assert not {m for m in modules if m.startswith(NOT_FOR_ONE_REPORT)}, sorted(
        m for m in modules if m.startswith(NOT_FOR_ONE_REPORT))
    assert ours <= EXPORT_BOUND * theirs, (
        f"export of one report imports for {ours / 1e3:.0f} ms, {ours / theirs:.2f}x the {theirs / 1e3:.0f} ms of "
        f"click, rich and polars alone (bound {EXPORT_BOUND}x)")


def test_the_read_side_imports_no_polars_until_a_frame_is_built() -> None:
    """Reading launches (the profiling path's reading included) needs no polars."""
    code = ("import sys\nimport ncuflow.read.extract, ncuflow.read.launch, ncuflow.read.runs, ncuflow.analyze.classify\n"
            "import ncuflow.output.launch_rows, ncuflow.output.render\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'polars'))")
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert printed.strip() == "[]"


def test_the_console_script_gives_mains_output_and_status(one_report: Path, tmp_path: Path) -> None:
    """The console script ends without the interpreter's teardown once the command is done: its
    output is all there (flushed first) and its exit status is the command's."""
    script = Path(sys.executable).with_name("ncuflow")
    if not script.is_file():
        pytest.skip("no ncuflow console script beside this interpreter")
    listed = subprocess.run([str(script), "classify", str(one_report), "--json"], capture_output=True, text=True,
                            timeout=120, check=False)
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) >= 1, listed.stderr
    missing = subprocess.run([str(script), "classify", str(tmp_path / "none.ncu-rep")], capture_output=True,
                             text=True, timeout=120, check=False)
    assert missing.returncode == 2 and missing.stderr.startswith("ncuflow: ") and "none.ncu-rep" in missing.stderr
    exported = subprocess.run([str(script), "export", str(one_report), "-o", str(tmp_path / "one.parquet")],
                              capture_output=True, text=True, timeout=120, check=False)
    assert exported.returncode == 0 and (tmp_path / "one.parquet").stat().st_size > 0, exported.stderr
