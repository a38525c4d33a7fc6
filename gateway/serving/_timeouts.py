"""A route's timeouts: `first_token_s` for each attempt, `total_s` for the whole request.

The first-token clock starts once the attempt's engine is loaded (loading is not interrupted:
a half-loaded model would be lost) and covers queueing, prefill or the upstream's first bytes;
it running out moves the request on to its next attempt. The total clock starts with the
request; it running out answers 504 before the first token, or ends the stream with an error
event after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from zest.engines import Delta
from zest.errors import GatewayTimeoutError
from zest.router import RouteTimeouts

__all__ = ["Deadline", "first_delta", "next_delta"]


@dataclass(frozen=True)
class Deadline:
    task: str
    timeouts: RouteTimeouts
    started: float  # event-loop time

    @classmethod
    def start(cls, task: str, timeouts: RouteTimeouts) -> Deadline:
        return cls(task, timeouts, asyncio.get_running_loop().time())

    def remaining(self) -> float | None:
        total = self.timeouts.total_s
        if total is None:
            return None
        return self.started + total - asyncio.get_running_loop().time()

    def check(self) -> None:
        remaining = self.remaining()
        if remaining is not None and remaining <= 0:
            raise self.total_error()

    def total_error(self) -> GatewayTimeoutError:
        return GatewayTimeoutError(
            f"route {self.task!r}: the request took longer than timeouts.total_s "
            f"({self.timeouts.total_s:g}s)",
            code="total_timeout",
        )

    def first_token_error(self, what: str) -> GatewayTimeoutError:
        return GatewayTimeoutError(
            f"route {self.task!r}: no first token from {what} within timeouts.first_token_s "
            f"({self.timeouts.first_token_s:g}s)",
            code="first_token_timeout",
        )


async def first_delta(stream: AsyncIterator[Delta], deadline: Deadline, what: str) -> Delta:
    """The attempt's first delta, within the first-token and the total limits."""
    first, total = deadline.timeouts.first_token_s, deadline.remaining()
    if first is None and total is None:
        return await anext(stream)
    by_total = first is None or (total is not None and total <= first)
    wait = total if by_total else first
    try:
        async with asyncio.timeout(max(wait or 0.0, 0.0)) as limit:
            return await anext(stream)
    except TimeoutError:
        if not limit.expired():
            raise
        raise (deadline.total_error() if by_total else deadline.first_token_error(what)) from None


async def next_delta(stream: AsyncIterator[Delta], deadline: Deadline | None) -> Delta | None:
    """The next delta (None at the end of the stream), within the total limit."""
    remaining = deadline.remaining() if deadline else None
    try:
        if remaining is None:
            return await anext(stream)
        async with asyncio.timeout(max(remaining, 0.0)) as limit:
            return await anext(stream)
    except StopAsyncIteration:
        return None
    except TimeoutError:
        if remaining is None or not limit.expired():
            raise
        raise deadline.total_error() from None  # type: ignore[union-attr]
