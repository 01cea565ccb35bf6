"""``ncuflow profile``, ``ncuflow doctor`` and ``ncuflow sweep``: the GPU-host commands.

These never import polars (the GPU host has none).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from ncuflow.cli.options import threshold_option, timeout_option
from ncuflow.errors import NcuflowError, UsageError
from ncuflow.profile.escalate import escalates
from ncuflow.profile.ncu import (
    CACHE_CONTROLS,
    CLOCK_CONTROLS,
    DECISIVE,
    DECISIVE_TIER2,
    NAMED_SETS,
    REPLAY_MODES,
    NcuOptions,
)

APP_ARGV_KEY = "ncuflow_app_argv"


class _CommandAfterDashes(click.Command):
    """Keeps everything after ``--`` as the program to profile (click would mix it with SPEC)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta[APP_ARGV_KEY] = args[cut + 1:]
            args = args[:cut]
        return super().parse_args(ctx, args)


def _console() -> Any:
    from ncuflow.files import make_console

    return make_console()


def _options(replay_mode: str, cache_control: str, clock_control: str, metric_set: str,
             sections: tuple[str, ...], metrics: tuple[str, ...], launch_count: int | None,
             launch_skip: int | None, kernel: str | None, nvtx: tuple[str, ...]) -> NcuOptions:
    extra = tuple(m.strip() for chunk in metrics for m in chunk.split(",") if m.strip())
    return NcuOptions(
        replay_mode=replay_mode, cache_control=cache_control, clock_control=clock_control,
        metric_set=metric_set, sections=tuple(sections), extra_metrics=extra,
        launch_count=launch_count, launch_skip=launch_skip, kernel_regex=kernel,
        nvtx_include=tuple(nvtx),
    )


def print_run_table(record: Any, console: Any, threshold: float) -> None:
    """The classify table of a stored run (extract + classify + render; no polars)."""
    try:
        from ncuflow.analyze.classify import classify
        from ncuflow.output.render import print_launch_table
        from ncuflow.read.extract import iter_launches
    except ImportError as missing:  # the read side is optional on a bare GPU host
        console.print(f"(no classify table: {missing})")
        return
    try:
        launches = list(iter_launches(record.report_path))
    except NcuflowError as error:
        console.print(f"[yellow]The stored report cannot be classified:[/yellow] {error}")
        return
    verdicts = [classify(launch, threshold=threshold) for launch in launches]
    print_launch_table(launches, verdicts, console, title=f"{record.cell} {record.run_id}")


def _print_pass_check(lines: list[str]) -> None:
    """The predicted passes (a comment line) and the names dropped for the chip (a warning)."""
    for line in lines:
        click.echo(f"ncuflow: {line}" if line.startswith("warning") else f"# {line}", err=True)


def _collection_options(function: Any) -> Any:
    decorators = [
        click.option("--replay-mode", type=click.Choice(REPLAY_MODES), default="kernel", show_default=True,
                     help="ncu replay: kernel (each kernel replayed), application, range, app-range."),
        click.option("--cache-control", type=click.Choice(CACHE_CONTROLS), default="all", show_default=True,
                     help="all: flush caches before each replay pass; none: keep them warm."),
        click.option("--clock-control", type=click.Choice(CLOCK_CONTROLS), default="base", show_default=True,
                     help="base: lock clocks to base; none: leave GPU boost on (recorded either way)."),
        click.option("--set", "metric_set", type=click.Choice((DECISIVE, DECISIVE_TIER2, *NAMED_SETS, "none")),
                     default=DECISIVE, show_default=True,
                     help="decisive: tier 1 of ncuflow's decisive metrics (decisive-tier2: its escalation); "
                     "or one of ncu's section sets."),
        click.option("--section", "sections", multiple=True, help="Add an ncu section (repeatable)."),
        click.option("--metrics", "metrics", multiple=True, help="Add raw metrics (comma-separated)."),
        click.option("--launch-count", type=click.IntRange(min=1), help="Profile at most N kernel launches."),
        click.option("--launch-skip", type=click.IntRange(min=0), help="Skip the first N matching launches."),
        click.option("--kernel", help="Profile only kernels whose name matches this regex."),
        click.option("--nvtx", multiple=True,
                     help="ncu --nvtx-include expression, e.g. 'step/' (a cell defaults to its own range)."),
    ]
    for decorator in reversed(decorators):
        function = decorator(function)
    return function


