"""One scheduler's statistics lines in bounded memory.

A log of a few hundred thousand lines is kept line for line. Beyond ``CAP`` samples of one
scheduler, the store folds lines together, so that any log, of any length, is analysed in
bounded memory and in time linear in its length:

- a Decode line is folded into the next Decode line of the same batch size (the later line
  stands for both: its interval starts where the earlier one's started, and it carries the
  tokens of both, so token counts and token-weighted per-token times stay exact; only the
  per-line spread is taken over longer intervals);
- consecutive Prefill lines with no Decode line between them become one admission (at the
  first line's time, the requests of all of them);
- if that is not enough, Decode lines are folded whatever their batch size, and runs that
  hold a single Prefill line and nothing else are counted and left out.

A run's start (a Prefill line with ``#running-req: 0``, a vLLM idle line) is never folded
into another line, so runs stay where they were. ``folded`` counts the lines folded.
"""

from __future__ import annotations

from collections.abc import Callable

from ncuflow.phases.model.traces import BatchSample

CAP = 1 << 17


def _is_decode(sample: BatchSample) -> bool:
    return sample.kind in ("decode", "stats")


def _boundary(sample: BatchSample) -> bool:
    """A line that starts or closes a run: never folded into another one."""
    if sample.kind == "prefill":
        return sample.running == 0
    return sample.running == 0 and not sample.queued


def _weighted(a: float | None, wa: float, b: float | None, wb: float) -> float | None:
    if a is None or b is None or wa + wb <= 0:
        return b if a is None else a if b is None else None
    return (a * wa + b * wb) / (wa + wb)


def fold_decode(before: BatchSample, earlier: BatchSample, later: BatchSample) -> BatchSample:
    """``later`` standing for ``earlier`` and itself; ``before`` is the Decode line that
    starts ``earlier``'s interval."""
    span_a = earlier.time_s - before.time_s
    span_b = later.time_s - earlier.time_s
    span = later.time_s - before.time_s
    throughput = None
    tokens_a = tokens_b = 0.0
    if earlier.gen_throughput is not None and later.gen_throughput is not None and span > 0:
        tokens_a, tokens_b = earlier.gen_throughput * span_a, later.gen_throughput * span_b
        throughput = (tokens_a + tokens_b) / span
    prompt = None
    if earlier.prompt_throughput is not None and later.prompt_throughput is not None and span > 0:
        prompt = (earlier.prompt_throughput * span_a + later.prompt_throughput * span_b) / span
    return later._replace(
        gen_throughput=throughput,
        prompt_throughput=prompt,
        accept_len=_weighted(earlier.accept_len, tokens_a, later.accept_len, tokens_b),
        lines=earlier.lines + later.lines,
    )


def merge_prefills(first: BatchSample, second: BatchSample) -> BatchSample:
    """Two admissions with no Decode line between them, as one at the first one's time."""
    return first._replace(
        new_seqs=(first.new_seqs or 0) + (second.new_seqs or 0),
        new_tokens=(first.new_tokens or 0) + (second.new_tokens or 0),
        cached_tokens=(first.cached_tokens or 0) + (second.cached_tokens or 0),
        unfinished_seqs=first.unfinished_seqs + second.unfinished_seqs,
        queued=second.queued,
        pending_tokens=second.pending_tokens,
        lines=first.lines + second.lines,
    )


class SampleStore:
    """The samples of one scheduler, in order; folded beyond ``cap`` (see the module)."""

    def __init__(
        self,
        cap: int = CAP,
        before_folding: Callable[[list[BatchSample]], list[BatchSample]] | None = None,
    ) -> None:
        self.cap = cap
        self.samples: list[BatchSample] = []
        self.folded = 0
        self.dropped_runs = 0
        self._before_folding = before_folding

    def append(self, sample: BatchSample) -> None:
        self.samples.append(sample)
        if len(self.samples) > self.cap:
            self._compact()

    def _compact(self) -> None:
        if self._before_folding is not None:
            self.samples = self._before_folding(self.samples)
        before = len(self.samples)
        self.samples = self._pass(self.samples, any_batch=False)
        if len(self.samples) > self.cap * 3 // 4:
            self.samples = self._pass(self.samples, any_batch=True)
        if len(self.samples) > self.cap * 3 // 4:
            self.samples = self._drop_lone_prefills(self.samples)
        self.folded += before - len(self.samples)
        if len(self.samples) > self.cap:  # nothing left to fold: allow more rather than fail
            self.cap = len(self.samples) * 2

    @staticmethod
    def _pass(samples: list[BatchSample], *, any_batch: bool) -> list[BatchSample]:
        out: list[BatchSample] = []
        made: list[bool] = []  # out[i] was made by folding in this pass (each folds once)
        last_decode: int | None = None  # index in out of the last Decode line
        before_last: BatchSample | None = None  # the Decode line before that one
        for sample in samples:
            if _is_decode(sample):
                earlier = out[last_decode] if last_decode is not None else None
                if (
                    earlier is not None
                    and last_decode is not None
                    and before_last is not None
                    and not made[last_decode]
                    and not _boundary(earlier)
                    and not _boundary(sample)
                    and (any_batch or earlier.running == sample.running)
                    and earlier.incoming == sample.incoming
                    and (earlier.gen_throughput is None) == (sample.gen_throughput is None)
                    and not any(_boundary(s) for s in out[last_decode + 1 :])
                ):
                    del out[last_decode]
                    del made[last_decode]
                    out.append(fold_decode(before_last, earlier, sample))
                    made.append(True)
                else:
                    before_last = earlier
                    out.append(sample)
                    made.append(False)
                last_decode = len(out) - 1
                continue
            previous = out[-1] if out else None
            if (
                previous is not None
                and previous.kind == "prefill"
                and sample.kind == "prefill"
                and not _boundary(sample)
                and not made[-1]
            ):
                out[-1] = merge_prefills(previous, sample)
                made[-1] = True
                continue
            out.append(sample)
            made.append(False)
        return out

    def _drop_lone_prefills(self, samples: list[BatchSample]) -> list[BatchSample]:
        """Runs made of one Prefill line and nothing else (no Decode line to analyse)."""
        out: list[BatchSample] = []
        for index, sample in enumerate(samples):
            following = samples[index + 1] if index + 1 < len(samples) else None
            lone = (
                sample.kind == "prefill"
                and _boundary(sample)
                and following is not None
                and following.kind == "prefill"
                and _boundary(following)
                and not (sample.pending_tokens or 0)
            )
            if lone:
                self.dropped_runs += 1
                continue
            out.append(sample)
        return out
