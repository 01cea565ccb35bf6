"""Parsers: each reads one kind of file into the frozen input types of ``ncuflow.phases.model``.

``sglang`` and ``vllm`` read server logs into ``ServerTrace``; ``jsonl`` (per-request
streaming timestamps) and ``bench`` (bench_serving --output-details JSON) read into
``RequestTrace``. ``ncuflow.phases.detect`` picks the parser.
"""
