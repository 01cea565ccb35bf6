"""``ncuflow phases``: split serving traces into admission ramp, steady decode and drain.

The tree is the pipeline: ``detect`` opens a file and picks a parser from ``parse/``
(sglang, vllm, jsonl, bench), which turns it into the frozen input types of
``model.traces``; ``model/`` holds the pure phase split, the TPOT reconciliation and the
amortization test; ``pipeline`` runs them per file; ``report`` and ``plot`` present the
result. Nothing here imports torch, triton, subprocess or the CLI.
"""

from __future__ import annotations

from ncuflow.errors import NcuflowError


class TraceError(NcuflowError):
    """A serving trace that cannot be read: names the file (and line) and the fix."""
