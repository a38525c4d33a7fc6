"""One runner around every engine, remote included: admission (the bound; 429 with
Retry-After; a request's n choices refused past the slots), counted on the event loop.

Where the engine holds its waiting requests itself (the llama.cpp batch scheduler, which admits
and preempts by route priority: `Engine.own_queue`), the runner keeps one counter, the requests
in the system, and hands each one within the bound to the engine at once. For every other
engine it also queues them (the pure AdmissionQueue: priority, then arrival; a request's n
choices together) until a slot is free: an onnx-genai worker gets one job at a time, the hybrid
pipeline its slots' worth, a remote upstream at most `max_in_flight` requests. So the bound and
the Retry-After are the same code for every kind, and `pending`/`waiting` are the runner's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field

from zest.engines._admission import Admission, AdmissionQueue, Bound
from zest.engines._base import Delta, Engine, GenerationJob
from zest.engines._worker import log_unstarted

__all__ = ["Admission", "Runner"]


@dataclass(eq=False)
class _Waiter:
    job: GenerationJob
    admitted: asyncio.Future[None] = field(default_factory=asyncio.Future)

    @property
    def abandoned(self) -> bool:
        return self.admitted.cancelled() or self.job.cancelled.is_set()


class Runner:
    def __init__(
        self, engine: Engine, admission: Admission, clock: Callable[[], float] | None = None
    ) -> None:
        self.engine = engine
        own = engine.own_queue()
        self._bound: Bound | None = None
        if own is not None:
            self._bound = Bound(
                slots=admission.slots,
                max_queue=admission.max_queue,
                counts=lambda: (own.running, own.waiting),
                slots_set_by=admission.slots_set_by,
                clock=clock or time.monotonic,
            )
        self._queue: AdmissionQueue[_Waiter] = AdmissionQueue(
            slots=admission.slots,
            max_queue=admission.max_queue,
            abandoned=lambda waiter: waiter.abandoned,
            group=lambda waiter: waiter.job.group,
            slots_set_by=admission.slots_set_by,
            clock=clock or time.monotonic,
        )

    @property
    def pending(self) -> int:
        """Jobs admitted and not finished, or waiting: the depth the auto cost model reads."""
        if self._bound is not None:
            return self._bound.in_system
        return self._queue.running + self._queue.waiting

    @property
    def waiting(self) -> int:
        """Jobs waiting for a slot (in the runner's queue, or in the engine's own)."""
        return self._bound.waiting if self._bound is not None else self._queue.waiting

    def retry_after(self) -> int:
        return self._bound.retry_after() if self._bound is not None else self._queue.retry_after()

    def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        """The engine's deltas once the job is admitted. A refusal (429, or 400 for n choices
        that could never run together) raises at once and holds nothing; closing the stream
        while it waits leaves the queue, and once it runs frees the slot."""
        if self._bound is not None:
            return self._handed_over(self._bound, job)
        return self._queued(job)

    async def _handed_over(self, bound: Bound, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        bound.offer(job.group)
        served = False
        try:
            async with aclosing(self.engine.stream(job)) as deltas:
                async for delta in deltas:
                    yield delta
            served = True
        finally:
            bound.finish(served=served)

    async def _queued(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        waiter = _Waiter(job)
        self._queue.offer(waiter, job.priority)
        self._admit()
        served = handed = False
        offered = time.perf_counter()
        try:
            await waiter.admitted
            handed = True  # no await before the engine has it: it writes the job's line
            async with aclosing(self.engine.stream(job)) as deltas:
                async for delta in deltas:
                    yield delta
            served = True
        finally:
            if waiter.admitted.done() and not waiter.admitted.cancelled():
                self._queue.finish(served=served)
            else:
                waiter.admitted.cancel()  # dropped from the queue when it is next looked at
            if not handed:  # left while it waited: its line, as the engine writes one
                log_unstarted(job, time.perf_counter() - offered, "left while waiting for a slot")
            self._admit()

    def _admit(self) -> None:
        while (waiter := self._queue.take()) is not None:
            waiter.admitted.set_result(None)
