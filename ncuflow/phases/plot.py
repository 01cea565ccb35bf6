"""Timeline PNG: batch size and per-token time over time, phases shaded (matplotlib, Agg)."""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Sequence
from pathlib import Path

import matplotlib

from ncuflow.phases.model.results import PhaseKind, SegmentKind

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.patches import Patch

from ncuflow.files import OutputError, atomic_path, guard_output, plot_metadata, png_recogniser
from ncuflow.phases import TraceError
from ncuflow.phases.model import PhaseSpan, RunAnalysis, Segment
from ncuflow.phases.model.capabilities import Capabilities
from ncuflow.phases.report import FileReport, PhasesReport

PHASE_COLOURS = {
    "ramp": "#f4a259",
    "prefill": "#e9c46a",
    "warm-up": "#d1495b",
    "steady": "#5b9e6b",
    "mixed": "#c9d98f",
    "burst": "#9b7fc8",
    "overload": "#8c510a",
    "drain": "#b0b0b0",
}
PHASE_NAMES = {
    "ramp": "admission ramp",
    "prefill": "the ramp's last admission: its own prefill",
    "warm-up": "warm-up (left after that prefill and ordinary decode steps)",
    "steady": "steady decode",
    "mixed": "full batch + admissions",
    "burst": "burst (a peak not held: rise and peak)",
    "overload": "overload (requests waiting at a full KV cache)",
    "drain": "drain (and tails)",
}
NO_STEADY = {
    "overload": ": requests waited at a full KV cache (overload{pushed})",
    "retraction": ": the KV cache filled up and retractions saw-tooth the batch",
    "traceback": ": the run ends in a traceback while still admitting",
    "windows": ": every {window}-s {server} window also processed prompts",
    "bursts": ": the batch rose and fell in bursts, holding no level",
    "admissions": ": requests were admitted between every two statistics lines",
}
MAX_EVENT_LINES = 200


def _distinct_labels(paths: Sequence[Path]) -> list[str]:
    """A label per input, all different: its stem, with as many parent folders before it as it
    takes to tell the inputs apart (``a/server.log``, ``b/server.log``: ``a-server``, ``b-server``);
    an input given twice gets its position too."""
    names = [[*Path(os.path.abspath(p)).parent.parts[1:], Path(p).stem] for p in paths]
    for depth in range(1, max(len(n) for n in names) + 1):
        labels = [re.sub(r"[^\w.]+", "-", "-".join(n[-depth:])).strip("-") or "input" for n in names]
        if len(set(labels)) == len(labels):
            return labels
    return [f"{label}-{index}" for index, label in enumerate(labels, start=1)]


def plot_paths(base: Path, report: PhasesReport) -> list[Path]:
    """One PNG per input: ``base`` itself for one, ``base-<label>.png`` for several (``_distinct_labels``)."""
    if len(report.files) == 1:
        return [base if base.suffix.lower() == ".png" else base.with_suffix(".png")]
    stem = base.with_suffix("") if base.suffix.lower() == ".png" else base
    return [stem.parent / f"{stem.name}-{label}.png" for label in _distinct_labels([Path(f.path) for f in report.files])]


def plot_report(report: PhasesReport, base: Path) -> list[Path]:
    paths = plot_paths(base, report)
    inputs = [Path(f.path) for f in report.files]
    try:
        for path in paths:  # every target checked before any is written
            guard_output(path, kind="a timeline plot", recognise=png_recogniser, inputs=inputs,
                         option="--plot")
        for file, path in zip(report.files, paths, strict=True):
            figure = plot_file(file)
            try:
                with atomic_path(path) as temporary:
                    figure.savefig(temporary, dpi=110, format="png", metadata=plot_metadata("timeline"))
            finally:
                plt.close(figure)
    except OutputError as error:
        raise TraceError(error.what, error.why, error.fix) from None
    return paths


