"""``ncuflow profile``, ``ncuflow doctor`` and ``ncuflow sweep``: the GPU-host commands.

These never import polars (the GPU host has none).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from ncuflow.cli.profile_options import profile_settings, settings_options
from ncuflow.errors import NcuflowError, UsageError
from ncuflow.files.safe_text import markup_text
from ncuflow.profile.ncu import (
    CACHE_CONTROLS,
    CLOCK_CONTROLS,
    DECISIVE,
    DECISIVE_TIER2,
    NAMED_SETS,
    REPLAY_MODES,
    NcuOptions,
)
from ncuflow.profile.why import FROM_VERDICT, WHY_WALLS
from ncuflow.store.collection import GRAPH_PROFILING

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


def _print_pass_check(lines: list[str]) -> None:
    """The predicted passes (a comment line) and the names dropped for the chip (a warning)."""
    for line in lines:
        click.echo(f"ncuflow: {line}" if line.startswith("warning") else f"# {line}", err=True)


class _ConsoleObserver:
    """``profile``'s observer: a status line while ncu runs, a table for each stored run."""

    def __init__(self, console: Any, threshold: float, announced: tuple[str, ...] = ()) -> None:
        self.console, self.threshold = console, threshold
        self.announced = set(announced)  # names dropped before ncu ran, already said
        self.status: Any = None

    def working(self, what: str) -> Any:
        if self.status is not None:
            self.status.stop()
        self.status = self.console.status(escape(what))
        self.status.start()
        return lambda line: self.status.update(escape(line[:110]))

    def _done(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None

    def stored(self, run: Any, tier: int) -> None:
        self._done()
        record = run.record
        dropped = [m for m in record.manifest.collection.options.dropped_metrics if m not in self.announced]
        if dropped:
            self.console.print(f"[yellow]this ncu does not know {markup_text(', '.join(dropped))}: "
                               "collected without them[/yellow]")
        label = f"stored tier {tier} in" if tier > 1 else "stored"
        self.console.print(f"{label} {markup_text(record.path)} "
                           f"(ncu wall time {record.manifest.outcome.wall_time_s} s)",
                           soft_wrap=True)
        if tier == 1:
            print_launches(run.launches, self.console, self.threshold, markup_text(f"{record.cell} {record.run_id}"))

    def escalating(self, run: Any, check: Any) -> None:
        from ncuflow.analyze.classify import ESCALATION_BAND

        found = run.record.manifest.provenance.escalation
        cost = f" ({check.recorded_expected} passes predicted on {check.chip})" if check.passes is not None else ""
        self.console.print(f"tier 1 leaves {found.undecided} of {found.launches} launches undecided (largest term "
                           f"within {ESCALATION_BAND:g}× below the on-wall threshold {self.threshold:g}): "
                           f"profiling tier 2{cost}", soft_wrap=True)
        for line in check.lines()[1:] if check.passes is not None else check.lines():
            self.console.print(escape(line), soft_wrap=True)

    def explaining(self, run: Any, wall: str | None, check: Any) -> None:
        from ncuflow.cli.why_view import passes_line, row_line
        from ncuflow.profile.why import why_row

        if wall is None:
            self.console.print("no why tier: no launch of the run has a verdict the why tier explains "
                               "(every one unknown); name a wall with --why WALL", soft_wrap=True)
            return
        self.console.print(f"profiling the why tier (tier 3) for {escape(row_line(why_row(wall)))}; "
                           f"{escape(passes_line(check))}", soft_wrap=True)


def print_launches(launches: Any, console: Any, threshold: float, title: str) -> None:
    """The classify table of a run's launches (classify + render; no polars)."""
    try:
        from ncuflow.analyze.classify import classify
        from ncuflow.output.render import print_launch_table
    except ImportError as missing:  # the read side is optional on a bare GPU host
        console.print(f"(no classify table: {markup_text(missing)})")
        return
    print_launch_table(launches, [classify(launch, threshold=threshold) for launch in launches], console,
                       title=title)


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
        click.option("--graph-profiling", type=click.Choice(GRAPH_PROFILING),
                     help="CUDA graphs: node profiles each kernel node as its own launch (ncu's default); "
                          "graph profiles each graph as one workload (marked [CUDA graph])."),
    ]
    for decorator in reversed(decorators):
        function = decorator(function)
    return function


