"""What a server log says about the requests it served, whatever the engine: one line per
arriving request, HTTP access lines, refusals by cause and tracebacks.

- **Arrivals**: vLLM's ``Received request <id>: prompt: …`` (``RequestLogger``, every version
  from 0.6 to 0.11, when request logging is on) and SGLang's ``Receive: obj=GenerateReqInput(…)``
  (``--log-requests``). vLLM V1 then logs ``Added request <id>.`` once the engine took the
  request: where a log has such lines, an arrival without one was refused before the
  scheduler (e.g. a prompt longer than the context) and is no arrival to queue. SGLang's
  health checks (``rid='HEALTH_CHECK…'``) are left out.
- **Access lines** (uvicorn): ``"POST /v1/chat/completions HTTP/1.1" 400 Bad Request``,
  counted by status for the generation endpoints.
- **Refusals by cause**: a message that says a prompt exceeds the model's context (vLLM
  "This model's maximum context length is N tokens…", "… is longer than the maximum model
  length of N", SGLang "The input (N tokens) is longer than the model's context length (M
  tokens)", "Requested token count exceeds the model's maximum context length…"); a prompt
  over vLLM's scheduler limit ("Input prompt (N tokens) is too long and exceeds limit of M",
  a warning: the request is finished unserved).
- **Over-length prompts without a refusal message**: the tokenizer's warning ``Token indices
  sequence length is longer than the specified maximum sequence length for this model (N >
  M)`` followed by an HTTP 400 access line: that 400 is a prompt over the context (the
  warning is the cause the log gives); a warning followed by the engine's own refusal
  message is that refusal, counted once.
- **Client aborts**: SGLang's ``AbortReq(…)`` and vLLM's ``Aborted request …`` lines: the
  client ended a request. A traceback after the last batch line that follows such aborts
  is the server stopped after the client ended the run, not an aborted run nor an error
  (``client_ended``; readers report each batch line through ``busy``).
- **Tracebacks**: a traceback (with the tracebacks chained to it) whose exception is such a
  refusal is a refused request, not an error of the server; any other is reported as
  before, by the log's reader (``on_traceback``), with its last line (the exception: a
  dotted name ending in Error or Exception, or after a frame line any unindented
  ``module.ClassName: …`` such as ``psutil.NoSuchProcess: …``).

Everything is counted in bounded memory: arrivals are kept in columns (thinned beyond
``MAX_ARRIVALS``), refusals and statuses as counts.
"""

from __future__ import annotations

import itertools
import re
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from ncuflow.phases.model.traces import LogEvent, Rejection, RequestArrivals, ServiceCounts

MAX_ARRIVALS = 1 << 19
MAX_PENDING = 4096  # arrivals waiting for their "Added request" line before they are judged
PENDING_S = 60.0  # an arrival with no "Added request" line this long after it was refused
# one row per cause of a refusal: the words engines print for it
REFUSAL_CAUSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "context length",
        (
            "maximum context length",
            "longer than the maximum model length",
            "longer than the model's context length",
            "context length exceeded",
        ),
    ),
    (
        # vLLM's scheduler (V0 and V1): the request is finished unserved, with no HTTP error
        "prompt limit (max_model_len, or max_num_batched_tokens where prefill is not chunked)",
        ("is too long and exceeds limit of",),
    ),
)
# every marker above holds one of these: a line without any is no refusal (one cheap test a line)
REFUSAL_HINTS = ("ength", "exceeds limit")
_MAY_REFUSE = re.compile("|".join(map(re.escape, REFUSAL_HINTS))).search  # literals: linear time
CHAINED = ("The above exception was the direct cause", "During handling of the above exception")
# the path cannot cross a quote or a space: one pass over the line, whatever it holds
ACCESS = re.compile(r'"(?P<method>POST|GET|PUT|DELETE) (?P<path>[^\s"]{1,2048}) HTTP/[\d.]{1,8}" (?P<status>\d{3})\b')
MAX_ID = 200  # characters of a request id kept to match its "Added request" line
GENERATION_PATHS = ("completions", "/generate", "/responses", "/messages")
PROCESS_PREFIX = re.compile(r"^\((?:APIServer|EngineCore\w*|VllmWorker\w*|Worker\w*)[^)]*\)\s*")
VLLM_ARRIVAL = "Received request "
VLLM_ADDED = "Added request "
SGLANG_ARRIVAL = "Receive: obj="
# the client ended a request (SGLang logs the AbortReq it received, vLLM "Aborted request <id>.")
CLIENT_ABORTS = ("AbortReq(", "Aborted request ")
# the Hugging Face tokenizer's warning for a prompt longer than its model_max_length
TOKENIZER_OVER_LENGTH = "longer than the specified maximum sequence length"
OVER_CONTEXT = REFUSAL_CAUSES[0][0]  # the cause a 400 after that warning is counted under
MAX_OVER_LENGTH = 64  # warnings waiting for their 400 (or the engine's own refusal message)