def _spans(run: RunAnalysis) -> list[PhaseSpan]:
    """Every segment's phases (a plateau's time with admissions as 'mixed' under its steady
    stretch); runs without segments (request traces) shade their run-level phases."""
    if not run.shape.segments:
        kinds = (PhaseKind.RAMP, PhaseKind.STEADY, PhaseKind.MIXED, PhaseKind.DRAIN)
        return [s for s in (run.phase(kind).span for kind in kinds) if s is not None]
    spans: list[PhaseSpan] = []
    for segment in run.shape.segments:
        if segment.kind is SegmentKind.BURST:
            start = segment.rise.start_s if segment.rise is not None else segment.plateau.start_s
            spans.append(PhaseSpan("burst", start, segment.plateau.end_s))
            spans.extend(_spans_of(segment, PhaseKind.DRAIN))
            continue
        if segment.kind is SegmentKind.OVERLOAD:
            if segment.rise is not None:
                spans.append(PhaseSpan("ramp", segment.rise.start_s, segment.rise.end_s))
            spans.append(PhaseSpan("overload", segment.plateau.start_s, segment.plateau.end_s))
            spans.extend(_spans_of(segment, PhaseKind.DRAIN))
            continue
        if segment.ramp is not None:
            spans.append(segment.ramp)
        spans.extend(_warmup_spans(segment))
        if segment.phase(PhaseKind.MIXED).seconds > 0:
            spans.append(PhaseSpan("mixed", segment.plateau.start_s, segment.plateau.end_s))
        spans.extend(_spans_of(segment, PhaseKind.STEADY))
        spans.extend(_spans_of(segment, PhaseKind.DRAIN))
    return spans


def _warmup_spans(segment: Segment) -> list[PhaseSpan]:
    """The warm-up interval as the reconciliation splits it: the last admission's own
    prefill, then what is left after it and the ordinary decode steps (drawn red)."""
    warmup = segment.warmup
    if warmup is None:
        return []
    start = warmup.start_s
    split = segment.warmup_split
    prefill = (split.prefill_s if split is not None else None) or 0.0
    excess = split.excess_s if split is not None else warmup.duration_s
    spans = [PhaseSpan("prefill", start, start + prefill)] if prefill > 0 else []
    if excess > 0:
        spans.append(PhaseSpan("warm-up", start + prefill, min(start + prefill + excess, warmup.end_s)))
    return spans


def _shade(axes: Sequence[Axes], runs: Sequence[RunAnalysis], ranks: int) -> set[str]:
    """Shade every rank's phases; with several DP ranks each gets a fainter layer, so
    where they agree the shade is full and where they differ it shows."""
    used: set[str] = set()
    alpha = 0.35 / min(max(ranks, 1), 4)
    for run in runs:
        for span in _spans(run):
            if span.duration_s <= 0 or span.name not in PHASE_COLOURS:
                continue
            used.add(span.name)
            for ax in axes:
                ax.axvspan(
                    span.start_s, span.end_s, color=PHASE_COLOURS[span.name], alpha=alpha, lw=0
                )
    return used


