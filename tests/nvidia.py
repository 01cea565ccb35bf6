"""NVIDIA's own reading of a report, for tests: every action through ``ncu_report``.

The walk is ``analysis/nvidia_actions.py``'s (the analysis scripts' checks against NVIDIA share
it), not written again: ``nvidia_actions`` yields ((range, action), IAction); ``actions_of``
lists the actions in the report's order. Scripts a test runs in a process of its own import it
the same way (``NVIDIA_ACTIONS_IMPORT``, with the repository root as their working folder).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.nvidia_actions import nvidia_actions

REPO = Path(__file__).resolve().parent.parent
NVIDIA_ACTIONS_IMPORT = "from analysis.nvidia_actions import nvidia_actions"

__all__ = ["NVIDIA_ACTIONS_IMPORT", "REPO", "actions_of", "nvidia_actions"]


def actions_of(path: Path) -> list[Any]:
    """Every action (``IAction``) of the report, range by range, as ``ncu_report`` reads it."""
    return [action for _, action in nvidia_actions(path)]
