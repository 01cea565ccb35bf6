"""The shapes a run served (``ncuflow.phases.shapes``): stated with their lines on every shared
log, checked by hand on three, settings read only from settings lines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.cli import cli
from ncuflow.errors import NcuflowError
from ncuflow.phases.shapes import FileShapes
from ncuflow.phases.shapes_scan import scan_lines
from ncuflow.serving import SETTINGS, ServingShape
from tests.test_phases_real_logs import ALL_LOGS, analyse


def phases(*args: str) -> tuple[int, str]:
    """The exit status and output of ``ncuflow phases`` (an error's paragraph and status as ``main`` gives them)."""
    result = CliRunner().invoke(cli, ["phases", *args])
    if isinstance(result.exception, NcuflowError):
        return result.exception.exit_code, result.output + str(result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.output


def shapes_of(logs: Path, name: str) -> FileShapes:
    shapes = analyse(logs, name).shapes
    assert shapes is not None
    return shapes


def lines_of(logs: Path, name: str) -> list[str]:
    return (logs / name).read_text(encoding="utf-8", errors="replace").split("\n")


@pytest.mark.parametrize("name", ALL_LOGS)
def test_every_shape_names_a_line_that_says_it(serving_logs_dir: Path, name: str) -> None:
    shapes = shapes_of(serving_logs_dir, name)
    text = lines_of(serving_logs_dir, name)
    assert shapes.runs, "every shared log is a server log with runs"
    for run in shapes.runs:
        for stretch in (run.run, *run.stretches):
            if stretch.first_line is None:
                continue
            line = text[stretch.first_line - 1]
            assert re.search(r"Decode batch|Prefill batch|Running: \d+ reqs", line), (name, stretch)
            if stretch.decode_batch is not None:  # the batch column is the lines' own #running-req
                assert stretch.decode_batch.minimum >= 1
    for setting in shapes.settings:
        if setting.source == "log":
            assert setting.value is not None and setting.value in text[(setting.line or 0) - 1]
        elif setting.value is None:
            assert setting.source == "not in the log" and setting.flag.startswith("--setting ")


def test_hand_check_sglang_0_3_5_batch(serving_logs_dir: Path) -> None:
    """Lines 5-17: 13 Decode lines at #running-req 100, #token 3825 + 4000 k (40 steps × 100
    requests a line): KV per request 38.25 … 518.25, median 278.25 (line 11); its two Prefill
    lines (3, 4) carry 540 and 2460 new tokens."""
    name = "sgldocs_openai-batch_2024-11-15_v0.3.5.post2.log"
    run = shapes_of(serving_logs_dir, name).runs[0].run
    assert (run.decode_lines, run.first_line) == (13, 5)
    assert run.decode_batch is not None and run.decode_batch.minimum == run.decode_batch.maximum == 100
    assert run.kv_len is not None
    assert (run.kv_len.minimum, run.kv_len.median, run.kv_len.maximum) == (38.25, 278.25, 518.25)
    assert run.prefill_chunk is not None and (run.prefill_chunk.minimum, run.prefill_chunk.maximum) == (540, 2460)
    assert "#token: 27825" in lines_of(serving_logs_dir, name)[10]  # the median's line, by hand
    assert all(s.source == "not in the log" for s in shapes_of(serving_logs_dir, name).settings)


def test_hand_check_eagle3_speculative_run(serving_logs_dir: Path) -> None:
    """The benchmark's run starts decoding at line 89 (#running-req 78, #token 280704: 3598.8
    per request, accept len 1.57); all 113 Decode lines of the file are its; the steady
    stretch holds the batch at the stated max concurrency 78."""
    name = "shun8686_qwen3-32b_eagle3_tp4_c78.log"
    shapes = shapes_of(serving_logs_dir, name)
    run = shapes.runs[1]
    assert (run.run.first_line, run.run.decode_lines) == (89, 113)
    assert run.run.kv_len is not None and run.run.kv_len.minimum <= 280704 / 78
    steady = next(s for s in run.stretches if s.name == "steady")
    assert steady.decode_batch is not None and steady.decode_batch.minimum == steady.decode_batch.maximum == 78
    speculative = shapes.setting(ServingShape.SPECULATIVE)
    assert speculative is not None and (speculative.line, speculative.source) == (89, "Decode lines")
    assert "accept len: 1.57" in lines_of(serving_logs_dir, name)[88]
    assert run.run.cuda_graph_share == 1.0  # every Decode line says "cpu graph: True"
    assert run.run.accept_len is not None and run.run.accept_len.count == 113 and run.run.accept_len.minimum > 1


def test_hand_check_vllm_closed_loops(serving_logs_dir: Path) -> None:
    """Three runs at Running 1 (lines 4, 8), 4 (16, 29) and 8 (53, 78); vLLM's statistics lines
    give only a KV usage share, so the KV length is not in the log."""
    shapes = shapes_of(serving_logs_dir, "faradawn_llama3-8b_vllm-0.11.2_c1-8.log")
    batches = [(r.run.first_line, r.run.decode_batch.median if r.run.decode_batch else None) for r in shapes.runs]
    assert batches == [(4, 1), (16, 4), (53, 8)]
    assert shapes.kv_len_source == "not in the log"
    assert all(r.run.kv_len is None for r in shapes.runs)


SERVER_ARGS = (
    "[2025-06-10 21:40:00] server_args=ServerArgs(model_path='m', tp_size=4, dp_size=1, page_size=16, "
    "attention_backend='flashinfer', kv_cache_dtype='fp8_e5m2', cuda_graph_bs=[1, 2, 4, 8], "
    "speculative_algorithm=None)"
)


def test_settings_come_from_settings_lines_only() -> None:
    found = scan_lines(enumerate([
        "    page_size = self.page_size",  # a traceback's source line: no setting
        SERVER_ARGS,
        "INFO 11-28 15:30:00 [cuda.py:1] Using FLASH_ATTN backend.",
    ], start=1))
    stated = {shape: (value.value, value.line) for shape, value in found.settings.items()}
    assert stated == {
        ServingShape.TP_SIZE: ("4", 2), ServingShape.DP_SIZE: ("1", 2), ServingShape.PAGE_SIZE: ("16", 2),
        ServingShape.ATTENTION_BACKEND: ("flashinfer", 2), ServingShape.KV_DTYPE: ("fp8_e5m2", 2),
        ServingShape.CUDA_GRAPH_BS: ("[1, 2, 4, 8]", 2), ServingShape.SPECULATIVE: ("None", 2),
    }
    vllm = scan_lines(enumerate([
        "INFO Initializing a V1 LLM engine (v0.11.2) with config: model='m', tensor_parallel_size=2, "
        "kv_cache_dtype=auto, block_size=None",
        "INFO 11-28 15:30:00 [cuda.py:1] Using FLASH_ATTN backend.",
    ], start=1))
    assert vllm.settings[ServingShape.TP_SIZE].value == "2"
    assert vllm.settings[ServingShape.ATTENTION_BACKEND].value == "FLASH_ATTN"


def test_setting_option_states_what_the_log_does_not(serving_logs_dir: Path) -> None:
    path = serving_logs_dir / "sgldocs_openai-batch_2025-06-10.log"
    result = CliRunner().invoke(cli, ["phases", str(path), "--json", "--setting", "page_size=16"])
    assert result.exit_code == 0, result.output
    settings = {s["shape"]: s for s in json.loads(result.output)["files"][0]["shapes"]["settings"]}
    assert settings["page_size"] == {"shape": "page_size", "value": "16", "line": None, "source": "--setting",
                                     "flag": "--setting page_size=VALUE"}
    assert {s["source"] for name, s in settings.items() if name != "page_size"} == {"not in the log"}
    assert set(settings) == {row.shape.value for row in SETTINGS}
    text = CliRunner().invoke(cli, ["phases", str(path)]).output
    assert "shapes served" in text and "not in the log: page_size" in text
    bad = CliRunner().invoke(cli, ["phases", str(path), "--setting", "pagesize=16"])
    assert bad.exit_code == 2 and "page_size" in bad.output and "Traceback" not in bad.output


def test_vllm_kv_length_from_its_stated_cache_size(serving_logs_dir: Path, tmp_path: Path) -> None:
    """vLLM states its cache's size once, at start-up; with it, usage × size / Running. On the
    closed loops: 0.2 % of 100,000 tokens over 4 requests (lines 16, 29) is 50, over 8 (53, 78) 25."""
    name = "faradawn_llama3-8b_vllm-0.11.2_c1-8.log"
    start = "INFO 11-28 15:30:00 [kv_cache_utils.py:1087] GPU KV cache size: 100,000 tokens"
    log = tmp_path / name
    log.write_text(start + "\n" + (serving_logs_dir / name).read_text(encoding="utf-8"))
    code, out = phases(str(log), "--json")
    assert code == 0, out
    shapes = json.loads(out)["files"][0]["shapes"]
    assert shapes["kv_len_source"].endswith("100000 tokens (line 1) / Running")
    medians = [run["run"]["kv_len"]["median"] if run["run"]["kv_len"] else None for run in shapes["runs"]]
    assert medians == [0.0, pytest.approx(50.0), pytest.approx(25.0)]


def test_a_long_list_is_stated_whole_or_not_at_all() -> None:
    sizes = ", ".join(str(n) for n in range(1, 513))  # SGLang's capture list can be this long
    found = scan_lines(enumerate([f"server_args=ServerArgs(cuda_graph_bs=[{sizes}], page_size=1)"], start=1))
    assert found.settings[ServingShape.CUDA_GRAPH_BS].value == f"[{sizes}]"
    cut = scan_lines(enumerate(["server_args=ServerArgs(cuda_graph_bs=[1, 2, 4" + ", 8" * 2000], start=1))
    assert ServingShape.CUDA_GRAPH_BS not in cut.settings  # unclosed: nothing, never "[1"


def test_a_setting_with_control_characters_states_nothing() -> None:
    found = scan_lines(enumerate(["server_args=ServerArgs(attention_backend='fa\x1b[31m3', page_size=16)"], start=1))
    assert ServingShape.ATTENTION_BACKEND not in found.settings
    assert found.settings[ServingShape.PAGE_SIZE].value == "16"
