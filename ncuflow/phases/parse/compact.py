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

A log of millions of short runs (a lone request at a time, idle between) cannot be folded
that way: beyond ``RUNS`` runs, every other run is left out, and from then on only every
``run_stride``-th run is kept (runs are numbered as kept; ``runs_seen`` counts them all).
The schedulers of one log share ``CAP`` and ``RUNS`` (``share_cap``).
"""

from __future__ import annotations

from collections.abc import Callable

from ncuflow.phases.model.runs import waiting_for_cache
from ncuflow.phases.model.traces import BatchSample

CAP = 1 << 17  # samples kept line for line, over all the schedulers of one log
MIN_CAP = 1 << 12
RUNS = 1 << 13  # runs kept, over all the schedulers of one log
MIN_RUNS = 1 << 8


def share_cap(stores: dict[str, SampleStore]) -> None:
    """Split ``CAP`` and ``RUNS`` between a log's schedulers (a 16-rank log keeps 8,192
    lines and 512 runs per rank)."""
    for store in stores.values():
        store.cap = max(MIN_CAP, CAP // len(stores), store.cap if store.cap > CAP else 0)
        store.max_runs = max(MIN_RUNS, RUNS // len(stores))


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
        decoding=_weighted(earlier.decoding, span_a, later.decoding, span_b),
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
        self.max_runs = RUNS
        self.samples: list[BatchSample] = []
        self.folded = 0
        self.dropped_runs = 0
        self.runs_seen = 0
        self.runs_kept = 0
        self.run_stride = 1
        self._skipping = False
        self._last: BatchSample | None = None  # the last line seen, kept or not
        self._before_folding = before_folding

    @staticmethod
    def _starts_run(sample: BatchSample, last: BatchSample | None) -> bool:
        """Whether ``sample`` starts a run, after ``last`` (as ``runs.split_server_runs``
        cuts them: SGLang at a Prefill line with no batch, vLLM at a busy line after an idle one)."""
        if last is None:
            return True
        if sample.kind == "prefill":
            continues = (last.kind == "prefill" and (last.pending_tokens or 0) > 0) or waiting_for_cache(last)
            return sample.running == 0 and not continues
        if sample.kind == "stats":
            return (sample.running > 0 or bool(sample.queued)) and _boundary(last)
        return False

    def append(self, sample: BatchSample) -> None:
        if self._starts_run(sample, self._last):
            self.runs_seen += 1
            if self.runs_kept >= self.max_runs:
                self._thin_runs()
            self._skipping = (self.runs_seen - 1) % self.run_stride != 0
            if not self._skipping:
                self.runs_kept += 1
        self._last = sample
        if self._skipping:
            return
        self.samples.append(sample)
        if len(self.samples) > self.cap:
            self._compact()

    def _thin_runs(self) -> None:
        """Keep every other run held (the first, the third, …); from now on every
        2·stride-th run of the log."""
        runs: list[list[BatchSample]] = []
        last: BatchSample | None = None
        for sample in self.samples:
            if not runs or self._starts_run(sample, last):
                runs.append([])
            runs[-1].append(sample)
            last = sample
        kept = runs[::2]
        self.samples = [s for run in kept for s in run]
        self.runs_kept = len(kept)
        self.run_stride *= 2

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


def folding_note(where: str, store: SampleStore) -> str:
    parts = []
    if store.folded:
        parts.append(
            f"{store.folded:,} statistics line(s){where} were folded into their neighbours "
            "(equal-batch Decode lines into the next one, consecutive Prefill lines into one "
            "admission); token counts and token-weighted per-token times stay exact, p10–p90 "
            "are over the longer intervals"
        )
    if store.dropped_runs:
        parts.append(f"{store.dropped_runs:,} run(s) of a single Prefill line and nothing else were left out")
    if store.run_stride > 1:
        parts.append(
            f"the log holds {store.runs_seen:,} runs{where}: only every {ordinal(store.run_stride)} was "
            "analysed (runs are numbered as kept)"
        )
    return "the log is long, and kept in bounded memory: " + "; ".join(parts)


def ordinal(number: int) -> str:
    """2nd, 3rd, 11th, 64th: how a note names every N-th run kept."""
    suffix = "th" if number % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"
