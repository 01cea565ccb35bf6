"""Phase split, TPOT reconciliation and the amortization test (``ncuflow phases``).

Pure functions over frozen dataclasses; no I/O. The parsers turn files into
``ServerTrace`` (scheduler statistics lines of SGLang or vLLM) or ``RequestTrace``
(per-request streaming timestamps); ``analyse_server_trace`` and ``analyse_request_trace``
turn those into ``RunAnalysis`` values, one per run; ``amortization_test`` compares runs.

Vocabulary used throughout:
- *admission ramp*: from the first request's submission (server logs: the first Prefill
  line of the run) until the batch reaches its steady size;
- *steady decode*: the longest stretch at stable batch size with no prefill mixed in;
- *drain*: from the end of the steady stretch until the last request finishes;
- *per-token time*: time between two output tokens of one request during steady decode
  (for speculative decoding, the step time divided by the accept length);
- *admission span*: first request's first token to the last admitted request's first
  token; this is the ``T_ramp`` of ``TPOT_reported ≈ T_steady + T_ramp / (N_output − 1)``.

Modules, one concept each: ``traces`` (inputs), ``stats`` (distributions), ``results``
(outputs, and the one place a ``RunAnalysis`` is built), ``intervals`` (the time between two
decode lines, with its per-token time), ``levels`` (the plateaus and bursts a run's batch
held), ``segments`` (one segment per concurrency level), ``runs`` (idle points cut a
scheduler's lines into runs), ``server`` and ``server_text`` (server-log runs and what they
say), ``server_harness`` (a run's output length and the harness-style TPOT its log gives),
``server_requests`` (the server's own per-request timing lines), ``floor`` (no per-token
time below the lone-request time, unflagged), ``reconcile`` (the TPOT terms), ``requests``
(per-request traces), ``bench`` (bench_serving JSON without start times), ``amortization``
(comparing runs of different output lengths).
"""

from __future__ import annotations

from ncuflow.phases.model.amortization import (
    AmortizationResult,
    AmortizationRun,
    ConfigGap,
    amortization_test,
    config_gaps,
)
from ncuflow.phases.model.reconcile import closed_loop_reconciliation
from ncuflow.phases.model.requests import analyse_request_trace
from ncuflow.phases.model.results import (
    PhaseKind,
    PhaseSpan,
    PhaseStats,
    Reconciliation,
    RunAnalysis,
    Segment,
    Term,
    TimelinePoint,
)
from ncuflow.phases.model.runs import split_server_runs
from ncuflow.phases.model.server import analyse_server_trace
from ncuflow.phases.model.stats import Distribution, distribution, quantile
from ncuflow.phases.model.traces import (
    BatchSample,
    BenchSummary,
    LogEvent,
    RequestRecord,
    RequestTrace,
    ServerTrace,
)

__all__ = [
    "AmortizationResult",
    "AmortizationRun",
    "BatchSample",
    "BenchSummary",
    "ConfigGap",
    "Distribution",
    "LogEvent",
    "PhaseKind",
    "PhaseSpan",
    "PhaseStats",
    "Reconciliation",
    "RequestRecord",
    "RequestTrace",
    "RunAnalysis",
    "Segment",
    "ServerTrace",
    "Term",
    "TimelinePoint",
    "amortization_test",
    "analyse_request_trace",
    "analyse_server_trace",
    "closed_loop_reconciliation",
    "config_gaps",
    "distribution",
    "quantile",
    "split_server_runs",
]
