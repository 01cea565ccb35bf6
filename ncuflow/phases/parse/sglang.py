"""Read SGLang server logs: ``Prefill batch`` / ``Decode batch`` scheduler lines.

Handles the stamps of every version since 0.3 (``parse.sglang_stamps``), ``Decode batch.`` and ``Decode batch,`` punctuation, the
speculative (``accept len``) and hybrid-model (``#full token``) fields, retraction lines,
tracebacks, the server's per-request timing lines (``parse.reqstats``), and the
``bench_serving`` command line and result block when the client output is interleaved in
the same file. Lines are read one at a time (``SglangReader.feed``), so a log of any length
is read in bounded memory (``parse.compact``).

A Prefill line of one 1-token request and no cached token (``#new-seq: 1, #new-token: 1``) is
a health check (SGLang's ``/health_generate``): it is set aside and counted, neither a run nor
an admission.

Refused with a paragraph each: a PD-disaggregated prefill node's log (Prefill lines with
``#unbootstrapped-req`` / ``#transferring-req`` and no Decode line: no decode phase to tell),
and SGLang 0.2's ``[gpu=0] Decode batch.`` lines, which carry no time.
"""

from __future__ import annotations

import contextlib
import re
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ncuflow.phases import TraceError
from ncuflow.phases.model.capabilities import Capabilities, RunBoundary
from ncuflow.phases.model.traces import BatchSample, LogEvent, RequestTimings, ServerTrace
from ncuflow.phases.parse.bench_block import BenchBlockReader
from ncuflow.phases.parse.chunked import mark_chunked_prefills
from ncuflow.phases.parse.compact import SampleStore, folding_note, share_cap
from ncuflow.phases.parse.format import FormatOption, LineFormat, LogReading, StatedSettings
from ncuflow.phases.parse.reqstats import RequestTimingLog, find_marker, parse_request_line
from ncuflow.phases.parse.service import ServiceLog, killed_after_client_event
from ncuflow.phases.parse.sglang_stamps import SglangStamps
from ncuflow.phases.parse.values import (
    BadValue,
    count_value,
    optional_rate,
)

STATS_LINE = re.compile(
    r"\b(?P<kind>Prefill|Decode) batch\b(?:\s*\[[^\]]*\])?[.,:]?\s*(?P<fields>.*)$"
)
RETRACTIONS = ("Decode out of memory happened", "Retract requests", "#retracted_reqs")
RETRACTED = re.compile(r"#retracted_reqs:\s*(\d{1,9})\b")
# the fields ncuflow reads, each at the start of a comma-separated field: one linear scan
USED_FIELDS = re.compile(
    r"(?:^|,)\s*(#running-req|#queue-req|#new-seq|#new-token|#cached-token|#pending-token|"
    r"#transfer-req|#prealloc-req|gen throughput \(token/s\)|accept len|token usage|"
    r"full token usage)\s*:\s*([^\s,%]*)"
)
MAX_EVENTS = 1000
# fields only the Prefill lines of a PD-disaggregated prefill node print (its requests waiting
# for the decode node's bootstrap, and those whose KV cache is being sent to it), in each
# version's words: "#unbootstrapped-req … #transferring-req" (2025), "#prealloc-req …
# #inflight-req" (late 2025), "#bootstrap-req … #inflight-req" (2026); "#inflight-req" alone is
# no evidence (SGLang 0.3 printed it for a chunked prompt on any server)
PD_PREFILL_FIELDS = ("#unbootstrapped-req", "#transferring-req", "#prealloc-req", "#bootstrap-req")
UNTIMED_SGLANG = (
    " (SGLang before 0.3 printed its scheduler lines as '[gpu=0] Decode batch. …', with no time: "
    "such a log cannot be placed in time)"
)
DECODE_LOG_INTERVAL = FormatOption(
    name="decode_log_interval",
    default=40,
    minimum=1,
    help="SGLang decode steps between two Decode lines (its server argument of that name): the "
    "step time where a Decode line has no gen throughput, and the cross-check of the timestamps.",
    stated_in="ServerArgs(",
)
FIX_MALFORMED = (
    "Use the server's own log as written (SGLang prints '[YYYY-MM-DD HH:MM:SS] Decode "
    "batch, #running-req: …'), or pass --skip-malformed to leave such lines out."
)


