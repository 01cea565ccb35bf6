"""A request whose server logs only its totals, as the chunks a request trace holds.

A per-request server log (TGI's router, llama.cpp's server) says when a request started and
ended, its tokens and its own time per output token, not when each token came. The request
is laid out as its first token and at most ``CHUNKS`` later chunks, evenly spaced at the
server's own per-token time: each chunk's gap over its tokens is that time, so the per-token
times the analysis reads are the server's numbers, in bounded memory whatever the length.
"""

from __future__ import annotations

from ncuflow.phases.model.traces import RequestRecord

CHUNKS = 16
# requests one log's reader keeps (about 1 KiB each): a longer log's later requests are
# counted and left out with a note (``beyond_note``), so memory stays bounded
MAX_REQUESTS = 1 << 18


def beyond_note(left_out: int) -> str:
    """The note of a log with more requests than ``MAX_REQUESTS``."""
    return (
        f"{left_out:,} request(s) after the first {MAX_REQUESTS:,} were left out (memory is bounded); "
        "split the log to read them"
    )


def logged_request(request_id: str, span: tuple[float, float], first_s: float, tokens: int, line: int) -> RequestRecord:
    """The request that ran over ``span`` (start, end), its first token at ``first_s`` and
    ``tokens`` output tokens, the later ones evenly spaced up to the end."""
    start, end = span
    if tokens < 2 or end <= first_s:
        return RequestRecord(request_id, start, (end,), (max(tokens, 1),), line)
    later = tokens - 1
    pieces = min(later, CHUNKS)
    counts = [later // pieces + (1 if k < later % pieces else 0) for k in range(pieces)]
    per_token = (end - first_s) / later
    times, done = [first_s], 0
    for count in counts:
        done += count
        times.append(first_s + per_token * done)
    times[-1] = end
    return RequestRecord(request_id, start, tuple(times), (1, *counts), line)
