"""The gate's ``--rules`` file: a small TOML file of what counts as a regression, checked where it enters.

```toml
fail_on_verdict = true        # a moved binding wall fails the job (default: reported only)
time_tolerance = 5            # %: gate time without replicas, beyond this growth
ignore = ["^warmup_", "nccl"] # kernels never gated (RE2 patterns searched in the function name)

[allow]                       # growth in % that does not fail, per work field (default 0)
dram_bytes = 1

[tolerance]                   # a field's noise band in % (as --tol FIELD=PCT)
inst_issued = 1

[[kernel]]                    # rules for the kernels a pattern selects (the last that names a field wins)
match = "copy_kernel"
allow = { inst_executed = 0.5 }
ignore = false
```

Every key is known or refused with one paragraph; every number finite and >= 0; every pattern
RE2's (``ncuflow.files.patterns``); the file a regular file under ``MAX_RULES_BYTES``.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ncuflow.analyze.fields import STABILITY_FIELDS, WORK_FIELDS
from ncuflow.analyze.gate import GateRules, KernelRule
from ncuflow.errors import UsageError
from ncuflow.files.inputs import read_small_file
from ncuflow.files.patterns import kernel_pattern
from ncuflow.files.safe_text import safe_text

MAX_RULES_BYTES = 1 << 20
TOP_KEYS = frozenset({"fail_on_verdict", "time_tolerance", "ignore", "allow", "tolerance", "kernel"})
KERNEL_KEYS = frozenset({"match", "allow", "ignore"})


def _refuse(path: Path, problem: str, fix: str = "Fix the file (docs/gate.md shows one).") -> UsageError:
    return UsageError(f"The rules file {safe_text(path)} is refused: {safe_text(problem)}.",
                      "A rules file says what the gate counts as a regression; a rule it misread would pass "
                      "or fail a CI job wrongly.", fix)


def _percent(path: Path, where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise _refuse(path, f"{where} is {value!r}, not a finite percentage >= 0")
    return float(value) / 100.0


def _fields(path: Path, where: str, table: object, known: tuple[str, ...]) -> dict[str, float]:
    if not isinstance(table, Mapping):
        raise _refuse(path, f"{where} is not a table of FIELD = PERCENT")
    unknown = [name for name in table if name not in known]
    if unknown:
        raise _refuse(path, f"{where} names {', '.join(map(str, unknown))}, which it cannot gate",
                      f"Use the fields: {', '.join(known)}.")
    return {name: _percent(path, f"{where}.{name}", value) for name, value in table.items()}


def _patterns(path: Path, where: str, value: object) -> list[Any]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _refuse(path, f"{where} is not a list of patterns")
    return [kernel_pattern(v, option=f"{path.name}: {where}") for v in value]


def _kernel(path: Path, index: int, entry: object) -> KernelRule:
    where = f"[[kernel]] {index + 1}"
    if not isinstance(entry, Mapping) or not isinstance(entry.get("match"), str):
        raise _refuse(path, f"{where} has no match = \"PATTERN\"")
    unknown = sorted(set(entry) - KERNEL_KEYS)
    if unknown:
        raise _refuse(path, f"{where} has the unknown keys {', '.join(unknown)}", f"Use: {', '.join(sorted(KERNEL_KEYS))}.")
    ignore = entry.get("ignore", False)
    if not isinstance(ignore, bool):
        raise _refuse(path, f"{where}: ignore is {ignore!r}, not true or false")
    allow = _fields(path, f"{where}.allow", entry.get("allow", {}), WORK_FIELDS)
    return KernelRule(kernel_pattern(entry["match"], option=f"{path.name}: {where} match"), tuple(sorted(allow.items())), ignore)


def parse_rules(path: Path, text: str, base: GateRules) -> tuple[GateRules, dict[str, float]]:
    """The rules a file's text says, over ``base`` (the options), and its per-field noise tolerances."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise _refuse(path, f"it is not TOML ({error})") from None
    unknown = sorted(set(document) - TOP_KEYS)
    if unknown:
        raise _refuse(path, f"it has the unknown keys {', '.join(unknown)}", f"Use: {', '.join(sorted(TOP_KEYS))}.")
    verdict = document.get("fail_on_verdict", base.fail_on_verdict)
    if not isinstance(verdict, bool):
        raise _refuse(path, f"fail_on_verdict is {verdict!r}, not true or false")
    time = document.get("time_tolerance")
    kernels = document.get("kernel", [])
    if not isinstance(kernels, list):
        raise _refuse(path, "kernel is not an array of tables ([[kernel]])")
    rules = replace(
        base,
        allow=tuple(sorted(_fields(path, "[allow]", document.get("allow", {}), WORK_FIELDS).items())),
        kernels=tuple(_kernel(path, i, entry) for i, entry in enumerate(kernels)),
        ignore=(*base.ignore, *_patterns(path, "ignore", document.get("ignore", []))),
        time_tolerance=_percent(path, "time_tolerance", time) if time is not None else base.time_tolerance,
        fail_on_verdict=verdict,
    )
    return rules, _fields(path, "[tolerance]", document.get("tolerance", {}), STABILITY_FIELDS)


def load_rules(path: Path, base: GateRules) -> tuple[GateRules, dict[str, float]]:
    """The rules file at ``path`` read (a small regular UTF-8 file) and parsed over ``base``."""
    text = read_small_file(path, MAX_RULES_BYTES, what="rules", error=lambda problem: _refuse(path, problem))
    return parse_rules(path, text, base)
