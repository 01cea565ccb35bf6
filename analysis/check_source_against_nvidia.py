"""`ncuflow source` against NVIDIA's own per-PC values, on every report with source counters.

    python analysis/check_source_against_nvidia.py [REPORT_DIR_OR_FILE ...] [--top N]   # default: the shared corpus, 10

For every launch, NVIDIA's lists are read whole through ``ncu_report`` (``IMetric``'s
``correlation_ids()`` and ``as_uint64(i)``/``as_double(i)``; ``source_info(pc)`` of every address)
and ranked plainly; the source view (ncuflow's reader, streaming, the top N kept) must give the
same top instructions by warp samples and by excess global sectors in the same order, their
counters exactly, the launch's sample total, the top source lines in the same order with the
same sums and instruction counts, and an excess equal to NVIDIA's ``derived__..._excessive``.
``tests/test_source.py`` runs the same checks (``launch_mismatches``) on five reports.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from analysis.nvidia_actions import nvidia_actions  # noqa: E402
from ncuflow.analyze.hotspots import LaunchHotspots, read_hotspots, samples_in  # noqa: E402
from ncuflow.read.reportfile import find_reports, import_ncu_report  # noqa: E402
from ncuflow.read.source_counters import (  # noqa: E402
    EXECUTED,
    SAMPLES,
    SECTOR_PAIRS,
    is_source_counter,
    stall_reason,
)

Lists = dict[str, dict[int, Any]]


def nvidia_lists(action: Any) -> Lists:
    """Every source counter's per-PC list of the action, whole, as ncu_report reads it."""
    module = import_ncu_report()
    doubles = {module.IMetric.ValueKind_DOUBLE, module.IMetric.ValueKind_FLOAT}
    lists: Lists = {}
    for name in action.metric_names():
        metric = action.metric_by_name(name)
        if not is_source_counter(name) or not metric.has_correlation_ids():
            continue
        ids = metric.correlation_ids()
        read = metric.as_double if metric.kind() in doubles else metric.as_uint64
        lists[name] = {ids.as_uint64(i): read(i) for i in range(metric.num_instances())}
    return lists


def _samples(lists: Lists) -> dict[int, Any]:
    if SAMPLES in lists:
        return lists[SAMPLES]
    total: dict[int, Any] = {}
    for name, values in lists.items():
        if stall_reason(name):
            for address, value in values.items():
                total[address] = total.get(address, 0) + value
    return total


def _excess(lists: Lists) -> dict[int, Any]:
    pair = next((p for p in SECTOR_PAIRS if p.theoretical in lists and p.ideal in lists), None)
    if pair is None:
        return {}
    return {a: v - lists[pair.ideal].get(a, 0) for a, v in lists[pair.theoretical].items()}


def ranked(values: dict[Any, Any], top: int) -> list[Any]:
    """The ``top`` keys of positive value, the largest first, ties by key."""
    return sorted((k for k, v in values.items() if v > 0), key=lambda k: (-values[k], k))[:top]


def _location(action: Any, address: int) -> tuple[str, int] | None:
    info = action.source_info(address)
    return None if info is None or not info.file_name() or info.line() <= 0 else (info.file_name(), info.line())


def _line_sums(action: Any, lists: Lists) -> tuple[dict[tuple[str, int], dict[str, Any]], dict[int, Any]]:
    sums: dict[tuple[str, int], dict[str, Any]] = {}
    located: dict[int, Any] = {}
    for name, values in lists.items():
        for address, value in values.items():
            if address not in located:
                located[address] = _location(action, address)
            if located[address] is not None:
                line = sums.setdefault(located[address], {})
                line[name] = line.get(name, 0) + value
    return sums, located


def _derived_excess(view: LaunchHotspots, action: Any) -> list[str]:
    if view.pair is None:
        return []
    metric = action.metric_by_name(f"derived__{view.pair.theoretical}_excessive")
    if metric is None or not metric.has_correlation_ids():
        return []
    ids = metric.correlation_ids()
    derived = {ids.as_uint64(i): metric.as_uint64(i) for i in range(metric.num_instances())}
    return [f"excess at {i.address:#x}" for i in view.by_excess
            if i.counters[view.pair.theoretical] - i.counters[view.pair.ideal] != derived.get(i.address)]


def _line_mismatches(view: LaunchHotspots, action: Any, lists: Lists, top: int) -> list[str]:
    sums, located = _line_sums(action, lists)
    weight = {k: (samples_in(v) or 0) if view.sampled else v.get(EXECUTED, 0) for k, v in sums.items()}
    wrong = [] if [(x.file, x.line) for x in view.lines] == ranked(weight, top) else ["line order"]
    counted = EXECUTED if EXECUTED in lists else view.counters[0]
    for line in view.lines:
        where = (line.file, line.line)
        instructions = sum(1 for a in lists.get(counted, {}) if located.get(a) == where)
        if dict(line.counters) != sums[where] or line.instructions != instructions:
            wrong.append(f"line {line.file}:{line.line}")
    return wrong


def launch_mismatches(view: LaunchHotspots, action: Any, top: int) -> list[str]:
    """What of the launch's source view differs from NVIDIA's lists (nothing: an empty list)."""
    lists = nvidia_lists(action)
    samples = _samples(lists)
    wrong = []
    if [i.address for i in view.by_samples] != ranked(samples, top):
        wrong.append("order by samples")
    if [i.address for i in view.by_excess] != ranked(_excess(lists), top):
        wrong.append("order by excess")
    sampled = any(name == SAMPLES or stall_reason(name) for name in action.metric_names())
    if view.total_samples != (sum(samples.values()) if sampled else None):
        wrong.append("sample total")
    wrong += [f"counters at {i.address:#x}" for i in view.instructions
              if dict(i.counters) != {n: v[i.address] for n, v in lists.items() if i.address in v}]
    if view.places or not view.note:  # lines were read: compared
        wrong += _line_mismatches(view, action, lists, top)
    return wrong + _derived_excess(view, action)


def check_report(path: Path, top: int) -> tuple[int, int, int, list[str]]:
    """(launches compared, instructions compared, lines compared, mismatches) for one report."""
    found = read_hotspots(path, lambda launch: True, top)
    actions = dict(nvidia_actions(path)) if found.launches else {}
    wrong = [*found.notes]
    for view in found.launches:
        action = actions[(view.range_index, view.action_index)]
        wrong += [f"{path.name} #{view.action_index}: {what}" for what in launch_mismatches(view, action, top)]
    return (len(found.launches), sum(len(v.instructions) for v in found.launches),
            sum(len(v.lines) for v in found.launches), wrong)


def main(argv: list[str]) -> int:
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 10
    paths = [a for i, a in enumerate(argv) if a != "--top" and (i == 0 or argv[i - 1] != "--top")]
    reports = find_reports(paths or [REPO.parent / "shared" / "ncu-reports"])
    totals, wrong, with_counters = [0, 0, 0], [], 0
    for report in reports:
        launches, instructions, lines, mismatches = check_report(report, top)
        with_counters += launches > 0
        totals = [totals[0] + launches, totals[1] + instructions, totals[2] + lines]
        wrong += mismatches
    print(f"{len(reports)} reports, {with_counters} with source counters: {totals[0]} launches, {totals[1]} "
          f"instructions and {totals[2]} source lines compared with ncu_report (top {top}): "
          f"{len(wrong)} mismatches")
    for line in wrong[:20]:
        print("  ", line)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
