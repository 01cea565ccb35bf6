"""Before ncu runs: the predicted passes of a collection on the GPU's chip, and the names it lacks.

``profile`` (and its ``--dry-run``) asks Perfworks, offline, how many passes the metric
list will cost on this GPU's chip and drops the names the chip does not know *before*
ncu runs, instead of letting ncu refuse the collection and retrying. ncuflow's own names
are dropped; a name the user asked for with ``--metrics`` is kept (ncu then says what
it thinks of it). Without Perfworks or a known chip, nothing is dropped and the note says why.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ncuflow.errors import NcuflowError
from ncuflow.profile.ncu import NcuOptions, collection_args

if TYPE_CHECKING:
    from ncuflow.profile.passes import PassPrediction


@dataclass(frozen=True)
class PassCheck:
    options: NcuOptions  # with the chip's unknown ncuflow names excluded
    chip: str | None
    passes: int | None  # predicted counter + SASS passes
    counter_passes: int | None
    sass_passes: int | None
    recorded_expected: int | None
    dropped: tuple[str, ...]
    note: str | None  # why there is no prediction, or what the prediction leaves out

    def lines(self) -> list[str]:
        out: list[str] = []
        if self.passes is not None:
            out.append(f"predicted passes on {self.chip}: {self.counter_passes} counter + {self.sass_passes} "
                       f"SASS-patching; ncu records about {self.recorded_expected} per kernel launch")
        if self.dropped:
            out.append(f"warning: {self.chip} does not know {', '.join(self.dropped)}: dropped before ncu runs")
        if self.note:
            out.append(self.note)
        return out


def metric_list(options: NcuOptions) -> tuple[str, ...]:
    args = collection_args(options)
    if "--metrics" not in args:
        return ()
    return tuple(args[args.index("--metrics") + 1].split(","))


def check_passes(options: NcuOptions, chip: str | None = None, section_names: tuple[str, ...] | None = None,
                 own: tuple[str, ...] = ()) -> PassCheck:
    """Predict the passes of ``options``' metric list and drop the names the chip lacks.

    ``section_names``: the metrics ncu lists for the options' sections
    (``ncuflow.profile.section_metrics``), predicted with the list; ncu's own names, never
    dropped. Without them a collection of sections is not predicted. ``own``: names among
    ``options.extra_metrics`` that ncuflow asked for (dropped where the chip lacks them, as the
    metric set's are; the user's ``--metrics`` are kept).
    """
    from ncuflow.profile import passes, perfworks

    def none(note: str) -> PassCheck:
        return PassCheck(options, chip, None, None, None, None, (), note)

    try:
        chip = chip or passes.local_chip()
    except NcuflowError:
        return none("passes not predicted: no GPU here names the chip (`ncuflow passes --chip CHIP` predicts them)")
    names = metric_list(options)
    sections = options.metric_set not in ("decisive", "decisive-tier2", "none") or options.sections
    if not names and not section_names:
        return none(f"passes not predicted: ncu's sections ({options.label()}) include sampling "
                    "and source counters Perfworks does not model")
    try:
        library = perfworks.load()
        with library.evaluator(chip) as evaluator:
            _known, unknown = passes.known_names(evaluator, names)
            ours = tuple(n for n in unknown if n not in options.extra_metrics or n in own)
            wanted = [n for n in (*names, *(section_names or ())) if n not in ours]
            prediction = passes.predict(evaluator, wanted, options.metric_set)
    except NcuflowError as error:
        return none(f"passes not predicted: {error.what}")
    checked = replace(options, exclude_metrics=options.exclude_metrics + ours) if ours else options
    return PassCheck(checked, chip, prediction.passes, prediction.counter_passes, prediction.sass_passes,
                     prediction.expected_recorded(None), ours, _sections_note(prediction, sections, section_names))


def _sections_note(prediction: PassPrediction, sections: object, section_names: tuple[str, ...] | None) -> str | None:
    """What the prediction leaves out: the sections' names Perfworks does not model."""
    if not sections:
        return None
    if section_names is None:
        return "the sections add passes Perfworks does not model"
    left = (*prediction.unmodelled_metrics, *prediction.unknown_metrics)
    if not left:
        return None
    shown = ", ".join(left[:6]) + (f", … ({len(left) - 6} more)" if len(left) > 6 else "")
    return (f"not counted: {len(left)} of the sections' {len(section_names)} names (tables ncu expands, "
            f"sampling and source counters, names Perfworks does not know on {prediction.chip}): {shown}")