@click.command(cls=_CommandAfterDashes, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("spec", required=False)
@settings_options
@_collection_options
@click.option("--replicas", type=click.IntRange(min=1, max=1000), default=1, show_default=True,
              help="Profile the cell N times in fresh ncu processes.")
@click.option("--time", "time_first", is_flag=True,
              help="Also time the cell with CUDA events outside ncu (stored as duration_unprofiled).")
@click.option("--attach", "attach_pid", type=click.IntRange(min=1), metavar="PID",
              help="Attach to the running process PID instead of starting one (Nsight Compute 2026.2.1+).")
@click.option("--dry-run", is_flag=True, help="Print the exact ncu command and stop.")
@click.option("--why", is_flag=False, flag_value=FROM_VERDICT, default=None, metavar="[WALL]",
              type=click.Choice((*WHY_WALLS, FROM_VERDICT)),
              help="After the verdict, also collect the ncu sections whose rules explain the binding wall "
                   "(the why tier, stored under STORE/.tier3); WALL forces one. Write it after SPEC.")
@click.pass_context
def profile_command(ctx: click.Context, spec: str | None, replicas: int, time_first: bool, dry_run: bool,
                    why: str | None, attach_pid: int | None, **given: Any) -> None:
    """Profile a cell SPEC (e.g. flat_decode:layout=scatter) or any program after `--`
    under ncu, store the run, and print its classify table.

    \b
      ncuflow profile paged_decode:page=16,kv=shared
      ncuflow profile --kernel 'gemm' -- ./app --size 4096
      ncuflow profile flat_decode --dry-run
      ncuflow profile flat_decode --why --dry-run       # + the why tier's sections and passes
      ncuflow profile --attach 1234 --kernel 'attention' --launch-count 20
    """
    from ncuflow.profile.plan import ProfileJob, attach_problem, plan_job
    from ncuflow.profile.precheck import check_passes
    from ncuflow.profile.session import profile_replicas

    settings = profile_settings(given)
    target = _target(spec, list(ctx.meta.get(APP_ARGV_KEY, [])), settings, time_first, attach_pid)
    options = replace(_options(**{k: given[k] for k in _COLLECTION_KEYS}), graph_profiling=given["graph_profiling"])
    check = check_passes(options, settings.escalation.chip)
    job = ProfileJob(target, check.options)
    if dry_run:
        plan = plan_job(job, settings, dry_run=True)
        click.echo(plan.shell_line())
        note = "" if plan.ncu_found else "  (ncu not found here: shown as given)"
        click.echo(f"# run folder: {plan.final_path}{note}", err=True)
        if (problem := attach_problem(plan)) is not None:
            click.echo(f"ncuflow: warning: {problem} A run would stop here.", err=True)
        _print_pass_check(check.lines())
        if why is not None:
            _print_why_plan(job, plan, settings, why)
        if replicas > 1:
            click.echo(f"# × {replicas} replicas, each in a fresh ncu process", err=True)
        return
    console = _console()
    for line in check.lines():
        console.print(f"[yellow]{escape(line)}[/yellow]" if line.startswith("warning") else escape(line), soft_wrap=True)
    if time_first:
        job = _timed(job, settings, console)
    observer = _ConsoleObserver(console, settings.escalation.threshold, check.dropped)
    try:
        results = profile_replicas(job, settings, replicas, observer, why)
    finally:
        observer._done()
    for result in results:
        _print_escalation(result, console, settings.escalation.threshold)


def _print_why_plan(job: Any, plan: Any, settings: Any, why: str) -> None:
    """``--why --dry-run``: the why tier's sections and predicted passes for the forced wall (and
    its ncu command, on stdout), or for every wall the verdict may name."""
    from dataclasses import replace

    from ncuflow.cli.why_view import row_lines
    from ncuflow.profile.plan import plan_job
    from ncuflow.profile.why import WHY, WHY_TIER, why_check, why_row
    from ncuflow.store import tiers

    ncu = plan.ncu_path if plan.ncu_found else None
    rows = WHY if why == FROM_VERDICT else (why_row(why),)
    heading = ("then the why tier (tier 3), the row of the verdict's wall" if why == FROM_VERDICT
               else f"then the why tier (tier 3) of {why}")
    click.echo(f"# {heading}, stored under {tiers.tier_root(plan.store_root, WHY_TIER)}:", err=True)
    for row in rows:
        check = why_check(job.options, row.wall, settings.escalation.chip, ncu)
        for line in row_lines(row, check):
            click.echo(f"#   {line}", err=True)
        if why != FROM_VERDICT:
            third = replace(job, options=check.options, store=tiers.tier_root(plan.store_root, WHY_TIER))
            click.echo(plan_job(third, settings, dry_run=True).shell_line())


_COLLECTION_KEYS = ("replay_mode", "cache_control", "clock_control", "metric_set", "sections", "metrics",
                    "launch_count", "launch_skip", "kernel", "nvtx")


def _target(spec: str | None, app_argv: list[str], settings: Any, time_first: bool, attach_pid: int | None) -> Any:
    """What to profile: a cell spec, the program after ``--`` or a running process (exactly one of them)."""
    from ncuflow.profile.plan import AttachTarget, CellTarget, CommandTarget

    if attach_pid is not None:
        if spec or app_argv or time_first:
            raise UsageError("--attach profiles a process that runs already; it takes no cell spec, program "
                             "or --time.", "", "Drop the cell spec, the program after `--` and --time, or --attach.")
        return AttachTarget(attach_pid)
    if spec and app_argv:
        raise UsageError("Give either a cell spec or a program after `--`, not both.", "", "Drop one of them.")
    if not spec and not app_argv:
        raise UsageError("Nothing to profile.", "ncuflow profile takes a cell spec or a program after `--`.",
                         "Run `ncuflow cells` for the cells, or write `ncuflow profile -- ./app ARGS`.")
    if not spec:
        if time_first:
            raise UsageError("--time times a cell; it cannot time an arbitrary program.", "",
                             "Drop --time, or profile a cell spec.")
        return CommandTarget(tuple(app_argv))
    cell_spec = settings.cells.parse(spec)
    if not settings.cells.definition(cell_spec.cell).needs_ncu:
        raise UsageError(
            f"The cell {cell_spec.cell} runs on the host and launches no kernel to profile.",
            "ncu profiles GPU kernels; this cell measures host-side work.",
            f"Time it instead: ncuflow time {cell_spec.text()}",
        )
    return CellTarget(cell_spec)


def _timed(job: Any, settings: Any, console: Any) -> Any:
    """The job with the cell timed by CUDA events outside ncu first (its ``duration_unprofiled``)."""
    from dataclasses import replace

    from ncuflow.cells.timing import time_cell

    with console.status(f"timing {markup_text(job.label)} with CUDA events (no ncu)"):
        timing = time_cell(job.target.spec, cells_dir=settings.cells.cells_dir).to_dict()
    timing.pop("samples_us", None)
    return replace(job, cell_facts=replace(job.cell_facts, duration_unprofiled=timing))


def _print_escalation(result: Any, console: Any, threshold: float) -> None:
    """A replica's tiers together, as every reader merges them (where any escalation run was
    merged), and why an escalation run could not be paired."""
    for problem in result.unpaired:
        console.print(f"[yellow]{escape(str(result.tier1.record.report_path))}: {escape(problem)}[/yellow]",
                      soft_wrap=True)
    if result.merged == (1,):
        return
    record = result.tier1.record
    runs = {2: result.tier2, 3: result.why}
    tiers = " + ".join(f"tier {tier}" for tier in result.merged)
    ids = ", ".join(run.record.run_id for tier, run in runs.items() if tier in result.merged and run is not None)
    print_launches(result.launches, console, threshold, markup_text(f"{record.cell} {record.run_id}: {tiers} ({ids})"))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--ncu", "ncu_path", help="Check this ncu instead of searching.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.option("--strict", is_flag=True, hidden=True,
              help="Kept for old scripts: doctor always exits 1 when this machine cannot profile.")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="Also connect to the Ray cluster at ADDRESS and say how many GPUs it offers.")
