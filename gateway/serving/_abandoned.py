"""The line of a generation stopped before any model's queue had it.

Every generation has one line, however it ends (issue 33): a job a model ran writes the
engine's (`finish=` with its counts), a job that left a model's queue before a slot the
runner's, and a request stopped before it reached a queue (its client left while it was
routed, counted, fitted or while its model loaded; a choice stopped with its siblings) this
one, in the same form. `mark_handed_to_queue` marks the moment a queue has the request's job: from
then on the runner or the engine writes its line.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import ParamSpec, TypeVar

__all__ = ["mark_handed_to_queue", "stopped_line", "written_when_stopped"]

log = logging.getLogger("zest.gateway")
P = ParamSpec("P")
T = TypeVar("T")


class _Queued:
    reached = False


# The generation the current task starts (a model-backed condition's own, inside another's
# routing, sets its own and restores the caller's).
_CURRENT: ContextVar[_Queued | None] = ContextVar("zest_generation_queued", default=None)


def mark_handed_to_queue(reached: bool = True) -> None:
    """The generation's job is handed to a model's queue: its runner writes its line now
    (False: that attempt's job failed, and the next one has none yet)."""
    if (current := _CURRENT.get()) is not None:
        current.reached = reached


@contextlib.contextmanager
def stopped_line(request_id: str, task: str) -> Iterator[None]:
    """Write the line of a request cancelled in this block before any queue had its job."""
    queued, started = _Queued(), time.perf_counter()
    token = _CURRENT.set(queued)
    try:
        yield
    except asyncio.CancelledError:
        if not queued.reached:
            log.info(
                "%s task=%s: finish=cancelled completion_tokens=0 seconds=%.3f (stopped before "
                "a model's queue had it)",
                request_id,
                task,
                time.perf_counter() - started,
            )
        raise
    finally:
        _CURRENT.reset(token)


def written_when_stopped(start: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """`start` (called with `request_id` and the task as `name` or its second argument) under
    `stopped_line`."""

    @functools.wraps(start)
    async def started(*args: P.args, **kwargs: P.kwargs) -> T:
        task = kwargs.get("name", args[1] if len(args) > 1 else "-")
        with stopped_line(str(kwargs.get("request_id", "-")), str(task)):
            return await start(*args, **kwargs)

    return started
