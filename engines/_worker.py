"""A thread owned by a loaded model that runs blocking generations one at a time.

The event loop never blocks on inference: each job's deltas cross back through an asyncio
queue. Closing the async iterator (a client went away) cancels the job; the generation loop
checks the flag between tokens, so the model is free again within one token step.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from engines._base import Delta, GenerationJob
from router import EngineError, ZestError

__all__ = ["GenerationWorker"]

log = logging.getLogger("zest.engines")
Generate = Callable[[GenerationJob], Iterator[Delta]]
_Item = Delta | BaseException | None  # None marks the end of a job's stream


@dataclass
class _Task:
    job: GenerationJob
    loop: asyncio.AbstractEventLoop
    results: asyncio.Queue[_Item]

    def send(self, item: _Item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.results.put_nowait, item)
        except RuntimeError:  # the caller's loop is closed: nobody listens, stop generating
            self.job.cancel()


class GenerationWorker:
    def __init__(self, name: str, generate: Generate) -> None:
        self._generate = generate
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"zest-{name}", daemon=True)
        self._thread.start()

    async def stream(self, job: GenerationJob) -> AsyncIterator[Delta]:
        results: asyncio.Queue[_Item] = asyncio.Queue()
        self._tasks.put(_Task(job, asyncio.get_running_loop(), results))
        try:
            while (item := await results.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            job.cancel()

    def close(self) -> None:
        self._tasks.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while (task := self._tasks.get()) is not None:
            if not task.job.cancelled.is_set():
                self._run_one(task)
            task.send(None)

    def _run_one(self, task: _Task) -> None:
        job, started = task.job, time.perf_counter()
        try:
            for delta in self._generate(job):
                task.send(delta)
                if delta.finish_reason is not None:
                    log.info(
                        "%s: finish=%s prompt_tokens=%d completion_tokens=%d max_tokens=%d "
                        "seconds=%.3f",
                        job.label or "job",
                        delta.finish_reason,
                        len(job.prompt_tokens),
                        delta.completion_tokens,
                        job.max_tokens,
                        time.perf_counter() - started,
                    )
        except ZestError as exc:
            task.send(exc)
        except Exception as exc:  # foreign errors become EngineError at the engine boundary
            log.exception("generation failed")
            error = EngineError(f"generation failed: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            task.send(error)
