"""The harness check (``ncuflow.phases.harness``): the share of a benchmark's timed window outside
steady decode and how far it moves the per-token figure, equal to a hand computation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ncuflow.phases.harness import HarnessCheck
from tests.test_phases_real_logs import analyse
from tests.test_phases_shapes import phases

LOG = "shun8686_qwen3-next-80b_mamba_c80.log"
# By hand, from the log and the phases table of it: bench_serving's block says "Benchmark
# duration (s): 350.53" (line 536) and "Mean TPOT (ms): 51.22"; runs 2-5 (t+7 s ... t+357 s)
# hold steady 68, 69, 67, 68 s (ramps 21, 19, 17, 19 s; no drain seen: each wave stops at once)
# at per-token 47.34, 46.97, 46.40, 46.56 ms.
DURATION, TPOT_MS = 350.53, 51.22
STEADY = (68.0, 69.0, 67.0, 68.0)
PER_TOKEN_MS = (47.34, 46.97, 46.40, 46.56)
RAMPS = (21.0, 19.0, 17.0, 19.0)


def hand_share() -> float:
    return 1 - sum(STEADY) / DURATION  # 1 − 272 / 350.53 = 22.4 %


def hand_move() -> float:
    steady_ms = sum(s * t for s, t in zip(STEADY, PER_TOKEN_MS, strict=True)) / sum(STEADY)  # 46.82 ms
    return TPOT_MS / steady_ms - 1  # +9.4 %


def check_of(logs: Path, *args: str) -> dict:
    code, out = phases(str(logs / LOG), "--json", *args)
    assert code == 0, out
    check = json.loads(out)["files"][0]["harness"]
    assert check is not None
    return check


def test_harness_share_equals_the_hand_computation(serving_logs_dir: Path) -> None:
    check = check_of(serving_logs_dir)
    assert check["client"]["source"] == "bench_serving result block, line 536"
    assert check["runs"] == ["run 2", "run 3", "run 4", "run 5"]  # run 1 (t+0 s ... 6 s) is before the window
    assert check["outside_share"] == pytest.approx(hand_share(), abs=1e-12)
    assert check["outside"]["ramp"] == sum(RAMPS)
    assert check["outside"]["uncovered"] == pytest.approx(DURATION - sum(STEADY) - sum(RAMPS))
    assert check["tpot_move"] == pytest.approx(hand_move(), abs=2e-4)  # the table shows per-token to 0.01 ms
    assert check["line"].startswith("harness: 22.4% of the 350.53-s timed window") and "+9.4%" in check["line"]
    text = phases(str(serving_logs_dir / LOG))[1]
    assert check["line"] in text


def test_bench_json_gives_the_same_window(serving_logs_dir: Path, tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"duration": DURATION, "mean_tpot_ms": TPOT_MS, "completed": 320}))
    check = check_of(serving_logs_dir, "--bench-json", str(result))
    assert check["client"]["source"] == "--bench-json result.json"
    assert check["outside_share"] == pytest.approx(hand_share(), abs=1e-12)


@pytest.mark.parametrize("content", ['{"duration": "NaN"}', '{"mean_tpot_ms": 5}', "[1, 2]", "{", '{"duration": -3}'])
def test_a_bad_bench_json_is_one_paragraph(serving_logs_dir: Path, tmp_path: Path, content: str) -> None:
    result = tmp_path / "result.json"
    result.write_text(content)
    code, out = phases(str(serving_logs_dir / LOG), "--bench-json", str(result))
    assert code == 2 and "duration" in out and "Traceback" not in out


def test_no_client_result_no_check(serving_logs_dir: Path) -> None:
    report = analyse(serving_logs_dir, "sgldocs_openai-batch_2025-06-10.log")
    assert report.study is not None and report.study.harness is None
    assert isinstance(analyse(serving_logs_dir, LOG).study.harness, HarnessCheck)  # type: ignore[union-attr]


@pytest.mark.parametrize("duration", ["0", "0.0", "5"])
def test_a_short_or_empty_window_is_no_crash(tmp_path: Path, duration: str) -> None:
    """A result block whose window is empty has no check; one shorter than the steady time it
    covers says 0 % outside, never a negative share."""
    lines = ["[2025-01-01 00:00:00 TP0] Prefill batch. #new-seq: 4, #new-token: 400, #cached-token: 0, "
             "token usage: 0.01, #running-req: 0, #queue-req: 0"]
    lines += [f"[2025-01-01 00:00:{s:02d} TP0] Decode batch. #running-req: 4, #token: {400 + 160 * s}, "
              f"token usage: 0.02, gen throughput (token/s): 160.00, #queue-req: 0" for s in range(1, 30)]
    lines += [f"Benchmark duration (s):                  {duration}", "Mean TPOT (ms):                          25.00"]
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    code, out = phases(str(log), "--json")
    assert code == 0, out
    check = json.loads(out)["files"][0]["harness"]
    if float(duration) == 0:
        assert check is None
    else:
        assert check["outside_share"] == 0.0 and check["steady_s"] == 5.0