def claims_sglang(line: str) -> bool:
    """An SGLang scheduler statistics line (the evidence that a log is SGLang's)."""
    if "batch" not in line:
        return False
    stats = STATS_LINE.search(line)
    return stats is not None and "#" in stats.group("fields")


def _rank_of(tags: str) -> str:
    parts = tags.split()
    dp = [p for p in parts if p.startswith("DP")]
    return dp[0] if dp else " ".join(parts)


def scheduler_fields(text: str) -> dict[str, str]:
    """The fields of a Prefill/Decode line that ncuflow reads, as text (the value up to a
    space, comma or %; the last of a repeated key, as before)."""
    return dict(USED_FIELDS.findall(text))


def parse_sglang_log(
    path: Path, lines: Iterable[str], reading: LogReading | None = None
) -> tuple[ServerTrace, ...]:
    """One ``ServerTrace`` per scheduler (DP rank) found in the log (lines numbered from 1)."""
    reader = SglangReader(path, reading or LogReading())
    for number, line in enumerate(lines, start=1):
        reader.feed(number, line.rstrip("\n"))
    return reader.traces()


@dataclass
class Tally:
    """How many lines of one kind, and the first of them."""

    count: int = 0
    first: int = 0

    def add(self, line: int) -> None:
        self.count += 1
        self.first = self.first or line


