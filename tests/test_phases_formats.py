"""Issue 32: log formats as plug-ins. One registry; each format a module that claims a
file, reads it and states a typed ``Capabilities`` record the model reads instead of an
engine's name; ``--format`` overrides detection; a new format is one module and one
registry entry; JSON carries a schema version and older keys keep their types."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncuflow.cli import cli
from ncuflow.phases import TraceError
from ncuflow.phases.model.capabilities import Capabilities, RunBoundary
from ncuflow.phases.model.results import PhaseKind
from ncuflow.phases.model.traces import BatchSample, ServerTrace
from ncuflow.phases.parse import registry
from ncuflow.phases.parse.format import LineFormat
from ncuflow.phases.parse.registry import format_options
from ncuflow.phases.pipeline import build_report
from ncuflow.phases.report import SCHEMA_VERSION
from ncuflow.phases.text import render_text

ROOT = Path(__file__).resolve().parent.parent
ENGINE_NAMES = {"sglang", "vllm"}


def test_no_engine_name_is_compared_outside_parse() -> None:
    """The model, the pipeline and the renderers read capabilities: no comparison with an
    engine's name (or its ``engine`` attribute) anywhere outside ``ncuflow/phases/parse``."""
    found = []
    for path in sorted((ROOT / "ncuflow" / "phases").rglob("*.py")):
        if "parse" in path.relative_to(ROOT / "ncuflow" / "phases").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                parts = [node.left, *node.comparators]
                texts = {p.value.lower() for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)}
                engine = any(isinstance(p, ast.Attribute) and p.attr == "engine" for p in parts)
                if texts & ENGINE_NAMES or engine:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found


TOY = Capabilities(
    name="toy",
    title="Toy server log",
    server="Toy",
    run_boundary=RunBoundary.BUSY_AFTER_IDLE,
    prefill_lines=False,
    step_counted_lines=False,
    stats_window_s=5.0,
    admission_evidence="a toy admission",
    queue=True,
    kv_usage=False,
    preemption_lines=False,
    preemption_word="eviction",
    arrival_lines=False,
    per_request_timings=False,
    batch_field="running",
    throughput_field="tok/s",
    batch_cap_option="--toy-batch-cap",
)
TOY_LINE = re.compile(r"^t=(?P<t>\d+) running=(?P<running>\d+) waiting=(?P<waiting>\d+) tok/s=(?P<rate>[\d.]+)$")


@dataclass
class ToyReader:
    """A whole format: a statistics line every 5 s, nothing else."""

    path: Path
    samples: list[BatchSample] = field(default_factory=list)

    def context(self, number: int, line: str) -> None:
        pass

    def feed(self, number: int, line: str) -> None:
        found = TOY_LINE.match(line)
        if found:
            self.samples.append(BatchSample(
                float(found["t"]), "stats", int(found["running"]), number, int(found["waiting"]),
                gen_throughput=float(found["rate"]), prompt_throughput=0.0,
            ))

    def traces(self) -> tuple[ServerTrace, ...]:
        if not self.samples:
            raise TraceError(f"{self.path}: no toy lines.", "", "")
        return (ServerTrace(str(self.path), TOY, None, "", tuple(self.samples), (), 1.0),)


TOY_FORMAT = LineFormat(
    name="toy",
    capabilities=TOY,
    claims=lambda line: bool(TOY_LINE.match(line)),
    reader=lambda path, skip: ToyReader(path),
    describe="a toy log ('t=… running=…' lines)",
    help="'t=… running=… waiting=… tok/s=…' lines",
)


def toy_log(tmp_path: Path) -> Path:
    lines = [f"t={5 * k} running={8 if 0 < k < 12 else 0} waiting=0 tok/s={8 / 0.02 if 0 < k < 12 else 0:.1f}" for k in range(14)]
    path = tmp_path / "toy.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_new_format_is_one_module_and_one_registry_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "LINE_FORMATS", (*registry.LINE_FORMATS, TOY_FORMAT))
    path = toy_log(tmp_path)
    report = build_report([path])
    (file,) = report.files
    assert file.source_format == "Toy server log" and file.capabilities is TOY
    (run,) = file.runs
    assert run.phase(PhaseKind.STEADY).token_s is not None and run.phase(PhaseKind.STEADY).token_s.median == pytest.approx(0.02)
    assert "5-s Toy stats window" in run.timing.step_method  # its own window, its own name
    text = render_text(report)
    assert "Toy server log" in text and "vLLM" not in text and "SGLang" not in text
    assert "toy" in registry.format_names()


def test_format_is_detected_per_file_and_forced_by_option(tmp_path: Path) -> None:
    sglang = tmp_path / "a.log"
    sglang.write_text(
        "[2026-01-04 07:00:00] Prefill batch, #new-seq: 1, #new-token: 10, #cached-token: 0, #running-req: 0, #queue-req: 0\n"
        "[2026-01-04 07:00:01] Decode batch, #running-req: 1, gen throughput (token/s): 50.00, #queue-req: 0\n"
        "[2026-01-04 07:00:02] Decode batch, #running-req: 1, gen throughput (token/s): 50.00, #queue-req: 0\n"
    )
    forced = CliRunner().invoke(cli, ["phases", str(sglang), "--format", "vllm"])
    assert isinstance(forced.exception, TraceError) and "no vLLM" in str(forced.exception)
    data = json.loads(CliRunner().invoke(cli, ["phases", str(sglang), "--json"]).output)
    assert data["files"][0]["format_name"] == "sglang" and data["files"][0]["capabilities"]["prefill_lines"]
    unknown = CliRunner().invoke(cli, ["phases", str(sglang), "--format", "nope"])
    assert unknown.exit_code == 2 and "nope" in unknown.output
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"submit_time": 0.0, "chunk_times": [0.1, 0.2, 0.3]}) + "\n")
    as_jsonl = CliRunner().invoke(cli, ["phases", str(trace), "--format", "jsonl"])
    assert as_jsonl.exit_code == 0 and "JSONL" in as_jsonl.output


