"""Threads that run blocking generations off the event loop, and the bridge back to it.

Each job's deltas cross back to the event loop through an asyncio queue. Closing the async
iterator (a client went away) cancels the job; generation loops check the flag between tokens,
so the model is free again within one token step.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

from zest.engines._base import Delta, GenerationJob
from zest.errors import EngineError, ZestError

__all__ = ["GenerationWorker", "Task", "as_engine_error", "log_finished", "stream_task"]

log = logging.getLogger("zest.engines")
Generate = Callable[[GenerationJob], Iterator[Delta]]
_Item = Delta | BaseException | None  # None marks the end of a job's stream


@dataclass
class Task:
    """A job in flight and the way back to the coroutine that waits for its deltas."""

    job: GenerationJob
    loop: asyncio.AbstractEventLoop
    results: asyncio.Queue[_Item]
    started: float = field(default_factory=time.perf_counter)

    def send(self, item: _Item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.results.put_nowait, item)
        except RuntimeError:  # the caller's loop is closed: nobody listens, stop generating
            self.job.cancel()

    def finish(self, delta: Delta) -> None:
        self.send(delta)
        log_finished(self.job, delta, time.perf_counter() - self.started)
        self.send(None)

    def fail(self, exc: BaseException) -> None:
        self.send(as_engine_error(exc))
        self.send(None)


class PendingCounter:
    """Jobs submitted and not yet finished: the queue depth the router's cost model reads."""

    def __init__(self) -> None:
        self.value = 0


async def stream_task(
    submit: Callable[[Task], None], job: GenerationJob, pending: PendingCounter
) -> AsyncIterator[Delta]:
    results: asyncio.Queue[_Item] = asyncio.Queue()
    pending.value += 1
    submit(Task(job, asyncio.get_running_loop(), results))
    try:
        while (item := await results.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        pending.value -= 1
        job.cancel()


def as_engine_error(exc: BaseException) -> ZestError:
    if isinstance(exc, ZestError):
        return exc
    log.error("generation failed", exc_info=exc)
    error = EngineError(f"generation failed: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def log_finished(job: GenerationJob, delta: Delta, seconds: float) -> None:
    log.info(
        "%s: finish=%s prompt_tokens=%d completion_tokens=%d max_tokens=%d seconds=%.3f",
        job.label or "job",
        delta.finish_reason,
        len(job.prompt_tokens),
        delta.completion_tokens,
        job.max_tokens,
        seconds,
    )


class GenerationWorker:
    """One thread that runs one generation at a time (a single-device model)."""

    def __init__(self, name: str, generate: Generate) -> None:
        self._generate = generate
        self._tasks: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        self.pending = PendingCounter()
        self._thread = threading.Thread(target=self._run, name=f"zest-{name}", daemon=True)
        self._thread.start()

    def stream(self, job: GenerationJob) -> AsyncIterator[Delta]:
        return stream_task(self._tasks.put, job, self.pending)

    def close(self) -> None:
        self._tasks.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while (task := self._tasks.get()) is not None:
            if task.job.cancelled.is_set():
                task.send(None)
                continue
            self._run_one(task)

    def _run_one(self, task: Task) -> None:
        try:
            last = None
            for delta in self._generate(task.job):
                if delta.finish_reason is not None:
                    last = delta
                    break
                task.send(delta)
            if last is None:
                raise EngineError("generation ended without a final delta")
            task.finish(last)
        except Exception as exc:  # foreign errors become EngineError at the engine boundary
            task.fail(exc)
