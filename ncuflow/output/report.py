"""The study report of a profile store on disk: report.md, PNG plots and parquet tables.

report.md names its plots, and is committed with them as a unit: each plot's name carries
the report's id (``terms-3fa9c1d2.png``), so writing a report replaces no plot that an
earlier report.md names. The plots and tables are renamed into place first and report.md
last, under the folder's lock (``files.atomic_paths``); then the plots that report.md no
longer names are removed. Killed at any moment, the folder's report.md names plots that
are there and are its own. The parquet tables carry the same id (``ncuflow.report_id`` in
their metadata, quoted at the end of report.md), so a reader can tell tables of another
report.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncuflow.analyze.study import Analysis
from ncuflow.files import (
    LEGACY_PLOT_SOFTWARE,
    PLOT_KEY,
    OutputError,
    atomic_paths,
    folders_locked,
    guard_output,
    png_recogniser,
    png_text,
)
from ncuflow.output.markdown import guard_markdown, report_markdown

# ---------------------------------------------------------------------------
# writing a report folder


@dataclass(frozen=True)
class WrittenReport:
    markdown: Path
    plots: tuple[Path, ...]
    parquet: tuple[Path, ...]


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:80] or "x"


TERMS_PER_PLOT = 16  # cells per utilization bar chart (more would not read at a glance)


def _planned_plots(analysis: Analysis, report_id: str) -> list[tuple[str, str, object]]:
    """(plot key, file name, what to plot) for every plot of the report; each name ends in the report's id."""
    planned: list[tuple[str, str, object]] = []
    points = list(analysis.points)
    for index in range(0, len(points), TERMS_PER_PLOT):
        name = f"terms-{report_id}.png" if index == 0 else f"terms-{index // TERMS_PER_PLOT + 1}-{report_id}.png"
        key = "terms" if index == 0 else f"terms:{index // TERMS_PER_PLOT + 1}"
        planned.append((key, name, points[index : index + TERMS_PER_PLOT]))
    for param, explained in analysis.sweeps.items():
        for index, ge in enumerate(explained):
            planned.append((f"sweep:{param}:{index}",
                            f"sweep-{_slug(param)}-{index}-{_slug(ge.group.cell)}-{report_id}.png", ge))
    for number, page in enumerate(_roofline_pages(analysis), start=1):  # at most 6 GPUs a picture
        planned.append(("roofline", f"roofline-{report_id}.png", page) if number == 1 else
                       (f"roofline:{number}", f"roofline-{number}-{report_id}.png", page))
    return planned


def _roofline_pages(analysis: Analysis) -> tuple[tuple[Any, ...], ...]:
    """The roofline of the report's points, one per GPU, on pages of at most 6 panels
    (``ncuflow.analyze.roofline.pages``, as ``ncuflow roofline`` writes them)."""
    from ncuflow.analyze.roofline import measurement_groups, pages, rooflines

    if not analysis.points:
        return ()
    return pages(rooflines(measurement_groups([s.point for s in analysis.points]), analysis.threshold))


# The plots a report writes (with the id of their report; without it, as before issue 24).
_REPORT_PLOT = re.compile(r"(terms|terms-\d+|roofline|roofline-\d+|sweep-.+-\d+-.+?)(-[0-9a-f]{8})?\.png")
REPORT_PLOT_KIND = "report"  # the first word of a report plot's ``ncuflow.plot`` text chunk


def _report_plot(path: Path) -> bool:
    """Whether ``path`` is a plot an ncuflow report wrote, by its content: its ``ncuflow.plot``
    chunk says a report drew it, or (a report before that chunk) its name is a report plot's and
    its Software chunk ncuflow's. Another command's plot, or anyone else's PNG, is not."""
    text = png_text(path)
    if PLOT_KEY in text:
        return text[PLOT_KEY].split(" ", 1)[0] == REPORT_PLOT_KIND
    return text.get("Software") == LEGACY_PLOT_SOFTWARE and _REPORT_PLOT.fullmatch(path.name) is not None


