"""Which prompts' prefill enters a batch step, and how much of each: route priority reaches the
batch, not just the admission queue.

A step's token budget (`n_batch`) goes first to the rows of the sequences that are decoding
(the scheduler adds those), then to prompts waiting for their prefill, highest priority first,
then in arrival order. A prompt *yields* while a request of higher priority is prefilling or
decoding, or came within HOLD_S (RecentPriority): the yielding prompts share one chunk of the
step, the oldest first, sized by yield_tokens to keep the step within STEP_TARGET_MS at the
measured cost per row (StepCost; MIN_YIELD to YIELD_CHUNK tokens), so the step stays short and
the higher-priority request's first token (and every next token) comes without waiting behind a
long prefill (stall-free batching, as Sarathi-Serve and vLLM's chunked prefill do, with route
priorities on top). While a request of higher priority waits for a free slot, the yielding
prompts pause (QueuePause): the step shrinks to its decode rows, so the slots of the requests
ahead free sooner. On 2 cores, 8 yielded tokens made a step of five autocomplete rows 190 ms
instead of ~80, each autocomplete held its slot 3 s, five slots could not keep up with one a
second, and the autocompletes went through in convoys (TTFT climbing to 4 s). The aging rule:
the oldest yielding prompt gets the shared chunk every step, and while paused at least once
every AGING_S, so a steady stream of interactive requests slows the batch prompts' prefill but
cannot starve them (each becomes the oldest in turn). Shared, not per prompt: three summaries
yielding 64 tokens each made every step of an autocomplete three times as long (a 192-token
chunk beside 5,000 cached cells: about 1.3 s on 2 cores).

Pure (RecentPriority's and QueuePause's clocks injected): the scheduler
(engines/_llama_batch.py) hands in what waits and what it measured, and applies the answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "AGING_S",
    "HOLD_S",
    "MIN_YIELD",
    "STEP_TARGET_MS",
    "YIELD_CHUNK",
    "Prefilling",
    "QueuePause",
    "RecentPriority",
    "StepCost",
    "prefill_chunks",
    "yield_tokens",
]

# Tokens the yielding prompts prefill per step at most: about 0.2 s of a 2-core CPU at ~300
# tokens/s.
YIELD_CHUNK = 64
# ...and at least, however slow the machine: the aging rule's floor.
MIN_YIELD = 8
# How long a step that carries yielding prefill may take: each token of the higher-priority
# requests waits one step, so this bounds their time between tokens.
STEP_TARGET_MS = 150.0
# How long a priority stays expected after its last request: interactive requests come in
# bursts (autocomplete as someone types), and one arriving between them would otherwise wait
# behind a whole n_batch of a lower prompt (3.5 s for 512 tokens on 2 cores, measured here).
HOLD_S = 2.0
# How long the yielding prompts may pause while higher-priority requests wait for a slot: their
# chunk still comes at least this often (the aging rule).
AGING_S = 1.0


@dataclass(frozen=True)
class Prefilling:
    key: int  # the scheduler's handle (its sequence id)
    priority: int
    remaining: int  # prompt tokens not yet in the KV cache


class RecentPriority:
    """The highest priority among the requests of the last HOLD_S seconds: lower prompts keep
    yielding to it for that long after its last request, so the next one finds short steps."""

    def __init__(self, hold_s: float = HOLD_S, clock: Callable[[], float] = time.monotonic):
        self._hold_s, self._clock = hold_s, clock
        self._seen: dict[int, float] = {}  # priority -> when last present

    def note(self, present: Iterable[int]) -> int | None:
        """Record the priorities present in this step; the highest one still expected."""
        now = self._clock()
        for priority in present:
            self._seen[priority] = now
        for priority in [p for p, at in self._seen.items() if now - at > self._hold_s]:
            del self._seen[priority]
        return max(self._seen, default=None)


class QueuePause:
    """Whether this step's yielding prompts pause: while a request of higher priority waits for
    a free slot, except once every AGING_S (their chunk still comes)."""

    def __init__(self, aging_s: float = AGING_S, clock: Callable[[], float] = time.monotonic):
        self._aging_s, self._clock = aging_s, clock
        self._served = clock()  # when the yielding prompts last had a chunk

    def share(self, chunk: int, *, queued_above: bool) -> int:
        """The yielding prompts' chunk this step: `chunk`, or 0 while paused."""
        now = self._clock()
        if queued_above and now - self._served < self._aging_s:
            return 0
        self._served = now
        return chunk


class StepCost:
    """A running estimate of a step's milliseconds per batch row (an exponential average of
    the steps measured): what sizes the yielding chunk on this machine."""

    def __init__(self, weight: float = 0.2) -> None:
        self.ms_per_row: float | None = None
        self._weight = weight

    def record(self, rows: int, ms: float) -> None:
        if rows <= 0:
            return
        sample = ms / rows
        previous = self.ms_per_row
        self.ms_per_row = (
            sample if previous is None else previous + self._weight * (sample - previous)
        )


def yield_tokens(ms_per_row: float | None, rows: int, target_ms: float = STEP_TARGET_MS) -> int:
    """The yielding prompts' share of a step that already holds `rows`: as many tokens as keep
    the step within `target_ms` at the measured cost, between MIN_YIELD and YIELD_CHUNK (a
    fast machine gets the whole YIELD_CHUNK; 10 ms a row, measured here beside long prompts,
    gets the floor). Unmeasured: YIELD_CHUNK."""
    if ms_per_row is None or ms_per_row <= 0:
        return YIELD_CHUNK
    fits = int(target_ms / ms_per_row) - rows
    return max(MIN_YIELD, min(YIELD_CHUNK, fits))


def prefill_chunks(
    waiting: Sequence[Prefilling],
    *,
    budget: int,
    others: Sequence[int] = (),
    yield_chunk: int = YIELD_CHUNK,
) -> list[tuple[int, int]]:
    """(key, tokens) for this step, in the order the chunks go into the batch. `waiting` is in
    arrival order; `others` holds the priorities of the step's other work: the sequences
    decoding in it, or (the scheduler's RecentPriority) the highest one expected soon."""
    ahead = max([*others, *(p.priority for p in waiting)], default=0)
    chunks = []
    yielding = yield_chunk  # shared by every yielding prompt: the step stays short however many
    for prompt in sorted(waiting, key=lambda p: -p.priority):  # stable: arrival order kept
        leads = prompt.priority >= ahead
        tokens = min(prompt.remaining, budget if leads else min(budget, yielding))
        if tokens <= 0:
            continue
        chunks.append((prompt.key, tokens))
        budget -= tokens
        if not leads:
            yielding -= tokens
    return chunks
