"""Read SGLang server logs: ``Prefill batch`` / ``Decode batch`` scheduler lines.

Handles ``[date time]``, ``[date time TP0]`` and ``[date time DPk TPk EPk]`` prefixes, with or
without fractional seconds, ``Decode batch.`` and ``Decode batch,`` punctuation, the
speculative (``accept len``) and hybrid-model (``#full token``) fields, retraction lines,
tracebacks, the server's per-request timing lines (``parse.reqstats``), and the
``bench_serving`` command line and result block when the client output is interleaved in
the same file. Lines are read one at a time (``SglangReader.feed``), so a log of any length
is read in bounded memory (``parse.compact``).

A Prefill line of one 1-token request and no cached token (``#new-seq: 1, #new-token: 1``) is
a health check (SGLang's ``/health_generate``): it is set aside and counted, neither a run nor
an admission.
"""

from __future__ import annotations

import contextlib
import re
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ncuflow.phases import TraceError
from ncuflow.phases.model.traces import BatchSample, LogEvent, RequestTimings, ServerTrace
from ncuflow.phases.parse.bench_block import bench_summary
from ncuflow.phases.parse.compact import SampleStore, share_cap
from ncuflow.phases.parse.reqstats import RequestTimingLog, find_marker, parse_request_line
from ncuflow.phases.parse.values import (
    BadValue,
    LogClock,
    count_value,
    optional_rate,
)

TIMESTAMP = re.compile(
    r"^\[(?P<date>\d{4}-\d{2}-\d{2})[ T](?P<time>\d{2}:\d{2}:\d{2})(?:[.,](?P<frac>\d{1,6}))?"
    r"(?P<tags>(?:\s+[A-Z]+\d+)*)\s*\]"
)
STATS_LINE = re.compile(
    r"\b(?P<kind>Prefill|Decode) batch\b(?:\s*\[[^\]]*\])?[.,:]?\s*(?P<fields>.*)$"
)
RETRACTIONS = ("Decode out of memory happened", "Retract requests", "#retracted_reqs")
# the fields ncuflow reads, each at the start of a comma-separated field: one linear scan
USED_FIELDS = re.compile(
    r"(?:^|,)\s*(#running-req|#queue-req|#new-seq|#new-token|#cached-token|#pending-token|"
    r"#transfer-req|#prealloc-req|gen throughput \(token/s\)|accept len)\s*:\s*([^\s,%]*)"
)
BENCH_COMMAND = re.compile(r"(?:^|\s)(?:python3? -m )?sglang\.bench_serving\b")
RESULT_FIELD = re.compile(
    r"^(?P<key>[A-Za-z][A-Za-z0-9 ()/.\-]*?):\s+(?P<value>-?\d+(?:\.\d+)?)\s*$"
)
EXCEPTION = re.compile(r"^[A-Za-z_.]+(Error|Exception)\b")
MAX_EVENTS = 1000
FIX_MALFORMED = (
    "Use the server's own log as written (SGLang prints '[YYYY-MM-DD HH:MM:SS] Decode "
    "batch, #running-req: …'), or pass --skip-malformed to leave such lines out."
)


