"""Chunked prefill in SGLang logs: a prompt prefilled over several Prefill lines is one
admission, counted when its last chunk is done."""

from __future__ import annotations

from collections.abc import Sequence

from ncuflow.phases.model.traces import BatchSample


def mark_chunked_prefills(samples: Sequence[BatchSample]) -> list[BatchSample]:
    """One scheduler's lines, each Prefill line whose last request is cut off marked.

    SGLang prefills a prompt longer than what is left of the batch's token budget over
    several batches, and counts that request in ``#new-seq`` on each of them: summed,
    ``#new-seq`` counts it once per chunk (seen on the DP-attention log: 80 admissions on
    a rank that holds 72 requests). Where the log has ``#pending-token`` (newer SGLang),
    a Prefill line with pending tokens is cut off, unless the next line shows all its
    requests joined the running batch (a build whose ``#pending-token`` is the whole queue's
    total: read as cut, most admissions went uncounted). Otherwise a line is taken to be cut off
    when it carries the scheduler's largest ``#new-token`` (the budget; seen on at least
    two lines), the very next line is a Prefill line (the cut request goes on at once),
    and that line shows one request fewer joined the running batch than ``#new-seq``
    said. Anything else is left as logged (a mark, once made, stays).
    """
    prefill_tokens = [
        s.new_tokens for s in samples if s.kind == "prefill" and s.new_tokens and s.lines == 1
    ]
    budget = max(prefill_tokens, default=None)
    if budget is not None and prefill_tokens.count(budget) < 2:
        budget = None
    marked = list(samples)
    for index, sample in enumerate(marked):
        if sample.kind != "prefill" or not sample.new_seqs or sample.unfinished_seqs or sample.lines > 1:
            continue
        following = marked[index + 1] if index + 1 < len(marked) else None
        if sample.pending_tokens is not None:
            # pending tokens are the cut request's rest, except in builds where they are the
            # whole queue's: there the next line shows every request of this one joined
            cut = sample.pending_tokens > 0 and not _all_joined(sample, following)
        else:
            cut = (
                following is not None
                and following.kind == "prefill"
                and following.lines == 1
                and sample.new_tokens == budget
                and following.running - sample.running == sample.new_seqs - 1
            )
        if cut:
            marked[index] = sample._replace(unfinished_seqs=1)
    return marked


def _all_joined(sample: BatchSample, following: BatchSample | None) -> bool:
    """The next line's batch holds every request this Prefill line admitted."""
    return (
        following is not None
        and following.lines == 1
        and following.running - sample.running >= (sample.new_seqs or 0)
    )
