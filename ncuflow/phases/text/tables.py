"""Render a ``PhasesReport`` as text tables. Pure.

A log's words (its path, run labels, rank names, notes) reach the text through ``safe_text``
value by value, before any line is joined: a label's newline, carriage return or U+2028 is
shown escaped in its cell (each cell is escaped before the column widths are measured) and
can start no line of its own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ncuflow.files.safe_text import safe_text
from ncuflow.phases.model import Distribution, PhaseSpan, Reconciliation, RunAnalysis, Segment, Term
from ncuflow.phases.model.results import PhaseKind, SegmentKind, WarmupSplit
from ncuflow.phases.model.session import run_numbers
from ncuflow.phases.report import FileReport, PhasesReport, ServerRow
from ncuflow.phases.selection import RunSelection
from ncuflow.phases.text.session import service_lines, session_lines
from ncuflow.phases.text.shapes import study_lines


def _ms(seconds: float | None, digits: int = 2) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.{digits}f} ms"


def _s(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds:.1f} s" if seconds < 100 else f"{seconds:.0f} s"


def _span(span: PhaseSpan | None, resolution_s: float | None = None) -> str:
    """A span's duration; one shorter than coarse timestamps can tell is "<1 s"."""
    if span is None:
        return "—"
    if resolution_s is not None and resolution_s >= 0.5 and span.duration_s < resolution_s:
        return f"<{resolution_s:g} s"
    return _s(span.duration_s)


def _warmup(span: PhaseSpan | None, split: WarmupSplit | None, resolution_s: float | None) -> str:
    """The warm-up column: what is left of the interval from the ramp's last admission to
    the first Decode line after its own prefill and the ordinary decode steps (the value
    the reconciliation uses); "<1 s" where coarse timestamps cannot tell it."""
    if span is None:
        return "—"
    value = span.duration_s if split is None else split.excess_s
    coarse = resolution_s is not None and resolution_s >= 0.5
    if coarse and resolution_s is not None and (span.duration_s < resolution_s or value < resolution_s):
        return f"<{resolution_s:g} s"
    return _s(value)


def _dist_ms(dist: Distribution | None, flagged: bool = False, headline: float | None = None,
             method: str = "") -> str:
    """median (p10–p90); or the headline value when it is token-weighted (``tw``); ``!``
    where the value is below the lone-request per-token time."""
    if dist is None:
        return "—"
    value = headline if headline is not None else dist.median
    mark = (" tw" if method == "token-weighted" else "") + ("!" if flagged else "")
    return f"{value * 1000:.2f} ms{mark} ({dist.p10 * 1000:.1f}–{dist.p90 * 1000:.1f})"


