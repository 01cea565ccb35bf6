"""Before ncu runs: the predicted passes of a collection on the GPU's chip, and the names it lacks.

``profile`` (and its ``--dry-run``) asks Perfworks, offline, how many passes the metric
list will cost on this GPU's chip and drops the names the chip does not know *before*
ncu runs, instead of letting ncu refuse the collection and retrying. ncuflow's own names
are dropped; a name the user asked for with ``--metrics`` is kept (ncu then says what
it thinks of it). Without Perfworks or a known chip, nothing is dropped and the note says why.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ncuflow.errors import NcuflowError
from ncuflow.profile.ncu import NcuOptions, collection_args


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


def check_passes(options: NcuOptions, chip: str | None = None) -> PassCheck:
    """Predict the passes of ``options``' metric list and drop the names the chip lacks."""
    from ncuflow.profile import passes, perfworks

    def none(note: str) -> PassCheck:
        return PassCheck(options, chip, None, None, None, None, (), note)

    try:
        chip = chip or passes.local_chip()
    except NcuflowError:
        return none("passes not predicted: no GPU here names the chip (`ncuflow passes --chip CHIP` predicts them)")
    names = metric_list(options)
    sections = options.metric_set not in ("decisive", "decisive-tier2", "none") or options.sections
    if not names:
        return none(f"passes not predicted: ncu's sections ({options.label()}) include sampling "
                    "and source counters Perfworks does not model")
    try:
        library = perfworks.load()
        with library.evaluator(chip) as evaluator:
            _known, unknown = passes.known_names(evaluator, names)
            ours = tuple(n for n in unknown if n not in options.extra_metrics)
            prediction = passes.predict(evaluator, [n for n in names if n not in ours], options.metric_set)
    except NcuflowError as error:
        return none(f"passes not predicted: {error.what}")
    checked = replace(options, exclude_metrics=options.exclude_metrics + ours) if ours else options
    note = ("the sections add passes Perfworks does not model" if sections else None)
    return PassCheck(checked, chip, prediction.passes, prediction.counter_passes, prediction.sass_passes,
                     prediction.expected_recorded(None), ours, note)
