"""Threads that run blocking generations off the event loop, and the bridge back to it.

Each job's deltas cross back to the event loop through an asyncio queue. Closing the async
iterator (a client went away) cancels the job; generation loops check the flag between tokens,
so the model is free again within one token step. A batch's scheduling thread holds a step's
deltas in an Outbox and hands them over in one wake-up of the loop, not one per stream.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field

from zest.engines._base import Delta, GenerationJob
from zest.errors import EngineError, ZestError

__all__ = [
    "GenerationWorker",
    "Outbox",
    "Task",
    "WaitingRoom",
    "as_engine_error",
    "log_finished",
    "log_unstarted",
    "stream_task",
]

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
    # Set by a scheduling thread that delivers once per step; only that thread sends then.
    outbox: Outbox | None = None

    def send(self, item: _Item) -> None:
        if self.outbox is not None:
            self.outbox.hold(self, item)
            return
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

    def drop(self, why: str) -> None:
        """End a job that never started: its line (every job has one), then no output."""
        log_unstarted(self.job, time.perf_counter() - self.started, why)
        self.send(None)


class Outbox:
    """The deltas of one scheduling step, handed to each event loop in one wake-up.

    Each call_soon_threadsafe writes to the loop's wake-up pipe, and each wake-up runs the
    loop's select and callbacks once: with eight streams a step cost eight of them, now one
    (issue 25, item 4). Used by one thread only, the one that schedules the steps.
    """

    def __init__(self) -> None:
        self._held: list[tuple[Task, _Item]] = []

    def hold(self, task: Task, item: _Item) -> None:
        self._held.append((task, item))

    def flush(self) -> None:
        held, self._held = self._held, []
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Task, _Item]]] = {}
        for task, item in held:
            by_loop.setdefault(task.loop, []).append((task, item))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # that loop is closed: nobody listens, stop generating
                for task, _ in items:
                    task.job.cancel()


def _deliver(items: list[tuple[Task, _Item]]) -> None:
    for task, item in items:  # in the order sent: a stream's deltas stay in order
        task.results.put_nowait(item)


async def stream_task(
    submit: Callable[[Task], None], job: GenerationJob
) -> AsyncGenerator[Delta, None]:
    """Submit `job` and yield its deltas; closing the generator cancels the job. (Admission,
    the bound and the 429 are the runner's, engines/_runner.py: what is submitted runs.)"""
    results: asyncio.Queue[_Item] = asyncio.Queue()
    submit(Task(job, asyncio.get_running_loop(), results))
    try:
        while (item := await results.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
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


def log_unstarted(job: GenerationJob, seconds: float, why: str) -> None:
    """The line of a job that never started (its caller left first, or its engine closed), in
    log_finished's form: every generation has one line, however it ended."""
    tokens = job.prompt.tokens
    log.info(
        "%s: finish=cancelled prompt_tokens=%s completion_tokens=0 max_tokens=%d seconds=%.3f (%s)",
        job.label or "job",
        len(tokens) if tokens is not None else "unknown",
        job.max_tokens,
        seconds,
        why,
    )


class WaitingRoom:
    """Tasks the runner admitted, handed to a thread in arrival order once one of its slots
    is free (a slot may still be freeing when the runner admits the next: it waits here)."""

    def __init__(self, *, slots: int) -> None:
        self._free = slots
        self._tasks: deque[Task] = deque()
        self._cond = threading.Condition()
        self._closed = False

    def submit(self, task: Task) -> None:
        with self._cond:
            if self._closed:
                task.drop("its engine closed before it started")
                return
            self._tasks.append(task)
            self._cond.notify_all()

    def next(self) -> Task | None:
        """Block until a task may run; None once the room is closed."""
        with self._cond:
            while not self._closed:
                if self._free and self._tasks:
                    task = self._tasks.popleft()
                    if task.job.cancelled.is_set():  # its caller left while it waited here
                        task.drop("left before its engine started it")
                        continue
                    self._free -= 1
                    return task
                self._cond.wait()
            return None

    def done(self) -> None:
        with self._cond:
            self._free += 1
            self._cond.notify_all()

    def close(self) -> None:
        """Stop handing out tasks; the waiting ones end without output."""
        with self._cond:
            self._closed = True
            while self._tasks:
                self._tasks.popleft().drop("its engine closed before it started")
            self._cond.notify_all()


class GenerationWorker:
    """One thread that runs one generation at a time (a single-device model)."""

    def __init__(self, name: str, generate: Generate) -> None:
        self._generate = generate
        self._room = WaitingRoom(slots=1)
        self._thread = threading.Thread(target=self._run, name=f"zest-{name}", daemon=True)
        self._thread.start()

    def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        return stream_task(self._room.submit, job)

    def close(self) -> None:
        self._room.close()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while (task := self._room.next()) is not None:
            try:
                self._run_one(task)
            finally:
                self._room.done()

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