# keys of a run, a segment and a file in the JSON before issue 32, with their JSON types
OLD_RUN_KEYS = {
    "run_label": str, "run_index": int, "source_format": str, "peak_batch": int,
    "steady_batch": float, "ramp": dict, "steady": dict, "warmup": dict, "steady_token_s": dict,
    "headline_token_s": float, "headline_method": str, "segments": list, "cannot": list, "notes": list,
    "reconciliation": dict, "harness_tpot_s": float, "output_tokens": int, "requests_total": int,
    "warmup_excess_s": float, "main_segment": int, "step_method": str,
}
OLD_SEGMENT_KEYS = {
    "index": int, "level": int, "kind": str, "steady_token_s": dict, "steady_s": float,
    "mixed_s": float, "below_floor": list, "headline_token_s": float, "warmup_excess_s": float,
}


def test_json_has_a_schema_version_and_old_keys_keep_their_types(serving_logs_dir: Path) -> None:
    path = serving_logs_dir / "shun8686_qwen3-next-80b_mamba_c80.log"
    if not path.exists():
        pytest.skip("log missing")
    data = json.loads(CliRunner().invoke(cli, ["phases", str(path), "--json"]).output)
    assert data["schema_version"] == SCHEMA_VERSION == 4
    file = data["files"][0]
    # schema 4: the settings the model used, each with its source; the old top-level key kept
    for _, option in format_options():
        assert isinstance(data[option.name], int) and set(file["settings"][option.name]) == {
            "value", "source", "line", "given"}
    assert isinstance(file["runs"], list) and isinstance(file["notes"], list) and file["format"] == "SGLang server log"
    run = file["runs"][1]
    for key, kind in OLD_RUN_KEYS.items():
        value = run[key]
        assert isinstance(value, kind) or (kind is float and isinstance(value, int)), (key, value)
    for key, kind in OLD_SEGMENT_KEYS.items():
        value = run["segments"][0][key]
        assert isinstance(value, kind) or (kind is float and isinstance(value, int)), (key, value)
    assert {"median", "p10", "p90"} <= set(run["steady_token_s"])  # a distribution, as before
    # schema 3: the segment's phases as records, each flat key read from them by its rule
    segment = run["segments"][0]
    compared = set()
    for kind, phase in segment["phases"].items():
        assert set(phase) == {"span", "seconds", "token_s", "tokens", "weighted_s"}
        for name in ("token_s", "tokens", "weighted_s"):
            if f"{kind}_{name}" in segment:  # schema 2 had no ramp_* keys
                assert segment[f"{kind}_{name}"] == phase[name]
                compared.add(kind)
    assert {"steady", "mixed", "drain"} <= compared
    assert segment["steady"] == segment["phases"]["steady"]["span"]
    assert segment["steady_s"] == segment["phases"]["steady"]["seconds"]


def _vllm_stats_log(path: Path, stamp_of: Callable[[datetime], str]) -> Path:
    """Thirty statistics lines of one run at batch 8 and 25 ms a token, each stamped by ``stamp_of``."""
    start = datetime(2025, 9, 10, 16, 32, 5, 957000)
    lines = []
    for k in range(30):
        running = 8 if 2 <= k <= 25 else 0
        lines.append(
            f"{stamp_of(start + timedelta(seconds=10 * k))} metrics.py:386] Avg prompt throughput: "
            f"{800.0 if k == 2 else 0.0:.1f} tokens/s, Avg generation throughput: {320.0 if running else 0.0:.1f} "
            f"tokens/s, Running: {running} reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 3.0%, "
            "CPU KV cache usage: 0.0%."
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_vllm_stamp_with_a_year_keeps_it_in_the_clock_origin_only(tmp_path: Path) -> None:
    # vLLM prints "INFO 09-10 16:32:05"; some builds and plug-ins print the year and milliseconds
    dated = _vllm_stats_log(tmp_path / "dated.log",
                            lambda t: f"INFO {t:%Y-%m-%d %H:%M:%S}.{t.microsecond // 1000:03d}")
    plain = _vllm_stats_log(tmp_path / "plain.log", lambda t: f"INFO {t:%m-%d %H:%M:%S}.{t.microsecond // 1000:03d}")
    dated_text, plain_text = render_text(build_report([dated])), render_text(build_report([plain]))
    assert "t=0 at 2025-09-10 16:32:05;" in dated_text and "t=0 at 09-10 16:32:05;" in plain_text
    assert dated_text.splitlines()[1:] == plain_text.splitlines()[1:]
    assert "25.00 ms" in dated_text
