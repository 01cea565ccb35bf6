"""Record per-request streaming timestamps from any OpenAI-compatible endpoint (stdlib only).

Sends ``requests`` streaming completions with ``concurrency`` workers in a closed loop (all
workers start together, each takes the next prompt when its request ends) and writes one
JSONL line per request in the schema of ``ncuflow.phases.parse.jsonl``: ``submit_time`` and the arrival time
of every chunk that carried text, plus ``output_tokens`` from the final usage chunk when the
server sends one. Times are ``time.time()`` at the start plus ``time.perf_counter()``
deltas: one monotonic clock with sub-millisecond resolution.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ncuflow.phases import TraceError


@dataclass(frozen=True)
class RecorderSettings:
    base_url: str
    model: str
    prompts: tuple[str, ...]
    concurrency: int
    max_tokens: int
    chat: bool = False
    ignore_eos: bool = False
    run: str | None = None
    timeout_s: float = 600.0


class _Clock:
    def __init__(self) -> None:
        self.wall0 = time.time()
        self.perf0 = time.perf_counter()

    def now(self) -> float:
        return self.wall0 + (time.perf_counter() - self.perf0)


def _endpoint(base_url: str, chat: bool) -> tuple[str, str, int, str]:
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TraceError(
            f"{base_url!r} is not an http(s) URL.",
            "The recorder talks to an OpenAI-compatible server.",
            "Give the server's base URL, e.g. http://127.0.0.1:30000.",
        )
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    path += "/chat/completions" if chat else "/completions"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname, port, path


def _body(settings: RecorderSettings, prompt: str) -> bytes:
    body: dict[str, Any] = {
        "model": settings.model,
        "max_tokens": settings.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    if settings.chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if settings.ignore_eos:
        body["ignore_eos"] = True
    return json.dumps(body).encode()


def _chunk_text(event: dict[str, Any]) -> str:
    choices = event.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    if "text" in choice:
        return str(choice.get("text") or "")
    delta = choice.get("delta") or {}
    return str(delta.get("content") or delta.get("reasoning_content") or "")


def record_one(
    settings: RecorderSettings, index: int, prompt: str, clock: _Clock
) -> dict[str, Any]:
    scheme, host, port, path = _endpoint(settings.base_url, settings.chat)
    connection_class = (
        http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    )
    record: dict[str, Any] = {"request_id": f"r{index}"}
    if settings.run is not None:
        record["run"] = settings.run
    connection = connection_class(host, port, timeout=settings.timeout_s)
    chunk_times: list[float] = []
    try:
        record["submit_time"] = clock.now()
        connection.request(
            "POST",
            path,
            body=_body(settings, prompt),
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        response = connection.getresponse()
        if response.status != 200:
            detail = response.read(300).decode("utf-8", "replace")
            record["error"] = f"HTTP {response.status}: {detail}"
            return record
        while True:
            raw = response.readline()
            if not raw:
                break
            arrived = clock.now()
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            try:
                event = json.loads(payload)
            except json.JSONDecodeError:
                continue
            if _chunk_text(event):
                chunk_times.append(arrived)
            usage = event.get("usage") or {}
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                record["output_tokens"] = usage["completion_tokens"]
    except (OSError, http.client.HTTPException) as error:
        record["error"] = f"{type(error).__name__}: {error}"
        return record
    finally:
        connection.close()
    if not chunk_times:
        record["error"] = "the stream carried no text"
    record["chunk_times"] = chunk_times
    return record


def record_requests(settings: RecorderSettings) -> list[dict[str, Any]]:
    """Run the closed loop and return the records in request order."""
    if settings.concurrency < 1 or not settings.prompts:
        raise TraceError(
            "nothing to record.", "", "Give at least one request and a concurrency ≥ 1."
        )
    clock = _Clock()
    lock = threading.Lock()
    next_index = [0]
    results: dict[int, dict[str, Any]] = {}

    def worker() -> None:
        while True:
            with lock:
                index = next_index[0]
                if index >= len(settings.prompts):
                    return
                next_index[0] += 1
            results[index] = record_one(settings, index, settings.prompts[index], clock)

    with ThreadPoolExecutor(max_workers=settings.concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(settings.concurrency)]:
            future.result()
    return [results[i] for i in sorted(results)]


def to_jsonl(records: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)
