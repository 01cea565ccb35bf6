"""The summary of a log of many runs, and what its server refused, as text. Pure."""

from __future__ import annotations

from ncuflow.files.safe_text import safe_text
from ncuflow.phases.model.session import SessionSummary
from ncuflow.phases.model.stats import Distribution
from ncuflow.phases.model.traces import ServiceCounts


def _ms(dist: Distribution) -> str:
    return f"{dist.median * 1000:.2f} ms (p10 {dist.p10 * 1000:.1f} – p90 {dist.p90 * 1000:.1f})"


def _duration(seconds: float) -> str:
    if seconds >= 7200:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def service_lines(service: ServiceCounts, indent: str = "  ") -> list[str]:
    """Refusals by cause, HTTP statuses of the generation endpoints, errors."""
    lines = []
    for rejection in service.rejections:
        lines.append(
            f"{indent}refused: {rejection.count} request(s), {rejection.cause} (first at line "
            f"{rejection.first_line}: '{safe_text(rejection.example, limit=120)}'): a refusal (HTTP 400), "
            "not an error of the server"
        )
    explained = sum(r.count for r in service.rejections)
    bad = sum(count for status, count in service.http_status if status == 400)
    if bad > explained:
        lines.append(
            f"{indent}refused: {bad - explained} request(s) with HTTP 400 whose cause the log does not say"
        )
    if service.http_status:
        statuses = ", ".join(f"{status} ×{count:,}" for status, count in service.http_status)
        lines.append(f"{indent}HTTP statuses of the generation requests (access lines): {statuses}")
    if service.errors:
        lines.append(
            f"{indent}errors: {service.errors} traceback(s) that refused no request (first at line "
            f"{service.first_error_line})"
        )
    return lines


def _cache_line(service: ServiceCounts) -> str | None:
    if service.prefills and service.prompt_tokens:
        share = service.cached_tokens / service.prompt_tokens
        return (
            f"    prefix cache: hit on {service.prefills_with_hit:,} of {service.prefills:,} prefills (Prefill lines); "
            f"{service.cached_tokens:,.0f} of {service.prompt_tokens:,.0f} prompt tokens ({share:.1%}) served from it"
        )
    if service.cache_hit_rate is not None:
        return (
            f"    prefix cache: hit rate {service.cache_hit_rate:.1%} (the server's last statistics line), "
            f"≈{service.prompt_tokens:,.0f} prompt tokens computed"
        )
    return None


def session_lines(session: SessionSummary, shown: int, picked_by: str) -> list[str]:
    """The session's summary, before its runs."""
    span = (session.end_s or 0.0) - (session.start_s or 0.0)
    requests = (
        f", {session.requests:,} requests ({session.requests_source})" if session.requests is not None else ""
    )
    lines = [f"  session: {session.runs:,} runs over {_duration(span)} (busy {_duration(session.busy_s)}){requests}"]
    peak = session.peak_batch
    lines.append(
        f"    runs: {session.runs_with_steady:,} with a steady phase, {session.runs_with_overload:,} with "
        f"overload, {session.runs_aborted:,} cut short by a traceback"
        + (f"; peak batch median {peak.median:g} (max {peak.maximum:g})" if peak is not None else "")
    )
    if session.per_token_s is not None:
        levels = "; ".join(
            f"{level.batch}: {level.per_token_s.median * 1000:.2f} ms ({level.intervals:,})" for level in session.levels
        )
        lines.append(
            f"    per-token over the session: {_ms(session.per_token_s)} over {session.per_token_s.count:,} "
            f"statistics intervals" + (f"; by batch size (intervals): {levels}" if levels else "")
        )
    if session.steady_token_s is not None:
        lines.append(f"    steady per-token of the runs: {_ms(session.steady_token_s)} over {session.steady_token_s.count:,} runs")
    cache = _cache_line(session.service)
    if cache is not None:
        lines.append(cache)
    lines.extend(service_lines(session.service, indent="    "))
    if shown < session.runs:
        lines.append(
            f"    runs in detail below: {shown} of {session.runs:,}{picked_by}; --runs all for every run, "
            "--runs 3,7-9 for some, --runs none for this summary alone"
        )
    return lines
