"""What a server-log format states about the server: a typed record the model reads.

Every decision the model takes that depends on *how* a server logs (is an admission a line
of its own? is a statistics line a window average or a count every N steps? where does a
run start?) reads a field of ``Capabilities``, never the name of an engine. A format module
in ``ncuflow.phases.parse`` fills one record for the traces it reads; a new format is a new
record (see docs/ARCHITECTURE.md, "A serving-log format").

What a given file actually holds (arrival lines, per-request timing lines, preemption
warnings) is data on the trace; a capability says only that the format *can* say it, and
so whether its absence means anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class RunBoundary(Enum):
    """Where a run (a stretch of the log during which the server was busy) starts."""

    # a Prefill line with no request running (SGLang): the first admission after an idle spell
    ADMISSION_FROM_EMPTY = "admission-from-empty"
    # the first busy statistics line after one with nothing running or waiting (vLLM)
    BUSY_AFTER_IDLE = "busy-after-idle"


STATS_LINE = "statistics line"  # a statistics line, in a format's sentences where it names none


@dataclass(frozen=True)
class Capabilities:
    """What the lines of one format say, for the model.

    ``name`` and the words (``title``, ``server``, ``admission_evidence``…) are for labels
    and sentences only; the model branches on the typed fields."""

    name: str  # the registry name (``--format``), e.g. "sglang"
    title: str  # "SGLang server log"
    server: str  # the server's name in sentences, e.g. "SGLang"
    run_boundary: RunBoundary
    # each admitted batch has a line of its own (#new-seq, #new-token)
    prefill_lines: bool
    # decode statistics lines are printed every N decode steps (--decode-log-interval), so
    # Δt between two of them / N is a step time, and requests can finish unseen after the last
    step_counted_lines: bool
    # statistics lines average a fixed window of this many seconds (vLLM: 10), else None
    stats_window_s: float | None
    # what marks an admission inside a statistics interval, in words
    admission_evidence: str
    # lines count requests waiting for admission (SGLang #queue-req, vLLM Waiting)
    queue: bool
    # lines carry the KV cache's usage (SGLang token usage, vLLM GPU KV cache usage)
    kv_usage: bool
    # the log says each time requests are pushed back to the queue for want of KV cache
    # (SGLang retraction lines), so none logged means none happened; otherwise (vLLM: V0
    # warns only every 50th preemption, V1 never) they are inferred from the counts
    preemption_lines: bool
    preemption_word: str  # "retraction", "preemption"
    # the log can hold one line per arriving request (vLLM "Received request", SGLang "Receive:")
    arrival_lines: bool
    # the log can hold the server's own per-request timing lines (SGLang ReqTimeStats)
    per_request_timings: bool
    # the words of its lines, for sentences: the batch-size field ("#running-req", "Running"),
    # the generation-throughput field, and the server option that caps the batch
    # ("--max-running-requests", "--max-num-seqs")
    batch_field: str
    throughput_field: str
    batch_cap_option: str
    # what its lines are called in sentences: a batch-statistics line ("Decode line", "stats
    # line"), an admission's own line ("Prefill line"; prefill_lines) and the queue field
    stats_line: str = STATS_LINE
    admission_line: str = "admission line"
    queue_field: str = "queue"
    line_interval: str = "line interval"  # the steps between two step-counted lines ("decode-log interval")


def per_request_capabilities(
    *,
    name: str,
    title: str,
    server: str,
    admission_evidence: str,
    batch_field: str,
    throughput_field: str,
    batch_cap_option: str,
    preemption_word: str = "preemption",
) -> Capabilities:
    """The row of a format whose log has a line per finished request instead of batch
    statistics (TGI's router, llama.cpp's server): no admission, statistics, queue or KV lines,
    runs from busy to idle, only each request's own timing; its words are its own."""
    return Capabilities(
        name=name,
        title=title,
        server=server,
        run_boundary=RunBoundary.BUSY_AFTER_IDLE,
        prefill_lines=False,
        step_counted_lines=False,
        stats_window_s=None,
        admission_evidence=admission_evidence,
        queue=False,
        kv_usage=False,
        preemption_lines=False,
        preemption_word=preemption_word,
        arrival_lines=False,
        per_request_timings=True,
        batch_field=batch_field,
        throughput_field=throughput_field,
        batch_cap_option=batch_cap_option,
    )