def _shown(value: object) -> str:
    """A value of the log as one line of plain text: control and invisible characters escaped."""
    return safe_text(value, limit=None)


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    rows = [[_shown(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _grouped(messages: Sequence[tuple[str, str]]) -> list[str]:
    """'message (runs a, b)' once per distinct message, in first-seen order."""
    order: dict[str, list[str]] = {}
    for label, message in messages:
        order.setdefault(message, []).append(label)
    lines = []
    for message, labels in order.items():
        where = (
            labels[0]
            if len(labels) == 1
            else f"{len(labels)} runs: {', '.join(labels[:4])}{', …' if len(labels) > 4 else ''}"
        )
        lines.append(f"    - {message} [{where}]")
    return lines


def _term(term: Term, rec: Reconciliation) -> str:
    share = f"({term.value_s / rec.reported_tpot_s:.0%})"
    if term.token_share is not None and term.per_token_s is not None and term.name != "steady":
        return (
            f"{term.name} {term.token_share:.0%} × {_ms(term.per_token_s)} = "
            f"{_ms(term.value_s)} {share}"
        )
    if term.token_share is not None and term.per_token_s is not None:
        if term.token_share >= 0.999:
            return f"steady {_ms(term.value_s)} {share}"
        return (
            f"steady {term.token_share:.0%} × {_ms(term.per_token_s)} = {_ms(term.value_s)} {share}"
        )
    return f"{term.name} {term.detail} = {_ms(term.value_s)} {share}"


def reconciliation_line(rec: Reconciliation) -> str:
    unexplained = f"unexplained {round(rec.residual_share, 2) + 0.0:+.0%}"
    if rec.terms:
        terms = " + ".join(_term(term, rec) for term in rec.terms)
        return f"{rec.reported_label} {_ms(rec.reported_tpot_s)} ≈ {terms}; {unexplained}"
    return (
        f"{rec.reported_label} {_ms(rec.reported_tpot_s)} ≈ steady {_ms(rec.steady_term_s)} "
        f"({rec.steady_share:.0%}) + ramp {rec.ramp_s:.2f} s/{rec.output_tokens - 1} = "
        f"{_ms(rec.ramp_term_s)} ({rec.ramp_share:.0%}); {unexplained}"
    )


SegmentCell = Callable[[Segment, float | None], str]


def _phase_cell(phase: PhaseKind) -> SegmentCell:
    """A segment's per-token time in one phase (flagged where below the lone-request time)."""

    def cell(s: Segment, _: float | None) -> str:
        return _dist_ms(s.phase(phase).token_s, phase.value in s.below_floor)

    return cell


def _steady_cell(s: Segment, _: float | None) -> str:
    steady = s.phase(PhaseKind.STEADY).token_s if s.phase(PhaseKind.STEADY).span is not None else None
    return _dist_ms(steady, "steady" in s.below_floor, s.headline_token_s, s.headline_method)


# (header, the segment kinds that make the column appear (None: always), the cell)
SEGMENT_COLUMNS: tuple[tuple[str, tuple[SegmentKind, ...] | None, SegmentCell], ...] = (
    ("kind", (SegmentKind.BURST, SegmentKind.OVERLOAD), lambda s, r: str(s.kind)),
    ("level", None, lambda s, r: str(s.level)),
    ("ramp", None, lambda s, r: _span(s.ramp, r)),
    ("warm-up", None, lambda s, r: _warmup(s.warmup, s.warmup_split, r)),
    ("steady", None, lambda s, r: _s(s.phase(PhaseKind.STEADY).seconds) if s.phase(PhaseKind.STEADY).seconds > 0 and s.phase(PhaseKind.STEADY).span is not None else "—"),
    ("steady per-token", None, _steady_cell),
    ("mixed", None, lambda s, r: _s(s.phase(PhaseKind.MIXED).seconds) if s.phase(PhaseKind.MIXED).seconds > 0 else "—"),
    ("mixed per-token", None, _phase_cell(PhaseKind.MIXED)),
    ("burst per-token", (SegmentKind.BURST,), _phase_cell(PhaseKind.BURST)),
    ("overload", (SegmentKind.OVERLOAD,), lambda s, r: _s(s.phase(PhaseKind.OVERLOAD).seconds) if s.phase(PhaseKind.OVERLOAD).seconds > 0 else "—"),
    ("overload per-token", (SegmentKind.OVERLOAD,), _phase_cell(PhaseKind.OVERLOAD)),
    ("drain", None, lambda s, r: _span(s.phase(PhaseKind.DRAIN).span, r)),
    ("drain per-token", None, _phase_cell(PhaseKind.DRAIN)),
    ("accept", None, lambda s, r: "—" if s.accept_len is None else f"{s.accept_len:.2f}"),
)


def _segment_rows(runs: Sequence[RunAnalysis], resolution_s: float | None) -> list[list[str]]:
    kinds = {s.kind for run in runs for s in run.shape.segments}
    columns = [c for c in SEGMENT_COLUMNS if c[1] is None or kinds & set(c[1])]
    rows = [["run", "seg", *(header for header, _, _ in columns)]]
    for run in runs:
        shown = len(run.shape.segments) > 1 or any(
            s.phase(PhaseKind.MIXED).seconds > 0 or s.phase(PhaseKind.DRAIN).token_s is not None or s.phase(PhaseKind.OVERLOAD).seconds > 0 for s in run.shape.segments
        )
        for segment in run.shape.segments if shown else ():
            rows.append(
                [run.identity.run_label, str(segment.index), *(cell(segment, resolution_s) for _, _, cell in columns)]
            )
    return rows


def _server_table(rows: Sequence[ServerRow]) -> list[str]:
    table = [
        ["whole server", "start", "peak (Σ ranks)", "steady batch", "per-token (slowest rank)",
         "rank spread"]
    ]
    for row in rows:
        which = (
            f"Σ {row.ranks} ranks"
            if row.ranks == row.of_ranks
            else f"{row.ranks} of {row.of_ranks} ranks: {', '.join(row.rank_names[:4])}"
        )
        table.append(
            [
                f"run {row.run_index} ({which})",
                "—" if row.start_s is None else f"t+{row.start_s:.0f}s",
                str(row.peak_batch),
                "—" if row.steady_batch is None else f"{row.steady_batch:g}",
                _ms(row.steady_token_s),
                "—" if row.rank_spread is None else f"{row.rank_spread:.1%}",
            ]
        )
    return _table(table)


def _itl_cross_check(file: FileReport) -> str | None:
    bench = file.bench
    medians = [r.timing.headline_token_s for r in file.runs if r.timing.headline_token_s is not None and r.phase(PhaseKind.STEADY).span]
    if bench is None or bench.median_itl_ms is None or not medians:
        return None
    steady = sorted(medians)[len(medians) // 2]
    accept = [r.timing.accept_len for r in file.runs if r.timing.accept_len]
    line = (
        f"    cross-check: bench_serving median ITL {bench.median_itl_ms:.2f} ms beside steady "
        f"per-token {steady * 1000:.2f} ms ({bench.median_itl_ms / 1000 / steady - 1:+.0%})"
    )
    if accept:
        line += " — speculative decoding: one ITL spans a whole accepted chunk (accept len tokens)"
    return line


def render_text(report: PhasesReport, selection: RunSelection | None = None) -> str:
    """The report as text; a log of many runs shows its summary and the runs ``selection``
    picks (by default a few that stand out)."""
    selection = selection or RunSelection()
    out: list[str] = []
    for file in report.files:
        shown = selection.pick(file.runs)
        out.append(_header(file))
        out.extend(_summary_lines(file, selection, run_numbers(shown)))
        if shown:
            out.extend(_file_lines(replace(file, runs=shown)))
            out.extend(study_lines(file.study, {r.identity.run_label for r in shown}))
        out.append("")
    out.extend(_amortization_lines(report))
    return "\n".join(_shown(line) for line in out).rstrip() + "\n"


def _header(file: FileReport) -> str:
    header = f"{file.path}  [{file.source_format}"
    if file.ranks:
        more = " …" if len(file.ranks) > 6 else ""
        header += f", {len(file.ranks)} scheduler(s): {', '.join(file.ranks[:6])}{more}"
    if file.clock_origin:
        header += f"; t=0 at {file.clock_origin}"
    if file.time_resolution_s is not None:
        resolution = "1 ms" if file.time_resolution_s < 0.5 else f"{file.time_resolution_s:g} s"
        header += f"; timestamps to {resolution}"
    return header + "]"


RUN_COLUMNS = [
    "run",
    "start",
    "peak",
    "steady batch",
    "ramp",
    "warm-up",
    "steady",
    "per-token (p10–p90)",
    "drain",
    "TTFT median",
    "harness TPOT",
]


def _main_flagged(run: RunAnalysis) -> bool:
    return any(
        s.index == run.shape.main_segment and "steady" in s.below_floor for s in run.shape.segments
    )


def _ttft_cell(run: RunAnalysis) -> str:
    """The server's own TTFT median, or the bounds the arrival lines give (``≤`` an upper one)."""
    if run.timing.ttft_s is not None:
        return _ms(run.timing.ttft_s.median, 0)
    arrivals = run.server.arrivals
    if arrivals is None or arrivals.ttft_high_s is None:
        return "—"
    high = arrivals.ttft_high_s.median
    low = arrivals.ttft_low_s.median if arrivals.ttft_low_s is not None else None
    scale, unit = (1000, "ms") if high < 10 else (1, "s")
    digits = 0 if unit == "ms" else 1
    if low is None:
        return f"≤{high * scale:.{digits}f} {unit}"
    return f"{low * scale:.{digits}f}–{high * scale:.{digits}f} {unit}"


def _overload_cell(run: RunAnalysis) -> str:
    """The run's overload stretches: their time and median per-token time."""
    if run.phase(PhaseKind.OVERLOAD).seconds <= 0:
        return "—"
    per_token = run.phase(PhaseKind.OVERLOAD).token_s
    return _s(run.phase(PhaseKind.OVERLOAD).seconds) + (f", {_ms(per_token.median)}" if per_token is not None else "")


def _run_row(run: RunAnalysis, resolution_s: float | None, with_segment: bool, with_overload: bool) -> list[str]:
    row = [
        run.identity.run_label,
        "—" if run.shape.start_s is None else f"t+{run.shape.start_s:.0f}s",
        str(run.shape.peak_batch) if run.shape.peak_batch else "—",
        "—" if run.shape.steady_batch is None else f"{run.shape.steady_batch:g}",
        _span(run.phase(PhaseKind.RAMP).span, resolution_s),
        _warmup(run.shape.warmup, run.shape.warmup_split, resolution_s),
        _span(run.phase(PhaseKind.STEADY).span, resolution_s),
        _dist_ms(run.phase(PhaseKind.STEADY).token_s, _main_flagged(run), run.timing.headline_token_s, run.timing.headline_method),
        "not seen" if any(c.startswith("drain not visible") for c in run.findings.cannot) else _span(run.phase(PhaseKind.DRAIN).span, resolution_s),
        _ttft_cell(run),
        _ms(run.tokens.harness_tpot_s),
    ]
    if with_overload:
        row.insert(-3, _overload_cell(run))
    if with_segment:
        main = f"{run.shape.main_segment} of {len(run.shape.segments)}" if run.shape.main_segment and len(run.shape.segments) > 1 else ""
        row.insert(1, main)
    return row


def _legend(file: FileReport) -> list[str]:
    lines = []
    if any(r.timing.headline_method == "token-weighted" for r in file.runs) or any(
        s.headline_method == "token-weighted" for r in file.runs for s in r.shape.segments
    ):
        lines.append(
            "  tw: token-weighted per-token time (speculative decoding whose acceptance length "
            "spreads; the median of the lines would weigh a low-acceptance interval like a high one)"
        )
    floors = sorted({r.timing.lone_request_token_s for r in file.runs if r.timing.lone_request_token_s})
    if any(s.below_floor for r in file.runs for s in r.shape.segments) and floors:
        lines.append(
            f"  !: below the lone-request per-token time ({floors[0] * 1000:.2f} ms): the batch "
            "shrank inside those statistics intervals (window-end bias); a lower bound"
        )
    return lines


def _summary_lines(file: FileReport, selection: RunSelection, shown: int) -> list[str]:
    """A session's summary (or, for a log of a few runs, what its server refused)."""
    session = file.session
    if session is None:
        return []
    if selection.is_session(file.runs):
        return session_lines(session, shown, selection.words())
    service = session.service
    if service.rejections or service.errors or any(status >= 400 for status, _ in service.http_status):
        return service_lines(service)
    return []


def _file_lines(file: FileReport) -> list[str]:
    """The file's tables and notes, below its header (``render_text`` writes that)."""
    out: list[str] = []
    resolution = file.time_resolution_s
    with_segment = any(len(r.shape.segments) > 1 for r in file.runs)
    with_overload = any(r.phase(PhaseKind.OVERLOAD).seconds > 0 for r in file.runs)
    columns = list(RUN_COLUMNS)
    if with_overload:
        columns.insert(-3, "overload (per-token)")
    if with_segment:
        columns.insert(1, "seg")
    out.extend(_table([columns] + [_run_row(run, resolution, with_segment, with_overload) for run in file.runs]))
    if file.server_rows:
        out.extend(_server_table(file.server_rows))
    segment_rows = _segment_rows(file.runs, resolution)
    if len(segment_rows) > 1:
        out.append(
            f"  segments (one per {file.capabilities.batch_field if file.capabilities else 'batch'} plateau"
            + (", burst or overload stretch" if with_overload else " or burst")
            + "; steady/mixed = time without/with admissions):"
        )
        out.extend(_table(segment_rows, indent="    "))
    out.extend(_legend(file))
    out.extend(_reconciliation_lines(file))
    sections = (
        (
            "how per-token time was derived",
            [(r.identity.run_label, r.timing.step_method) for r in file.runs if r.timing.step_method],
        ),
        ("cannot tell", [(r.identity.run_label, c) for r in file.runs for c in r.findings.cannot]),
        (
            "notes",
            [(r.identity.run_label, n) for r in file.runs for n in r.findings.notes]
            + [("file", n) for n in file.file_notes],
        ),
    )
    for title, messages in sections:
        if messages:
            out.append(f"  {title}:")
            out.extend(_grouped(messages))
    return out


def _reconciliation_lines(file: FileReport) -> list[str]:
    recs = [(r.identity.run_label, r.tokens.reconciliation) for r in file.runs if r.tokens.reconciliation is not None]
    recs += [
        (f"{r.identity.run_label} seg {s.index}", s.reconciliation)
        for r in file.runs
        for s in r.shape.segments
        if s.reconciliation is not None
    ]
    if not recs and file.bench_reconciliation is None:
        return []
    out = [
        "  reconciliation  TPOT ≈ Σ share × per-token time (steady, mixed, burst, overload, drain)"
        " + (ramp wait + last prefill + warm-up)/(N − 1):"
    ]
    for label, rec in recs:
        assert rec is not None
        out.append(f"    {label}: {reconciliation_line(rec)}")
    if file.bench_reconciliation is not None:
        requests = file.bench_reconciliation.requests
        out.append(
            f"    whole benchmark: {reconciliation_line(file.bench_reconciliation)} "
            f"(shares of output tokens; waits spread over all {requests} requests)"
        )
    itl = _itl_cross_check(file)
    if itl is not None:
        out.append(itl)
    return out


def _amortization_lines(report: PhasesReport) -> list[str]:
    if not report.amortization:
        return []
    out = ["amortization test (does TPOT − T_steady shrink as 1/(N − 1)?):"]
    for result in report.amortization:
        lengths = ", ".join(
            f"N={r.output_tokens}: {_ms(r.reported_tpot_s)} vs steady {_ms(r.steady_token_s)}"
            for r in result.runs
        )
        out.append(f"  {result.config}: {result.verdict} — {result.explanation}")
        out.append(f"    {lengths}")
    for gap in report.gaps:
        out.append(
            f"  N={gap.output_tokens}: {gap.configs[0]} vs {gap.configs[1]}: reported TPOT gap "
            f"{gap.reported_gap:+.1%}, steady decode gap {gap.steady_gap:+.1%}"
        )
    return out
