"""Graceful shutdown: stop taking work, let what runs finish, end the rest with an error.

On SIGTERM the server drains: new requests are answered 503 `shutting_down` with Retry-After
and readiness turns 503 at once (a load balancer stops sending), while requests in flight go
on for up to the grace period (ZEST_SHUTDOWN_GRACE_S). Whatever still runs then is
interrupted: a request waiting for its first token answers the 503 as JSON, a stream ends with
an error event (never a silent cut), and the process exits 0.

Each generation registers an `Activity` for its whole life. Interrupting it cancels the task
that awaits the engine's next delta, and that task turns the cancellation into the shutdown
error; a task busy elsewhere (sending a chunk) meets the error at its next delta instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from zest.errors import ShuttingDownError

__all__ = ["Activity", "Drain"]

log = logging.getLogger("zest.gateway")


@dataclass(eq=False)
class Activity:
    """One generation in flight, as the drain sees it."""

    drain: Drain
    error: ShuttingDownError | None = None
    _task: asyncio.Task[object] | None = None  # awaiting the engine, when not None

    @contextlib.contextmanager
    def awaiting(self) -> Iterator[None]:
        """Around an await on the engine: an interruption cancels it and raises the error."""
        self.check()
        self._task = asyncio.current_task()
        try:
            yield
        except asyncio.CancelledError:
            if self.error is None or self._task is None:
                raise
            self._task.uncancel()  # the cancellation was ours: it ends here, as the error
            raise self.error from None
        finally:
            self._task = None

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def interrupt(self, error: ShuttingDownError) -> None:
        if self.error is None:
            self.error = error
            if self._task is not None:
                self._task.cancel()

    def close(self) -> None:
        self.drain.discard(self)


@dataclass
class Drain:
    grace_s: float = 20.0
    draining: bool = False
    _active: set[Activity] = field(default_factory=set)
    _idle: asyncio.Event | None = None

    def track(self) -> Activity:
        activity = Activity(self)
        self._active.add(activity)
        if self.draining:  # arrived as the drain began: it takes no part in it
            activity.interrupt(self.refusal())
        return activity

    def discard(self, activity: Activity) -> None:
        self._active.discard(activity)
        if not self._active and self._idle is not None:
            self._idle.set()

    @property
    def in_flight(self) -> int:
        return len(self._active)

    def refusal(self) -> ShuttingDownError:
        return ShuttingDownError(
            "the server is shutting down and takes no new requests: retry (another replica "
            "will answer)",
            retry_after=max(int(self.grace_s), 1),
        )

    async def run(self) -> None:
        """Drain: refuse new work, wait up to the grace for what runs, interrupt the rest."""
        self.draining = True
        started = time.monotonic()
        log.info(
            "shutting down: %d request(s) in flight, up to %gs to finish "
            "(ZEST_SHUTDOWN_GRACE_S); new requests get 503",
            self.in_flight,
            self.grace_s,
        )
        if not await self._wait_idle(self.grace_s):
            self.interrupt_all()
            await self._wait_idle(5.0)  # let the error events and bodies go out
        log.info("drained in %.1fs", time.monotonic() - started)

    def interrupt_all(self) -> None:
        if not self._active:
            return
        log.warning("shutting down: ending %d request(s) still running", self.in_flight)
        error = ShuttingDownError(
            f"the server shut down before this request finished (after the {self.grace_s:g}s "
            "grace, ZEST_SHUTDOWN_GRACE_S): retry it (another replica will answer)"
        )
        for activity in list(self._active):
            activity.interrupt(error)

    async def _wait_idle(self, timeout: float) -> bool:
        if not self._active:
            return True
        self._idle = asyncio.Event()
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True