def killed_after_client_event(time_s: float | None, line: int, exception: str, aborts: int) -> LogEvent:
    """A traceback after the client ended the run (its aborts after the last batch line):
    the server stopped (killed, its monitor threads failing), with the exception's last
    line as the cause; no aborted run."""
    cause = exception[:120] or "no exception line"
    return LogEvent(
        time_s,
        line,
        "shutdown",
        f"the server was stopped after the client ended the run ({aborts} request(s) aborted by the "
        f"client first); its exception at the stop: {cause}",
    )


def refusal_cause(text: str) -> str | None:
    """The cause of a refusal a message states, or None."""
    lowered = text.lower()
    for cause, markers in REFUSAL_CAUSES:
        if any(marker in lowered for marker in markers):
            return cause
    return None


def is_exception_line(text: str) -> bool:
    """``ValueError: …``, ``vllm.v1.engine.exceptions.EngineDeadError: …``: a dotted name
    ending in Error or Exception, then a colon or the end (no pattern: linear time)."""
    head = text[:200].split(":", 1)[0].strip()
    return head.endswith(("Error", "Exception")) and head.replace(".", "_").isidentifier()


def names_exception_class(text: str) -> bool:
    """``psutil.NoSuchProcess: process no longer exists``: an unindented line starting with a
    dotted name whose last part is a class name (capitalised, not all capitals: no
    ``INFO:``), the last line of a traceback whose exception is not called …Error."""
    if not text or text[0].isspace():
        return False
    head = text[:200].split(":", 1)[0].rstrip()
    last = head.rsplit(".", 1)[-1]
    return (
        head.replace(".", "_").isidentifier() and last[:1].isupper() and any(c.islower() for c in last)
    )


def without_process_prefix(text: str) -> str:
    """A line without vLLM's ``(APIServer pid=N)`` / ``(EngineCore_DP0 pid=N)`` prefix."""
    return PROCESS_PREFIX.sub("", text, count=1) if text.startswith("(") else text


@dataclass
class _Refusals:
    count: int = 0
    first_line: int = 0
    example: str = ""


@dataclass
class _Traceback:
    line: int
    time_s: float | None
    exception: str = ""
    cause: str | None = None
    frames: bool = False  # a 'File "…"' line was read: an unindented class name ends it


