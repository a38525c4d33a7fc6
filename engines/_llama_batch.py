"""Continuous batching on one device: one context, several sequences, one llama_decode per step.

Each step is one batch, packed as llama.cpp's own server packs it: a row for every sequence that
is generating (plus its speculative draft, when its route asks for one), then chunks of the
prompts waiting to be prefilled, several prompts side by side, up to the step's token budget
(`n_batch`). So prompts that arrive together are prefilled together, a new request starts at
once, and a step never holds more prompt than the budget: the streams already running wait at
most one budgeted step for their next token. A lone request is prefilled in `n_batch` chunks and
decoded a token a step, exactly as llama-cpp-python does it (its tokens are identical); under
concurrency the batch's shape depends on what else runs, so a greedy stream can, at a near-tie,
differ from the same request alone (docs/serving.md). Admission is the runner's (engines/_runner.py:
route priority, then arrival; `slots + max_queue` requests in the system, more refused with
429): what it lets through starts here in arrival order as slots free.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from zest.engines._base import Delta, GenerationJob, StageStats
from zest.engines._kv_cells import KvCells, count_cells
from zest.engines._llama_native import NativeContext
from zest.engines._output import SequenceOutput
from zest.engines._prefix_cache import PrefixCache
from zest.engines._speculation import PromptLookup, draft_entries, take_tokens
from zest.engines._step_plan import (
    Prefilling,
    QueuePause,
    RecentPriority,
    StepCost,
    prefill_chunks,
    yield_tokens,
)
from zest.engines._worker import Outbox, Task, stream_task

__all__ = ["BatchScheduler"]

_FIRST_TOKENS_KEPT = 256


@dataclass
class _Slot:
    task: Task
    seq: int
    out: SequenceOutput
    sampler: Any
    cursor: int = 0  # prompt tokens already in the KV cache
    token: int | None = None  # last sampled token, once generating
    admitted: float = field(default_factory=time.perf_counter)
    stats: StageStats | None = None
    decode_start: float = 0.0
    reused: int = 0  # prompt tokens whose KV came from the prefix cache
    drafter: PromptLookup | None = None  # the route's speculative decoding
    drafted: int = 0
    accepted: int = 0

    @property
    def prompt(self) -> tuple[int, ...]:
        return self.task.job.prompt_tokens

    @property
    def position(self) -> int:
        """Where the current token goes in the sequence."""
        return len(self.prompt) + self.out.produced - 1

    def draft(self) -> list[int]:
        room = self.task.job.max_tokens - self.out.produced - 1  # no draft past max_tokens
        return self.drafter.draft(room) if self.drafter is not None else []


@dataclass
class _Row:
    """Where a slot's rows sit in the step's batch."""

    slot: _Slot
    first: int  # batch index of its first row
    draft: list[int] = field(default_factory=list)
    end: int = 0  # prefill: the prompt position its chunk reaches


class BatchScheduler:
    def __init__(
        self,
        name: str,
        *,
        ctx: NativeContext,
        slots: int,
        cache: PrefixCache | None,
        new_output: Callable[[GenerationJob], SequenceOutput],
        new_sampler: Callable[[GenerationJob], Any],
        device: str,
    ) -> None:
        self._ctx, self._cache = ctx, cache
        self._new_output, self._new_sampler, self._device = new_output, new_sampler, device
        self._free = list(range(slots))
        self._active: list[_Slot] = []
        # Admitted by the runner (engines/_runner.py), started here in arrival order.
        self._incoming: deque[Task] = deque()
        self._cond = threading.Condition()
        self._closed = False
        # Steps run, and the step at which recent jobs (by label) had their first token: what
        # the batch composition is judged by (tests count steps, not seconds).
        self.steps = 0
        self.first_token_steps: dict[str, int] = {}
        self._cost = StepCost()  # sizes the yielding prompts' chunk (engines/_step_plan.py)
        self._recent = RecentPriority()  # ...and who they yield to
        self._pause = QueuePause()  # ...and when they pause for requests waiting for a slot
        # The highest priority the runner holds back for want of a slot (set from the event
        # loop: Runner -> Engine.note_queued; one attribute, read once a step).
        self.queued_priority: int | None = None
        self._outbox = Outbox()  # a step's deltas reach the event loop in one wake-up
        # The context's cells, counted between steps by this scheduler's thread.
        self.kv = KvCells()
        self._thread = threading.Thread(target=self._run, name=f"zest-{name}", daemon=True)
        self._thread.start()

    def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        return stream_task(self._submit, job)

    def _submit(self, task: Task) -> None:
        with self._cond:
            if self._closed:
                task.drop("its engine closed before it started")
                return
            self._incoming.append(task)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=30)

    # --- the scheduling thread ---------------------------------------------------------------

    def _run(self) -> None:
        while self._admit():
            self._retire_cancelled()
            if self._active:
                self._step()  # it hands over what is held while its llama_decode runs
            self.kv = self._count_cells()
            if not self._active:
                self._outbox.flush()  # no step left to overlap with, and _admit may block

    def _count_cells(self) -> KvCells:
        kept = self._cache.kept() if self._cache is not None else {}
        return count_cells(self._ctx, [s.seq for s in self._active], self._free, kept)

    def _admit(self) -> bool:
        """Move waiting requests into free slots; block while there is nothing to do."""
        with self._cond:
            while not self._closed and not self._incoming and not self._active:
                self._cond.wait()
            if self._closed:
                while self._incoming:
                    self._incoming.popleft().drop("its engine closed before it started")
                return bool(self._active)
            admitted = []
            while self._free and self._incoming:
                task = self._incoming.popleft()
                if task.job.cancelled.is_set():  # its caller left before it started
                    task.drop("left before its engine started it")
                    continue
                admitted.append((task, self._take_slot(task.job.prompt_tokens)))
        for task, seq in admitted:
            self._start(task, seq)
        return True

    def _take_slot(self, prompt: tuple[int, ...]) -> int:
        """The free sequence whose stream already holds most of `prompt`, else the lowest (a
        lone batch takes the same sequence every time)."""
        seq = min(self._free) if self._cache is None else self._cache.choose(prompt, self._free)
        self._free.remove(seq)
        return seq

    def _start(self, task: Task, seq: int) -> None:
        job = task.job
        task.outbox = self._outbox
        try:  # a sampler llama.cpp refuses (its grammar) fails the job, never this thread
            slot = _Slot(task, seq, self._new_output(job), self._new_sampler(job))
        except Exception as exc:
            if self._cache is None:
                self._ctx.forget(seq)
            else:
                self._cache.release(seq, keep=False)
            with self._cond:
                self._free.append(seq)
            task.fail(exc)
            return
        if job.speculative is not None:
            slot.drafter = PromptLookup(
                job.prompt_tokens, job.speculative.tokens, job.speculative.ngram
            )
        try:  # the sequence's stream holds at most its last prompt (engines/_prefix_cache.py)
            if self._cache is not None:
                slot.reused = slot.cursor = self._cache.reuse(job.prompt_tokens, seq)
        except Exception as exc:
            self._active.append(slot)
            self._retire(slot, error=exc)
            return
        self._active.append(slot)

    def _retire_cancelled(self) -> None:
        for slot in [s for s in self._active if s.task.job.cancelled.is_set()]:
            self._retire(slot)

    def _step(self) -> None:
        """One batch: the generating sequences' rows, then prompt chunks up to the budget."""
        entries: list[tuple[int, int, int, bool]] = []
        decoding, filling = [], []
        generating = [s for s in self._active if s.token is not None]
        capacity = max(self._ctx.settings.n_batch, len(generating))
        for number, slot in enumerate(generating):
            spare = capacity - len(entries) - (len(generating) - number)  # rows left to others
            row = _Row(slot, len(entries), slot.draft()[: max(spare, 0)])
            entries += draft_entries(slot.token or 0, slot.position, slot.seq, row.draft)
            decoding.append(row)
        for slot, tokens in self._prefill_plan(len(entries)):
            end = slot.cursor + tokens
            last = len(slot.prompt) - 1
            chunk = [(slot.prompt[p], p, slot.seq, p == last) for p in range(slot.cursor, end)]
            filling.append(_Row(slot, len(entries) + len(chunk) - 1, end=end))
            entries += chunk
        self.steps += 1
        try:
            started = time.perf_counter()
            # The last step's deltas go to the event loop while llama.cpp computes this one:
            # waking the loop (a socket write) was 17% of this thread's busy samples at 4
            # streams, on the step's critical path (py-spy, issue 25).
            self._ctx.decode(entries, while_waiting=self._outbox.flush)
            self._cost.record(len(entries), (time.perf_counter() - started) * 1000)
            for row in decoding:
                self._advance(row)
            for row in filling:
                self._after_prefill_chunk(row.slot, row.end, row.first)
        except Exception as exc:
            for slot in list(self._active):
                self._retire(slot, error=exc)

    def _prefill_plan(self, used: int) -> list[tuple[_Slot, int]]:
        """The prompts' chunks of this step: by route priority, lower ones yielding
        (engines/_step_plan.py)."""
        prefilling = {s.seq: s for s in self._active if s.token is None}
        waiting = [
            Prefilling(seq, s.task.job.priority, len(s.prompt) - s.cursor)
            for seq, s in prefilling.items()
        ]
        # The highest priority present or expected soon: at least every decoding sequence's.
        expected = self._recent.note(s.task.job.priority for s in self._active)
        # Waiting for a slot: behind the runner (its queue), or here while a slot is freed.
        with self._cond:
            queued = [t.job.priority for t in self._incoming]
        if self.queued_priority is not None:
            queued.append(self.queued_priority)
        top = max(queued, default=None)
        # Only beside decode rows: a step of paused prompts alone would be empty (llama_decode
        # fails on no tokens, and every request in the batch with it), and frees no slot.
        below = used > 0 and top is not None and any(p.priority < top for p in waiting)
        share = yield_tokens(self._cost.ms_per_row, used)
        chunks = prefill_chunks(
            waiting,
            budget=self._ctx.settings.n_batch - used,
            others=[p for p in (expected, top) if p is not None],
            yield_chunk=self._pause.share(share, queued_above=below),
        )
        return [(prefilling[seq], tokens) for seq, tokens in chunks]

    def _after_prefill_chunk(self, slot: _Slot, chunk_end: int, last_index: int) -> None:
        slot.cursor = chunk_end
        if chunk_end < len(slot.prompt):
            return
        token = self._ctx.sample_into(slot.out, slot.sampler, last_index)
        prefill_ms = (time.perf_counter() - slot.admitted) * 1000
        slot.stats = StageStats(self._device, self._device, prefill_ms)
        if self._cache is not None:
            self._cache.hold(slot.prompt, slot.seq)
        slot.decode_start = time.perf_counter()
        self.first_token_steps[slot.task.job.label] = self.steps
        while len(self.first_token_steps) > _FIRST_TOKENS_KEPT:
            del self.first_token_steps[next(iter(self.first_token_steps))]
        slot.token = token
        if slot.drafter is not None:
            slot.drafter.append(token)
        text = slot.out.push(token)
        slot.task.send(Delta(text, stats=slot.stats, cached_tokens=slot.reused))
        if slot.out.finish is not None:
            self._retire(slot)

    def _advance(self, row: _Row) -> None:
        """Draw the slot's next tokens (one, or more where its draft holds) and drop the KV
        cells of the draft the model did not follow."""
        slot = row.slot
        position = slot.position
        taken = take_tokens(
            lambda index: self._ctx.sample_into(slot.out, slot.sampler, index),
            slot.out,
            row.first,
            row.draft,
            lambda text: slot.task.send(Delta(text)),
        )
        if len(taken.drawn) <= len(row.draft):  # rows past the last one used: not the answer
            self._ctx.forget_from(slot.seq, position + len(taken.drawn))
        slot.token = taken.token
        slot.drafted += len(row.draft)
        slot.accepted += taken.matched
        if slot.drafter is not None:
            slot.drafter.record(len(row.draft), taken.matched)
            for token in taken.drawn:
                slot.drafter.append(token)
        if slot.out.finish is not None:
            self._retire(slot)

    def _retire(self, slot: _Slot, error: BaseException | None = None) -> None:
        # The slot's stream keeps its prompt for a later request: in a stream of its own it
        # costs the other sequences' attention nothing (engines/_prefix_cache.py).
        self._active.remove(slot)
        if self._cache is None:
            self._ctx.forget(slot.seq)
        else:
            self._cache.release(slot.seq, keep=error is None)
        slot.sampler.close()
        with self._cond:
            self._free.append(slot.seq)
        if error is not None:
            slot.task.fail(error)
            return
        stats = slot.stats or StageStats(
            self._device, self._device, (time.perf_counter() - slot.admitted) * 1000
        )
        decoded = max(slot.out.produced - 1, 0)
        ms = (time.perf_counter() - slot.decode_start) * 1000 if slot.decode_start else 0.0
        stats = replace(
            stats,
            decode_ms=ms,
            decode_tokens=decoded,
            drafted_tokens=slot.drafted,
            accepted_tokens=slot.accepted,
        )
        slot.task.finish(slot.out.final(stats))