def plot_file(file: FileReport) -> plt.Figure:
    with_timeline = [r for r in file.runs if r.plot.timeline]
    if not with_timeline:
        return _plot_without_timeline(file)
    figure, (top, bottom) = plt.subplots(
        2, 1, figsize=(13, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    ranks = sorted({r.identity.rank or "" for r in with_timeline}, key=_rank_key)
    shade_runs = [r for r in with_timeline if (r.identity.rank or "") == ranks[0]]
    used = _shade((top, bottom), with_timeline, len(ranks))
    _draw_ranks(top, bottom, file, with_timeline, ranks)
    _annotate_steady(bottom, shade_runs)
    _mark_floor(bottom, with_timeline)
    _limit_per_token_axis(bottom, with_timeline)
    _mark_events(top, bottom, with_timeline, shade_runs)
    queue = _draw_queue(top, with_timeline)
    _finish(figure, top, bottom, file, with_timeline, used, len(ranks), queue)
    return figure


def _draw_queue(top: Axes, runs: Sequence[RunAnalysis]) -> Axes | None:
    """Requests waiting for admission (#queue-req, vLLM Waiting) on a right-hand axis of
    their own, where any line shows a queue."""
    points = sorted(
        (p.time_s, p.queued) for r in runs for p in r.plot.timeline if p.queued is not None and p.kind != "prefill"
    )
    if not any(q for _, q in points):
        return None
    axis = top.twinx()
    axis.step([t for t, _ in points], [q for _, q in points], where="post", color="#555555",
              lw=0.9, ls="--", label="waiting (queue, right axis)")
    axis.set_ylabel("requests waiting", color="#555555")
    axis.set_ylim(bottom=0)
    return axis


def _draw_ranks(
    top: Axes, bottom: Axes, file: FileReport, runs: Sequence[RunAnalysis], ranks: Sequence[str]
) -> None:
    """Batch size (and admissions) on top, per-token time below, one colour per rank."""
    colours = plt.get_cmap("tab10")
    thin = len(ranks) >= 4
    caps = file.capabilities
    admission_label = caps.admission_line if caps is not None and caps.prefill_lines else "admission"
    for index, rank in enumerate(ranks):
        colour = colours(index % 10)
        rank_runs = [r for r in runs if (r.identity.rank or "") == rank]
        for run_number, run in enumerate(rank_runs):
            points = sorted(run.plot.timeline, key=lambda p: p.time_s)
            first_of_rank = run_number == 0
            top.step(
                [p.time_s for p in points],
                [p.batch for p in points],
                where="post",
                color=colour,
                lw=0.8 if thin else 1.4,
                label=(rank or "batch size") if first_of_rank and index < 8 else None,
            )
            prefill_points = [p for p in points if p.kind == "prefill"]
            if prefill_points and not file.source_format.startswith("per-request"):
                top.plot(
                    [p.time_s for p in prefill_points],
                    [p.batch for p in prefill_points],
                    "v",
                    color=colour,
                    ms=4,
                    alpha=0.7,
                    label=admission_label if index == 0 and first_of_rank else None,
                )
            tok = [
                (p.time_s, p.per_token_s * 1000 if p.per_token_s is not None else math.nan)
                for p in points
                if p.kind != "prefill"
            ]
            if any(not math.isnan(v) for _, v in tok):
                bottom.plot(
                    [t for t, _ in tok], [v for _, v in tok], ".-", color=colour, ms=3, lw=0.8
                )
    for run in runs:
        if run.plot.token_gaps:
            bottom.plot(
                [t for t, _ in run.plot.token_gaps],
                [g * 1000 for _, g in run.plot.token_gaps],
                ",",
                color="#555555",
                alpha=0.5,
            )


def _spans_of(segment: Segment, kind: PhaseKind) -> list[PhaseSpan]:
    span = segment.phase(kind).span
    return [span] if span is not None else []


def _on_curve(run: RunAnalysis, start_s: float, end_s: float, fallback: float) -> float:
    """The per-token curve's height over a stretch (the median of its points there): where
    a label naming that stretch sits, whatever value the label states."""
    points = sorted(p.per_token_s for p in run.plot.timeline if p.per_token_s is not None and start_s <= p.time_s <= end_s)
    return statistics.median(points) if points else fallback


def _annotate_steady(bottom: Axes, runs: Sequence[RunAnalysis]) -> None:
    annotated = [r for r in runs if r.phase(PhaseKind.STEADY).span is not None and r.timing.headline_token_s is not None]
    for run in annotated if len(annotated) <= 8 else ():
        steady = run.phase(PhaseKind.STEADY).span
        if steady is not None and run.timing.headline_token_s is not None:
            mid = (steady.start_s + steady.end_s) / 2
            tw = " (tw)" if run.timing.headline_method == "token-weighted" else ""
            height = _on_curve(run, steady.start_s, steady.end_s, run.timing.headline_token_s)
            bottom.annotate(
                f"{run.timing.headline_token_s * 1000:.1f} ms{tw}",
                (mid, height * 1000),
                textcoords="offset points",
                xytext=(0, 8),
                ha="center",
                fontsize=8,
                color="#1d5c2e",
                fontweight="bold",
            )


def _mark_floor(bottom: Axes, runs: Sequence[RunAnalysis]) -> None:
    """The lone-request per-token time: no request decodes faster (values below it are
    flagged in the tables)."""
    floors = sorted({r.timing.lone_request_token_s for r in runs if r.timing.lone_request_token_s})
    if floors:
        bottom.axhline(floors[0] * 1000, color="#7a3b8f", lw=0.9, ls=":",
                       label=f"lone request {floors[0] * 1000:.1f} ms/token\n(below it: window-end bias)")


def _limit_per_token_axis(bottom: Axes, runs: Sequence[RunAnalysis]) -> None:
    steady_values = [d.p90 * 1000 for d in (r.phase(PhaseKind.STEADY).token_s for r in runs) if d]
    all_values = sorted(
        p.per_token_s * 1000 for r in runs for p in r.plot.timeline if p.per_token_s is not None
    )
    if steady_values:
        bottom.set_ylim(0, max(steady_values) * 2.2)
    elif all_values:
        bottom.set_ylim(0, all_values[int(0.8 * (len(all_values) - 1))] * 2.5)


def _mark_events(
    top: Axes, bottom: Axes, runs: Sequence[RunAnalysis], shade_runs: Sequence[RunAnalysis]
) -> None:
    aborts = sorted({r.plot.abort_time_s for r in runs if r.plot.abort_time_s is not None})
    if aborts:
        for ax in (top, bottom):
            ax.axvline(
                aborts[0],
                color="black",
                lw=1.5,
                label="traceback (run aborted)" if ax is top else None,
            )
    retractions = sorted({t for r in shade_runs for t in r.plot.retraction_times_s})
    stride = max(1, len(retractions) // MAX_EVENT_LINES)
    for number, moment in enumerate(retractions[::stride]):
        for ax in (top, bottom):
            ax.axvline(
                moment,
                color="#c0392b",
                lw=1,
                ls="--",
                label="retraction (KV cache full)" if number == 0 and ax is top else None,
            )


def _finish(
    figure: plt.Figure,
    top: Axes,
    bottom: Axes,
    file: FileReport,
    runs: Sequence[RunAnalysis],
    used: set[str],
    ranks: int,
    queue: Axes | None = None,
) -> None:
    top.set_ylabel("requests in batch")
    bottom.set_ylabel("per-token time (ms)")
    origin = f" since {file.clock_origin}" if file.clock_origin else ""
    bottom.set_xlabel(f"time (s){origin}")
    handles = [
        Patch(color=PHASE_COLOURS[k], alpha=0.5, label=PHASE_NAMES[k])
        for k in PHASE_COLOURS
        if k in used
    ]
    line_handles, _ = top.get_legend_handles_labels()
    line_handles += bottom.get_legend_handles_labels()[0]
    if queue is not None:
        line_handles += queue.get_legend_handles_labels()[0]
    if ranks > 8:
        handles.append(Patch(color="none", label=f"(+{ranks - 8} more ranks, unlabelled)"))
    top.legend(
        handles=line_handles + handles,
        loc="upper left",
        bbox_to_anchor=(1.07 if queue is not None else 1.005, 1.0),
        fontsize=8,
        framealpha=0.9,
    )
    top.set_title(_title(Path(file.path).name, file), fontsize=10, loc="left")
    top.grid(alpha=0.3)
    bottom.grid(alpha=0.3)
    if not any(p.per_token_s is not None for r in runs for p in r.plot.timeline) and not any(
        r.plot.token_gaps for r in runs
    ):
        bottom.text(
            0.5,
            0.5,
            "no per-token times in this trace",
            transform=bottom.transAxes,
            ha="center",
            va="center",
            color="#777777",
        )
    figure.tight_layout()


def _rank_key(rank: str) -> tuple[int, str]:
    digits = "".join(ch for ch in rank.split()[0] if ch.isdigit()) if rank else ""
    return (int(digits) if digits else -1, rank)


def _title(name: str, file: FileReport) -> str:
    steady = [r for r in file.runs if r.timing.headline_token_s is not None and r.phase(PhaseKind.STEADY).span is not None]
    line = f"{_printable(name)} — {file.source_format}"
    if steady:
        first = max(steady, key=lambda r: r.shape.steady_batch or 0)  # the largest steady batch
        assert first.timing.headline_token_s is not None
        tw = " (token-weighted)" if first.timing.headline_method == "token-weighted" else ""
        where = [first.identity.run_label] if len(steady) > 1 or len(first.shape.segments) > 1 else []
        if len(first.shape.segments) > 1:
            where.append(f"segment {first.shape.main_segment} of {len(first.shape.segments)}")
        line += (
            f"\nsteady decode at batch {first.shape.steady_batch:g}"
            + (f" ({', '.join(where)})" if where else "")
            + f": {first.timing.headline_token_s * 1000:.1f} ms/token{tw}"
        )
        ramp_span = first.phase(PhaseKind.RAMP).span
        if ramp_span is not None:
            ramp = "its ramp" if len(first.shape.segments) > 1 else "admission ramp"
            line += f"; {ramp} {ramp_span.duration_s:.1f} s"
        if len(steady) > 1:
            line += f"; {len(steady)} runs have a steady phase"
        if first.tokens.reconciliation is not None:
            rec = first.tokens.reconciliation
            line += f"; harness TPOT {rec.reported_tpot_s * 1000:.1f} ms ({rec.ramp_share:.0%} from the ramp)"
    else:
        kinds = [r.server.no_steady_kind for r in file.runs if r.server.no_steady_kind]
        why = NO_STEADY.get(kinds[0], "") if kinds else ""
        caps = file.capabilities
        if caps is not None:
            why = why.format(window=f"{caps.stats_window_s or 0:g}", server=caps.server,
                             pushed=_pushed_words(file, caps))
        line += f"\nno steady decode phase{why} (see the text report)"
    return line


def _pushed_words(file: FileReport, caps: Capabilities) -> str:
    pushed = sum(r.overload.preempted for r in file.runs)
    if not pushed:
        return ""
    if any(s.preemption_inferred for r in file.runs for s in r.shape.segments):
        return f"; at least {pushed} requests preempted, inferred"
    return f"; {pushed} requests pushed back: {caps.preemption_word}s"


def _printable(name: str) -> str:
    """A file name as text any font can draw: undecodable bytes (surrogates) escaped."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _plot_without_timeline(file: FileReport) -> plt.Figure:
    """bench_serving JSON: no start times, so show ITL by token position and the TTFTs."""
    figure, (top, bottom) = plt.subplots(
        1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 1]}
    )
    for run in file.runs:
        if run.plot.itl_by_position:
            xs = list(range(1, len(run.plot.itl_by_position) + 1))
            top.plot(xs, [v * 1000 for v in run.plot.itl_by_position], lw=1, label=_printable(run.identity.run_label))
    top.set_yscale("log")
    top.set_xlabel("output token position (1 = gap after the first token)")
    top.set_ylabel("median inter-token latency (ms, log)")
    top.grid(alpha=0.3, which="both")
    if top.get_legend_handles_labels()[0]:
        top.legend(fontsize=8)
    top.set_title(
        f"{_printable(Path(file.path).name)} — bench_serving JSON has no start times: no timeline.\n"
        "Median ITL by position; spikes at early positions are waits for other requests' prefill.",
        fontsize=10,
        loc="left",
    )
    for run in file.runs:
        if run.timing.ttft_s is not None and run.plot.ttft_values_s:
            bottom.hist(
                [v * 1000 for v in run.plot.ttft_values_s], bins=30, alpha=0.6, label=_printable(run.identity.run_label)
            )
    bottom.set_xlabel("TTFT (ms)")
    bottom.set_ylabel("requests")
    bottom.set_title("TTFT distribution", fontsize=10, loc="left")
    figure.tight_layout()
    return figure
