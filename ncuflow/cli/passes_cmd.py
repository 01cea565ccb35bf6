"""`ncuflow passes`: what a collection costs in replay passes, predicted offline with Perfworks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ncuflow.cli.options import jobs_option
from ncuflow.errors import UsageError


def _names_line(label: str, names: tuple[str, ...], limit: int = 8) -> str:
    if not names:
        return f"  {label}: none"
    shown = ", ".join(names[:limit]) + (f", … ({len(names) - limit} more)" if len(names) > limit else "")
    return f"  {label} ({len(names)}): {shown}"


def _collection_costs(chip: str | None, collection: str, metrics: tuple[str, ...]) -> dict[str, Any]:
    from ncuflow.profile import passes, perfworks

    library = perfworks.load()
    chip_name = (chip or passes.local_chip()).lower()
    escalation: tuple[str, ...] = ()
    if metrics:
        names, label = passes.parse_metric_list(metrics), "metrics"
    else:
        chosen = passes.get_collection(collection)
        if chosen.metrics is None:
            raise UsageError(
                f"The collection {collection!r} is ncu's section set, not a metric list.",
                "Its passes include sampling and source counters that Perfworks does not model; "
                "the passes a full-set report recorded are in the report itself.",
                "Run `ncuflow passes REPORT` on a full-set report of this chip.",
            )
        names, label, escalation = chosen.metrics, chosen.name, chosen.escalation
    dropped: tuple[str, ...] = ()
    with library.evaluator(chip_name) as evaluator:
        if not metrics:  # ncuflow's own collection: offered with the names the chip knows (as profile runs it)
            offered = passes.for_chip(chosen, evaluator)
            names, escalation, dropped = offered.collection.metrics or (), offered.collection.escalation, offered.dropped
        prediction = passes.predict(evaluator, names, label)
        result = prediction.to_json()
        result["dropped_metrics"] = list(dropped)
        result["recorded_passes_expected"] = prediction.expected_recorded(None)
        if escalation:
            tier2 = passes.predict(evaluator, escalation, f"{label} escalation")
            result["escalation"] = {**tier2.to_json(), "recorded_passes_expected": tier2.expected_recorded(None)}
    return result


def _print_collection(result: dict[str, Any]) -> None:
    click.echo(f"{result['collection']} on {result['chip']}: {result['passes']} passes "
               f"({result['counter_passes']} counter + {result['sass_passes']} SASS-patching) for "
               f"{result['metrics']} metric names; ncu records about {result['recorded_passes_expected']} "
               "(one more on most chips and versions)")
    click.echo(_names_line("free (launch and device attributes, derived)", tuple(result["free_metrics"])))
    click.echo(_names_line("SASS-patched (one pass of their own)", tuple(result["sass_metrics"])))
    click.echo(_names_line("not modelled by Perfworks (sampling, source counters)", tuple(result["unmodelled_metrics"])))
    if result["unknown_metrics"] or not result["dropped_metrics"]:
        click.echo(_names_line(f"unknown on {result['chip']} (ncu would refuse them)", tuple(result["unknown_metrics"])))
    if result["dropped_metrics"]:
        click.echo(_names_line(f"dropped: not metrics on {result['chip']} (profile drops them before ncu runs)",
                               tuple(result["dropped_metrics"])))
    escalation = result.get("escalation")
    if escalation:
        click.echo(f"escalation (only for launches tier 1 leaves undecided): {escalation['passes']} passes "
                   f"({escalation['counter_passes']} counter + {escalation['sass_passes']} SASS), "
                   f"ncu records about {escalation['recorded_passes_expected']}")
        if escalation["unknown_metrics"]:
            click.echo(_names_line(f"unknown on {result['chip']}", tuple(escalation["unknown_metrics"])))
    click.echo(f"# Perfworks: {result['library']}")


def _report_rows(paths: tuple[Path, ...], jobs: int | None = None) -> list[dict[str, Any]]:
    from ncuflow.cli.progress import progress_bar
    from ncuflow.profile import passes, perfworks
    from ncuflow.read.jobs import resolve_jobs
    from ncuflow.read.pool import map_reports
    from ncuflow.read.reportfile import find_reports

    library = perfworks.load()
    rows: list[dict[str, Any]] = []
    reports = find_reports(paths)
    with progress_bar() as bar:
        collected = list(map_reports(passes.read_report_collection, [(report,) for report in reports],
                                     jobs=resolve_jobs(jobs), progress=bar.stage("reading", len(reports))))
    for report, info in zip(reports, collected, strict=True):
        row: dict[str, Any] = {
            "report": str(report), "device": info.device, "chip": info.chip,
            "ncu_version": info.ncu_version, "recorded_passes": info.recorded_passes,
            "warmup_passes": info.warmup_passes, "metrics": len(info.metrics),
            "counter_only": info.counter_only, "predicted_passes": None,
            "counter_passes": None, "sass_passes": None, "ncu_passes": None, "unmodelled_metrics": None,
            "unknown_metrics": None, "note": None,
        }
        if info.chip is None or info.chip.upper() not in library.chips():
            row["note"] = (f"Perfworks ({library.path.name}) does not model this chip "
                           f"({info.chip or 'unknown chip'})")
        else:
            with library.evaluator(info.chip) as evaluator:
                prediction = passes.predict(evaluator, info.metrics, "report")
            row.update(
                predicted_passes=prediction.expected_recorded(info.ncu_version, info.warmup_passes),
                counter_passes=prediction.counter_passes, sass_passes=prediction.sass_passes,
                ncu_passes=passes.ncu_overhead(info.chip, info.ncu_version),
                unmodelled_metrics=len(prediction.unmodelled_metrics),
                unknown_metrics=list(prediction.unknown_metrics),
            )
            if not info.counter_only:
                row["note"] = (f"{len(prediction.unmodelled_metrics)} sampling / source-counter names cost "
                               "passes Perfworks does not model")
        rows.append(row)
    return rows


def _predicted_parts(row: dict[str, Any]) -> str:
    """The parts of a report's predicted passes, adding up to it: "8 counter + 0 SASS + 1 ncu + 1 warm-up"."""
    parts = [f"{row['counter_passes']} counter", f"{row['sass_passes']} SASS"]
    parts += [f"{row[key]} {name}" for key, name in (("ncu_passes", "ncu"), ("warmup_passes", "warm-up")) if row[key]]
    return " + ".join(parts)