@dataclass
class ServiceLog:
    """The request-level lines of one server log, as they are read."""

    on_traceback: Callable[[int, float | None, str], None]  # (line, time, exception): no refusal
    time_s: array = field(default_factory=lambda: array("d"))  # arrivals kept
    line: array = field(default_factory=lambda: array("q"))
    refused_s: array = field(default_factory=lambda: array("d"))
    seen: int = 0
    stride: int = 1
    refused: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    refusals: dict[str, _Refusals] = field(default_factory=dict)
    errors: int = 0
    first_error_line: int = 0
    pending: dict[str, tuple[float, int]] = field(default_factory=dict)
    added_lines: bool = False
    matched: int = 0  # "Added request" lines matched to an arrival
    traceback: _Traceback | None = None
    chained: bool = False
    last_refusal: tuple[float | None, str] = (None, "")
    client_aborts: int = 0
    last_abort_line: int = 0
    last_batch_line: int = 0  # the reader's last batch line with requests running or waiting
    over_length: list[tuple[int, str]] = field(default_factory=list)  # (line, warning) awaiting a 400

    # ------------------------------------------------------------------ per line

    def read(self, number: int, text: str, time_of: Callable[[], float | None]) -> bool:
        """Whether the line was about requests (and so is nothing else). ``time_of`` gives
        the line's time (or the last one the log stated), asked only where it is needed."""
        if self._traceback_line(number, text, time_of):
            return True
        if any(marker in text for marker in CLIENT_ABORTS):
            self.client_aborts += 1
            self.last_abort_line = number
            return True
        if TOKENIZER_OVER_LENGTH in text:
            if len(self.over_length) < MAX_OVER_LENGTH:
                at = text.find("(", text.find(TOKENIZER_OVER_LENGTH))
                lengths = text[at : text.find(")", at) + 1][:40] if at >= 0 else ""
                self.over_length.append((number, f"tokenizer: prompt {TOKENIZER_OVER_LENGTH} {lengths}".strip()))
            return True
        if VLLM_ARRIVAL in text or SGLANG_ARRIVAL in text or VLLM_ADDED in text:
            return self._arrival(number, text, time_of())
        if "HTTP/" in text and '" ' in text:
            found = ACCESS.search(text)
            if found and found.group("method") == "POST" and any(p in found.group("path") for p in GENERATION_PATHS):
                status = int(found.group("status"))
                self.statuses[status] = self.statuses.get(status, 0) + 1
                if status == 400 and self.over_length:
                    self._refused(OVER_CONTEXT, *self.over_length.pop(0))
                return True
        cause = refusal_cause(text) if _MAY_REFUSE(text) else None
        if cause is not None:
            message = text.strip()[-160:]
            moment = time_of()
            if self.last_refusal != (moment, message) or moment is None:
                self._refused(cause, number, message)
                if cause == OVER_CONTEXT and self.over_length:
                    self.over_length.pop(0)  # the same request's tokenizer warning
            self.last_refusal = (moment, message)
            return True
        return False

    def _traceback_line(self, number: int, text: str, time_of: Callable[[], float | None]) -> bool:
        """Tracebacks, with those chained to them: the ``Traceback`` line, the joining line
        and the exception line are theirs; frame lines are left to the log's reader (other
        processes' lines come between them)."""
        if "Traceback (most recent call last)" in text:
            if self.traceback is None or not self.chained:
                self._close_traceback()
                self.traceback = _Traceback(number, time_of())
            self.chained = False
            return True
        found = self.traceback
        if found is None:
            return False
        unprefixed = without_process_prefix(text)
        stripped = unprefixed.strip()
        if any(stripped.startswith(c) for c in CHAINED):
            self.chained = True
            return True
        if stripped.startswith('File "'):
            found.frames = True
            return False
        if is_exception_line(stripped) or (found.frames and names_exception_class(unprefixed)):
            found.exception = found.exception or stripped[:160]
            found.cause = found.cause or refusal_cause(stripped)
            self.chained = False
            return True
        if stripped and found.exception and not self.chained:
            self._close_traceback()
        return False

    def _close_traceback(self) -> None:
        found, self.traceback = self.traceback, None
        if found is None:
            return
        if found.cause is not None:
            self._refused(found.cause, found.line, found.exception)
            return
        if not self.client_ended():  # the server stopped after its client: no error of it
            self.errors += 1
            self.first_error_line = self.first_error_line or found.line
        self.on_traceback(found.line, found.time_s, found.exception)

    def busy(self, line: int) -> None:
        """The reader read a batch line with requests running or waiting."""
        self.last_batch_line = line

    def client_ended(self) -> bool:
        """The client aborted requests after the server's last batch line: the run was over
        on the client's side."""
        return self.client_aborts > 0 and self.last_abort_line > self.last_batch_line

    def flush(self) -> None:
        """A traceback still open at a line that is not part of it, or at the end."""
        if self.traceback is not None and self.traceback.exception and not self.chained:
            self._close_traceback()

    def _refused(self, cause: str, number: int, message: str) -> None:
        tally = self.refusals.setdefault(cause, _Refusals())
        tally.count += 1
        if not tally.first_line:
            tally.first_line, tally.example = number, message

    # ------------------------------------------------------------------ arrivals

    def _arrival(self, number: int, text: str, time_s: float | None) -> bool:
        if time_s is None:
            return False
        at = text.find(VLLM_ADDED)
        if at >= 0:
            self.added_lines = True
            key = text[at + len(VLLM_ADDED) :].strip().removesuffix(".")[:MAX_ID]
            found = self.pending.pop(key, None) or self._related(key)
            if found is not None:
                self.matched += 1
                self._keep(*found)
            return True
        at = text.find(VLLM_ARRIVAL)
        if at >= 0:
            key = text[at + len(VLLM_ARRIVAL) : at + len(VLLM_ARRIVAL) + MAX_ID + 1].partition(":")[0].strip()[:MAX_ID]
            self.pending[key] = (time_s, number)
            self._judge_pending(time_s)
            return True
        if "HEALTH_CHECK" in text:
            return True
        self._keep(time_s, number)
        return True

    def _related(self, key: str) -> tuple[float, int] | None:
        """An arrival whose id the engine's id extends or shortens (a version that adds a
        suffix or a prefix): the oldest few pending are looked at."""
        for pending in list(itertools.islice(self.pending, 8)):
            if key.startswith(pending) or pending.startswith(key) or key.endswith(pending):
                return self.pending.pop(pending)
        return None

    def _judge_pending(self, now: float) -> None:
        """Arrivals that waited too long for an ``Added request`` line were refused; in a
        log with no such lines, or whose ``Added`` ids never match an arrival's, every
        arrival counts."""
        if not self.added_lines or not self.matched:
            if len(self.pending) > MAX_PENDING:
                for time_s, line in self.pending.values():
                    self._keep(time_s, line)
                self.pending.clear()
            return
        while self.pending:  # the oldest first (a dict keeps its order): amortized O(1)
            key, (time_s, _) = next(iter(self.pending.items()))
            if time_s > now - PENDING_S and len(self.pending) <= MAX_PENDING:
                break
            del self.pending[key]
            self._refuse_arrival(time_s)

    def _refuse_arrival(self, time_s: float) -> None:
        self.refused += 1
        if len(self.refused_s) < MAX_ARRIVALS:
            self.refused_s.append(time_s)

    def _keep(self, time_s: float, line: int) -> None:
        self.seen += 1
        if (self.seen - 1) % self.stride:
            return
        self.time_s.append(time_s)
        self.line.append(line)
        if len(self.time_s) > MAX_ARRIVALS:  # keep every other one from now on
            self.time_s, self.line, self.stride = self.time_s[::2], self.line[::2], self.stride * 2

    # ------------------------------------------------------------------ the result

    def finish(self) -> tuple[RequestArrivals | None, ServiceCounts]:
        self.flush()
        if self.traceback is not None:
            self._close_traceback()
        for time_s, line in self.pending.values():
            if self.added_lines and self.matched:
                self._refuse_arrival(time_s)
            else:
                self._keep(time_s, line)
        self.pending.clear()
        order = sorted(range(len(self.time_s)), key=self.time_s.__getitem__)
        arrivals = RequestArrivals(
            array("d", (self.time_s[i] for i in order)),
            array("q", (self.line[i] for i in order)),
            self.refused_s,
            self.stride,
            self.seen,
            self.refused,
        )
        counts = ServiceCounts(
            http_status=tuple(sorted(self.statuses.items())),
            rejections=tuple(
                Rejection(cause, tally.count, tally.first_line, tally.example)
                for cause, tally in self.refusals.items()
            ),
            errors=self.errors,
            first_error_line=self.first_error_line,
        )
        return (arrivals if self.seen or self.refused else None), counts
