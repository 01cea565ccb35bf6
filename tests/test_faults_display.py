"""Fault injection, what a terminal and Markdown show (issue 31): every string from a report or a
store reaches the terminal with its control characters escaped, and Markdown with its syntax
escaped, through one function (``ncuflow.files.safe_text.safe_text``); long names are shortened.

Before: escape sequences in kernel names (a window title, clear screen) were printed raw by
classify, summary, compare and stability; a newline in a name injected a heading,
``<img onerror=...>`` and table rows into ``compare --markdown`` and ``stability --markdown``;
``stability`` on a 50,000-character name ran past 60 s and ``summary`` on a 2 MB name took
23 s. Each case runs the real command line under the fault suite's limits on reports of the
corpus whose kernel names were rewritten (``analysis.report_edit``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis.report_edit import rename_kernels
from ncuflow import store
from ncuflow.files.safe_text import _CONTROL
from ncuflow.profile.sweep import parse_sweep
from tests.hostile import FIGURES, figures_line, run_limited

SMALL = "yzwang2000__cudaCode__profile.ncu-rep"
# A window title, a bell, clear screen, a right-to-left override, a newline starting a heading,
# HTML, a table row, mathtext and a Markdown link.
HOSTILE = ("evil\x1b]0;PWNED\x07\x1b[2J{i}\n# Injected heading <img src=x onerror=alert(1)>\n| injected | row |"
           "\u202e$x^2$ [link](javascript:alert(1))")
CONTROL = re.compile(f"[{_CONTROL}]")
SEEN: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("display figures", SEEN), figures_line("fault suite so far", FIGURES))


@pytest.fixture(scope="module")
def hostile(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A report of hostile names, a store of two runs of it (for stability and compare), and reports
    whose names are 50,000 characters and 2 MB long."""
    base = tmp_path_factory.mktemp("display")
    report = base / "hostile.ncu-rep"
    rename_kernels(corpus_dir / SMALL, report, lambda index, old: HOSTILE.format(i=index))
    spec = parse_sweep({"cell": "copy_bandwidth", "replicas": 1, "axes": {"mib": [16]}}).points[0].spec
    for _ in range(2):
        store.write_run(base / "store", spec, report)
    made = {"report": report, "store": base / "store"}
    for name, length in (("long", 50_000), ("huge", 2_000_000)):
        made[name] = base / f"{name}.ncu-rep"
        rename_kernels(corpus_dir / SMALL, made[name], lambda index, old, n=length: f"{'k' * n}{index}")
        store.write_run(base / f"store-{name}", spec, made[name])
        store.write_run(base / f"store-{name}", spec, made[name])
        made[f"store-{name}"] = base / f"store-{name}"
    return made


def _clean(text: str, where: str) -> None:
    """No control character but the line breaks (and store check's tabs) of ncuflow's own output."""
    found = sorted({hex(ord(c)) for c in CONTROL.findall(text) if c not in "\n\t"})
    SEEN["control_characters_reaching_output"] += len(found)
    assert not found, (where, found, text[-1500:])


def _commands(paths: dict[str, Path], out: Path) -> dict[str, list[str]]:
    report, root = str(paths["report"]), str(paths["store"])
    return {
        "classify": ["classify", report, "--evidence"],
        "summary": ["summary", report],
        "stability": ["stability", root, "--markdown", str(out / "stability.md")],
        "compare": ["compare", root, root, "--markdown", str(out / "compare.md")],
        "explain": ["explain", root, "--vary", "mib"],
        "report": ["report", root, "-o", str(out / "report")],
        "roofline": ["roofline", report, "-o", str(out / "roofline.png")],
        "store check": ["store", "check", root],
        "classify --json": ["classify", report, "--json"],
    }