@dataclass
class SglangReader:
    """Line-by-line state of one SGLang log."""

    path: Path
    reading: LogReading = field(default_factory=LogReading)
    stamps: SglangStamps = field(default_factory=SglangStamps)
    stores: dict[str, SampleStore] = field(default_factory=dict)
    requests: dict[str, RequestTimingLog] = field(default_factory=dict)
    events: list[LogEvent] = field(default_factory=list)
    retractions: array = field(default_factory=lambda: array("d"))
    skipped: Tally = field(default_factory=Tally)
    health_checks: Tally = field(default_factory=Tally)
    handoff_prefills: Tally = field(default_factory=Tally)  # a PD prefill node's (PD_PREFILL_FIELDS)
    decode_lines: int = 0
    bad_request_lines: Tally = field(default_factory=Tally)
    last_time: dict[str, tuple[float, int]] = field(default_factory=dict)
    last_stamped: str = ""
    rank_of: dict[str, str] = field(default_factory=dict)  # tags → rank
    retracted: array = field(default_factory=lambda: array("q"))  # requests per retraction
    bench: BenchBlockReader = field(init=False)
    service: ServiceLog = field(init=False)
    stated: StatedSettings = field(default_factory=lambda: StatedSettings((DECODE_LOG_INTERVAL,)))
    traceback_reported: bool = False
    prompts: list[int] = field(default_factory=lambda: [0, 0, 0, 0])  # prefills, with a hit, tokens, cached

    def __post_init__(self) -> None:
        self.bench = BenchBlockReader(self._malformed)
        self.service = ServiceLog(self._traceback)

    @property
    def skip_malformed(self) -> bool:
        return self.reading.skip_malformed

    # ------------------------------------------------------------------ per line

    def context(self, number: int, line: str) -> None:
        """A line read before the log's format is known: only what surrounds the
        statistics (the clock's origin, the bench_serving block, events)."""
        self._note_stamp(line)
        self.stated.read(number, line)
        if not self.bench.read(number, line):
            self._event(number, line)

    def feed(self, number: int, line: str) -> None:
        self._note_stamp(line)
        self.stated.read(number, line)
        if self.bench.read(number, line) or self._event(number, line):
            return
        if "batch" in line:
            stats = STATS_LINE.search(line)
            if stats and "#" in stats.group("fields"):  # else prose mentioning a batch
                self._stats(number, line, stats)
                return
        if "TimeStats(" in line or "Time Stats(" in line:
            self._request(number, line)

    def _note_stamp(self, line: str) -> None:
        if not line.startswith("["):
            return
        self.last_stamped = line
        if not self.stamps.started:
            with contextlib.suppress(BadValue):
                self.stamps.time_of(line)

    def _time_or_none(self, line: str) -> float | None:
        try:
            found = self.stamps.time_of(line)
        except BadValue:
            return None
        return found[0] if found else None

    def _event(self, number: int, line: str) -> bool:
        """Request lines and tracebacks (``service``), SIGTERM, retractions."""
        if self.service.read(number, line, lambda: self._time_or_none(line if line.startswith("[") else self.last_stamped)):
            return True
        if "SIGTERM" in line and "SIGTERM received" in line and len(self.events) < MAX_EVENTS:
            self.events.append(
                LogEvent(self._time_or_none(line), number, "shutdown", "the server was shut down (SIGTERM)")
            )
            return True
        if ("Retract" in line or "out of memory" in line or "#retracted" in line) and any(
            marker in line for marker in RETRACTIONS
        ):
            time_s = self._time_or_none(line)
            if time_s is not None:
                count = RETRACTED.search(line)
                self.retractions.append(time_s)
                self.retracted.append(int(count.group(1)) if count else 0)
            if len(self.events) < MAX_EVENTS:
                self.events.append(LogEvent(time_s, number, "retraction", line.strip()[:200]))
            return True
        return False

    def _traceback(self, line: int, time_s: float | None, exception: str) -> None:
        """A traceback that refused no request: the first one is reported (a shutdown's
        own exception is not an abort)."""
        if self.traceback_reported:
            return
        self.traceback_reported = True
        if self.service.client_ended():
            self.events.append(killed_after_client_event(time_s, line, exception, self.service.client_aborts))
            return
        after_shutdown = any(e.kind == "shutdown" for e in self.events)
        exception = exception[:120] or "no exception line"
        self.events.append(
            LogEvent(
                time_s,
                line,
                "shutdown" if after_shutdown else "traceback",
                f"an exception after the shutdown began ({exception}): a shutdown, not an aborted run"
                if after_shutdown
                else f"the server hit an exception and the run was aborted ({exception})",
            )
        )

    def _malformed(self, number: int, line: str, problem: str) -> None:
        if self.skip_malformed:
            self.skipped.add(number)
            return
        raise TraceError(
            f"{self.path}:{number}: this SGLang scheduler line {problem}: {line.strip()[:160]!r}.",
            "ncuflow phases needs the time and the batch size of every Prefill/Decode batch line, "
            "and takes no value it cannot trust as data.",
            FIX_MALFORMED,
        )

    def _stats(self, number: int, line: str, stats: re.Match[str]) -> None:
        kind = "prefill" if stats.group("kind") == "Prefill" else "decode"
        try:
            stamp = self.stamps.time_of(line)
        except BadValue as bad:
            self._malformed(number, line, f"has an impossible timestamp ({bad.text})")
            return
        fields = scheduler_fields(stats.group("fields"))
        if stamp is None:
            self._malformed(number, line, "has no timestamp in square brackets at the start of the line" + (
                UNTIMED_SGLANG if line.startswith("[gpu") else ""))
            return
        if "#running-req" not in fields:
            self._malformed(number, line, "has no readable '#running-req: N' field")
            return
        self.service.busy(number)
        if kind == "prefill" and "#new-seq" not in fields:
            self._malformed(number, line, "is a Prefill line without a readable '#new-seq: N' field")
            return
        try:
            sample = _sample(kind, stamp[0], number, fields)
        except BadValue as bad:
            self._malformed(number, line, f"has '{bad.key}: {bad.text[:40]}', which is not {bad.expected}")
            return
        if kind == "prefill" and sample.new_seqs == 1 and sample.new_tokens == 1 and not sample.cached_tokens:
            self.health_checks.add(number)
            return
        if kind == "prefill":
            self._count_prompt(sample)
        rank = self.rank_of.get(stamp[1])
        if rank is None:
            rank = self.rank_of[stamp[1]] = _rank_of(stamp[1])
        self._check_order(number, rank, sample.time_s)
        store = self.stores.get(rank)
        if store is None:
            store = self.stores[rank] = SampleStore(before_folding=mark_chunked_prefills)
            share_cap(self.stores)
        store.append(sample)
        if kind == "decode":
            self.decode_lines += 1
        elif any(marker in line for marker in PD_PREFILL_FIELDS):
            self.handoff_prefills.add(number)

    def _count_prompt(self, sample: BatchSample) -> None:
        cached = sample.cached_tokens or 0
        self.prompts[0] += 1
        self.prompts[1] += cached > 0
        self.prompts[2] += (sample.new_tokens or 0) + cached
        self.prompts[3] += cached

    def _request(self, number: int, line: str) -> None:
        opening = find_marker(line)
        if opening < 0:
            return
        try:
            stamp = self.stamps.time_of(line)
            if stamp is None:
                raise BadValue("timestamp", "", "a timestamp in square brackets")
            request = parse_request_line(line, opening)
        except BadValue:
            self.bad_request_lines.add(number)
            return
        rank = _rank_of(stamp[1])
        log = self.requests.get(rank)
        if log is None:
            log = self.requests[rank] = RequestTimingLog()
        log.add(stamp[0], number, request)

    def _check_order(self, number: int, rank: str, time_s: float) -> None:
        previous = self.last_time.get(rank)
        if previous is not None and time_s < previous[0] - 1.0:
            raise TraceError(
                f"{self.path}:{number}: time goes back from line {previous[1]} to this line "
                f"({time_s - previous[0]:+.0f} s) for the same scheduler{' ' + rank if rank else ''}.",
                "The file holds interleaved or concatenated runs from different server processes or "
                "restarts, whose lines cannot be put on one timeline.",
                "Split the file into one log per server run (e.g. at the restart) and pass each file.",
            )
        self.last_time[rank] = (time_s, number)

    # ------------------------------------------------------------------ the result

    def _notes(self) -> list[LogEvent]:
        notes = []
        if self.skipped.count:
            first = self.skipped.first
            notes.append(LogEvent(None, first, "malformed",
                                  f"{self.skipped.count} malformed scheduler line(s) left out (first at line {first})"))
        if self.health_checks.count:
            notes.append(LogEvent(None, self.health_checks.first, "note",
                                  f"{self.health_checks.count} health-check prefill(s) (one request of one "
                                  "token, e.g. /health_generate) set aside, neither runs nor admissions "
                                  f"(first at line {self.health_checks.first})"))
        if self.bad_request_lines.count:
            notes.append(LogEvent(None, self.bad_request_lines.first, "note",
                                  f"{self.bad_request_lines.count} per-request timing line(s) that cannot be "
                                  f"read left out (first at line {self.bad_request_lines.first})"))
        other = sum(log.other_types for log in self.requests.values())
        if other:
            notes.append(LogEvent(None, 0, "note",
                                  f"{other} per-request timing line(s) of PD-disaggregated requests "
                                  "(type prefill/decode) counted but not used"))
        for rank, store in self.stores.items():
            if store.folded or store.dropped_runs or store.run_stride > 1:
                where = f" of {rank}" if rank and len(self.stores) > 1 else ""
                notes.append(LogEvent(None, 0, "note", folding_note(where, store)))
        return notes

    def traces(self) -> tuple[ServerTrace, ...]:
        if not self.decode_lines and self.handoff_prefills.count:
            raise TraceError(
                f"{self.path}:{self.handoff_prefills.first}: the log of the prefill node of a "
                "PD-disaggregated SGLang server (its Prefill lines count the requests it hands to a "
                "decode node), with no Decode line.",
                "A prefill node prefills each prompt and hands the request to a decode node: its log "
                "has no decode batches, so no decode phase and no per-token time.",
                "Pass the decode node's log (its Decode lines carry #prealloc-req / #transfer-req).",
            )
        if not self.stores:
            raise TraceError(
                f"{self.path}: no SGLang 'Prefill batch' or 'Decode batch' lines with a timestamp.",
                "Without scheduler statistics lines there is nothing to split into phases.",
                "Pass the SGLang server log (not the client output), with default logging enabled.",
            )
        arrivals, service = self.service.finish()
        prefills, hits, tokens, cached = self.prompts
        service = replace(service, prefills=prefills, prefills_with_hit=hits, prompt_tokens=tokens,
                          cached_tokens=cached)
        steps = self.stated.resolved(DECODE_LOG_INTERVAL, self.reading)
        disagreement = steps.disagreement()
        given = [LogEvent(None, steps.line or 0, "note", disagreement)] if disagreement else []
        events = tuple(self.events + self._notes() + given)
        multi = len(self.stores) > 1
        requests = self._requests_by_rank(multi)
        return tuple(
            ServerTrace(
                path=str(self.path),
                capabilities=CAPABILITIES,
                rank=(rank or None) if multi else None,
                clock_origin=self.stamps.clock_origin(),
                samples=tuple(mark_chunked_prefills(store.samples)),
                events=events,
                time_resolution_s=self.stamps.resolution_s,
                bench=self.bench.summary(),
                retraction_times_s=self.retractions,
                requests=requests.get(rank),
                arrivals=None if multi else arrivals,
                service=service,
                retracted_requests=self.retracted,
                steps_per_line=steps,
            )
            for rank, store in sorted(self.stores.items(), key=lambda kv: _rank_sort_key(kv[0]))
        )

    def _requests_by_rank(self, multi: bool) -> dict[str, RequestTimings]:
        found = {rank: log.timings() for rank, log in self.requests.items()}
        kept = {rank: timings for rank, timings in found.items() if timings is not None}
        if multi or not kept:
            return kept
        (only,) = self.stores
        if len(kept) == 1:
            return {only: next(iter(kept.values()))}
        order = sorted(
            (t.time_s[i], t.line[i], t, i) for t in kept.values() for i in range(len(t))
        )
        merged = RequestTimings(stride=max(t.stride for t in kept.values()),
                                seen=sum(t.seen for t in kept.values()))
        for _, _, t, i in order:
            for name in ("time_s", "line", "output_tokens", "queue_s", "prefill_s", "decode_s", "forward_s"):
                getattr(merged, name).append(getattr(t, name)[i])
        return {only: merged}


