"""The admission queue every local runner uses: priority, then arrival; a bound; Retry-After.

A pure object (no threads, no locks: the runner calls it under its own lock), after vLLM's
request queue: the policy lives apart from the scheduler that runs what it admits.

The bound counts requests in the system: `slots` may run at once and `max_queue` more may wait
beyond them, so `slots + max_queue` simultaneous requests are all accepted and the next is
refused at once, holding nothing. Retry-After is the time the observed service rate needs to
free a place for the refused request.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from zest.errors import OverloadedError

__all__ = ["AdmissionQueue"]

Item = TypeVar("Item")

# Completions remembered for the service rate, and how far back they count.
_RATE_SAMPLES = 64
_RATE_WINDOW_S = 120.0
_RETRY_AFTER_MAX_S = 300


class AdmissionQueue(Generic[Item]):
    def __init__(
        self,
        *,
        slots: int,
        max_queue: int,
        abandoned: Callable[[Item], bool] = lambda item: False,
        drop: Callable[[Item], None] = lambda item: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if slots < 1 or max_queue < 0:
            raise ValueError("an admission queue needs slots >= 1 and max_queue >= 0")
        self.slots, self.max_queue = slots, max_queue
        # A waiting item whose caller went away is dropped (told through `drop`), so that it
        # holds no place in the queue.
        self._abandoned, self._drop, self._clock = abandoned, drop, clock
        self._waiting: list[tuple[int, int, Item]] = []  # heap: (-priority, arrival, item)
        self._arrivals = itertools.count()
        self.running = 0
        self._finished: deque[float] = deque(maxlen=_RATE_SAMPLES)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def offer(self, item: Item, priority: int = 0) -> None:
        """Queue `item`, or refuse it with 429 when every slot and queue place is taken."""
        if self.running + self.waiting >= self.slots + self.max_queue:
            self._drop_abandoned()
        if self.running + self.waiting >= self.slots + self.max_queue:
            retry_after = self.retry_after()
            raise OverloadedError(
                f"the model is at capacity ({self.running} running, {self.waiting} waiting): "
                f"retry in {retry_after} s (Retry-After), or raise options.max_queue "
                f"(now {self.max_queue}) in routes.yaml",
                retry_after=retry_after,
            )
        heapq.heappush(self._waiting, (-priority, next(self._arrivals), item))

    def take(self) -> Item | None:
        """The next item to run, if a slot is free: highest priority, then first come."""
        while self._waiting and self.running < self.slots:
            item = heapq.heappop(self._waiting)[2]
            if not self._abandoned(item):
                self.running += 1
                return item
            self._drop(item)
        return None

    def finish(self, *, served: bool = True) -> None:
        """A taken item left its slot; `served` ones count towards the service rate."""
        self.running -= 1
        if served:
            self._finished.append(self._clock())

    def drain(self) -> list[Item]:
        """Every waiting item, in admission order, leaving the queue empty (on close)."""
        items = [entry[2] for entry in sorted(self._waiting)]
        self._waiting.clear()
        return items

    def _drop_abandoned(self) -> None:
        kept = []
        for entry in self._waiting:
            if self._abandoned(entry[2]):
                self._drop(entry[2])
            else:
                kept.append(entry)
        heapq.heapify(kept)
        self._waiting = kept

    def retry_after(self) -> int:
        """Seconds until a place frees up for one more request, from recent completions."""
        rate = self._service_rate()
        if rate is None:
            return 1
        ahead = max(self.running + self.waiting - self.slots - self.max_queue + 1, 1)
        return min(max(math.ceil(ahead / rate), 1), _RETRY_AFTER_MAX_S)

    def _service_rate(self) -> float | None:
        """Requests finished per second over the recent window; None until two are seen."""
        now = self._clock()
        recent = [t for t in self._finished if now - t <= _RATE_WINDOW_S]
        if len(recent) < 2:
            return None
        span = now - recent[0]
        return len(recent) / span if span > 0 else None
