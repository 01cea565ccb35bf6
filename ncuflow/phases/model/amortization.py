"""The amortization test: does TPOT − T_steady shrink as 1/(N − 1)?"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class AmortizationRun:
    label: str
    config: str
    output_tokens: int
    reported_tpot_s: float
    steady_token_s: float

    @property
    def excess_s(self) -> float:
        return self.reported_tpot_s - self.steady_token_s


@dataclass(frozen=True)
class AmortizationResult:
    config: str
    runs: tuple[AmortizationRun, ...]
    verdict: str  # "fixed", "per-token", "none", "inconclusive"
    fixed_cost_s: float | None
    per_token_cost_s: float | None
    fixed_rms_rel: float | None
    per_token_rms_rel: float | None
    explanation: str


@dataclass(frozen=True)
class ConfigGap:
    output_tokens: int
    configs: tuple[str, str]
    reported_gap: float
    steady_gap: float


def amortization_test(
    runs: Sequence[AmortizationRun], *, tolerance: float = 0.25
) -> tuple[AmortizationResult, ...]:
    """Per configuration: does TPOT − T_steady shrink as 1/(N − 1) (a fixed cost, such as an
    admission ramp, amortized over more tokens) or stay constant (a recurring per-token cost)?

    Fits both one-parameter models by least squares and keeps the one with the smaller
    relative RMS residual; "inconclusive" when both fit about equally (within ``tolerance``)
    or when fewer than two output lengths are present; "none" when the excess is < 1 % of
    the steady time everywhere.
    """
    by_config: dict[str, list[AmortizationRun]] = {}
    for run in runs:
        by_config.setdefault(run.config, []).append(run)
    return tuple(
        _config_result(config, sorted(group, key=lambda r: r.output_tokens), tolerance)
        for config, group in by_config.items()
    )


@dataclass(frozen=True)
class _ModelFit:
    """Both one-parameter models of the excess, with their relative RMS residuals."""

    fixed_s: float  # excess = fixed_s / (N − 1)
    per_token_s: float  # excess = per_token_s
    fixed_rms_rel: float
    per_token_rms_rel: float


def _config_result(
    config: str, group: Sequence[AmortizationRun], tolerance: float
) -> AmortizationResult:
    """The verdict for one configuration's runs (sorted by output length)."""
    if len({r.output_tokens for r in group}) < 2:
        return _undecided(
            config, group, "inconclusive", "needs runs with at least two different output lengths"
        )
    if all(abs(r.excess_s) < 0.01 * r.steady_token_s for r in group):
        return _undecided(
            config, group, "none", "reported TPOT equals steady decode at every output length"
        )
    fit = _fit_models(group)
    verdict, text = _verdict(fit, tolerance)
    return AmortizationResult(
        config,
        tuple(group),
        verdict,
        fit.fixed_s,
        fit.per_token_s,
        fit.fixed_rms_rel,
        fit.per_token_rms_rel,
        text,
    )


def _undecided(
    config: str, group: Sequence[AmortizationRun], verdict: str, explanation: str
) -> AmortizationResult:
    """A result with no fit: too few output lengths, or no excess to explain."""
    return AmortizationResult(config, tuple(group), verdict, None, None, None, None, explanation)


def _fit_models(group: Sequence[AmortizationRun]) -> _ModelFit:
    """Least-squares fits of a fixed cost (∝ 1/(N − 1)) and of a per-token cost (constant)."""
    inv = [1.0 / (r.output_tokens - 1) for r in group]
    excess = [r.excess_s for r in group]
    fixed = sum(x * e for x, e in zip(inv, excess, strict=True)) / sum(x * x for x in inv)
    per_token = statistics.fmean(excess)
    scale = statistics.fmean(abs(e) for e in excess) or 1.0
    rms_fixed = (
        math.sqrt(statistics.fmean((e - fixed * x) ** 2 for x, e in zip(inv, excess, strict=True)))
        / scale
    )
    rms_token = math.sqrt(statistics.fmean((e - per_token) ** 2 for e in excess)) / scale
    return _ModelFit(fixed, per_token, rms_fixed, rms_token)


def _verdict(fit: _ModelFit, tolerance: float) -> tuple[str, str]:
    """(verdict, explanation): the model that fits clearly better, or "inconclusive"."""
    if fit.fixed_rms_rel < fit.per_token_rms_rel * (1 - tolerance) and fit.fixed_s > 0:
        return "fixed", (
            f"the excess over steady decode shrinks as 1/(N − 1): a fixed cost of "
            f"{fit.fixed_s:.2f} s per run amortized over the output tokens (an admission ramp), "
            "not a per-token cost"
        )
    if fit.per_token_rms_rel < fit.fixed_rms_rel * (1 - tolerance):
        return "per-token", (
            f"the excess over steady decode stays ≈ {fit.per_token_s * 1000:.2f} ms per token "
            "whatever the output length: a recurring per-token cost"
        )
    return "inconclusive", "both a fixed and a per-token cost fit the runs about equally well"


def config_gaps(runs: Sequence[AmortizationRun]) -> tuple[ConfigGap, ...]:
    """Relative gap between two configurations at each common output length."""
    configs = sorted({r.config for r in runs})
    if len(configs) != 2:
        return ()
    gaps = []
    lengths = sorted({r.output_tokens for r in runs})
    for n in lengths:
        pair = [[r for r in runs if r.config == c and r.output_tokens == n] for c in configs]
        if not pair[0] or not pair[1]:
            continue
        a, b = pair[0][0], pair[1][0]
        low, high = (a, b) if a.reported_tpot_s <= b.reported_tpot_s else (b, a)
        gaps.append(
            ConfigGap(
                output_tokens=n,
                configs=(high.config, low.config),
                reported_gap=high.reported_tpot_s / low.reported_tpot_s - 1,
                steady_gap=high.steady_token_s / low.steady_token_s - 1,
            )
        )
    return tuple(gaps)