@pytest.mark.parametrize("command", list(_commands({"report": Path(), "store": Path()}, Path())))
def test_no_control_character_of_a_kernel_name_reaches_the_terminal(hostile: dict[str, Path], tmp_path: Path,
                                                                    command: str) -> None:
    ran = run_limited(_commands(hostile, tmp_path)[command], case="display-terminal")
    SEEN["display_cases"] += 1
    assert not ran.traceback and not ran.timed_out and ran.code in (0, 1, 2), ran.output[-2000:]
    _clean(ran.stdout, f"{command} stdout")
    _clean(ran.stderr, f"{command} stderr")
    if command == "classify":
        assert "evil\\x1b]0;PWNED\\x07" in ran.stdout  # shown, escaped


def _unescaped(line: str, token: str) -> bool:
    """Whether ``token`` occurs in ``line`` not escaped (after an even number of backslashes)."""
    for found in re.finditer(re.escape(token), line):
        backslashes = len(line[:found.start()]) - len(line[:found.start()].rstrip("\\"))
        if backslashes % 2 == 0:
            return True
    return False


def _markdown_is_inert(text: str, where: str) -> None:
    _clean(text, where)
    injected = [line for line in text.splitlines()
                if line.startswith(("# Injected", "| injected")) or _unescaped(line, "<img")
                or _unescaped(line, "](javascript:") or _unescaped(line, "$x")]
    SEEN["markdown_injections"] += len(injected)
    assert not injected, (where, injected)


def test_no_kernel_name_injects_markdown(hostile: dict[str, Path], tmp_path: Path) -> None:
    commands = _commands(hostile, tmp_path)
    for name in ("stability", "compare", "report"):
        ran = run_limited(commands[name], case="display-markdown")
        assert ran.code == 0 and not ran.traceback, ran.output[-2000:]
    for path in (tmp_path / "stability.md", tmp_path / "compare.md", tmp_path / "report" / "report.md"):
        text = path.read_text()
        assert "evil\\\\x1b" in text, path  # the name is there, escaped
        _markdown_is_inert(text, path.name)
        SEEN["markdown_files_checked"] += 1


@pytest.mark.parametrize("size", ["long", "huge"])
@pytest.mark.parametrize("command", ["classify", "summary", "stability", "compare", "report"])
def test_long_kernel_names_are_shortened_and_fast(hostile: dict[str, Path], tmp_path: Path, size: str,
                                                  command: str) -> None:
    root = str(hostile[f"store-{size}"])
    argv = {"classify": ["classify", str(hostile[size])], "summary": ["summary", str(hostile[size])],
            "stability": ["stability", root, "--markdown", str(tmp_path / "s.md")],
            "compare": ["compare", root, root], "report": ["report", root, "-o", str(tmp_path / "r")]}[command]
    ran = run_limited(argv, case=f"display-{size}-name")
    SEEN["long_name_cases"] += 1
    SEEN["max_long_name_seconds_x100"] = max(SEEN["max_long_name_seconds_x100"], int(ran.seconds * 100))
    assert ran.code == 0 and not ran.traceback and ran.seconds < 20, (ran.seconds, ran.output[-1500:])
    assert len(ran.stdout) < 200_000, len(ran.stdout)  # the name is shortened, not printed whole
    shown = ran.stdout + ran.stderr + "".join(p.read_text() for p in tmp_path.rglob("*.md"))
    assert "k" * 1000 not in shown and "kkkk…" in shown


def test_a_serving_logs_name_reaches_the_terminal_escaped(serving_logs_dir: Path, tmp_path: Path) -> None:
    """phases prints a log's name and its run labels: escaped as every other renderer's text."""
    log = sorted(serving_logs_dir.glob("*.log"))[0]
    hostile = tmp_path / f"evil\x1b]0;PWNED\x07\x1b[2J-{log.name}"
    hostile.write_bytes(log.read_bytes())
    ran = run_limited(["phases", str(hostile)], case="display-phases")
    SEEN["display_cases"] += 1
    assert ran.code == 0 and not ran.traceback, ran.output[-2000:]
    _clean(ran.stdout, "phases stdout")
    _clean(ran.stderr, "phases stderr")
    assert "evil\\x1b]0;PWNED\\x07" in ran.stdout