@click.command(cls=_CommandAfterDashes, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("spec", required=False)
@click.option("--store", "store_root", type=click.Path(file_okay=False, path_type=Path),
              default=Path("profiles"), show_default=True, help="Profile store root.")
@click.option("--cells-dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Folder of user cells.")
@click.option("--ncu", "ncu_path", help="The ncu executable (default: $NCU, PATH, /opt/nvidia/nsight-compute).")
@_collection_options
@click.option("--replicas", type=click.IntRange(min=1), default=1, show_default=True,
              help="Profile the cell N times in fresh ncu processes.")
@timeout_option()
@threshold_option(help="On-wall threshold of the table (a fraction in (0, 1]).")
@click.option("--time", "time_first", is_flag=True,
              help="Also time the cell with CUDA events outside ncu (stored as duration_unprofiled).")
@click.option("--dry-run", is_flag=True, help="Print the exact ncu command and stop.")
@click.option("--chip", help="Predict passes (and drop unknown names) for this chip instead of the GPU's, e.g. gh100.")
@click.option("--escalate/--no-escalate", default=True, show_default=True,
              help="With the decisive set: profile tier 2 for a run whose launches tier 1 leaves undecided.")
@click.pass_context
def profile_command(ctx: click.Context, spec: str | None, store_root: Path, cells_dir: Path | None,
                    ncu_path: str | None, replay_mode: str, cache_control: str, clock_control: str,
                    metric_set: str, sections: tuple[str, ...], metrics: tuple[str, ...],
                    launch_count: int | None, launch_skip: int | None, kernel: str | None,
                    nvtx: tuple[str, ...], replicas: int, timeout: float, threshold: float,
                    time_first: bool, dry_run: bool, chip: str | None, escalate: bool) -> None:
    """Profile a cell SPEC (e.g. flat_decode:layout=scatter) or any program after `--`
    under ncu, store the run, and print its classify table.

    \b
      ncuflow profile paged_decode:page=16,kv=shared
      ncuflow profile --kernel 'gemm' -- ./app --size 4096
      ncuflow profile flat_decode --dry-run
    """
    from ncuflow.profile import orchestrate

    app_argv: list[str] = list(ctx.meta.get(APP_ARGV_KEY, []))
    if spec and app_argv:
        raise UsageError("Give either a cell spec or a program after `--`, not both.", "",
                         "Drop one of them.")
    if not spec and not app_argv:
        raise UsageError("Nothing to profile.", "ncuflow profile takes a cell spec or a program after `--`.",
                         "Run `ncuflow cells` for the cells, or write `ncuflow profile -- ./app ARGS`.")
    if time_first and not spec:
        raise UsageError("--time times a cell; it cannot time an arbitrary program.", "",
                         "Drop --time, or profile a cell spec.")
    options = _options(replay_mode, cache_control, clock_control, metric_set, sections, metrics,
                       launch_count, launch_skip, kernel, nvtx)
    from ncuflow.profile.precheck import check_passes

    check = check_passes(options, chip)
    options = check.options
    console = _console()
    if not dry_run:
        for line in check.lines():
            console.print(f"[yellow]{escape(line)}[/yellow]" if line.startswith("warning") else escape(line),
                          soft_wrap=True)
    if spec:
        from ncuflow.cells.registry import get_cell, parse_spec

        cell_spec = parse_spec(spec, cells_dir)
        if not get_cell(cell_spec.cell, cells_dir).needs_ncu:
            raise UsageError(
                f"The cell {cell_spec.cell} runs on the host and launches no kernel to profile.",
                "ncu profiles GPU kernels; this cell measures host-side work.",
                f"Time it instead: ncuflow time {cell_spec.text()}",
            )
        plan = orchestrate.plan_cell(cell_spec, options, store_root, cells_dir=cells_dir,
                                     ncu=ncu_path, dry_run=dry_run)
    else:
        plan = orchestrate.plan_command_line(app_argv, options, store_root, ncu=ncu_path, dry_run=dry_run)
    if dry_run:
        click.echo(plan.shell_line())
        note = "" if plan.ncu_found else "  (ncu not found here: shown as given)"
        click.echo(f"# run folder: {plan.final_path}{note}", err=True)
        _print_pass_check(check.lines())
        if replicas > 1:
            click.echo(f"# × {replicas} replicas, each in a fresh ncu process", err=True)
        return
    unprofiled = None
    if time_first:
        from ncuflow.cells.timing import time_cell

        with console.status(f"timing {cell_spec.text()} with CUDA events (no ncu)"):
            timing = time_cell(cell_spec, cells_dir=cells_dir).to_dict()
        timing.pop("samples_us", None)
        unprofiled = timing
    for replica in range(replicas):
        label = cell_spec.text() if spec else " ".join(app_argv)
        with console.status(f"profiling {label} under ncu") as status:

            def show(line: str, status: Any = status) -> None:
                status.update(escape(line[:110]))

            if spec:
                record = orchestrate.profile_cell(
                    cell_spec, options, store_root, cells_dir=cells_dir, timeout=timeout,
                    progress=show, ncu=ncu_path, manifest_extra={"replica": replica},
                    duration_unprofiled=unprofiled)
            else:
                record = orchestrate.profile_command_line(
                    app_argv, options, store_root, timeout=timeout, progress=show, ncu=ncu_path,
                    manifest_extra={"replica": replica})
        dropped = record.manifest.dropped_metrics or ()
        if dropped:
            console.print(f"[yellow]this ncu does not know {', '.join(dropped)}: collected without them[/yellow]")
        console.print(f"stored {record.path} (ncu wall time {record.manifest.wall_time_s} s)",
                      soft_wrap=True)
        print_run_table(record, console, threshold)
        if escalate and escalates(options):

            def again(tier2: NcuOptions, root: Path, extra: dict[str, Any], replica: int = replica) -> Any:
                extra = {**extra, "replica": replica}
                with console.status("profiling tier 2 under ncu"):
                    if spec:
                        return orchestrate.profile_cell(cell_spec, tier2, root, cells_dir=cells_dir,
                                                        timeout=timeout, ncu=ncu_path, manifest_extra=extra)
                    return orchestrate.profile_command_line(app_argv, tier2, root, timeout=timeout,
                                                            ncu=ncu_path, manifest_extra=extra)

            from ncuflow.cli.escalation import escalate_to_tier2

            escalate_to_tier2(record, options, store_root, chip, threshold, console, again)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--ncu", "ncu_path", help="Check this ncu instead of searching.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.option("--strict", is_flag=True, help="Exit 1 when this machine cannot profile.")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="Also connect to the Ray cluster at ADDRESS and say how many GPUs it offers.")
