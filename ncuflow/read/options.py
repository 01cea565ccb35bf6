"""What a reading command reads of each launch beyond its counters: one options record.

The default (``READ_DEFAULT``) is what ``classify``, ``export`` and every other reading command
read without being asked: the canonical fields, NVIDIA's breakdown and its speed-of-light title.
``findings=True`` adds NVIDIA's rule results and source markers (``Launch.rule_results``,
``ncuflow.read.findings``), parsed only then (docs/scaling.md states what they cost). The record
travels with each reading task to the workers (``ncuflow.read.runs.read_source``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReadOptions:
    """What is read of each launch besides its fields."""

    findings: bool = False  # NVIDIA's rule results ("findings") and source markers


READ_DEFAULT = ReadOptions()
WITH_FINDINGS = ReadOptions(findings=True)
