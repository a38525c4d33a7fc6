"""Continuous batching on one device: one context, several sequences, one llama_decode per step.

The scheduler owns its requests, as vLLM's owns `waiting` and `running`: the runner (on the
event loop) only bounds how many are in the system and answers 429 past the bound; every
request it lets through comes here through one thread-safe inbox, which this scheduler's thread
alone reads. The thread holds the waiting requests (new ones, and preempted sequences whose KV
state waits in host memory) and the running sequences (one per slot), and builds every step from
one pure function (engines/_step_plan.py: who is dropped, preempted, admitted, and each
sequence's rows), with the token budgets of one injected cost model (engines/_step_cost.py).

Each step is one batch, packed as llama.cpp's own server packs it: decode rows (plus a route's
speculative draft), then chunks of prompts, several side by side. A lone request is prefilled
in `n_batch` chunks and decoded a token a step, exactly as llama-cpp-python does it (its tokens
are identical); under concurrency the batch's shape depends on what else runs, so a greedy
stream can, at a near-tie, differ from the same request alone (docs/serving.md).

Preemption saves the victim's KV state to host memory (`llama_state_seq_get_data`) and puts it
back into whichever slot it resumes in (`llama_state_seq_set_data`): on 2 cores that costs
milliseconds where computing the tokens again costs seconds (bench/preemption.py); its sampler,
grammar and draft state stay with it, so it continues as if it had never left.

A step llama.cpp refuses fails the requests in it (each stream ends with an error event) and
no others: the scheduler goes on with the rest.
"""

from __future__ import annotations

import itertools
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
from zest.engines._step_cost import CostModel, MeasuredCost
from zest.engines._step_plan import Running, StepPlan, StepState, Waiting, plan_step
from zest.engines._worker import Outbox, Task, stream_task
from zest.errors import EngineError

__all__ = ["BatchScheduler"]

_FIRST_TOKENS_KEPT = 256


@dataclass(eq=False)
class _Sequence:
    """A request from the inbox to its end: waiting, running in a slot, or preempted."""

    task: Task
    key: int  # arrival order
    since: int  # the step it began waiting (its arrival, or its preemption)
    out: SequenceOutput | None = None  # from its first start on
    sampler: Any = None
    seq: int | None = None  # its slot's sequence while it runs
    cursor: int = 0  # prompt tokens in its KV state
    token: int | None = None  # last sampled token, once generating (not in the KV yet)
    saved: bytes | None = None  # its KV state while preempted
    preempted: bool = False
    shielded: bool = False
    last_served: int = 0
    started_step: int = 0  # the step it took its slot (a shield lasts SHIELD_STEPS from it)
    started_at: int = 0  # the scheduler's llama_decode calls when it took its slot
    draft: list[int] = field(default_factory=list)  # proposed for this step
    admitted: float = 0.0
    stats: StageStats | None = None
    decode_start: float = 0.0
    reused: int = 0  # prompt tokens whose KV came from the prefix cache
    drafter: PromptLookup | None = None  # the route's speculative decoding
    drafted: int = 0
    accepted: int = 0

    @property
    def job(self) -> GenerationJob:
        return self.task.job

    @property
    def prompt(self) -> tuple[int, ...]:
        return self.job.prompt_tokens

    @property
    def position(self) -> int:
        """Where the current token goes in the sequence."""
        assert self.out is not None
        return len(self.prompt) + self.out.produced - 1

    @property
    def remaining(self) -> int:
        """Prompt tokens not in its KV state yet (0: generating)."""
        return 0 if self.token is not None else len(self.prompt) - self.cursor

    def propose_draft(self) -> list[int]:
        if self.drafter is None or self.out is None or self.token is None:
            return []
        room = self.job.max_tokens - self.out.produced - 1  # no draft past max_tokens
        return self.drafter.draft(room)

    def group(self) -> tuple[int | None, int]:
        group = self.job.group
        return (None, 1) if group is None else (id(group), group.size)


