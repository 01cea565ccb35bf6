"""What the analysis produces: phases, segments, reconciliation and one ``RunAnalysis`` per run.

``assemble_run`` is the one place a ``RunAnalysis`` is built: each analyser (server logs,
per-request traces, bench JSON) hands it the parts it knows, and every part it does not
know stays ``None`` ("missing is missing, never 0").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import TypeVar

from ncuflow.phases.model.stats import Distribution


class SegmentKind(StrEnum):
    """What a segment is (its JSON ``kind`` is the value): a level the batch held, a peak
    it did not hold, or a stretch the KV cache set (requests waiting at a full cache)."""

    PLATEAU = "plateau"
    BURST = "burst"
    OVERLOAD = "overload"


@dataclass(frozen=True)
class PhaseSpan:
    name: str  # "ramp", "warm-up", "steady", "mixed", "drain", "plateau"
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Term:
    """One term of a reconciliation: its contribution to the TPOT and how it was derived.

    Phase terms (steady, mixed, drain) are ``token_share × per_token_s``: the share of the
    output tokens generated in that phase times the phase's per-token time. Wait terms
    (ramp, warm-up) are a time every request waits, spread over its N − 1 tokens.
    """

    name: str
    value_s: float
    detail: str
    token_share: float | None = None
    per_token_s: float | None = None


@dataclass(frozen=True)
class Reconciliation:
    """TPOT_reported ≈ Σ terms, and what each term explains.

    Without ``terms`` (the classic single-generation form) the terms are the steady
    per-token time and ``T_ramp / (N − 1)``.
    """

    reported_label: str
    reported_tpot_s: float
    steady_term_s: float
    ramp_term_s: float
    ramp_s: float
    output_tokens: int
    terms: tuple[Term, ...] = ()
    requests: int | None = None  # the requests the reported mean is over, when it is a mean

    @property
    def predicted_tpot_s(self) -> float:
        if self.terms:
            return sum(term.value_s for term in self.terms)
        return self.steady_term_s + self.ramp_term_s

    @property
    def steady_share(self) -> float:
        return self.steady_term_s / self.reported_tpot_s

    @property
    def ramp_share(self) -> float:
        return self.ramp_term_s / self.reported_tpot_s

    @property
    def residual_share(self) -> float:
        return 1.0 - self.predicted_tpot_s / self.reported_tpot_s


@dataclass(frozen=True)
class TimelinePoint:
    time_s: float
    kind: str
    batch: int
    queued: int | None
    per_token_s: float | None  # per-token time over the interval ending here, if known


class PhaseKind(StrEnum):
    """A phase of a segment with its own per-token time (its JSON keys are the value as a
    prefix: ``steady_token_s``, ``drain_tokens`` …, kept from schema 2)."""

    RAMP = "ramp"  # tokens decoded while the batch rose (counted on PD decode nodes)
    STEADY = "steady"  # admission-free intervals on the plateau, the batch held
    MIXED = "mixed"  # intervals on the plateau with admissions
    DRAIN = "drain"  # from the last line on the plateau to the valley after it
    BURST = "burst"  # a burst's rise and peak intervals
    OVERLOAD = "overload"  # an overload stretch's intervals


@dataclass(frozen=True)
class PhaseStats:
    """One phase of one segment: where it lies, its time, and its per-token times.

    ``span``: the phase's stretch (steady: the longest admission-free stretch; drain: last
    plateau line → valley); ``seconds``: the time of all its intervals (steady: every
    admission-free interval, which may be more than ``span``); ``token_s``: the per-token
    times of its intervals; ``tokens``: output tokens generated in it (all requests);
    ``weighted_s``: its token-weighted per-token time. Missing is None, never 0."""

    span: PhaseSpan | None = None
    seconds: float = 0.0
    token_s: Distribution | None = None
    tokens: float | None = None
    weighted_s: float | None = None


NO_PHASE = PhaseStats()
# a JSON key of schema 2 named "<phase><suffix>" (steady_token_s, overload_s, drain …) is that
# phase's PhaseStats field: the one rule that derives those keys from the records
PHASE_FIELDS: tuple[tuple[str, str], ...] = (
    ("", "span"),
    ("_s", "seconds"),
    ("_token_s", "token_s"),
    ("_tokens", "tokens"),
    ("_weighted_s", "weighted_s"),
)


def phase_field(name: str) -> tuple[PhaseKind, str] | None:
    """(phase, PhaseStats field) a flat JSON key stands for by ``PHASE_FIELDS``, or None."""
    for kind in PhaseKind:
        for suffix, attribute in PHASE_FIELDS:
            if name == kind.value + suffix:
                return kind, attribute
    return None


@dataclass(frozen=True)
class WarmupSplit:
    """The warm-up interval, less its last admission's prefill and ordinary decode steps."""

    prefill_s: float | None  # the last admission's prefill (None where the rate is unknown)
    prefill_tokens: int
    decode_s: float  # ordinary decode steps (half a decode-log interval)
    excess_s: float  # what is left: warm-up


