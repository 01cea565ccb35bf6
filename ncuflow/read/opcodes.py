"""Loads of every kind from NVIDIA's per-opcode SASS table, where no dedicated counter was collected.

ncu's "Instruction Statistics" section stores ``sass__inst_executed_per_opcode``: one instance per
SASS opcode the launch executed, its correlation id the opcode's name ("LDG", "LDGSTS",
"UTMALDG" ...), its value the warp-level instructions of that opcode executed. An opcode the launch
did not execute has no instance: with the table held, it executed 0 times, a 0 and not a missing
kind. The table counts as the hardware does: its LDGSTS equals ``smsp__inst_executed_op_ldgsts.sum``
on every launch of the corpus that holds both (the SASS-patched ``ldgsts`` counters count fewer:
A100 16,128 against 21,504), so it feeds the hardware family of load kinds (``ldg_inst``,
``ldgsts_inst``, ``tma_ld_inst``), and only a kind whose own counter the report lacks; the
provenance names the table and the opcodes. TMA loads are ``UTMALDG`` (tensor) plus ``UBLKCP``
(bulk copies, ``cp.async.bulk``): on Blackwell reports of an FP8 MLA decode kernel no TMA counter
is collected, and only this table counts its loads. A generic ``LD`` reaches global, shared or
local memory, which an opcode cannot say: where the table holds one, LDG alone is not every global
load, and ``ldg_inst`` is not taken from it (Monte-Carlo pi's loads are all generic ``LD``s, and its
L1 saw global-load requests).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ncuflow.read.metrics import FIELDS_BY_NAME

OPCODE_TABLE = "sass__inst_executed_per_opcode"

# field -> the SASS opcodes whose executed instructions it counts
KIND_OPCODES: dict[str, tuple[str, ...]] = {
    "ldg_inst": ("LDG",),
    "ldgsts_inst": ("LDGSTS",),
    "tma_ld_inst": ("UTMALDG", "UBLKCP"),
}
GENERIC_LOADS: tuple[str, ...] = ("LD",)  # may be global loads: an opcode does not say
SPLIT_BY_GENERIC = "ldg_inst"  # the kind generic loads may belong to
for _name in KIND_OPCODES:  # a name the field table does not define is a typo, found at import
    if _name not in FIELDS_BY_NAME:
        raise ValueError(f"ncuflow.read.opcodes names {_name!r}, which ncuflow.read.metrics does not define")


def provenance_of(opcodes: tuple[str, ...], table: Mapping[str, float]) -> str:
    """e.g. 'sass__inst_executed_per_opcode[LDG]', '... [UTMALDG + UBLKCP]', or '... (no LDGSTS: 0)'."""
    held = [op for op in opcodes if op in table]
    text = f"{OPCODE_TABLE}[{' + '.join(held)}]" if held else OPCODE_TABLE
    absent = [op for op in opcodes if op not in table]
    return text + (f" (no {', '.join(absent)} executed: 0)" if absent else "")


def kinds_from_table(table: Mapping[str, float], missing: Iterable[str]) -> dict[str, tuple[float, str]]:
    """field -> (count, provenance) for each load kind in ``missing`` that the table counts (LDG not
    where the launch executed generic loads, some of which may be global)."""
    generic = any(table.get(op) for op in GENERIC_LOADS)
    return {name: (float(sum(table.get(op, 0) for op in KIND_OPCODES[name])), provenance_of(KIND_OPCODES[name], table))
            for name in missing if name in KIND_OPCODES and not (generic and name == SPLIT_BY_GENERIC)}