def doctor_command(ncu_path: str | None, as_json: bool, strict: bool, ray_address: str | None) -> None:
    """Check ncu, ncu_report, the GPU, counter permission, DCGM, package versions and Ray.

    Exits 0 when this machine can profile, 1 when it cannot (the last line says why).
    """
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
    if not ok:  # --strict, once needed for this, changes nothing
        raise click.exceptions.Exit(1)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("sweep_file", type=click.Path(dir_okay=False, path_type=Path))
@settings_options(timeout_default=None)
@click.option("--keep-going", is_flag=True, help="Continue past a point's own failure.")
@click.option("--dry-run", is_flag=True, help="List the points (and what is already stored) and stop.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="auto", default=None, metavar="[ADDRESS]",
              help="Run each profile as a Ray task needing one GPU, on the cluster at ADDRESS "
                   "(without one: RAY_ADDRESS or the cluster `ray start` runs here). Runs come back to this store.")
@click.option("--ray-local-gpus", type=click.IntRange(min=1), default=None, metavar="N",
              help="Start a local Ray instance that declares N GPUs and run the tasks on it.")
def sweep_command(sweep_file: Path, keep_going: bool, dry_run: bool, ray_address: str | None,
                  ray_local_gpus: int | None, **given: Any) -> None:
    """Profile every point of a sweep FILE (TOML); interrupt any time and re-run to resume.

    With --ray or --ray-local-gpus each profile is a Ray task that needs one GPU (Ray sets
    CUDA_VISIBLE_DEVICES); the runs are shipped back and stored here, as a local sweep stores them.
    With the decisive collection, runs tier 1 leaves undecided are then profiled with tier 2,
    as `ncuflow profile` does (--no-escalate: never); a resumed sweep finishes what a stopped
    one left.
    """
    from ncuflow.profile.settings import RayPlacement, SweepSettings
    from ncuflow.profile.sweep import load_sweep
    from ncuflow.profile.sweep_run import run_sweep

    if ray_address is not None and ray_local_gpus is not None:
        raise UsageError("Give --ray ADDRESS or --ray-local-gpus N, not both.", "",
                         "--ray joins a running cluster; --ray-local-gpus starts one here.")
    settings = profile_settings(given)
    timeout = given["timeout"]
    plan = load_sweep(sweep_file, settings.cells)
    console = _console()
    if dry_run:
        _print_sweep_plan(plan, settings, console)
        return
    ray = (RayPlacement(None if ray_address == "auto" else ray_address, ray_local_gpus)
           if ray_address is not None or ray_local_gpus is not None else None)
    executor = None
    if ray is not None:
        from ncuflow.profile.ray_sweep import RayExecutor

        executor = RayExecutor
    try:
        outcome = run_sweep(plan, settings, SweepSettings(keep_going=keep_going, timeout=timeout, ray=ray), console,
                            executor)
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


