"""The hybrid pipeline: prefill in one context (the NPU's), decode in another (the GPU's).

Two threads. The prefill thread evaluates a prompt, samples the first token, exports the
sequence's KV state (`llama_state_seq_get_data`: sequence state, not whole-context state with
logits) and hands it over. The decode thread imports it into a free sequence slot
(`llama_state_seq_set_data`) and decodes one token per step for every active sequence, so a long
prompt being prefilled never stalls the streams already decoding.

The prefill thread takes the requests its runner admitted (engines/_runner.py: priority, then
arrival; `parallel + max_queue` requests fit, the next gets 429) only while a decode slot is free
for them.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, replace
from typing import Any

from zest.engines._base import Delta, GenerationJob, StageStats
from zest.engines._kv_cells import KvCells, count_cells
from zest.engines._llama_native import NativeContext
from zest.engines._output import SequenceOutput
from zest.engines._speculation import PromptLookup, draft_entries, take_tokens
from zest.engines._worker import Outbox, Task, WaitingRoom, stream_task
from zest.router import Placement

__all__ = ["HybridPipeline"]


@dataclass
class _Sequence:
    """A request between prefill and the end of decode."""

    task: Task
    out: SequenceOutput
    sampler: Any
    token: int
    pos: int
    stats: StageStats
    state: bytes = b""
    decode_start: float = 0.0
    drafter: PromptLookup | None = None  # the route's speculative decoding
    drafted: int = 0
    accepted: int = 0

    def draft(self, spare: int) -> list[int]:
        room = min(self.task.job.max_tokens - self.out.produced - 1, spare)
        return self.drafter.draft(room) if self.drafter is not None else []


class HybridPipeline:
    def __init__(
        self,
        name: str,
        *,
        prefill: NativeContext,
        decode: NativeContext,
        new_output: Callable[[GenerationJob], SequenceOutput],
        new_sampler: Callable[[GenerationJob], Any],
        placement: Placement,
    ) -> None:
        self._prefill, self._decode = prefill, decode
        self._new_output, self._new_sampler = new_output, new_sampler
        self._devices = (placement.prefill.label, placement.decode.label)
        # A request holds its place from prefill until its decode slot is freed.
        self._room = WaitingRoom(slots=decode.settings.n_seq)
        self._outbox = Outbox()  # a decode step's deltas reach the event loop in one wake-up
        self._handoffs: queue.SimpleQueue[_Sequence | None] = queue.SimpleQueue()
        # Each context's cells, counted by the thread that owns it once its work is done.
        self._prefill_cells, self._decode_cells = KvCells(), KvCells()
        self._threads = [
            threading.Thread(target=self._prefill_loop, name=f"zest-{name}-prefill", daemon=True),
            threading.Thread(target=self._decode_loop, name=f"zest-{name}-decode", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        return stream_task(self._room.submit, job)

    @property
    def kv(self) -> KvCells:
        return self._prefill_cells + self._decode_cells

    def close(self) -> None:
        self._room.close()
        for thread in self._threads:
            thread.join(timeout=30)

    # --- prefill thread ----------------------------------------------------------------------

    def _prefill_loop(self) -> None:
        while (task := self._room.next()) is not None:
            try:
                seq = self._prefill_one(task)
            except Exception as exc:
                self._prefill.forget(0)
                self._room.done()
                task.fail(exc)
                continue
            if seq is None:
                self._room.done()
            else:
                self._handoffs.put(seq)
            self._prefill_cells = KvCells(stray=self._prefill.cells(0))  # exported, forgotten
        self._handoffs.put(None)

    def _prefill_one(self, task: Task) -> _Sequence | None:
        """The job prefilled and its first token drawn (None: cancelled, and answered); its
        sampler is closed unless the sequence goes on to decode."""
        out, sampler = self._new_output(task.job), self._new_sampler(task.job)
        try:
            seq = self._prefilled(task, out, sampler)
        except BaseException:
            sampler.close()
            raise
        if seq is None:
            sampler.close()
        return seq

    def _prefilled(self, task: Task, out: SequenceOutput, sampler: Any) -> _Sequence | None:
        job, ctx = task.job, self._prefill
        started = time.perf_counter()
        ctx.forget(0)
        if not ctx.prefill(job.prompt_tokens, 0, job.cancelled):
            task.finish(out.final(StageStats(*self._devices, prefill_ms=_ms(started))))
            return None
        token = ctx.sample_into(out, sampler, ctx.last_index)
        prefill_ms, exported = _ms(started), time.perf_counter()
        state = ctx.export_seq(0)
        ctx.forget(0)
        stats = StageStats(
            *self._devices,
            prefill_ms=prefill_ms,
            handoff_ms=_ms(exported),
            handoff_bytes=len(state),
        )
        seq = _Sequence(task, out, sampler, token, len(job.prompt_tokens), stats, state)
        if job.speculative is not None:
            seq.drafter = PromptLookup(
                job.prompt_tokens, job.speculative.tokens, job.speculative.ngram
            )
            seq.drafter.append(token)
        return seq

    # --- decode thread -----------------------------------------------------------------------

    def _decode_loop(self) -> None:
        active: dict[int, _Sequence] = {}
        free = list(range(self._decode.settings.n_seq))
        closed = False
        while not closed or active:
            closed = self._admit_handoffs(active, free) or closed
            if active:
                self._step(active, free)
            self._decode_cells = count_cells(self._decode, list(active), free, {})
            self._outbox.flush()  # before the next handoff wait may block

    def _admit_handoffs(self, active: dict[int, _Sequence], free: list[int]) -> bool:
        """Take waiting handoffs into free slots; block only when nothing is decoding, and
        then only once what was sent went out (a sequence done at its first token, max_tokens
        1, was retired by its admission: its deltas must not wait for the next handoff)."""
        while free:
            if not active:
                self._outbox.flush()
            try:
                seq = self._handoffs.get(block=not active)
            except queue.Empty:
                return False
            if seq is None:
                return True
            self._admit(seq, free.pop(0), active, free)
        return False

    def _admit(
        self, seq: _Sequence, slot: int, active: dict[int, _Sequence], free: list[int]
    ) -> None:
        imported = time.perf_counter()
        try:
            self._decode.forget(slot)
            self._decode.import_seq(slot, seq.state)
        except Exception as exc:
            self._decode.forget(slot)
            free.append(slot)
            seq.sampler.close()
            self._room.done()
            seq.task.fail(exc)
            return
        handoff_ms = (seq.stats.handoff_ms or 0.0) + _ms(imported)
        seq.stats, seq.state = replace(seq.stats, handoff_ms=handoff_ms), b""
        seq.task.outbox = self._outbox  # from here on only this thread sends to it
        seq.task.send(Delta(seq.out.push(seq.token), stats=seq.stats))
        seq.decode_start = time.perf_counter()
        active[slot] = seq
        if seq.out.finish is not None:
            self._retire(slot, active, free)

    def _step(self, active: dict[int, _Sequence], free: list[int]) -> None:
        for slot in [s for s, seq in active.items() if seq.task.job.cancelled.is_set()]:
            self._retire(slot, active, free)
        if not active:
            return
        order = list(active.items())
        entries: list[tuple[int, int, int, bool]] = []
        rows = []
        capacity = max(self._decode.settings.n_batch, len(order))
        for number, (slot, seq) in enumerate(order):
            draft = seq.draft(capacity - len(entries) - (len(order) - number))
            rows.append((slot, seq, len(entries), draft))
            entries += draft_entries(seq.token, seq.pos, slot, draft)
        try:
            self._decode.decode(entries)
        except Exception as exc:
            for slot, seq in order:
                self._drop(slot, seq, active, free)
                seq.task.fail(exc)
            return
        for slot, seq, first, draft in rows:
            self._advance(slot, seq, first, draft)
            if seq.out.finish is not None:
                self._retire(slot, active, free)

    def _advance(self, slot: int, seq: _Sequence, first: int, draft: list[int]) -> None:
        """Draw the sequence's next tokens where its draft holds (one without a draft)."""
        taken = take_tokens(
            lambda index: self._decode.sample_into(seq.out, seq.sampler, index),
            seq.out,
            first,
            draft,
            lambda text: seq.task.send(Delta(text)),
        )
        if len(taken.drawn) <= len(draft):
            self._decode.forget_from(slot, seq.pos + len(taken.drawn))
        seq.pos += len(taken.drawn)
        seq.token = taken.token
        seq.drafted += len(draft)
        seq.accepted += taken.matched
        if seq.drafter is not None:
            seq.drafter.record(len(draft), taken.matched)
            for token in taken.drawn:
                seq.drafter.append(token)

    def _retire(self, slot: int, active: dict[int, _Sequence], free: list[int]) -> None:
        seq = active[slot]
        self._drop(slot, seq, active, free)
        decoded = max(seq.out.produced - 1, 0)  # the first token came from prefill
        stats = replace(
            seq.stats,
            decode_ms=_ms(seq.decode_start),
            decode_tokens=decoded,
            drafted_tokens=seq.drafted,
            accepted_tokens=seq.accepted,
        )
        seq.task.finish(seq.out.final(stats))

    def _drop(
        self,
        slot: int,
        seq: _Sequence,
        active: dict[int, _Sequence],
        free: list[int],
    ) -> None:
        self._decode.forget(slot)
        seq.sampler.close()
        del active[slot]
        free.append(slot)
        self._room.done()


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000
