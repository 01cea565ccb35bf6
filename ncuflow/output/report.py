"""The study report of a profile store on disk: report.md, PNG plots and parquet tables."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ncuflow.analyze.study import Analysis
from ncuflow.files import OutputError, guard_output, png_recogniser
from ncuflow.output.markdown import guard_markdown, report_markdown, write_markdown

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


def _planned_plots(analysis: Analysis) -> list[tuple[str, str, object]]:
    """(plot key, file name, what to plot) for every plot of the report."""
    planned: list[tuple[str, str, object]] = []
    points = list(analysis.points)
    for index in range(0, len(points), TERMS_PER_PLOT):
        name = "terms.png" if index == 0 else f"terms-{index // TERMS_PER_PLOT + 1}.png"
        key = "terms" if index == 0 else f"terms:{index // TERMS_PER_PLOT + 1}"
        planned.append((key, name, points[index : index + TERMS_PER_PLOT]))
    for param, explained in analysis.sweeps.items():
        for index, ge in enumerate(explained):
            planned.append((f"sweep:{param}:{index}", f"sweep-{_slug(param)}-{index}-{_slug(ge.group.cell)}.png", ge))
    return planned


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
                 inputs: Sequence[Path] = ()) -> WrittenReport:
    """report.md, PNG plots and the numbers as parquet in ``out_dir``.

    Every file is checked before any is written: none may be an input, and an existing
    one must be an earlier output of the same kind (``files.guard_output``). Each is
    written atomically.
    """
    from ncuflow.output.export import guard_parquet
    from ncuflow.output.plots import plot_sweep, plot_terms

    out = Path(out_dir)
    guard_report_folder(out, inputs)
    planned = _planned_plots(analysis)
    markdown = out / "report.md"
    guard_markdown(markdown, inputs=inputs, option="-o/--output")
    for _key, name, _what in planned:
        guard_output(out / name, kind="an ncuflow plot", recognise=png_recogniser, inputs=inputs,
                     option="-o/--output")
    if with_parquet:
        for table in ("stability", "explain"):
            guard_parquet(out / f"{table}.parquet", table=table, inputs=inputs, option="-o/--output")
    plots: dict[str, str] = {}
    written: list[Path] = []
    for key, name, what in planned:
        if key.startswith("terms"):
            written.append(plot_terms(what, out / name))  # type: ignore[arg-type]
        else:
            written.append(plot_sweep(what, out / name))  # type: ignore[arg-type]
        plots[key] = name
    write_markdown(report_markdown(analysis, plots), markdown, title="report", inputs=inputs, option="-o/--output")
    parquet: list[Path] = []
    if with_parquet:
        parquet = write_tables(analysis, out, inputs=inputs)
    return WrittenReport(markdown, tuple(written), tuple(parquet))


def write_tables(analysis: Analysis, out_dir: Path, *, inputs: Sequence[Path] = ()) -> list[Path]:
    """stability.parquet and explain.parquet (the numbers behind the report)."""
    import polars as pl

    from ncuflow.analyze.explain import explain_rows
    from ncuflow.analyze.stability import stability_frame
    from ncuflow.output.export import write_parquet

    out = Path(out_dir)
    paths = [out / "stability.parquet"]
    groups = list(analysis.stability) or [s.stability for s in analysis.points]
    write_parquet(stability_frame(groups), paths[0], table="stability", inputs=inputs, option="-o/--output")
    rows = explain_rows([ge for groups in analysis.sweeps.values() for ge in groups])
    if rows:
        paths.append(out / "explain.parquet")
        write_parquet(pl.DataFrame(rows, infer_schema_length=None), paths[1], table="explain", inputs=inputs,
                      option="-o/--output")
    return paths
