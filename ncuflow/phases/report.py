"""Assemble per-file results and render them as a text table or JSON-ready dicts. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncuflow.phases.model import (
    AmortizationResult,
    AmortizationRun,
    BenchSummary,
    ConfigGap,
    Distribution,
    PhaseSpan,
    Reconciliation,
    RunAnalysis,
)


@dataclass(frozen=True)
class FileReport:
    path: str
    source_format: str
    config: str
    ranks: tuple[str, ...]
    clock_origin: str
    time_resolution_s: float | None
    runs: tuple[RunAnalysis, ...]
    bench: BenchSummary | None
    bench_reconciliation: Reconciliation | None
    file_notes: tuple[str, ...]


@dataclass(frozen=True)
class PhasesReport:
    files: tuple[FileReport, ...]
    amortization: tuple[AmortizationResult, ...]
    gaps: tuple[ConfigGap, ...]
    decode_log_interval: int


def amortization_runs(files: Sequence[FileReport]) -> list[AmortizationRun]:
    runs = []
    for report in files:
        for run in report.runs:
            rec = run.reconciliation
            if rec is None or run.steady_token_s is None:
                continue
            runs.append(
                AmortizationRun(
                    label=f"{Path(report.path).name} {run.run_label}",
                    config=report.config,
                    output_tokens=rec.output_tokens,
                    reported_tpot_s=rec.reported_tpot_s,
                    steady_token_s=rec.steady_term_s,
                )
            )
    return runs


# ----------------------------------------------------------------------------- text


def _ms(seconds: float | None, digits: int = 2) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.{digits}f} ms"


def _s(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds:.1f} s" if seconds < 100 else f"{seconds:.0f} s"


def _span(span: PhaseSpan | None) -> str:
    return "—" if span is None else _s(span.duration_s)


def _dist_ms(dist: Distribution | None) -> str:
    if dist is None:
        return "—"
    return f"{dist.median * 1000:.2f} ms ({dist.p10 * 1000:.1f}–{dist.p90 * 1000:.1f})"


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
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


def reconciliation_line(rec: Reconciliation) -> str:
    return (
        f"{rec.reported_label} {_ms(rec.reported_tpot_s)} ≈ steady {_ms(rec.steady_term_s)} "
        f"({rec.steady_share:.0%}) + ramp {rec.ramp_s:.2f} s/{rec.output_tokens - 1} = "
        f"{_ms(rec.ramp_term_s)} ({rec.ramp_share:.0%}); unexplained "
        f"{round(rec.residual_share, 2) + 0.0:+.0%}"
    )


def render_text(report: PhasesReport) -> str:
    out: list[str] = []
    for file in report.files:
        header = f"{file.path}  [{file.source_format}"
        if file.ranks:
            header += f", {len(file.ranks)} scheduler(s): {', '.join(file.ranks[:6])}{' …' if len(file.ranks) > 6 else ''}"
        if file.clock_origin:
            header += f"; t=0 at {file.clock_origin}"
        if file.time_resolution_s is not None:
            header += f"; timestamps to {'1 ms' if file.time_resolution_s < 0.5 else f'{file.time_resolution_s:g} s'}"
        out.append(header + "]")
        rows = [
            [
                "run",
                "start",
                "peak",
                "steady batch",
                "ramp",
                "steady",
                "per-token (p10–p90)",
                "drain",
                "TTFT median",
                "harness TPOT",
            ]
        ]
        for run in file.runs:
            rows.append(
                [
                    run.run_label,
                    f"t+{run.start_s:.0f}s" if run.source_format != "bench-json" else "—",
                    str(run.peak_batch) if run.peak_batch else "—",
                    "—" if run.steady_batch is None else f"{run.steady_batch:g}",
                    _span(run.ramp),
                    _span(run.steady),
                    _dist_ms(run.steady_token_s),
                    _span(run.drain) if run.drain is not None or run.steady is None else "not seen",
                    _ms(run.ttft_s.median, 0) if run.ttft_s else "—",
                    _ms(run.harness_tpot_s),
                ]
            )
        out.extend(_table(rows))
        recs = [(r.run_label, r.reconciliation) for r in file.runs if r.reconciliation is not None]
        if recs or file.bench_reconciliation:
            out.append("  reconciliation  TPOT ≈ T_steady + T_ramp/(N − 1):")
            for label, rec in recs:
                assert rec is not None
                out.append(f"    {label}: {reconciliation_line(rec)}")
            if file.bench_reconciliation is not None:
                out.append(
                    f"    whole benchmark: {reconciliation_line(file.bench_reconciliation)} "
                    "(ramp = mean wait of a request for the admissions after its own)"
                )
        methods = [(r.run_label, r.step_method) for r in file.runs if r.step_method]
        if methods:
            out.append("  how per-token time was derived:")
            out.extend(_grouped(methods))
        cannot = [(r.run_label, c) for r in file.runs for c in r.cannot]
        if cannot:
            out.append("  cannot tell:")
            out.extend(_grouped(cannot))
        notes = [(r.run_label, n) for r in file.runs for n in r.notes]
        notes += [("file", n) for n in file.file_notes]
        if notes:
            out.append("  notes:")
            out.extend(_grouped(notes))
        out.append("")
    if report.amortization:
        out.append("amortization test (does TPOT − T_steady shrink as 1/(N − 1)?):")
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
    return "\n".join(out).rstrip() + "\n"


# ----------------------------------------------------------------------------- JSON


def _plain(value: Any) -> Any:
    if isinstance(value, Distribution):
        return {
            "count": value.count,
            "median": value.median,
            "p10": value.p10,
            "p90": value.p90,
            "min": value.minimum,
            "max": value.maximum,
        }
    if isinstance(value, PhaseSpan):
        return {"start_s": value.start_s, "end_s": value.end_s, "duration_s": value.duration_s}
    if isinstance(value, Reconciliation):
        return {
            "reported": value.reported_label,
            "reported_tpot_s": value.reported_tpot_s,
            "steady_term_s": value.steady_term_s,
            "ramp_s": value.ramp_s,
            "ramp_term_s": value.ramp_term_s,
            "output_tokens": value.output_tokens,
            "predicted_tpot_s": value.predicted_tpot_s,
            "steady_share": value.steady_share,
            "ramp_share": value.ramp_share,
            "unexplained_share": value.residual_share,
        }
    return value


def run_to_dict(run: RunAnalysis) -> dict[str, Any]:
    keys = [
        "run_label",
        "run_index",
        "rank",
        "source_format",
        "start_s",
        "end_s",
        "peak_batch",
        "steady_batch",
        "ramp",
        "steady",
        "mixed",
        "drain",
        "admission_span_s",
        "mean_admission_wait_s",
        "requests_admitted",
        "ttft_s",
        "steady_token_s",
        "steady_step_s",
        "step_method",
        "output_tokens",
        "output_tokens_source",
        "harness_tpot_s",
        "mean_request_tpot_s",
        "reconciliation",
    ]
    data = {key: _plain(getattr(run, key)) for key in keys}
    data["cannot"] = list(run.cannot)
    data["notes"] = list(run.notes)
    return data


def report_to_dict(report: PhasesReport) -> dict[str, Any]:
    return {
        "decode_log_interval": report.decode_log_interval,
        "files": [
            {
                "path": f.path,
                "format": f.source_format,
                "config": f.config,
                "ranks": list(f.ranks),
                "clock_origin": f.clock_origin,
                "time_resolution_s": f.time_resolution_s,
                "bench": None if f.bench is None else f.bench.__dict__,
                "bench_reconciliation": _plain(f.bench_reconciliation),
                "notes": list(f.file_notes),
                "runs": [run_to_dict(r) for r in f.runs],
            }
            for f in report.files
        ],
        "amortization": [
            {
                "config": a.config,
                "verdict": a.verdict,
                "explanation": a.explanation,
                "fixed_cost_s": a.fixed_cost_s,
                "per_token_cost_s": a.per_token_cost_s,
                "runs": [
                    {
                        "label": r.label,
                        "output_tokens": r.output_tokens,
                        "reported_tpot_s": r.reported_tpot_s,
                        "steady_token_s": r.steady_token_s,
                    }
                    for r in a.runs
                ],
            }
            for a in report.amortization
        ],
        "gaps": [
            {
                "output_tokens": g.output_tokens,
                "configs": list(g.configs),
                "reported_gap": g.reported_gap,
                "steady_gap": g.steady_gap,
            }
            for g in report.gaps
        ],
    }