def looks_like_sglang(lines: Iterable[str]) -> bool:
    return any(claims_sglang(line) for line in lines)


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
    path: Path, lines: Iterable[str], *, skip_malformed: bool = False
) -> tuple[ServerTrace, ...]:
    """One ``ServerTrace`` per scheduler (DP rank) found in the log (lines numbered from 1)."""
    reader = SglangReader(path, skip_malformed)
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
    skip_malformed: bool = False
    clock: LogClock = field(default_factory=LogClock)
    any_fraction: bool = False
    stores: dict[str, SampleStore] = field(default_factory=dict)
    requests: dict[str, RequestTimingLog] = field(default_factory=dict)
    events: list[LogEvent] = field(default_factory=list)
    retractions: array = field(default_factory=lambda: array("d"))
    skipped: Tally = field(default_factory=Tally)
    health_checks: Tally = field(default_factory=Tally)
    bad_request_lines: Tally = field(default_factory=Tally)
    last_time: dict[str, tuple[float, int]] = field(default_factory=dict)
    last_stamped: str = ""
    seconds_of: dict[str, float] = field(default_factory=dict)  # "date time" → seconds
    rank_of: dict[str, str] = field(default_factory=dict)  # tags → rank
    command_args: dict[str, str] = field(default_factory=dict)
    command_line: int = 0
    result: dict[str, float] = field(default_factory=dict)
    result_line: int = 0
    in_result: bool = False
    traceback_line: int | None = None
    traceback_time: float | None = None

    # ------------------------------------------------------------------ per line

    def context(self, number: int, line: str) -> None:
        """A line read before the log's format is known: only what surrounds the
        statistics (the clock's origin, the bench_serving block, events)."""
        self._note_stamp(line)
        if not self._bench(number, line):
            self._event(number, line)

    def feed(self, number: int, line: str) -> None:
        self._note_stamp(line)
        if self._bench(number, line) or self._event(number, line):
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
        if self.clock.origin_s is None:
            with contextlib.suppress(BadValue):
                self._time_of(line)

    def _time_of(self, line: str) -> tuple[float, str] | None:
        """(seconds since t = 0, rank tags) of a line's timestamp; raises ``BadValue``."""
        stamp = TIMESTAMP.match(line)
        if not stamp:
            return None
        date, time, frac = stamp.group("date", "time", "frac")
        key = date + time
        whole = self.seconds_of.get(key)
        if whole is None:
            if len(self.seconds_of) > 4096:
                self.seconds_of.clear()
            whole = self.seconds_of[key] = self.clock.seconds(date, time, None)
        if frac:
            self.any_fraction = True
            return whole + float("0." + frac), stamp.group("tags") or ""
        return whole, stamp.group("tags") or ""

    def _time_or_none(self, line: str) -> float | None:
        try:
            found = self._time_of(line)
        except BadValue:
            return None
        return found[0] if found else None

    def _bench(self, number: int, line: str) -> bool:
        """The bench_serving command line and result block, when interleaved in the log."""
        if "bench_serving" in line and "--" in line and BENCH_COMMAND.search(line):
            self.command_line = number
            tokens = line.split()
            for i, token in enumerate(tokens):
                if (
                    token.startswith("--")
                    and i + 1 < len(tokens)
                    and not tokens[i + 1].startswith("--")
                ):
                    self.command_args[token[2:]] = tokens[i + 1]
            return True
        if "Serving Benchmark Result" in line:
            self.in_result, self.result_line = True, number
            return True
        if self.in_result:
            found = RESULT_FIELD.match(line.strip())
            if found:
                value = float(found.group("value"))
                if abs(value) > 1e12:
                    self._malformed(number, line, f"has a value out of range ({found.group('value')[:30]})")
                else:
                    self.result[found.group("key").strip()] = value
            elif line.startswith("=====") and self.result:
                self.in_result = False
            return True
        return False

    def _event(self, number: int, line: str) -> bool:
        """Tracebacks (a shutdown's own exception is not an abort), SIGTERM, retractions."""
        if self.traceback_line is None and "Traceback" in line and "Traceback (most recent call last)" in line:
            self.traceback_line = number
            self.traceback_time = self._time_or_none(line if line.startswith("[") else self.last_stamped)
            return True
        if self.traceback_line is not None and self.traceback_line >= 0 and EXCEPTION.match(line):
            after_shutdown = any(e.kind == "shutdown" for e in self.events)
            exception = line.strip()[:120]
            self.events.append(
                LogEvent(
                    self.traceback_time,
                    self.traceback_line,
                    "shutdown" if after_shutdown else "traceback",
                    f"an exception after the shutdown began ({exception}): a shutdown, not an "
                    "aborted run"
                    if after_shutdown
                    else f"the server hit an exception and the run was aborted ({exception})",
                )
            )
            self.traceback_line = -1  # reported once
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
                self.retractions.append(time_s)
            if len(self.events) < MAX_EVENTS:
                self.events.append(LogEvent(time_s, number, "retraction", line.strip()[:200]))
            return True
        return False

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
            stamp = self._time_of(line)
        except BadValue as bad:
            self._malformed(number, line, f"has an impossible timestamp ({bad.text})")
            return
        fields = scheduler_fields(stats.group("fields"))
        if stamp is None:
            self._malformed(number, line, "has no timestamp in square brackets at the start of the line")
            return
        if "#running-req" not in fields:
            self._malformed(number, line, "has no readable '#running-req: N' field")
            return
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
        rank = self.rank_of.get(stamp[1])
        if rank is None:
            rank = self.rank_of[stamp[1]] = _rank_of(stamp[1])
        self._check_order(number, rank, sample.time_s)
        store = self.stores.get(rank)
        if store is None:
            store = self.stores[rank] = SampleStore(before_folding=mark_chunked_prefills)
            share_cap(self.stores)
        store.append(sample)

    def _request(self, number: int, line: str) -> None:
        opening = find_marker(line)
        if opening < 0:
            return
        try:
            stamp = self._time_of(line)
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
        if not self.stores:
            raise TraceError(
                f"{self.path}: no SGLang 'Prefill batch' or 'Decode batch' lines with a timestamp.",
                "Without scheduler statistics lines there is nothing to split into phases.",
                "Pass the SGLang server log (not the client output), with default logging enabled.",
            )
        bench = bench_summary(self.command_args, self.command_line, self.result, self.result_line)
        events = tuple(self.events + self._notes())
        multi = len(self.stores) > 1
        requests = self._requests_by_rank(multi)
        return tuple(
            ServerTrace(
                path=str(self.path),
                engine="sglang",
                rank=(rank or None) if multi else None,
                clock_origin=self.clock.origin_text,
                samples=tuple(mark_chunked_prefills(store.samples)),
                events=events,
                time_resolution_s=0.001 if self.any_fraction else 1.0,
                bench=bench,
                retraction_times_s=self.retractions,
                requests=requests.get(rank),
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


def folding_note(where: str, store: SampleStore) -> str:
    parts = []
    if store.folded:
        parts.append(
            f"{store.folded:,} statistics line(s){where} were folded into their neighbours "
            "(equal-batch Decode lines into the next one, consecutive Prefill lines into one "
            "admission); token counts and token-weighted per-token times stay exact, p10–p90 "
            "are over the longer intervals"
        )
    if store.dropped_runs:
        parts.append(f"{store.dropped_runs:,} run(s) of a single Prefill line and nothing else were left out")
    if store.run_stride > 1:
        parts.append(
            f"the log holds {store.runs_seen:,} runs{where}: only every {store.run_stride}th was "
            "analysed (runs are numbered as kept)"
        )
    return "the log is long, and kept in bounded memory: " + "; ".join(parts)


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
    )


def mark_chunked_prefills(samples: Sequence[BatchSample]) -> list[BatchSample]:
    """One scheduler's lines, each Prefill line whose last request is cut off marked.

    SGLang prefills a prompt longer than what is left of the batch's token budget over
    several batches, and counts that request in ``#new-seq`` on each of them: summed,
    ``#new-seq`` counts it once per chunk (seen on the DP-attention log: 80 admissions on
    a rank that holds 72 requests). Where the log has ``#pending-token`` (newer SGLang),
    a Prefill line with pending tokens is cut off. Otherwise a line is taken to be cut off
    when it carries the scheduler's largest ``#new-token`` (the budget; seen on at least
    two lines), the very next line is a Prefill line (the cut request goes on at once),
    and that line shows one request fewer joined the running batch than ``#new-seq``
    said. Anything else is left as logged (a mark, once made, stays).
    """
    prefill_tokens = [
        s.new_tokens for s in samples if s.kind == "prefill" and s.new_tokens and s.lines == 1
    ]
    budget = max(prefill_tokens, default=None)
    if budget is not None and prefill_tokens.count(budget) < 2:
        budget = None
    marked = list(samples)
    for index, sample in enumerate(marked):
        if sample.kind != "prefill" or not sample.new_seqs or sample.unfinished_seqs or sample.lines > 1:
            continue
        following = marked[index + 1] if index + 1 < len(marked) else None
        if sample.pending_tokens is not None:
            cut = sample.pending_tokens > 0
        else:
            cut = (
                following is not None
                and following.kind == "prefill"
                and following.lines == 1
                and sample.new_tokens == budget
                and following.running - sample.running == sample.new_seqs - 1
            )
        if cut:
            marked[index] = sample._replace(unfinished_seqs=1)
    return marked


def _rank_sort_key(rank: str) -> tuple[int, str]:
    digits = re.search(r"\d+", rank)
    return (int(digits.group()) if digits else -1, rank)