def doctor_command(ncu_path: str | None, as_json: bool, strict: bool, ray_address: str | None) -> None:
    """Check ncu, ncu_report, the GPU, counter permission, package versions and Ray."""
    from ncuflow.profile.doctor import Check, run_checks, verdict
    from ncuflow.profile.ray_sweep import ray_doctor_checks

    checks = run_checks(ncu_path)
    checks += [Check(name, status, detail, fix) for name, status, detail, fix in ray_doctor_checks(ray_address)]  # type: ignore[arg-type]
    ok, sentence = verdict(checks)
    if as_json:
        click.echo(json.dumps({"can_profile": ok, "summary": sentence,
                               "checks": [c.__dict__ for c in checks]}, indent=2))
    else:
        from rich.table import Table

        console = _console()
        table = Table(show_header=True, header_style="bold")
        for column in ("check", "status", "detail"):
            table.add_column(column)
        style = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim", "info": "cyan"}
        for check in checks:
            detail = escape(check.detail)
            if check.fix and check.status != "ok":
                detail += f"\n[dim]fix: {escape(check.fix)}[/dim]"
            table.add_row(check.name, f"[{style[check.status]}]{check.status}[/]", detail)
        console.print(table)
        console.print(escape(sentence))
    if strict and not ok:
        raise click.exceptions.Exit(1)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("sweep_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--store", "store_root", type=click.Path(file_okay=False, path_type=Path),
              default=Path("profiles"), show_default=True, help="Profile store root.")
@click.option("--cells-dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--ncu", "ncu_path", help="The ncu executable.")
@timeout_option(default=None, help="Seconds per profile (overrides the file's timeout).")
@click.option("--keep-going", is_flag=True, help="Continue past a point's own failure.")
@click.option("--dry-run", is_flag=True, help="List the points (and what is already stored) and stop.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="auto", default=None, metavar="[ADDRESS]",
              help="Run each profile as a Ray task needing one GPU, on the cluster at ADDRESS "
                   "(without one: RAY_ADDRESS or the cluster `ray start` runs here). Runs come back to this store.")