@dataclass(frozen=True)
class Segment:
    """One plateau of ``#running-req`` (one concurrency level) or one burst of a run, and
    its phases (see ``levels`` for the rule).

    A change of plateau starts a new segment: a closed-loop client sweeping c = 1, 2, 4
    without idle gaps gives three segments, each with its own per-token times. Each phase
    with a per-token time is a ``PhaseStats`` in ``phases`` (``phase(kind)``: an empty one
    where the segment has none). A burst (``kind == "burst"``: a peak the batch did not
    hold) has a ``rise`` (no ramp), its rise and peak intervals as its ``BURST`` phase, a
    drain, and nothing steady. An overload stretch (``kind == "overload"``) likewise: a
    ``rise``, its intervals as its ``OVERLOAD`` phase, its drain.
    """

    index: int
    level: int  # the plateau's batch size (largest #running-req seen on it)
    start_s: float
    end_s: float
    warmup: PhaseSpan | None  # last admission of the ramp → first Decode line after it
    plateau: PhaseSpan
    phases: Mapping[PhaseKind, PhaseStats] = field(default_factory=dict)
    accept_len: float | None = None  # speculative decoding: mean acceptance length
    # the warm-up interval less its last admission's own prefill and the ordinary decode
    # steps it holds (``prefill.WarmupSplit``): what is left is warm-up
    warmup_split: WarmupSplit | None = None
    kind: SegmentKind = SegmentKind.PLATEAU
    rise: PhaseSpan | None = None  # a burst's climb to its peak (a burst has no ramp)
    # the steady per-token time the segment is summed up by, and how: "median" of the
    # steady lines, or "token-weighted" where speculative acceptance spreads
    headline_token_s: float | None = None
    headline_method: str = ""
    # phases whose per-token time is below the lone-request time (window-end bias)
    below_floor: tuple[str, ...] = ()
    # an overload stretch: the largest queue and KV usage on its lines and the requests
    # pushed back (``preemption_inferred``: a format that cannot log each preemption, where
    # Running fell while Waiting rose at a full cache)
    queued_max: int = 0
    kv_usage_max: float | None = None
    preempted: int = 0
    preemption_inferred: bool = False
    # a wave of a per-request trace (``waves``): its own harness-style TPOT, reconciled
    reconciliation: Reconciliation | None = None

    def phase(self, kind: PhaseKind) -> PhaseStats:
        """The segment's ``kind`` phase (an empty record where it has none)."""
        return self.phases.get(kind, NO_PHASE)

    @property
    def ramp(self) -> PhaseSpan | None:
        """The admission ramp: its ``RAMP`` phase's span (a burst or overload stretch has none)."""
        return self.phase(PhaseKind.RAMP).span

    @property
    def harness_tpot_s(self) -> float | None:
        """A wave's harness-style TPOT: what its reconciliation explains."""
        return self.reconciliation.reported_tpot_s if self.reconciliation is not None else None


@dataclass(frozen=True)
class QueueCause:
    """Time a run spent with requests waiting for admission, for one cause: the KV cache
    full (overload), the batch at its cap with room in the cache, or admissions still
    being prefilled."""

    cause: str
    duration_s: float
    max_queued: int


@dataclass(frozen=True)
class RunOverload:
    """Why a run's requests waited, and those its overload stretches pushed back (the
    stretches' time and per-token times are the run's ``OVERLOAD`` phase)."""

    preempted: int = 0  # requests pushed back to the queue in its overload stretches
    queue_causes: tuple[QueueCause, ...] = ()


@dataclass(frozen=True)
class RunIdentity:
    path: str
    source_format: str
    run_index: int
    run_label: str
    rank: str | None
    clock_origin: str