@click.command("passes")
@click.argument("reports", nargs=-1, type=click.Path(path_type=Path))
@click.option("--chip", help="Perfworks chip name: gh100 (H100/H200), ga100, ga102, ad102, tu104, gb202... "
              "Default: this machine's GPU.")
@click.option("--collection", default="decisive", show_default=True,
              help="decisive (tier 1 + its escalation), tier1, tier2, decisive+tier2, fields; "
                   "roofline, occupancy, stalls (what the roofline and classify --evidence read).")
@click.option("--metrics", "metrics", multiple=True, help="A metric list (comma-separated) instead of a collection.")
@click.option("--list-chips", is_flag=True, help="List the chips the Perfworks library knows and stop.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (an object for --chip, an array for reports).")
@jobs_option
def passes_command(reports: tuple[Path, ...], chip: str | None, collection: str, metrics: tuple[str, ...],
                   list_chips: bool, as_json: bool, jobs: int | None) -> None:
    """Replay passes a collection costs on a chip, predicted offline with NVIDIA's Perfworks;
    or, for REPORTS, the passes predicted for the metrics each holds beside the ones ncu recorded.

    \b
      ncuflow passes --chip gh100                      # the decisive collection
      ncuflow passes --chip ga100 --metrics sm__throughput.avg.pct_of_peak_sustained_elapsed
      ncuflow passes profiles/ --json                  # predicted vs recorded
    """
    if list_chips:
        from ncuflow.profile import perfworks

        names = [c.lower() for c in perfworks.load().chips()]
        click.echo(json.dumps(names) if as_json else " ".join(names))
        return
    if reports:
        if chip or metrics:
            raise UsageError("--chip and --metrics describe a planned collection; reports carry their own.",
                             "", "Drop REPORTS to plan a collection, or drop --chip/--metrics to read reports.")
        rows = _report_rows(reports, jobs)
        if as_json:
            click.echo(json.dumps(rows, indent=1))
            return
        for row in rows:
            predicted = "?" if row["predicted_passes"] is None else row["predicted_passes"]
            detail = f" ({_predicted_parts(row)})" if row["counter_passes"] is not None else ""
            recorded = "not recorded" if row["recorded_passes"] is None else row["recorded_passes"]
            click.echo(f"{row['report']}: {row['device'] or 'unknown GPU'} ({row['chip'] or '?'}), "
                       f"ncu {row['ncu_version'] or '?'}: predicted {predicted}{detail}, recorded {recorded}"
                       + (f"; {row['note']}" if row["note"] else ""))
        return
    result = _collection_costs(chip, collection, metrics)
    if as_json:
        click.echo(json.dumps(result, indent=1))
        return
    _print_collection(result)
