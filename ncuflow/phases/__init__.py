"""``ncuflow phases``: split serving traces into admission ramp, steady decode and drain.

Parsers (``parse_sglang``, ``parse_vllm``, ``parse_jsonl``, ``parse_bench``) read files into
the frozen dataclasses of ``model``; ``model`` holds the pure phase split, the TPOT
reconciliation and the amortization test; ``render`` and ``plot`` present the result.
"""

from __future__ import annotations

from ncuflow.errors import NcuflowError


class TraceError(NcuflowError):
    """A serving trace that cannot be read: names the file (and line) and the fix."""