@dataclass(frozen=True)
class RunShape:
    """A run's extent, batch, warm-up and segments (its phases are ``RunAnalysis.phases``):
    the warm-up is the main segment's (``warmup``, and ``warmup_split``: what it holds)."""

    start_s: float | None = None
    end_s: float | None = None
    peak_batch: int | None = None
    steady_batch: float | None = None
    warmup: PhaseSpan | None = None
    warmup_split: WarmupSplit | None = None
    segments: tuple[Segment, ...] = ()
    main_segment: int | None = None  # index of the segment the run row shows


@dataclass(frozen=True)
class RunAdmission:
    admission_span_s: float | None = None
    mean_admission_wait_s: float | None = None  # mean over admitted of (last admission − own)
    requests_admitted: int | None = None
    total_admission_wait_s: float | None = None  # the sum of the same waits
    requests_total: int | None = None  # every request admitted in the run (all generations)


@dataclass(frozen=True)
class ServerRequests:
    """What the server's own per-request timing lines (SGLang ``ReqTimeStats``) say about
    the requests that finished during one run. ``tpot_s``: each request's
    ``post_prefill_elapsed / (output_len − 1)`` (None where the lines do not say);
    ``weighted_tpot_s``: Σ decode time / Σ (output_len − 1), what a token-weighted
    per-token time of the Decode lines estimates; ``ttft_s``: queue + prefill, server-side."""

    requests: int
    first_line: int
    output_tokens: Distribution | None
    tpot_s: Distribution | None
    mean_tpot_s: float | None
    weighted_tpot_s: float | None
    queue_s: Distribution | None
    prefill_s: Distribution | None
    ttft_s: Distribution | None
    stride: int = 1


@dataclass(frozen=True)
class RunTiming:
    """How the run's step was timed, its TTFT, and the per-token time it is summed up by
    (its phases' per-token times are ``RunAnalysis.phases``)."""

    step_method: str = ""
    ttft_s: Distribution | None = None
    steady_step_s: float | None = None
    mean_request_tpot_s: float | None = None
    accept_len: float | None = None
    headline_token_s: float | None = None  # the steady per-token time the run is summed up by
    headline_method: str = ""
    lone_request_token_s: float | None = None  # the log's lone-request per-token time


@dataclass(frozen=True)
class RunTokens:
    output_tokens: int | None = None
    output_tokens_source: str = ""
    harness_tpot_s: float | None = None
    reconciliation: Reconciliation | None = None


@dataclass(frozen=True)
class RunPlotData:
    timeline: tuple[TimelinePoint, ...] = ()
    token_gaps: tuple[tuple[float, float], ...] = ()  # (time, s/token)
    itl_by_position: tuple[float, ...] = ()  # median ITL per output position
    retraction_times_s: tuple[float, ...] = ()
    ttft_values_s: tuple[float, ...] = ()
    abort_time_s: float | None = None  # a traceback ended the run here


@dataclass(frozen=True)
class RunFindings:
    """What an analyser says about a run in words: what its input cannot tell, and notes."""

    cannot: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ArrivalTimes:
    """What the server's arrival lines (vLLM ``Received request``, SGLang ``Receive:``) say
    about one run's requests. A request leaves the queue in arrival order (FIFO): at the
    Prefill line that admits it (SGLang: its queue wait is exact to the timestamps), or
    inside the statistics window where arrivals less ``Waiting`` first count it (vLLM:
    bounds, the window's start and end). ``*_low_s`` are lower bounds (None where none
    holds: preempted requests waiting again hide when a request was first admitted),
    the others upper bounds."""

    requests: int  # arrivals in the run
    refused: int  # arrivals refused before the scheduler
    arrival_span_s: float  # first arrival → last
    admission_span_s: float | None  # first arrival → last admission (upper bound)
    queue_wait_s: Distribution | None
    queue_wait_low_s: Distribution | None
    ttft_low_s: Distribution | None
    ttft_high_s: Distribution | None
    method: str  # how the admissions were placed, in words


@dataclass(frozen=True)
class ServerLogFacts:
    """What only a server-log run has: the benchmark's stated concurrency, why the run has no
    steady phase (a word, for titles), the server's own per-request timing lines and what
    its arrival lines say."""

    stated_concurrency: int | None = None
    no_steady_kind: str = ""
    server_requests: ServerRequests | None = None
    arrivals: ArrivalTimes | None = None


