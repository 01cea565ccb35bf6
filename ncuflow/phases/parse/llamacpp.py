"""llama.cpp's server (``llama-server``): its ``print_timing`` block per finished request.

When a slot finishes a request it prints, in one block (older builds: a header line, then
the three lines bare; newer builds: each line behind the ``slot print_timing: id N | task
T |`` prefix)::

    0.17.959.794 I slot print_timing: id  0 | task 8 | prompt eval time =   447.42 ms /   283 tokens (...)
    0.17.959.801 I slot print_timing: id  0 | task 8 |        eval time =   473.12 ms /    27 tokens (   17.52 ms per token, ...)
    0.17.959.802 I slot print_timing: id  0 | task 8 |       total time =   920.53 ms /   310 tokens

The leading ``M.SS.mmm.uuu`` (minutes, seconds, ms, µs since the server started) is there
only with ``--log-timestamps``. What a block gives:

- the prompt eval time: from the slot's start on the request to its first token;
- the eval time over the N output tokens: llama.cpp's own "ms per token" divides it by N,
  the first token included; a request's TPOT here is the eval time over the N − 1 gaps;
- with timestamps, the end (the block's time) and the start (less prompt and eval time),
  so requests overlap on one clock and the slots busy at once are rebuilt from them.

Older servers print the same times in other words, all read alike:

- 2024 (``print_timings`` with ``--log-format text``, or the JSON lines that were the
  default): ``prompt eval time     =  15.62 ms / 12 tokens`` then ``generation eval time =
  3194.22 ms / 783 runs``, each with ``timestamp=`` (JSON: ``"timestamp":``) the Unix time
  in whole seconds and ``id_task``: the block's end on a clock of 1-s resolution;
- 2023 (``print_timings:`` or ``llama_print_timings:``): ``eval time = … ms / N runs``, no
  time (as without ``--log-timestamps``).

A line may carry a prefix before its ``M.SS.mmm.uuu`` stamp (a wrapper's ``[pid]``, or
journald's ``Jun 18 08:57:40 host app[pid]:``).

The wait for a free slot is not logged (a request's start is its slot's start), so TTFT is
the server's prompt time, without queueing. Without ``--log-timestamps`` requests cannot be
placed on one clock: TTFT and per-token time are told, concurrency and phases are not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ncuflow.phases import TraceError
from ncuflow.phases.model.capabilities import per_request_capabilities
from ncuflow.phases.model.traces import RequestRecord, RequestTrace
from ncuflow.phases.parse.format import LineFormat
from ncuflow.phases.parse.request_chunks import MAX_REQUESTS, beyond_note, logged_request

CAPABILITIES = per_request_capabilities(
    name="llama.cpp",
    title="llama.cpp server log",
    server="llama-server",
    admission_evidence="a print_timing block",
    batch_field="slots busy",
    throughput_field="eval time",
    batch_cap_option="--parallel",
)
STAMP = re.compile(r"(?:^|\s)(\d{1,7})\.(\d\d)\.(\d{3})\.(\d{3}) [A-Z] ")
TASK = re.compile(r"print_timing: id +\d{1,6} \| task (\d{1,12}) \|")
# 2024's print_timings lines: the Unix time (whole seconds) and the task, text or JSON
EPOCH = re.compile(r'\btimestamp"?[=:](\d{9,11})\b')
TASK_2024 = re.compile(r'\b(?:id_task|task_id)"?[=:](\d{1,12})\b')
# "prompt eval time = … ms / N tokens", "eval time = … ms / N tokens"; 2023-24 builds:
# "prompt eval time     = …", "generation eval time = … ms / N runs"
TIMING = re.compile(
    r"\b(prompt eval|generation eval|eval) time {1,8}= {0,20}(\d{1,12}(?:\.\d{1,6})?) ms / {0,20}(\d{1,12}) (?:tokens|runs)"
)
TTFT_SERVER = (
    "TTFT here is llama-server's prompt eval time: from the slot's start on a request to its "
    "first token; the wait for a free slot (--parallel) is not logged, so it is left out"
)
NO_CLOCK = (
    "no --log-timestamps: the print_timing blocks carry no time, so requests cannot be placed "
    "on one clock — TTFT (prompt eval time) and per-token time are told per request; "
    "concurrency, phases and the harness TPOT need the server run with --log-timestamps"
)


def claims(line: str) -> bool:
    """The prompt-eval line of a print_timing block (the first of each block)."""
    if "prompt eval time" not in line or " ms /" not in line:
        return False
    timing = TIMING.search(line)
    return timing is not None and timing[1] == "prompt eval"


def _stamp_s(line: str) -> float | None:
    found = STAMP.search(line, 0, 160)
    if not found:
        return None
    minutes, seconds, ms, us = (int(part) for part in found.groups())
    return 60.0 * minutes + seconds + ms / 1e3 + us / 1e6


def _epoch_s(line: str) -> tuple[float, str] | None:
    """(Unix time, task) of a 2024 print_timings line, if it states them."""
    found = EPOCH.search(line)
    if not found:
        return None
    task = TASK_2024.search(line)
    return float(found[1]), task[1] if task else ""


@dataclass
class LlamaCppReader:
    """Each print_timing block as a request: its prompt line, then its eval line."""

    path: Path
    skip_malformed: bool
    requests: list[RequestRecord] = field(default_factory=list)
    header: tuple[str, float | None] = ("", None)  # the block's task and time (older builds)
    prompt: tuple[float, int] | None = None  # prompt eval seconds, line
    unstamped: int = 0
    epoch_origin: float | None = None  # the first request's start, where lines carry the Unix time
    beyond: int = 0  # requests past MAX_REQUESTS, left out

    def context(self, number: int, line: str) -> None:
        self._header(line)

    def _header(self, line: str) -> None:
        task = TASK.search(line)
        if task:
            self.header = (task[1], _stamp_s(line))

    def feed(self, number: int, line: str) -> None:
        self._header(line)
        timing = TIMING.search(line)
        if timing is None:
            return
        seconds, tokens = float(timing[2]) / 1e3, int(timing[3])
        if timing[1] == "prompt eval":
            self.prompt = (seconds, number)
        elif self.prompt is not None:
            self._request(number, line, seconds, tokens)
            self.prompt = None

    def _request(self, number: int, line: str, eval_s: float, tokens: int) -> None:
        if len(self.requests) >= MAX_REQUESTS:
            self.beyond += 1
            return
        prompt_s, _ = self.prompt or (0.0, number)
        task, header_s = self.header
        end = _stamp_s(line)
        end = header_s if end is None else end
        if end is None and (epoch := _epoch_s(line)) is not None:
            (end, task), total = epoch, prompt_s + eval_s
            self.epoch_origin = end - total if self.epoch_origin is None else self.epoch_origin
            end -= self.epoch_origin
        if end is None:
            self.unstamped += 1
            end = prompt_s + eval_s  # the request on a clock of its own, from its slot's start
        start = end - prompt_s - eval_s
        self.requests.append(logged_request(f"task{task or number}", (start, end), start + prompt_s, tokens, number))

    def traces(self) -> tuple[RequestTrace, ...]:
        if not self.requests:
            raise TraceError(
                f"{self.path}: a prompt eval time line but no eval time line after it.",
                "A request's timing block is its prompt eval and its eval line together.",
                "Pass the server's whole log (its print_timing blocks whole).",
            )
        timed = self.unstamped == 0
        notes: tuple[str, ...] = (TTFT_SERVER,) if timed else (TTFT_SERVER, NO_CLOCK)
        notes += (beyond_note(self.beyond),) if self.beyond else ()
        return (RequestTrace(str(self.path), "log", CAPABILITIES.name, tuple(self.requests),
                             has_start_times=timed, clock_origin=self._clock_origin() if timed else "", notes=notes),)

    def _clock_origin(self) -> str:
        if self.epoch_origin is None:
            return "the server's start"
        return datetime.fromtimestamp(self.epoch_origin, UTC).isoformat(timespec="seconds") + " (timestamps to 1 s)"


FORMAT = LineFormat(
    name="llama.cpp",
    capabilities=CAPABILITIES,
    claims=claims,
    reader=lambda path, reading: LlamaCppReader(path, reading.skip_malformed),
    describe="a llama.cpp server log (print_timing blocks: 'prompt eval time = … ms / N tokens')",
    help="llama-server's print_timing block per request: prompt eval time,\n"
    "eval time (with --log-timestamps: when, so concurrency too)",
)