def _print_sweep_plan(plan: Any, settings: Any, console: Any) -> None:
    """``sweep --dry-run``: every point, what is stored, what is to run."""
    from rich.table import Table

    from ncuflow.profile.escalation import escalates
    from ncuflow.profile.sweep import axes_summary
    from ncuflow.profile.sweep_run import describe_points

    rows = describe_points(plan, settings)
    table = Table(title=markup_text(f"{plan.name}: {plan.cell} {axes_summary(plan.axes)}, {plan.replicas} replicas"),
                  header_style="bold")
    for column in ("#", "point", "key", "stored", "to run"):
        table.add_column(column)
    for row in rows:
        table.add_row(str(row["index"]), escape(row["axes"]), row["key8"], str(row["done"]), str(row["to_run"]))
    console.print(table)
    fixed = ", ".join(f"{k}={v}" for k, v in plan.fixed.items())
    options = plan.options
    console.print(escape(f"fixed: {fixed or '(cell defaults)'}; ncu: {options.label()}, replay {options.replay_mode}, "
                         f"cache {options.cache_control}, clocks {options.clock_control}; timeout {plan.timeout:g} s"))
    tier2 = (" (then tier 2 for runs tier 1 leaves undecided)"
             if settings.escalation.enabled and escalates(options) else "")
    console.print(f"{len(rows)} points, {sum(r['to_run'] for r in rows)} profiles to run{tier2}")