@dataclass(frozen=True)
class RunAnalysis:
    """One run of a log as the records it is made of: who it is (``identity``), its extent,
    warm-up and segments (``shape``), its phases (those of its main segment, and its
    overload stretches together), its admissions, timing, tokens and reconciliation, what
    only a plot needs, what the server said (``server``), its queues (``overload``) and the
    findings. Built only by ``assemble_run``; a part it was not given is empty (None)."""

    identity: RunIdentity
    shape: RunShape
    phases: Mapping[PhaseKind, PhaseStats]
    admission: RunAdmission
    timing: RunTiming
    tokens: RunTokens
    plot: RunPlotData = field(repr=False)
    server: ServerLogFacts
    overload: RunOverload
    findings: RunFindings

    def phase(self, kind: PhaseKind) -> PhaseStats:
        """The run's ``kind`` phase (an empty record where it has none)."""
        return self.phases.get(kind, NO_PHASE)


RunPart = RunAdmission | RunTiming | RunTokens | RunPlotData | ServerLogFacts | RunOverload
_P = TypeVar("_P", RunAdmission, RunTiming, RunTokens, RunPlotData, ServerLogFacts, RunOverload)


def assemble_run(
    identity: RunIdentity,
    shape: RunShape,
    *parts: RunPart,
    phases: Mapping[PhaseKind, PhaseStats] | None = None,
    findings: RunFindings | None = None,
) -> RunAnalysis:
    """The one constructor of ``RunAnalysis``; parts not given are unknown (None).

    A part is known by its type (one of each at most); a phase's fields that are None or
    0 are unknown, and a phase with nothing known is left out; repeated findings are kept
    once, in order; the headline per-token time is the steady median where the analyser
    named none.
    """
    given = {type(part): part for part in parts}
    if len(given) != len(parts):
        raise ValueError("assemble_run takes one part of each kind")
    findings = findings or RunFindings()
    known = known_phases(phases or {})
    timing = given.get(RunTiming)
    return RunAnalysis(
        identity=identity,
        shape=shape,
        phases=known,
        admission=_part(given, RunAdmission),
        timing=_with_default_headline(
            timing if isinstance(timing, RunTiming) else RunTiming(), known.get(PhaseKind.STEADY, NO_PHASE)
        ),
        tokens=_part(given, RunTokens),
        plot=_part(given, RunPlotData),
        server=_part(given, ServerLogFacts),
        overload=_part(given, RunOverload),
        findings=RunFindings(tuple(dict.fromkeys(findings.cannot)), tuple(dict.fromkeys(findings.notes))),
    )


def _part(given: Mapping[type, RunPart], kind: type[_P]) -> _P:
    """The part of type ``kind`` given, or an empty one."""
    part = given.get(kind)
    return part if isinstance(part, kind) else kind()


def known_phases(phases: Mapping[PhaseKind, PhaseStats]) -> dict[PhaseKind, PhaseStats]:
    """The phases with their unknown fields (None or 0) at their defaults, those with
    nothing known left out."""
    found: dict[PhaseKind, PhaseStats] = {}
    for kind, stats in phases.items():
        values = {f.name: getattr(stats, f.name) for f in fields(stats)}
        known = {name: value for name, value in values.items() if value is not None and value != 0.0}
        if known:
            found[kind] = PhaseStats(**known)
    return found


def _with_default_headline(timing: RunTiming, steady: PhaseStats) -> RunTiming:
    """Where the analyser named no headline per-token time: the steady median, "median"."""
    return replace(
        timing,
        headline_token_s=timing.headline_token_s
        if timing.headline_token_s is not None
        else (steady.token_s.median if steady.token_s is not None else None),
        headline_method=timing.headline_method or ("median" if steady.token_s else ""),
    )


WARMUP_PREFIX = "warmup_"  # a JSON key "warmup_<field>" is that field of the warm-up's split


def warmup_field(split: WarmupSplit | None, name: str) -> object:
    """The value of the JSON key ``warmup_<name>``: the split's field, or where there is no
    split, nothing (0 for a count, None otherwise)."""
    if split is not None:
        return getattr(split, name)
    declared = next(f for f in fields(WarmupSplit) if f.name == name)
    return 0 if declared.type == "int" else None
