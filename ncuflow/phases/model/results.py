"""What the analysis produces: phases, reconciliation and one ``RunAnalysis`` per run."""

from __future__ import annotations

from dataclasses import dataclass, field

from ncuflow.phases.model.stats import Distribution


@dataclass(frozen=True)
class PhaseSpan:
    name: str  # "ramp", "steady", "mixed", "drain"
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Reconciliation:
    """TPOT_reported ≈ T_steady + T_ramp / (N_output − 1), and what each term explains."""

    reported_label: str
    reported_tpot_s: float
    steady_term_s: float
    ramp_term_s: float
    ramp_s: float
    output_tokens: int

    @property
    def predicted_tpot_s(self) -> float:
        return self.steady_term_s + self.ramp_term_s

    @property
    def steady_share(self) -> float:
        return self.steady_term_s / self.reported_tpot_s

    @property
    def ramp_share(self) -> float:
        return self.ramp_term_s / self.reported_tpot_s

    @property
    def residual_share(self) -> float:
        return 1.0 - self.steady_share - self.ramp_share


@dataclass(frozen=True)
class TimelinePoint:
    time_s: float
    kind: str
    batch: int
    queued: int | None
    per_token_s: float | None  # per-token time over the interval ending here, if known


@dataclass(frozen=True)
class RunAnalysis:
    path: str
    source_format: str
    run_index: int
    run_label: str
    rank: str | None
    clock_origin: str
    start_s: float
    end_s: float
    peak_batch: int
    steady_batch: float | None
    ramp: PhaseSpan | None
    steady: PhaseSpan | None
    drain: PhaseSpan | None
    admission_span_s: float | None
    mean_admission_wait_s: float | None  # mean over admitted requests of (last admission − own)
    requests_admitted: int | None
    ttft_s: Distribution | None
    steady_token_s: Distribution | None
    steady_step_s: float | None
    step_method: str
    output_tokens: int | None
    output_tokens_source: str
    harness_tpot_s: float | None
    mean_request_tpot_s: float | None
    reconciliation: Reconciliation | None
    cannot: tuple[str, ...]
    notes: tuple[str, ...]
    timeline: tuple[TimelinePoint, ...] = field(default=(), repr=False)
    mixed: PhaseSpan | None = None  # batch at steady size but with admissions (closed loop)
    token_gaps: tuple[tuple[float, float], ...] = field(default=(), repr=False)  # (time, s/token)
    itl_by_position: tuple[float, ...] = field(default=(), repr=False)  # median ITL per position
    retraction_times_s: tuple[float, ...] = ()
    ttft_values_s: tuple[float, ...] = field(default=(), repr=False)
    abort_time_s: float | None = None  # a traceback ended the run here