@dataclass
class _Row:
    """Where a sequence's rows sit in the step's batch."""

    sequence: _Sequence
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
        cost: CostModel | None = None,
    ) -> None:
        self._ctx, self._cache = ctx, cache
        self._new_output, self._new_sampler, self._device = new_output, new_sampler, device
        # The one injected cost model: the token budgets of each step on this machine.
        self.cost: CostModel = cost or MeasuredCost(max(ctx.settings.n_batch, slots))
        self._free = list(range(slots))
        # Owned by the scheduling thread alone (the event loop reads their sizes only).
        self._running: dict[int, _Sequence] = {}
        self._waiting: dict[int, _Sequence] = {}
        self._keys = itertools.count()
        # The one way in: admitted by the runner, read by the scheduling thread alone.
        self._inbox: deque[Task] = deque()
        self._cond = threading.Condition()
        self._closed = False
        # Steps planned, and the step at which recent jobs (by label) had their first token:
        # what the batch composition is judged by (tests count steps, not seconds).
        self.steps = 0
        self.first_token_steps: dict[str, int] = {}
        self.preemptions = 0
        self._decodes = 0  # llama_decode calls made
        self.last_plan = StepPlan()
        self._outbox = Outbox()  # a step's deltas reach the event loop in one wake-up
        # The context's cells, counted between steps by this scheduler's thread.
        self.kv = KvCells()
        self._thread = threading.Thread(target=self._run, name=f"zest-{name}", daemon=True)
        self._thread.start()

    @property
    def running(self) -> int:
        """Sequences holding a slot."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot: in the inbox, not started, or preempted."""
        return len(self._inbox) + len(self._waiting)

    @property
    def saved_bytes(self) -> int:
        """Host memory held by preempted sequences' KV states."""
        return sum(len(s.saved) for s in list(self._waiting.values()) if s.saved is not None)

    def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        return stream_task(self._submit, job)

    def _submit(self, task: Task) -> None:
        with self._cond:
            if self._closed:
                task.drop("its engine closed before it started")
                return
            self._inbox.append(task)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=30)

    # --- the scheduling thread ---------------------------------------------------------------

    def _run(self) -> None:
        while self._gather():
            self._step()  # it hands over what is held while its llama_decode runs
            self.kv = self._count_cells()
            if not self._running:
                self._outbox.flush()  # no step left to overlap with, and _gather may block

    def _count_cells(self) -> KvCells:
        kept = self._cache.kept() if self._cache is not None else {}
        running = [s.seq for s in self._running.values() if s.seq is not None]
        return count_cells(self._ctx, running, self._free, kept)

    def _gather(self) -> bool:
        """Take the inbox into the waiting list; block while there is nothing to do. False
        once closed with nothing running (the waiting requests end without output)."""
        with self._cond:
            while not (self._closed or self._inbox or self._running or self._waiting):
                self._cond.wait()
            arrived, self._inbox = self._inbox, deque()
            closed = self._closed
        for task in arrived:
            key = next(self._keys)
            self._waiting[key] = _Sequence(task, key, since=self.steps)
        if closed:
            for sequence in list(self._waiting.values()):
                self._drop_waiting(sequence, why="its engine closed before it started")
        return bool(self._running or self._waiting)

    def _state(self) -> StepState:
        running = []
        for s in self._running.values():
            s.draft = s.propose_draft()
            group, _ = s.group()
            running.append(
                Running(
                    key=s.key,
                    priority=s.job.priority,
                    arrival=s.key,
                    remaining=s.remaining,
                    rows=1 + len(s.draft),
                    last_served=s.last_served,
                    shielded=s.shielded,
                    started=s.started_step,
                    abandoned=s.job.cancelled.is_set(),
                    group=group,
                    peak=s.job.peak_priority,
                )
            )
        waiting = []
        for s in self._waiting.values():
            group, size = s.group()
            waiting.append(
                Waiting(
                    key=s.key,
                    priority=s.job.priority,
                    arrival=s.key,
                    remaining=s.remaining,
                    since=s.since,
                    preempted=s.preempted,
                    abandoned=s.job.cancelled.is_set(),
                    group=group,
                    group_size=size,
                    peak=s.job.peak_priority,
                )
            )
        return StepState(tuple(running), tuple(waiting), len(self._free), self.steps)

    def _step(self) -> None:
        plan = self.last_plan = plan_step(self._state(), self.cost.budget())
        for key in plan.dropped:
            if key in self._running:
                self._retire(self._running[key])
            else:
                self._drop_waiting(self._waiting[key])
        for key in plan.preempted:
            self._preempt(self._running[key])
        for key in plan.admitted:
            self._start(self._waiting.pop(key), shielded=key in plan.shielded)
        rows = self._rows(plan)
        self.steps += 1
        entries: list[tuple[int, int, int, bool]] = []
        for row in rows:  # a decode row's logits are at its first entry, a chunk's at its last
            chunk = self._entries(row)
            row.first = len(entries) + (len(chunk) - 1 if row.end else 0)
            entries += chunk
        if entries:
            self._decode(entries, rows)
        elif not self._running and self._waiting and not plan.admitted:
            self._refuse_waiting()  # nothing runs and nothing can start: never spin

    def _refuse_waiting(self) -> None:
        """Waiting requests that no free slot can take: n choices beyond the slots, which only
        a caller past the runner (its 400) can send."""
        error = EngineError(
            f"{len(self._waiting)} request(s) cannot start: more choices than the model's "
            f"{len(self._free)} slot(s) (options.parallel in routes.yaml)"
        )
        for sequence in list(self._waiting.values()):
            self._drop_waiting(sequence, error)

    def _rows(self, plan: StepPlan) -> list[_Row]:
        rows = []
        for key, tokens in plan.rows:
            sequence = self._running.get(key)
            if sequence is None:  # it failed to start
                continue
            sequence.last_served = self.steps
            if sequence.token is not None:
                rows.append(_Row(sequence, 0, sequence.draft[: tokens - 1]))
            else:  # a prompt's chunk: the prefix cache may have covered more than planned
                end = min(sequence.cursor + tokens, len(sequence.prompt))
                if end > sequence.cursor:
                    rows.append(_Row(sequence, 0, end=end))
        return rows

    def _entries(self, row: _Row) -> list[tuple[int, int, int, bool]]:
        s = row.sequence
        assert s.seq is not None
        if not row.end:
            return draft_entries(s.token or 0, s.position, s.seq, row.draft)
        last = len(s.prompt) - 1
        return [(s.prompt[p], p, s.seq, p == last) for p in range(s.cursor, row.end)]

    def _decode(self, entries: list[tuple[int, int, int, bool]], rows: list[_Row]) -> None:
        try:
            started = time.perf_counter()
            # The last step's deltas go to the event loop while llama.cpp computes this one:
            # waking the loop (a socket write) was 17% of this thread's busy samples at 4
            # streams, on the step's critical path (py-spy, issue 25).
            self._decodes += 1
            self._ctx.decode(entries, while_waiting=self._outbox.flush)
            self.cost.record(len(entries), (time.perf_counter() - started) * 1000)
        except Exception as exc:  # only the sequences in this step fail: the rest go on
            for row in rows:
                self._retire(row.sequence, error=exc)
            return
        for row in rows:
            try:
                if row.end:
                    self._after_prefill_chunk(row.sequence, row.end, row.first)
                else:
                    self._advance(row)
            except Exception as exc:
                if row.sequence.key in self._running:
                    self._retire(row.sequence, error=exc)

    # --- slots -------------------------------------------------------------------------------

    def _take_slot(self, sequence: _Sequence) -> int:
        """A preempted sequence: an empty slot if one is free (its state replaces what the
        slot holds). A new one: the free slot whose stream already holds most of its prompt,
        else the lowest (a lone batch takes the same sequence every time)."""
        if self._cache is None:
            seq = min(self._free)
        else:
            seq = self._cache.choose(() if sequence.saved else sequence.prompt, self._free)
        self._free.remove(seq)
        return seq

    def _start(self, sequence: _Sequence, *, shielded: bool) -> None:
        sequence.seq, sequence.shielded = self._take_slot(sequence), shielded
        sequence.last_served = sequence.started_step = self.steps
        sequence.started_at = self._decodes
        self._running[sequence.key] = sequence
        try:
            if sequence.out is None:
                self._first_start(sequence)
            else:
                self._resume(sequence)
        except Exception as exc:
            self._retire(sequence, error=exc)

    def _first_start(self, sequence: _Sequence) -> None:
        job = sequence.job
        sequence.task.outbox = self._outbox
        sequence.admitted = time.perf_counter()
        sequence.out, sequence.sampler = self._new_output(job), self._new_sampler(job)
        if job.speculative is not None:
            sequence.drafter = PromptLookup(
                job.prompt_tokens, job.speculative.tokens, job.speculative.ngram
            )
        self._first_kv(sequence)

    def _first_kv(self, sequence: _Sequence) -> None:
        """The slot's stream as its prompt starts: the longest prefix the prefix cache holds
        (engines/_prefix_cache.py), else nothing."""
        assert sequence.seq is not None
        if self._cache is None:
            self._ctx.forget(sequence.seq)
            return
        sequence.reused = sequence.cursor = self._cache.reuse(sequence.prompt, sequence.seq)

    def _resume(self, sequence: _Sequence) -> None:
        """Put a preempted sequence's state back into its new slot."""
        assert sequence.seq is not None
        state, sequence.saved = sequence.saved, None
        if not state:  # preempted before it computed anything: its prompt starts over
            self._first_kv(sequence)
            return
        self._ctx.import_seq(sequence.seq, state)
        if self._cache is not None:
            held = sequence.prompt[: sequence.cursor] if sequence.token is None else sequence.prompt
            self._cache.restored(held, sequence.seq)

    def _preempt(self, sequence: _Sequence) -> None:
        """Out of its slot, its KV state saved to host memory: waiting again, first among its
        priority (it arrived before the requests behind it)."""
        assert sequence.seq is not None
        if sequence.started_at == self._decodes:
            # No llama_decode since it started: a stream copy of the prefix cache may still be
            # pending (llama.cpp applies them at the next decode), so its cells are not what
            # it holds yet. Nothing of its own was computed: it starts over when it resumes.
            sequence.cursor = sequence.reused = 0
        elif sequence.cursor or sequence.token is not None:
            sequence.saved = self._ctx.export_seq(sequence.seq)
        self._free_slot(sequence, keep=True)
        del self._running[sequence.key]
        sequence.preempted, sequence.since = True, self.steps
        self._waiting[sequence.key] = sequence
        self.preemptions += 1

    def _free_slot(self, sequence: _Sequence, *, keep: bool) -> None:
        # The slot's stream keeps its prompt for a later request: in a stream of its own it
        # costs the other sequences' attention nothing (engines/_prefix_cache.py).
        seq, sequence.seq = sequence.seq, None
        if seq is None:
            return
        if self._cache is None:
            self._ctx.forget(seq)
        else:
            self._cache.release(seq, keep=keep)
        self._free.append(seq)

    def _drop_waiting(
        self,
        sequence: _Sequence,
        error: BaseException | None = None,
        *,
        why: str = "left before its engine started it",
    ) -> None:
        """A waiting request whose client left, or a closing scheduler's: nothing kept. Every
        job writes its line: one never started says `why`, a preempted one what it drew."""
        del self._waiting[sequence.key]
        sequence.saved = None
        if sequence.sampler is not None:
            sequence.sampler.close()
        if error is not None:
            sequence.task.fail(error)
        elif sequence.out is None:
            sequence.task.drop(why)
        else:
            self._finish(sequence)

    # --- tokens ------------------------------------------------------------------------------

    def _after_prefill_chunk(self, sequence: _Sequence, chunk_end: int, last_index: int) -> None:
        sequence.cursor = chunk_end
        if chunk_end < len(sequence.prompt):
            return
        out = sequence.out
        assert out is not None
        assert sequence.seq is not None
        token = self._ctx.sample_into(out, sequence.sampler, last_index)
        prefill_ms = (time.perf_counter() - sequence.admitted) * 1000
        sequence.stats = StageStats(self._device, self._device, prefill_ms)
        if self._cache is not None:
            self._cache.hold(sequence.prompt, sequence.seq)
        sequence.decode_start = time.perf_counter()
        self.first_token_steps[sequence.job.label] = self.steps
        while len(self.first_token_steps) > _FIRST_TOKENS_KEPT:
            del self.first_token_steps[next(iter(self.first_token_steps))]
        sequence.token = token
        if sequence.drafter is not None:
            sequence.drafter.append(token)
        text = out.push(token)
        sequence.task.send(Delta(text, stats=sequence.stats, cached_tokens=sequence.reused))
        if out.finish is not None:
            self._retire(sequence)

    def _advance(self, row: _Row) -> None:
        """Draw the sequence's next tokens (one, or more where its draft holds) and drop the
        KV cells of the draft the model did not follow."""
        s, out = row.sequence, row.sequence.out
        assert out is not None
        assert s.seq is not None
        position = s.position
        taken = take_tokens(
            lambda index: self._ctx.sample_into(out, s.sampler, index),
            out,
            row.first,
            row.draft,
            lambda text: s.task.send(Delta(text)),
        )
        if len(taken.drawn) <= len(row.draft):  # rows past the last one used: not the answer
            self._ctx.forget_from(s.seq, position + len(taken.drawn))
        s.token = taken.token
        s.drafted += len(row.draft)
        s.accepted += taken.matched
        if s.drafter is not None:
            s.drafter.record(len(row.draft), taken.matched)
            for token in taken.drawn:
                s.drafter.append(token)
        if out.finish is not None:
            self._retire(s)

    def _retire(self, sequence: _Sequence, error: BaseException | None = None) -> None:
        del self._running[sequence.key]
        self._free_slot(sequence, keep=error is None)
        if sequence.sampler is not None:
            sequence.sampler.close()
        if error is not None:
            sequence.task.fail(error)
            return
        self._finish(sequence)

    def _finish(self, sequence: _Sequence) -> None:
        stats = sequence.stats or StageStats(
            self._device, self._device, (time.perf_counter() - sequence.admitted) * 1000
        )
        out = sequence.out
        assert out is not None
        decoded = max(out.produced - 1, 0)
        ms = (time.perf_counter() - sequence.decode_start) * 1000 if sequence.decode_start else 0
        stats = replace(
            stats,
            decode_ms=ms,
            decode_tokens=decoded,
            drafted_tokens=sequence.drafted,
            accepted_tokens=sequence.accepted,
        )
        sequence.task.finish(out.final(stats))
