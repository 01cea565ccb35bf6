"""`ncuflow gate` on real data: no false alarm on the corpus, the H200 store and their replicas;
a real report rewritten to do 2 % more (or less) work is caught (or passed); the H200 copy
16 → 256 MiB fails; a baseline file committed in a scratch repository and read back; JUnit
parsed; Markdown read."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.report_edit import metric_scaled, rename_kernels
from ncuflow.analyze.baseline import VERSION, baseline_document, read_baseline
from ncuflow.analyze.gate import EXIT_CODES, GATE_LABELS, LABELS, Z_DECIDE, replicas_to_decide
from ncuflow.analyze.gate_run import gate_measurements
from ncuflow.analyze.measurement import Measurement, measurements
from ncuflow.cli import cli
from ncuflow.errors import NcuflowError
from ncuflow.read.reportfile import find_reports
from ncuflow.read.runs import load_paths

H200 = Path(__file__).resolve().parent.parent / "profiles" / "reference" / "h200"
COPY = H200 / "copy_bandwidth"
DRAM_BYTES = frozenset({"dram__bytes.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"})
INSTRUCTIONS = frozenset({"smsp__inst_executed.sum", "sm__inst_executed.sum"})
EXIT = {e.meaning.split(":")[0]: e.code for e in EXIT_CODES}


def _gate(*args: str) -> tuple[int, str]:
    """The exit status and output of ``ncuflow gate`` (an error's paragraph and status as ``main`` gives them)."""
    result = CliRunner().invoke(cli, ["gate", *args])
    if isinstance(result.exception, NcuflowError):
        return result.exception.exit_code, result.output + str(result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.output


def _copy(mib: int) -> Path:
    return next(COPY.glob(f"impltriton-mib{mib}-*"))


def test_exit_codes_and_labels_are_distinct() -> None:
    assert sorted(EXIT) == sorted({"pass", "regression", "bad input or usage", "undecidable under --strict"})
    assert len({e.code for e in EXIT_CODES}) == len(EXIT_CODES)
    assert len({label.code for label in GATE_LABELS}) == len({label.text for label in GATE_LABELS}) == len(GATE_LABELS)


def test_every_corpus_report_and_the_h200_store_against_itself_pass(corpus_dir: Path) -> None:
    kernels = 0
    for source in [*find_reports([corpus_dir]), H200]:
        members = measurements(load_paths([source]).runs)
        result = gate_measurements(members, members)
        assert result.exit_code == EXIT["pass"] and not result.failing, source.name
        assert {g.label.code for g in result.kernels} == {"same"}, (source.name, result.counts())
        kernels += len(result.kernels)
    assert kernels > len(find_reports([corpus_dir]))


def _replica_runs() -> list[list[Path]]:
    points = [p for cell in sorted(H200.iterdir()) if cell.is_dir() for p in sorted(cell.iterdir()) if p.is_dir()]
    return [runs for p in points if len(runs := sorted(r for r in p.iterdir() if r.is_dir())) >= 2]


def test_every_h200_run_against_its_replicas_has_no_regression() -> None:
    replicated = _replica_runs()
    assert replicated
    gated = 0
    for runs in replicated:
        for other in runs[1:]:
            result = gate_measurements(measurements(load_paths([runs[0]]).runs), measurements(load_paths([other]).runs))
            assert not result.failing, (other, [(g.kernel, g.label.text, [m.detail() for m in g.moved]) for g in result.failing])
            gated += len(result.kernels)
    assert gated >= 2 * len(replicated)


def _halves(m: Measurement) -> tuple[Measurement, Measurement]:
    """Repeated launches of one kernel split into two sides (every other launch), each launch a run of its own."""
    first, second = m.launches[0::2], m.launches[1::2]
    return replace(m, launches=first, runs=len(first)), replace(m, launches=second, runs=len(second))


def test_repeated_launches_of_the_same_work_against_each_other_have_no_regression(corpus_dir: Path) -> None:
    from ncuflow.analyze.work import work_key

    split = 0
    for source in [*find_reports([corpus_dir]), H200]:
        for m in measurements(load_paths([source]).runs):
            by_work: dict[object, list] = {}
            for launch in m.launches:
                by_work.setdefault(work_key(launch), []).append(launch)
            for launches in by_work.values():
                if len(launches) >= 4:
                    base, new = _halves(replace(m, launches=tuple(launches)))
                    result = gate_measurements([base], [new])
                    assert not result.failing, (source.name, m.kernel, [mv.detail() for g in result.failing for mv in g.moved])
                    split += 1
    assert split >= 5


def _full_kernel(corpus_dir: Path) -> tuple[Path, str]:
    """A corpus report and one of its kernels measured once with DRAM bytes and instructions
    (well above the byte floor), the report holding other kernels too."""
    for report in find_reports([corpus_dir]):
        members = measurements(load_paths([report]).runs)
        for m in members:
            dram, inst = m.stats("dram_bytes"), m.stats("inst_executed")
            if len(members) >= 3 and dram.n == inst.n == 1 and (dram.median or 0) > 1e6 and (inst.median or 0) > 1e5:
                return report, m.function
    pytest.skip("no corpus report with a fully counted kernel among several")


@pytest.mark.parametrize(("metrics", "field"), [(DRAM_BYTES, "dram_bytes"), (INSTRUCTIONS, "inst_executed")])
@pytest.mark.parametrize("factor", [1.02, 0.98])
def test_a_kernel_rewritten_to_do_2_percent_more_work_fails_and_less_passes(
        corpus_dir: Path, tmp_path: Path, metrics: frozenset[str], field: str, factor: float) -> None:
    report, kernel = _full_kernel(corpus_dir)
    edited = tmp_path / "edited.ncu-rep"
    assert metric_scaled(report, edited, lambda name: name in metrics, factor, lambda _, function: function == kernel)
    code, out = _gate(str(report), str(edited), "--json")
    document = json.loads(out)
    (moved,) = [k for k in document["kernels"] if k["kernel"].startswith(kernel + " ")]
    others = [k for k in document["kernels"] if k is not moved]
    assert others and {k["label"] for k in others} == {"same"}
    assert field in {m["field"] for m in moved["moved"]}
    if factor > 1:
        assert code == EXIT["regression"] and moved["label"] == "more_work" and moved["fails"]
        assert any(m["field"] == field and m["direction"] == "up" and m["change"] == "+2.0 %" for m in moved["moved"])
    else:
        assert code == EXIT["pass"] and moved["label"] == "less_work" and not moved["fails"]


def test_copy_16_to_256_mib_is_more_work_and_the_reverse_passes() -> None:
    code, out = _gate(str(_copy(16)), str(_copy(256)))
    assert code == EXIT["regression"] and "more work" in out and "copy_kernel" in out
    code, out = _gate(str(_copy(256)), str(_copy(16)))
    assert code == EXIT["pass"] and "less work" in out


def test_a_baseline_committed_in_a_repository_is_read_back_and_gated(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    baseline = repo / "gate-baseline.json"
    code, out = _gate(str(_copy(16)), "--write-baseline", str(baseline))
    assert code == 0, out
    git = ["git", "-C", str(repo), "-c", "user.name=ci", "-c", "user.email=ci@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", baseline.name], check=True)
    subprocess.run([*git, "commit", "-qm", "baseline"], check=True)
    committed = tmp_path / "from-git.json"
    committed.write_bytes(subprocess.run([*git, "show", f"HEAD:{baseline.name}"], check=True, capture_output=True).stdout)
    document = json.loads(committed.read_text())
    assert document["version"] == VERSION and document["gpu"] == ["NVIDIA H200"]
    assert document == baseline_document(measurements(load_paths([_copy(16)]).runs))
    assert _gate(str(committed), str(_copy(16)))[0] == EXIT["pass"]
    code, out = _gate(str(committed), str(_copy(256)))
    assert code == EXIT["regression"] and "more work" in out
    read = read_baseline(committed)
    original = measurements(load_paths([_copy(16)]).runs)
    def kept(m: Measurement) -> list[dict[str, float]]:
        return [{name: v for name, v in launch.values.items() if v is not None} for launch in m.launches]

    assert [kept(m) for m in read] == [kept(m) for m in original]  # every value, not one field
    assert [(m.kernel, m.spec(), m.runs, m.model().bound) for m in read] == \
        [(m.kernel, m.spec(), m.runs, m.model().bound) for m in original]


def test_a_baseline_from_another_gpu_is_refused_or_downgraded(tmp_path: Path) -> None:
    baseline = tmp_path / "b.json"
    assert _gate(str(_copy(16)), "--write-baseline", str(baseline))[0] == 0
    document = json.loads(baseline.read_text())
    for entry in document["measurements"]:
        entry["device"]["name"] = "NVIDIA A100-SXM4-40GB"
    document["gpu"] = ["NVIDIA A100-SXM4-40GB"]
    baseline.write_text(json.dumps(document, indent=1))
    code, out = _gate(str(baseline), str(_copy(16)))
    assert code == EXIT["bad input or usage"] and "A100" in out and "--other-gpu work" in out
    code, out = _gate(str(baseline), str(_copy(16)), "--other-gpu", "work")
    assert code == EXIT["pass"] and "downgraded to work counters" in out


@pytest.mark.parametrize("text", ["{", '{"format": "ncuflow gate baseline", "version": 99}', "[" * 5000])
def test_a_damaged_baseline_is_one_paragraph(tmp_path: Path, text: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{\n "format": "ncuflow gate baseline",' if text == "{" else text)
    code, out = _gate(str(bad), str(_copy(16)))
    assert code in (EXIT["bad input or usage"], EXIT["pass"]) and "Traceback" not in out


def test_junit_parses_with_one_case_per_kernel_and_failures_name_fields(tmp_path: Path) -> None:
    junit = tmp_path / "gate.xml"
    code, _ = _gate(str(_copy(16)), str(_copy(256)), "--junit", str(junit))
    suite = ET.parse(junit).getroot()
    assert code == EXIT["regression"] and suite.tag == "testsuite" and suite.get("failures") == "1"
    (case,) = suite.findall("testcase")
    failure = case.find("failure")
    assert failure is not None and "inst_executed" in (failure.get("message") or "") and "dram_bytes" in (failure.text or "")


def test_markdown_reads_as_a_summary_with_hostile_names_made_safe(corpus_dir: Path, tmp_path: Path) -> None:
    report, kernel = _full_kernel(corpus_dir)
    hostile = "evil|`name`\x1b[31m<b>*x*"
    renamed, edited = tmp_path / "renamed.ncu-rep", tmp_path / "edited.ncu-rep"
    rename_kernels(report, renamed, lambda _, old: hostile if old == kernel else old)
    metric_scaled(renamed, edited, lambda name: name in DRAM_BYTES, 1.02, lambda _, function: function == hostile)
    markdown, junit = tmp_path / "summary.md", tmp_path / "summary.xml"
    code, _ = _gate(str(renamed), str(edited), "--markdown", str(markdown), "--junit", str(junit))
    (failed,) = [case for case in ET.parse(junit).getroot().iter("testcase") if case.find("failure") is not None]
    assert (failed.get("name") or "").startswith("evil|`name`\\x1b[31m<b>*x*")  # the escape shown, never sent
    text = markdown.read_text()
    print(text)
    lines = text.splitlines()
    assert code == EXIT["regression"] and lines[0].startswith("# ncuflow gate ")
    assert "exit 1, regression" in lines[2]
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert rows[0].startswith("| ❌ |") and "more work" in rows[0] and "dram\\_bytes +2.0 %" not in rows[0]
    assert all(row.count(" | ") == 3 for row in rows), rows  # no name broke a column
    assert "\x1b" not in text and "<b>" not in text and "evil\\|" in rows[0]


def test_rules_allow_ignore_and_refuse(corpus_dir: Path, tmp_path: Path) -> None:
    report, kernel = _full_kernel(corpus_dir)
    edited = tmp_path / "edited.ncu-rep"
    metric_scaled(report, edited, lambda name: name in DRAM_BYTES, 1.02, lambda _, function: function == kernel)
    rules = tmp_path / "rules.toml"
    rules.write_text(f'[[kernel]]\nmatch = "^{kernel}$"\nallow = {{ dram_bytes = 3, dram_bytes_read = 3, dram_bytes_write = 3 }}\n')
    assert _gate(str(report), str(edited), "--rules", str(rules))[0] == EXIT["pass"]
    rules.write_text(f'ignore = ["^{kernel}$"]\n')
    code, out = _gate(str(report), str(edited), "--rules", str(rules))
    assert code == EXIT["pass"] and "ignored by the rules" in out
    assert _gate(str(report), str(edited), "--ignore", kernel)[0] == EXIT["pass"]
    rules.unlink()
    rules.symlink_to("/dev/zero")
    assert _gate(str(report), str(edited), "--rules", str(rules))[0] == EXIT["bad input or usage"]
    rules.unlink()
    for bad in ('ignore = ["(a)\\\\1"]\n', "[allow]\nduration_ns = 1\n", "[allow]\ndram_bytes = -1\n", "nonsense = 1\n", "= ="):
        rules.write_text(bad)
        code, out = _gate(str(report), str(edited), "--rules", str(rules))
        assert code == EXIT["bad input or usage"] and "Traceback" not in out, (bad, out)


def test_an_undecidable_change_passes_and_exits_3_under_strict(corpus_dir: Path, tmp_path: Path) -> None:
    """inst_issued (near-exact, 0.5 %) +1 % with one launch a side: too small to count without replicas."""
    report, kernel = _full_kernel(corpus_dir)
    edited = tmp_path / "edited.ncu-rep"
    metric_scaled(report, edited, lambda name: name in {"smsp__inst_issued.sum", "sm__inst_issued.sum"}, 1.01,
                  lambda _, function: function == kernel)
    code, out = _gate(str(report), str(edited), "--json")
    (moved,) = [k for k in json.loads(out)["kernels"] if k["label"] != "same"]
    assert code == EXIT["pass"] and moved["label"] == LABELS["ambiguous"].code and moved["replicas_to_decide"] == 2
    assert _gate(str(report), str(edited), "--strict")[0] == EXIT["undecidable under --strict"]


def test_replicas_to_decide_follow_the_standard_error() -> None:
    assert replicas_to_decide(0.02, [0.02, 0.02]) == round(Z_DECIDE**2 * 2)
    assert replicas_to_decide(0.02, [0.001, 0.001]) == 2
    assert replicas_to_decide(0.0, [0.01]) is None


def test_a_kernel_launched_more_often_per_run_is_more_work(corpus_dir: Path) -> None:
    """The same launches, one of them dropped from the new side: one launch fewer per run."""
    for report in find_reports([corpus_dir]):
        members = measurements(load_paths([report]).runs)
        repeated = next((m for m in members if len(m.launches) >= 3), None)
        if repeated is not None:
            break
    else:
        pytest.skip("no corpus kernel launched three times")
    fewer = replace(repeated, launches=repeated.launches[:-1])
    result = gate_measurements([fewer], [repeated])
    (kernel,) = result.kernels
    assert kernel.label.code == "more_work" and kernel.moved[0].field == "launches_per_run" and result.exit_code == 1
    assert gate_measurements([repeated], [fewer]).kernels[0].label.code == "less_work"


def test_outputs_never_replace_what_is_not_theirs(tmp_path: Path) -> None:
    """--write-baseline over a file of the user's, a FIFO as the baseline: one paragraph, nothing lost."""
    import os

    mine = tmp_path / "notes.json"
    mine.write_text('{"mine": true}\n')
    code, out = _gate(str(_copy(16)), "--write-baseline", str(mine))
    assert code == EXIT["bad input or usage"] and "Refusing to overwrite" in out and mine.read_text() == '{"mine": true}\n'
    link = tmp_path / "link.json"
    link.symlink_to(mine)
    assert _gate(str(_copy(16)), "--write-baseline", str(link))[0] == EXIT["bad input or usage"]
    assert mine.read_text() == '{"mine": true}\n'
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    code, out = _gate(str(fifo), str(_copy(16)))
    assert code == EXIT["bad input or usage"], out
    junit = tmp_path / "report.xml"
    junit.write_text("<other/>\n")
    assert _gate(str(_copy(16)), str(_copy(16)), "--junit", str(junit))[0] == EXIT["bad input or usage"]
    assert junit.read_text() == "<other/>\n"
    same = tmp_path / "both"
    assert _gate(str(_copy(16)), str(_copy(16)), "--junit", str(same), "--markdown", str(same))[0] == EXIT["bad input or usage"]


DOC = Path(__file__).resolve().parent.parent / "docs" / "gate.md"


def _doc_table(heading: str) -> list[list[str]]:
    """The rows of the first table after ``heading`` in docs/gate.md (cells stripped)."""
    lines = DOC.read_text().split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_docs_tables_are_the_label_table_the_exit_codes_and_the_replicas_rule() -> None:
    assert [row[0] for row in _doc_table("## Labels")] == [label.text for label in GATE_LABELS]
    assert _doc_table("## Exit status") == [[str(e.code), e.meaning] for e in EXIT_CODES]
    for sigma, launches in _doc_table("## How many replicas"):
        value = float(sigma.split()[0]) / 100
        assert replicas_to_decide(0.02, [value, value]) == int(launches), sigma


def test_the_same_work_in_half_the_launches_of_twice_the_grid_is_same(corpus_dir: Path) -> None:
    """A reconfigured kernel is judged per run in total: a real launch run twice against one launch
    of twice the grid doing twice each work counter (the same work per run) is not more work."""
    from ncuflow.analyze.fields import WORK_FIELDS

    report, kernel = _full_kernel(corpus_dir)
    (m,) = [m for m in measurements(load_paths([report]).runs) if m.function == kernel]
    (launch,) = m.launches
    doubled = {name: (2 * v if v is not None and (name in WORK_FIELDS or name == "grid_size") else v)
               for name, v in launch.values.items()}
    base = replace(m, launches=(launch, replace(launch, action_index=launch.action_index + 1)))
    new = replace(m, launches=(replace(launch, values=doubled),))
    result = gate_measurements([base], [new])
    (gate,) = result.kernels
    assert gate.compared is not None and gate.compared.how == "reconfigured"
    assert gate.label.code == "same" and result.exit_code == EXIT["pass"], [mv.detail() for mv in gate.moved]
    tripled = {name: (1.5 * v if v is not None and name == "inst_executed" else v) for name, v in doubled.items()}
    more = gate_measurements([base], [replace(new, launches=(replace(launch, values=tripled),))])
    assert more.kernels[0].label.code == "more_work" and more.kernels[0].moved[0].field == "inst_executed"


def test_the_summaries_quoted_in_the_docs_are_what_the_gate_writes(tmp_path: Path) -> None:
    quoted = [line[2:] for line in DOC.read_text().splitlines() if line.startswith("> |") and "---" not in line]
    paged = H200 / "paged_decode"
    page16, page64 = (next(paged.glob(f"*kvshared*page{page}-*")) for page in (16, 64))
    written = ""
    for index, (base, new) in enumerate(((_copy(16), _copy(256)), (page64, page16))):
        target = tmp_path / f"{index}.md"
        _gate(str(base), str(new), "--markdown", str(target))
        written += target.read_text()
    rows = [line for line in quoted if not line.startswith("| | kernel")]
    outcomes = [line[2:] for line in DOC.read_text().splitlines() if line.startswith("> **exit")]
    assert len(rows) == 3 and len(outcomes) == 2
    assert all(line in written.splitlines() for line in rows + outcomes), rows + outcomes


def _repeated_kernel(corpus_dir: Path) -> tuple[Path, str, str]:
    """A corpus report whose kernel is launched at least four times doing the same work (its time
    noise known): the report, the function and the kernel as the gate names it."""
    from ncuflow.analyze.compare import key_label, match_key
    from ncuflow.analyze.work import work_key

    for report in find_reports([corpus_dir]):
        for m in measurements(load_paths([report]).runs):
            if len(m.values("duration_ns")) >= 4 and len({work_key(launch) for launch in m.launches}) == 1:
                return report, m.function, key_label(match_key(m))
    pytest.skip("no corpus kernel launched four times doing the same work")


@pytest.mark.parametrize(("factor", "label", "code"), [(1.10, "slower", 1), (0.90, "faster", 0)])
def test_time_is_gated_where_repeated_launches_make_its_noise_known(
        corpus_dir: Path, tmp_path: Path, factor: float, label: str, code: int) -> None:
    report, kernel, name = _repeated_kernel(corpus_dir)
    edited = tmp_path / "edited.ncu-rep"
    assert metric_scaled(report, edited, lambda metric: metric == "gpu__time_duration.sum", factor,
                         lambda _, function: function == kernel)
    status, out = _gate(str(report), str(edited), "--json")
    kernels = json.loads(out)["kernels"]
    (timed,) = [k for k in kernels if k["kernel"] == name]
    assert status == code and timed["label"] == label, timed
    assert [m["field"] for m in timed["moved"]] == ["duration_ns"]
    assert {k["label"] for k in kernels if k["function"] != kernel} <= {"same"}
    assert _gate(str(report), str(edited), "--time-tolerance", "15")[0] == EXIT["pass"]


def test_a_moved_binding_wall_is_reported_and_fails_only_when_asked() -> None:
    """The H200 16 MiB copy (latency-bound) with its speed-of-light figures doubled (u_dram past the
    threshold) and its work and time untouched: verdict moved; exit 1 only with fail_on_verdict."""
    from ncuflow.analyze.gate import GateRules
    from ncuflow.read.launch import Launch
    from ncuflow.read.metrics import FIELDS_BY_NAME

    (m,) = measurements(load_paths([_copy(16)]).runs)
    percents = {name for name, row in FIELDS_BY_NAME.items() if row.unit == "%" and "throughput" in name}

    def busier(launch: Launch) -> Launch:
        values = {n: (min(2 * v, 100.0) if v is not None and n in percents else v) for n, v in launch.values.items()}
        return replace(launch, values=values, breakdown={k: min(2 * v, 100.0) for k, v in launch.breakdown.items()})

    new = replace(m, launches=tuple(busier(launch) for launch in m.launches))
    assert m.model().bound == "latency" and new.model().bound != "latency"
    result = gate_measurements([m], [new])
    (gate,) = result.kernels
    assert gate.label.code == "verdict_moved" and result.exit_code == EXIT["pass"]
    assert any(note.startswith("bound latency → ") for note in gate.notes)
    strict = gate_measurements([m], [new], rules=GateRules(fail_on_verdict=True))
    assert strict.exit_code == EXIT["regression"] and strict.failing
