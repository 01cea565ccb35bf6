"""ncuflow: profile the smallest decisive kernel cell under Nsight Compute and say which wall binds.

The stages, each a subpackage; imports only point down the list:

- ``cli``       the click command line, a thin layer over everything below
- ``output``    parquet, console tables, Markdown reports, plots
- ``analyze``   the field table, the max model (classify), replay stability, explain
- ``read``      ``.ncu-rep`` -> ``Launch`` rows (the only place that imports ``ncu_report``)
- ``store``     the profile store: run folders, manifests, atomic commits
- ``profile``   the ncu command line, planning, running a cell under ncu, sweeps, doctor
- ``cells``     the cell registry and spec grammar, ``cellrun`` (what ncu launches), timing
- ``phases``    timing phases of serving traces (its own pipeline: parse -> model -> report)
- ``kernels``   the built-in cells (the top-level ``kernels/`` folder, installed as ``ncuflow.kernels``)

From Python (a notebook), the read side's answers as polars frames or frozen records
(``docs/api.md``): ``ncuflow.launches(paths)``, ``ncuflow.classify(paths)``,
``ncuflow.findings(paths)``, ``ncuflow.summary(paths)``, ``ncuflow.compare(base, new)``, ``ncuflow.roofline(paths)``.
They are looked up when first used (``ncuflow.output.api``), so ``import ncuflow`` stays
cheap and imports no polars: the profiling path on a GPU host has none.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.abc alone costs every command ~18 ms: the finder below needs none of it
    import importlib.machinery

__version__ = "0.1.0"

_KERNELS_NAME = "ncuflow.kernels"


class _SourceCheckoutKernels:
    """Maps ``ncuflow.kernels`` to the checkout's top-level ``kernels/`` folder (a meta path
    finder: ``find_spec`` is all the import system asks of one).

    An installed ncuflow (``pip install .`` or ``-e .``) gets that mapping from
    setuptools' ``package-dir``. A checkout run without installing (``python -m ncuflow``
    on a GPU host that has no network to install from) needs this finder; it is added
    only when nothing else provides ``ncuflow.kernels``.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != _KERNELS_NAME:
            return None
        import importlib.util

        return importlib.util.spec_from_file_location(
            fullname, self.folder / "__init__.py", submodule_search_locations=[str(self.folder)]
        )


def _provide_kernels_from_checkout() -> None:
    # Appended last: an installed mapping (setuptools' editable finder, or a real
    # ncuflow/kernels folder on sys.path) is always found first.
    checkout = Path(__file__).resolve().parent.parent
    folder = checkout / "kernels"
    if (folder / "__init__.py").is_file() and (checkout / "pyproject.toml").is_file():
        sys.meta_path.append(_SourceCheckoutKernels(folder))


_provide_kernels_from_checkout()

# The public Python API: name -> its function in ncuflow.output.api, imported on first use.
API: tuple[str, ...] = ("launches", "classify", "findings", "summary", "summaries", "compare", "roofline")
__all__ = ["API", "__version__", *API]


def __getattr__(name: str) -> object:
    if name in API:
        from ncuflow.output import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ncuflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *API})