@click.option("--ray-local-gpus", type=click.IntRange(min=1), default=None, metavar="N",
              help="Start a local Ray instance that declares N GPUs and run the tasks on it.")
@click.option("--escalate/--no-escalate", default=True, show_default=True,
              help="After tier 1, profile the decisive tier 2 for every run whose launches tier 1 leaves "
                   "undecided (stored under STORE/.tier2, read together with the run).")
def sweep_command(sweep_file: Path, store_root: Path, cells_dir: Path | None, ncu_path: str | None,
                  timeout: float | None, keep_going: bool, dry_run: bool, ray_address: str | None,
                  ray_local_gpus: int | None, escalate: bool) -> None:
    """Profile every point of a sweep FILE (TOML); interrupt any time and re-run to resume.

    With --ray or --ray-local-gpus each profile is a Ray task that needs one GPU (Ray sets
    CUDA_VISIBLE_DEVICES); the runs are shipped back and stored here, as a local sweep stores them.
    With the decisive collection, runs tier 1 leaves undecided are then profiled with tier 2,
    as `ncuflow profile` does (--no-escalate: never); a resumed sweep finishes what a stopped
    one left.
    """
    from ncuflow.profile.sweep import axes_summary, describe_points, load_sweep

    plan = load_sweep(sweep_file, cells_dir)
    console = _console()
    if dry_run:
        from rich.table import Table

        rows = describe_points(plan, store_root)
        table = Table(title=f"{plan.name}: {plan.cell} {axes_summary(plan.axes)}, "
                            f"{plan.replicas} replicas", header_style="bold")
        for column in ("#", "point", "key", "stored", "to run"):
            table.add_column(column)
        for row in rows:
            table.add_row(str(row["index"]), escape(row["axes"]), row["key8"], str(row["done"]),
                          str(row["to_run"]))
        console.print(table)
        fixed = ", ".join(f"{k}={v}" for k, v in plan.fixed.items())
        console.print(escape(f"fixed: {fixed or '(cell defaults)'}; ncu: {plan.options.metric_set_label()}, "
                             f"replay {plan.options.replay_mode}, cache {plan.options.cache_control}, "
                             f"clocks {plan.options.clock_control}; timeout {plan.timeout:g} s"))
        tier2 = " (then tier 2 for runs tier 1 leaves undecided)" if escalate and escalates(plan.options) else ""
        console.print(f"{len(rows)} points, {sum(r['to_run'] for r in rows)} profiles to run{tier2}")
        return
    try:
        if ray_address is not None and ray_local_gpus is not None:
            raise UsageError("Give --ray ADDRESS or --ray-local-gpus N, not both.", "",
                             "--ray joins a running cluster; --ray-local-gpus starts one here.")
        if ray_address is not None or ray_local_gpus is not None:
            from ncuflow.profile.ray_sweep import run_sweep_on_ray

            outcome = run_sweep_on_ray(plan, store_root, address=None if ray_address == "auto" else ray_address,
                                       local_gpus=ray_local_gpus, ncu=ncu_path, cells_dir=cells_dir,
                                       timeout=timeout, keep_going=keep_going, console=console, escalate=escalate)
        else:
            from ncuflow.profile.sweep_escalation import sweep_here

            outcome = sweep_here(plan, store_root, escalate=escalate, ncu=ncu_path, cells_dir=cells_dir,
                                 timeout=timeout, keep_going=keep_going, console=console)
    except NcuflowError as error:
        console.print("[yellow]The sweep stopped; every finished run is stored. "
                      "Re-run the same command to resume.[/yellow]")
        raise error
    tier2 = f", {len(outcome.escalated)} escalated to tier 2" if outcome.escalated else ""
    console.print(f"done: {len(outcome.profiled)} profiled{tier2}, {outcome.skipped_points} points skipped "
                  f"(already complete), {len(outcome.failures)} failed")
    if outcome.unchecked:
        console.print(f"[yellow]{outcome.unchecked} runs could not be read here to decide their escalation "
                      "(no ncu_report, or a damaged report): run the sweep again where ncuflow reads reports."
                      "[/yellow]")
    if outcome.failures:
        raise click.exceptions.Exit(3)
