"""Open an input, detect its format and hand it to the right parser."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ncuflow.phases import TraceError
from ncuflow.phases.model import RequestTrace, ServerTrace
from ncuflow.phases.parse.bench import is_bench_object, parse_bench_json
from ncuflow.phases.parse.jsonl import parse_request_jsonl
from ncuflow.phases.parse.sglang import looks_like_sglang, parse_sglang_log
from ncuflow.phases.parse.vllm import looks_like_vllm, parse_vllm_log, strip_ansi

Trace = ServerTrace | RequestTrace

FORMATS = (
    "an SGLang server log ('Prefill batch' / 'Decode batch' lines), a vLLM server log "
    "('Running: N reqs, Waiting: M reqs' lines), per-request streaming timestamps as JSONL "
    "('submit_time' and 'chunk_times' per line) or bench_serving --output-details JSON"
)


def read_lines(path: Path) -> list[str]:
    if not path.exists():
        raise TraceError(f"{path}: no such file.", "", "Check the path.")
    if path.is_dir():
        raise TraceError(
            f"{path} is a directory.",
            "ncuflow phases reads trace files.",
            f"Pass the files inside it, e.g. {path}/*.log.",
        )
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise TraceError(
            f"{path}: cannot be read ({error.strerror}).", "", "Check its permissions."
        ) from None
    return text.splitlines()


def detect_format(path: Path, lines: list[str]) -> str:
    meaningful = [line for line in lines if line.strip()]
    if not meaningful:
        raise TraceError(
            f"{path} is empty.", "There is no trace to split into phases.", f"Pass {FORMATS}."
        )
    if looks_like_sglang(lines):
        return "sglang"
    if looks_like_vllm(lines):
        return "vllm"
    if meaningful[0].lstrip().startswith(("{", "[")) and not meaningful[0].lstrip().startswith(
        "[20"
    ):
        return "json"
    first = next(i for i, line in enumerate(lines, start=1) if line.strip())
    text = strip_ansi(lines[first - 1]).strip()
    shown = "binary data" if not text.isprintable() else f"first line: {text[:100]!r}"
    raise TraceError(
        f"{path}:{first}: not a format ncuflow phases reads ({shown}).",
        "No SGLang Prefill/Decode batch lines and no vLLM statistics lines were found, and it is not JSON.",
        f"Pass {FORMATS}. A log with only HTTP access lines has no scheduler statistics.",
    )


def _json_objects(path: Path, lines: list[str]) -> list[tuple[int, Any]]:
    whole = "\n".join(lines)
    try:
        obj = json.loads(whole)
    except json.JSONDecodeError:
        pass
    else:
        if isinstance(obj, list):
            return [(1, o) for o in obj]
        return [(1, obj)]
    objects = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            objects.append((number, json.loads(line)))
        except json.JSONDecodeError as error:
            raise TraceError(
                f"{path}:{number}: not valid JSON ({error.msg} at column {error.colno}).",
                "A JSONL trace needs one complete JSON object per line.",
                "Fix or remove the line (a recorder killed mid-write leaves a truncated last line).",
            ) from None
    return objects


def load_traces(path: Path, *, skip_malformed: bool = False) -> tuple[Trace, ...]:
    lines = read_lines(path)
    kind = detect_format(path, lines)
    if kind == "sglang":
        return parse_sglang_log(path, lines, skip_malformed=skip_malformed)
    if kind == "vllm":
        return parse_vllm_log(path, lines, skip_malformed=skip_malformed)
    objects = _json_objects(path, lines)
    if objects and is_bench_object(objects[0][1]):
        bench = [(n, o) for n, o in objects if is_bench_object(o)]
        if len(bench) != len(objects):
            bad = next(n for n, o in objects if not is_bench_object(o))
            raise TraceError(
                f"{path}:{bad}: a bench_serving result line without 'ttfts'/'itls'.",
                "",
                "Run bench_serving with --output-details, or pass only such results.",
            )
        return parse_bench_json(path, bench)
    if len(objects) == 1 and isinstance(objects[0][1], dict) and "submit_time" not in objects[0][1]:
        raise TraceError(
            f"{path}: a JSON object that is neither bench_serving --output-details output (no "
            "'ttfts'/'itls') nor a per-request trace (no 'submit_time').",
            "",
            f"Pass {FORMATS}.",
        )
    return parse_request_jsonl(path, lines)
