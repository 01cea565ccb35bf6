"""Which launches a reading command looks at: ``--kernel REGEX`` and ``--nvtx RANGE``, parsed once.

``kernel`` is a Python regular expression searched in the kernel's function and
demangled names (``ncuflow.read.runs.kernel_filter``). ``nvtx`` names an NVTX range the
launch ran inside: ``RANGE`` matches a range of that name at any depth (``domain@name``
for a range of a named domain, or the name alone), ``OUTER/INNER`` a range nested
directly in another, and a trailing ``/`` (ncu's ``--nvtx-include`` spelling of a
push/pop range) is ignored. Plain data; the loading stays ``ncuflow.read.runs``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ncuflow.analyze.arguments import checked_text
from ncuflow.errors import UsageError
from ncuflow.files.patterns import kernel_pattern
from ncuflow.read.launch import KernelName, Launch
from ncuflow.read.options import READ_DEFAULT, ReadOptions
from ncuflow.read.runs import Loaded, kernel_filter, load_paths


def _component_matches(wanted: str, found: str) -> bool:
    if wanted == found:
        return True
    _domain, at, name = found.partition("@")
    return bool(at) and wanted == name and "@" not in wanted


def nvtx_matches(ranges: Sequence[str], spec: str) -> bool:
    """Whether a launch inside ``ranges`` (outermost first) is inside the range ``spec`` names."""
    wanted = [part for part in spec.strip().rstrip("/").split("/") if part]
    if not wanted:
        return True
    for start in range(len(ranges) - len(wanted) + 1):
        if all(_component_matches(w, ranges[start + i]) for i, w in enumerate(wanted)):
            return True
    return False


@dataclass(frozen=True)
class Selection:
    """The launches a command reads: by kernel name and by enclosing NVTX range (None: all)."""

    kernel: str | None = None
    nvtx: str | None = None

    def __post_init__(self) -> None:
        checked_text(self.kernel, "kernel")  # the API's kernel=123: what --kernel never is
        checked_text(self.nvtx, "nvtx")
        kernel_filter(self.kernel)  # a bad regular expression is refused here, once
        if self.nvtx is not None and not self.nvtx.strip().rstrip("/"):
            raise UsageError(
                f"--nvtx {self.nvtx!r} names no range.",
                "--nvtx keeps the launches that ran inside an NVTX range of that name.",
                "Give a range name, e.g. --nvtx decode or --nvtx 'outer/inner'.",
            )

    @property
    def describe(self) -> str:
        parts = [f"--kernel {self.kernel!r}" if self.kernel else "", f"--nvtx {self.nvtx!r}" if self.nvtx else ""]
        return " and ".join(p for p in parts if p)

    def keeps(self, launch: Launch) -> bool:
        return kernel_filter(self.kernel)(launch) and (self.nvtx is None or nvtx_matches(launch.nvtx, self.nvtx))

    def keeps_named(self, kernel: KernelName, nvtx: tuple[str, ...]) -> bool:
        """``keeps`` for a launch known by its names only (the source view reads no ``Launch``)."""
        found = not self.kernel or bool(kernel_pattern(self.kernel).search(kernel.function)
                                        or kernel_pattern(self.kernel).search(kernel.demangled))
        return found and (self.nvtx is None or nvtx_matches(nvtx, self.nvtx))

    def predicate(self) -> Callable[[Launch], bool]:
        by_kernel = kernel_filter(self.kernel)
        nvtx = self.nvtx
        return lambda launch: by_kernel(launch) and (nvtx is None or nvtx_matches(launch.nvtx, nvtx))

    def apply(self, loaded: Loaded, *, strict: bool = True) -> Loaded:
        """The loaded runs with only the selected launches; a run left empty is dropped and noted.

        ``strict``: nothing left at all is a usage error (one path of several may match nothing).
        """
        if self.nvtx is None and self.kernel is None:
            return loaded
        keep = self.predicate()
        runs = []
        notes = list(loaded.notes)
        for run in loaded.runs:
            launches = tuple(x for x in run.launches if keep(x))
            if launches:
                runs.append(replace(run, launches=launches))
            elif run.launches:
                notes.append(f"{run.report}: no launch matches {self.describe}")
        if not runs and strict:
            raise UsageError(
                f"No launch matches {self.describe}.",
                "The paths hold launches, but none of them has that kernel name or ran inside that NVTX range.",
                "Check the names with `ncuflow classify PATH` (kernels) or `ncuflow summary --json PATH`, "
                "or leave the filter out.",
            )
        return replace(loaded, runs=tuple(runs), notes=tuple(notes))

    def load(self, paths: Sequence[Path], *, jobs: int | None = None, options: ReadOptions = READ_DEFAULT) -> Loaded:
        """``load_paths`` with the kernel filter applied in the readers and the NVTX filter after."""
        return self.apply(load_paths(list(paths), kernel=self.kernel, jobs=jobs, options=options))


ALL = Selection()
