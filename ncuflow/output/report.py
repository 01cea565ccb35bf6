"""The study report of a profile store on disk: report.md, PNG plots and parquet tables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ncuflow.analyze.study import Analysis
from ncuflow.output.markdown import report_markdown

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


def write_report(analysis: Analysis, out_dir: Path, *, with_parquet: bool = True) -> WrittenReport:
    """report.md, PNG plots and the numbers as parquet in ``out_dir``."""
    from ncuflow.output.plots import plot_sweep, plot_terms

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots: dict[str, str] = {}
    written: list[Path] = []
    points = list(analysis.points)
    for index in range(0, len(points), TERMS_PER_PLOT):
        name = "terms.png" if index == 0 else f"terms-{index // TERMS_PER_PLOT + 1}.png"
        written.append(plot_terms(points[index : index + TERMS_PER_PLOT], out / name, threshold=analysis.threshold))
        plots["terms" if index == 0 else f"terms:{index // TERMS_PER_PLOT + 1}"] = name
    for param, explained in analysis.sweeps.items():
        for index, ge in enumerate(explained):
            name = f"sweep-{_slug(param)}-{index}-{_slug(ge.group.cell)}.png"
            written.append(plot_sweep(ge, out / name))
            plots[f"sweep:{param}:{index}"] = name
    markdown = out / "report.md"
    markdown.write_text(report_markdown(analysis, plots), encoding="utf-8")
    parquet: list[Path] = []
    if with_parquet:
        parquet = write_tables(analysis, out)
    return WrittenReport(markdown, tuple(written), tuple(parquet))


def write_tables(analysis: Analysis, out_dir: Path) -> list[Path]:
    """stability.parquet and explain.parquet (the numbers behind the report)."""
    import polars as pl

    from ncuflow.analyze.explain import explain_rows
    from ncuflow.analyze.stability import stability_frame
    from ncuflow.output.export import write_parquet

    out = Path(out_dir)
    paths = [out / "stability.parquet"]
    groups = list(analysis.stability) or [s.stability for s in analysis.points]
    write_parquet(stability_frame(groups), paths[0], table="stability")
    rows = explain_rows([ge for groups in analysis.sweeps.values() for ge in groups])
    if rows:
        paths.append(out / "explain.parquet")
        write_parquet(pl.DataFrame(rows, infer_schema_length=None), paths[1], table="explain")
    return paths