def _count(fields: dict[str, str], key: str) -> int | None:
    text = fields.get(key)
    if text is None:
        return None
    if len(text) < 10 and text.isascii() and text.isdigit():  # the common case, inline
        return int(text)
    return count_value(key, text)


def _sample(kind: str, time_s: float, number: int, fields: dict[str, str]) -> BatchSample:
    accept = optional_rate(fields, "accept len")
    incoming = None
    if "#prealloc-req" in fields or "#transfer-req" in fields:
        incoming = (_count(fields, "#prealloc-req") or 0) + (_count(fields, "#transfer-req") or 0)
    return BatchSample(
        time_s,
        kind,
        count_value("#running-req", fields["#running-req"]),
        number,
        _count(fields, "#queue-req"),
        _count(fields, "#new-seq"),
        _count(fields, "#new-token"),
        optional_rate(fields, "gen throughput (token/s)"),
        None,
        accept if accept else None,
        _count(fields, "#pending-token"),
        incoming,
        0,
        _count(fields, "#cached-token"),
        1,
        optional_rate(fields, "token usage") if "token usage" in fields else optional_rate(fields, "full token usage"),
    )


def _rank_sort_key(rank: str) -> tuple[int, str]:
    digits = re.search(r"\d+", rank)
    return (int(digits.group()) if digits else -1, rank)


CAPABILITIES = Capabilities(
    name="sglang",
    title="SGLang server log",
    server="SGLang",
    run_boundary=RunBoundary.ADMISSION_FROM_EMPTY,
    prefill_lines=True,
    step_counted_lines=True,
    stats_window_s=None,
    admission_evidence="a Prefill line",
    queue=True,
    kv_usage=True,
    preemption_lines=True,
    preemption_word="retraction",
    arrival_lines=True,
    per_request_timings=True,
    batch_field="#running-req",
    throughput_field="gen throughput",
    stats_line="Decode line",
    admission_line="Prefill line",
    queue_field="#queue-req",
    line_interval="decode-log interval",
    batch_cap_option="--max-running-requests",
)
FORMAT = LineFormat(
    name="sglang",
    capabilities=CAPABILITIES,
    claims=claims_sglang,
    reader=SglangReader,
    describe="an SGLang server log ('Prefill batch' / 'Decode batch' lines)",
    help="'Prefill batch' / 'Decode batch' lines (any version, DP ranks split)",
    options=(DECODE_LOG_INTERVAL,),
)
