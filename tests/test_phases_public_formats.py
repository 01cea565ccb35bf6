"""Line formats of public server logs ``phases`` had never read, one test per variant.

Each log is written here in the exact line format a public log shows (the source is named at
each writer: repository and issue), with values of our own; every expectation is derived
from the values put into the log. docs/phases.md ("Line formats checked against public
logs") lists the variants and their sources."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from ncuflow.phases.pipeline import build_report
from ncuflow.phases.report import FileReport

STEP_S = 0.025  # a decode step
BATCH = 8


def analyse(tmp_path: Path, lines: list[str], name: str = "server.log") -> FileReport:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (file,) = build_report([path]).files
    return file


# ---------------------------------------------------------------- SGLang 0.3: no date


def sglang_time_of_day_log(start: datetime) -> list[str]:
    """SGLang 0.3 (Aug-Nov 2024) stamps its scheduler lines with the time of day only:
    ``[16:43:29 TP0] Prefill batch. #new-seq: 1, #new-token: 2062, #cached-token: 0, cache hit
    rate: 0.00%, token usage: 0.00, #running-req: 0, #queue-req: 0`` and ``[04:40:55 TP0]
    Decode batch. #running-req: 2, #token: 4078, token usage: 0.00, gen throughput (token/s):
    447.31, #queue-req: 0`` (sgl-project/sglang issues 1612 and 1270)."""

    def stamp(t: float) -> str:
        return f"[{start + timedelta(seconds=t):%H:%M:%S} TP0]"

    lines = [
        f"{stamp(0)} Prefill batch. #new-seq: {BATCH}, #new-token: {BATCH * 500}, #cached-token: 0, "
        f"cache hit rate: 0.00%, token usage: 0.00, #running-req: 0, #queue-req: 0"
    ]
    for i in range(1, 40):
        lines.append(
            f"{stamp(i)} Decode batch. #running-req: {BATCH}, #token: {BATCH * (500 + 40 * i)}, token usage: 0.02, "
            f"gen throughput (token/s): {BATCH / STEP_S:.2f}, #queue-req: 0"
        )
    return lines


@pytest.mark.parametrize("start", [datetime(2024, 10, 8, 16, 43, 29), datetime(2024, 10, 8, 23, 59, 40)])
def test_sglang_stamps_without_a_date_are_read_across_midnight(tmp_path: Path, start: datetime) -> None:
    """Refused before ('no timestamp in square brackets'); a run that crosses midnight is one
    run, not time going back; t = 0 is told as the time of day the log prints."""
    file = analyse(tmp_path, sglang_time_of_day_log(start))
    (run,) = file.runs
    assert run.shape.peak_batch == BATCH
    assert run.timing.headline_token_s == pytest.approx(STEP_S)
    assert run.shape.end_s - run.shape.start_s == pytest.approx(39, abs=1)
    assert file.clock_origin == f"{start:%H:%M:%S}"