def _named_plots(markdown: Path) -> set[str]:
    """The plot files a report.md names."""
    try:
        return set(re.findall(r"\]\(([^()/]+\.png)\)", markdown.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return set()


def remove_unnamed_plots(out: Path) -> list[Path]:
    """Remove the report plots (an ncuflow report's, by content: ``_report_plot``) that the
    folder's report.md does not name: those of earlier reports. A PNG anyone else wrote, another
    ncuflow command's plot included, stays. Under the folder's lock, so a report committing meanwhile
    keeps its own."""
    removed: list[Path] = []
    with folders_locked([out]):
        named = _named_plots(out / "report.md")
        for path in sorted(out.glob("*.png")):
            with contextlib.suppress(OSError):
                if path.name not in named and path.is_file() and not path.is_symlink() and _report_plot(path):
                    path.unlink()
                    removed.append(path)
    return removed


def plot_count(analysis: Analysis) -> int:
    """How many plots ``write_report`` draws (for a progress bar)."""
    return len(_planned_plots(analysis, "0" * 8))


def guard_report_folder(out_dir: Path, inputs: Sequence[Path] = ()) -> None:
    """Refuse a report folder that is one of the inputs (a store or a folder of reports)."""
    out = Path(out_dir).absolute()
    for source in inputs:
        if Path(source).absolute() == out:
            raise OutputError(
                f"Refusing to write the report into {out_dir}: it is also an input of this command.",
                "The report's files would be mixed with the data being read.",
                "Give -o/--output a folder of its own, e.g. out/report.",
            )


def write_report(analysis: Analysis, out_dir: Path, *, with_parquet: bool = True,
                 inputs: Sequence[Path] = (), progress: Callable[[int, Path], None] | None = None) -> WrittenReport:
    """report.md, PNG plots and the numbers as parquet in ``out_dir``, committed as a unit.

    Every file is checked before any is written: none may be an input, and an existing
    one must be an earlier output of the same kind (``files.guard_output``). All are
    written to temporary files first and renamed into place together at the end, report.md
    last, so a failure (a full disk, a plot that cannot be drawn) or a kill leaves the
    previous report whole; the plots no report.md names are removed after the commit.
    ``progress`` is called with (index, plot path) as each plot is drawn.
    """
    from ncuflow.output.deep_markdown import roofline_markdown, waiting_markdown
    from ncuflow.output.export import guard_parquet, write_parquet
    from ncuflow.output.findings_markdown import findings_markdown
    from ncuflow.output.plots import plot_sweep, plot_terms
    from ncuflow.output.roofline_plot import plot_rooflines

    out = Path(out_dir)
    guard_report_folder(out, inputs)
    report_id = uuid.uuid4().hex[:8]
    planned = _planned_plots(analysis, report_id)
    markdown = out / "report.md"
    guard_markdown(markdown, title="report", inputs=inputs, option="-o/--output")
    for _key, name, _what in planned:
        guard_output(out / name, kind="an ncuflow plot", recognise=png_recogniser, inputs=inputs,
                     option="-o/--output")
    tables = _tables(analysis) if with_parquet else {}
    for table in tables:
        guard_parquet(out / f"{table}.parquet", table=table, inputs=inputs, option="-o/--output")
    plot_paths = [out / name for _key, name, _what in planned]
    table_paths = [out / f"{table}.parquet" for table in tables]
    with atomic_paths([*plot_paths, *table_paths, markdown]) as temporaries:
        plots: dict[str, str] = {}
        for (key, name, what), temporary in zip(planned, temporaries, strict=False):
            kind = f"{REPORT_PLOT_KIND} {key}"
            if key.startswith("terms"):
                plot_terms(what, temporary, threshold=analysis.threshold, every=analysis.points, kind=kind)  # type: ignore[arg-type]
            elif key.startswith("roofline"):
                plot_rooflines(what, temporary, kind=kind)  # type: ignore[arg-type]
            else:
                plot_sweep(what, temporary, threshold=analysis.threshold, kind=kind)  # type: ignore[arg-type]
            plots[key] = name
            if progress is not None:
                progress(len(plots) - 1, out / name)
        for (table, frame), temporary in zip(tables.items(), temporaries[len(plot_paths):], strict=False):
            write_parquet(frame, temporary, table=table, metadata={"ncuflow.report_id": report_id})
        lines = [line for key, _name, what in planned if key.startswith("roofline") for line in what]  # type: ignore[attr-defined]
        pictures = [name for key, name in plots.items() if key.startswith("roofline")]
        extra = [*roofline_markdown(lines, pictures), *waiting_markdown(analysis),
                 *findings_markdown(analysis)]
        text = report_markdown(analysis, plots, extra) + (
            f"\nReport id: `{report_id}` (in the name of each plot, and as `ncuflow.report_id` in the "
            "metadata of the parquet tables beside this file).\n")
        Path(temporaries[-1]).write_text(text, encoding="utf-8")
    remove_unnamed_plots(out)
    return WrittenReport(markdown, tuple(plot_paths), tuple(table_paths))


def _tables(analysis: Analysis) -> dict[str, Any]:
    """The frames behind the report: stability always, explain when a parameter was swept."""
    import polars as pl

    from ncuflow.analyze.explain import explain_rows
    from ncuflow.analyze.stability_table import stability_frame

    groups = list(analysis.stability) or [s.stability for s in analysis.points]
    frames: dict[str, Any] = {"stability": stability_frame(groups)}
    rows = explain_rows([ge for groups in analysis.sweeps.values() for ge in groups])
    if rows:
        frames["explain"] = pl.DataFrame(rows, infer_schema_length=None)
    return frames

