"""Bad input gets one clear paragraph naming the file (and line), never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.cli import cli
from ncuflow.phases import TraceError

GOOD_DECODE = "[2026-01-04 07:00:{s:02d} TP0] Decode batch, #running-req: 8, #token: 100, gen throughput (token/s): 200.00, #queue-req: 0, "
GOOD_PREFILL = "[2026-01-04 07:00:00 TP0] Prefill batch, #new-seq: 8, #new-token: 800, #cached-token: 0, #running-req: 0, #queue-req: 0, "


def run_phases(*args: str) -> TraceError:
    result = CliRunner().invoke(cli, ["phases", *args])
    assert result.exit_code != 0
    assert isinstance(result.exception, TraceError), result.output
    return result.exception


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.log"
    path.write_text("\n  \n")
    error = run_phases(str(path))
    assert str(path) in str(error) and "empty" in str(error)


def test_missing_file(tmp_path: Path) -> None:
    error = run_phases(str(tmp_path / "nope.log"))
    assert "no such file" in str(error)


def test_unknown_format_names_the_first_line(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    path.write_text('[2026-01-04 07:00:00] INFO: 127.0.0.1 - "POST /generate HTTP/1.1" 200 OK\n')
    error = run_phases(str(path))
    assert f"{path}:1" in str(error) and "scheduler statistics" in str(error)


def test_malformed_scheduler_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    lines = [
        GOOD_PREFILL,
        GOOD_DECODE.format(s=2),
        "[2026-01-04 07:00:04 TP0] Decode batch, #running-req: eight, #token: 1",
        GOOD_DECODE.format(s=6),
    ]
    path.write_text("\n".join(lines) + "\n")
    error = run_phases(str(path))
    assert (
        f"{path}:3" in str(error)
        and "#running-req" in str(error)
        and "--skip-malformed" in str(error)
    )
    ok = CliRunner().invoke(cli, ["phases", str(path), "--skip-malformed"])
    assert ok.exit_code == 0, ok.output
    assert "1 malformed scheduler line(s) left out (first at line 3)" in ok.output


def test_scheduler_line_without_timestamp(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(
        GOOD_PREFILL + "\nDecode batch. #running-req: 8, #token: 1, gen throughput (token/s): 3.0\n"
    )
    error = run_phases(str(path))
    assert f"{path}:2" in str(error) and "timestamp" in str(error)


def test_interleaved_runs_in_one_server_log(tmp_path: Path) -> None:
    path = tmp_path / "two.log"
    first = [GOOD_PREFILL] + [GOOD_DECODE.format(s=s) for s in (10, 20, 30)]
    second = [GOOD_DECODE.format(s=s) for s in (5, 15)]
    path.write_text("\n".join(first + second) + "\n")
    error = run_phases(str(path))
    assert f"{path}:5" in str(error) and "interleaved" in str(error)


def test_overlapping_runs_in_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    records = [
        {"run": "a", "submit_time": 0.0, "chunk_times": [0.1, 0.2, 0.3]},
        {"run": "b", "submit_time": 0.15, "chunk_times": [0.25, 0.35]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    error = run_phases(str(path))
    assert "overlap" in str(error) and "'a'" in str(error) and "'b'" in str(error)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"submit_time": 1.0, "chunk_times": [1.5, 1.4]}', "go back in time"),
        ('{"submit_time": 2.0, "chunk_times": [1.5]}', "before 'submit_time'"),
        ('{"submit_time": 1.0}', "no 'chunk_times'"),
        ('{"submit_time": 1.0, "chunk_times": []}', "empty"),
        ('{"submit_time": "soon", "chunk_times": [2.0]}', "not a finite number"),
        ('{"submit_time": 1.0, "chunk_times": [2.0], "chunk_tokens": [1, 2]}', "one per chunk"),
        ('{"submit_time": 1.0, "chunk_times": [2.0', "not valid JSON"),
    ],
)
def test_bad_jsonl_lines(tmp_path: Path, line: str, expected: str) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text('{"submit_time": 0.0, "chunk_times": [0.5, 0.6]}\n' + line + "\n")
    error = run_phases(str(path))
    assert f"{path}:2" in str(error) and expected in str(error)


def test_label_count_must_match_inputs(tmp_path: Path) -> None:
    paths = []
    for name in ("a.jsonl", "b.jsonl", "c.jsonl"):
        path = tmp_path / name
        path.write_text('{"submit_time": 0.0, "chunk_times": [0.5, 0.6]}\n')
        paths.append(str(path))
    error = run_phases(*paths, "--label", "x", "--label", "y")
    assert "--label was given 2 times for 3 inputs" in str(error)


def test_bad_input_through_main_has_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "broken.log"
    path.write_text(GOOD_PREFILL + "\n[2026-01-04 07:00:04 TP0] Decode batch, #token: 1\n")
    done = subprocess.run(
        [sys.executable, "-m", "ncuflow", "phases", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("ncuflow: ") and f"{path}:2" in done.stderr
