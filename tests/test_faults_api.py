"""Fault injection, round four (issue 38): the Python API's arguments, checked by the command line's rules.

``classify(R, threshold=10**400)``, ``kernel=123``, ``nvtx=[1]``, ``compare(..., pairs=[(1, 2)])``
raised OverflowError, TypeError or AttributeError; each is now the documented ``UsageError``,
in one paragraph, from the function that checks the option of the same name
(``ncuflow.analyze.arguments``), before any report is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ncuflow
from ncuflow.errors import UsageError
from tests.hostile import FIGURES, figures_line, run_limited

SMALL = "yzwang2000__cudaCode__profile.ncu-rep"
MISSING = "no-such-report.ncu-rep"  # checked before any path is read: a missing one is never reached


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    print(figures_line("fault suite so far", FIGURES))


CASES: list[tuple[str, Callable[[Path], Any], str]] = [
    ("threshold=10**400", lambda r: ncuflow.classify(r, threshold=10**400), "threshold"),
    ("threshold=10**5000", lambda r: ncuflow.summary(r, threshold=10**5000), "integer of"),
    ("threshold=-10**400", lambda r: ncuflow.launches(r, threshold=-(10**400)), "threshold"),
    ("kernel=123", lambda r: ncuflow.classify(r, kernel=123), "kernel 123 is not text"),  # type: ignore[arg-type]
    ("nvtx=[1]", lambda r: ncuflow.classify(r, nvtx=[1]), "nvtx [1] is not text"),  # type: ignore[arg-type]
    ("kernel=b'x'", lambda r: ncuflow.roofline(r, kernel=b"x"), "not text"),  # type: ignore[arg-type]
    ("pairs=[(1, 2)]", lambda r: ncuflow.compare(r, r, pairs=[(1, 2)]), "is not BASE=NEW"),  # type: ignore[list-item]
    ("pairs='ab'", lambda r: ncuflow.compare(r, r, pairs="ab"), "not a list"),  # type: ignore[arg-type]
    ("pairs=[('a',)]", lambda r: ncuflow.compare(r, r, pairs=[("a",)]), "not one (BASE, NEW)"),  # type: ignore[list-item]
    ("pairs=[('', 'x')]", lambda r: ncuflow.compare(r, r, pairs=[("", "x")]), "is not BASE=NEW"),
    ("paths=123", lambda r: ncuflow.classify(123), "is not a path"),  # type: ignore[arg-type]
    ("paths=[None]", lambda r: ncuflow.summary([None]), "is not a path"),  # type: ignore[list-item]
]


@pytest.mark.parametrize(("label", "call", "words"), CASES, ids=[c[0] for c in CASES])
def test_an_argument_of_the_wrong_type_or_range_is_a_usage_error(corpus_dir: Path, label: str,
                                                                 call: Callable[[Path], Any], words: str) -> None:
    for report in (corpus_dir / SMALL, Path(MISSING)):
        with pytest.raises(UsageError) as caught:
            call(report)
        text = str(caught.value)
        assert words in text and "\n" not in text, text
    FIGURES[f"case:api {label}"] += 1
    FIGURES["cases"] += 1


@pytest.mark.parametrize(("argv", "words"), [
    (["classify", "--threshold", "1e400"], "--threshold"),
    (["compare", "--pair", "=x"], "is not BASE=NEW"),
])
def test_the_command_line_refuses_the_same_values(corpus_dir: Path, argv: list[str], words: str) -> None:
    report = str(corpus_dir / SMALL)
    ran = run_limited([*argv, report, *([report] if argv[0] == "compare" else [])], case="api: the CLI's twin")
    assert ran.code == 2 and not ran.traceback and words in ran.stderr, ran.output[-2000:]
