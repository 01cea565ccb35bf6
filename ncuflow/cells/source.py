"""Where cells come from (``CellSource``): the built-in ones and, optionally, a folder of the user's.

The one options record of that concern: the command line builds it once from
``--cells-dir`` and every stage that names a cell (a spec, a sweep point, the program ncu
launches) asks it, instead of threading the folder through each call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ncuflow.cells.contract import CellDefinition, CellSpec


@dataclass(frozen=True)
class CellSource:
    """The built-in cells, plus the cells defined in ``cells_dir`` when one is given."""

    cells_dir: Path | None = None

    def parse(self, text: str) -> CellSpec:
        """``cell:key=value,...`` as a spec (defaults filled, values checked)."""
        from ncuflow.cells.registry import parse_spec

        return parse_spec(text, self.cells_dir)

    def make(self, cell: str, params: Mapping[str, object] | None = None) -> CellSpec:
        """A spec from a name and Python values (defaults filled, values checked)."""
        from ncuflow.cells.registry import make_spec

        return make_spec(cell, params, self.cells_dir)

    def definition(self, name: str) -> CellDefinition:
        from ncuflow.cells.registry import get_cell

        return get_cell(name, self.cells_dir)

    def runner_args(self) -> list[str]:
        """What the cell runner (``ncuflow.cells.cellrun``) needs to find the same cells."""
        return ["--cells-dir", str(self.cells_dir)] if self.cells_dir is not None else []
