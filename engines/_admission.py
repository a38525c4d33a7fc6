"""The admission queue every local runner uses: priority, then arrival; a bound; Retry-After.

A pure object (no threads, no locks: the runner calls it under its own lock), after vLLM's
request queue: the policy lives apart from the scheduler that runs what it admits.

The bound counts requests in the system: `slots` may run at once and `max_queue` more may wait
beyond them, so `slots + max_queue` simultaneous requests are all accepted and the next is
refused at once, holding nothing. Retry-After is the time the observed service rate needs to
free a place for the refused request.

An engine that schedules its own requests (the llama.cpp batch, which admits and preempts by
priority itself) gets a `Bound` instead: the same bound, 429 and Retry-After, one counter of
the requests in the system, and every request within it handed over at once.

A request's n choices form a `ChoiceGroup`, admitted together: none of its members takes a slot
until there is a free slot for every member not running yet (nothing queued behind it takes
one meanwhile), and once one is taken its waiting siblings are taken next. A group larger
than the slots could never decode together: it is refused with 400, except by a runner of
one sequence at a time (an onnx-genai model), which takes its members one after another.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from zest.errors import BadRequestError, OverloadedError

__all__ = ["Admission", "AdmissionQueue", "Bound", "ChoiceGroup"]

Item = TypeVar("Item")

# Completions remembered for the service rate, and how far back they count.
_RATE_SAMPLES = 64
_RATE_WINDOW_S = 120.0
_RETRY_AFTER_MAX_S = 300


@dataclass(frozen=True)
class Admission:
    """How many of an engine's jobs run at once, and how many more may wait (each engine
    kind declares it from its model's options; its runner enforces it)."""

    slots: int
    max_queue: int
    # What sets `slots`, as a request's n choices beyond them are refused naming it; None: an
    # engine whose choices run one after another anyway (takes a larger group member by member).
    slots_set_by: str | None = None


@dataclass(eq=False)
class ChoiceGroup:
    """Items admitted together: a request's n choices (each a sequence of its own), or every
    answer of a completions batch (its prompts times n, `prompts` > 1)."""

    size: int
    prompts: int = 1


class _ServiceRate:
    """Recent completions, and the Retry-After they give a refused request."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._finished: deque[float] = deque(maxlen=_RATE_SAMPLES)

    def served(self) -> None:
        self._finished.append(self._clock())

    def retry_after(self, beyond: int) -> int:
        """Seconds until `beyond` requests more than the bound have left (at least one)."""
        now = self._clock()
        recent = [t for t in self._finished if now - t <= _RATE_WINDOW_S]
        span = now - recent[0] if len(recent) >= 2 else 0.0
        if span <= 0:  # not two completions seen yet
            return 1
        rate = len(recent) / span
        return min(max(math.ceil(max(beyond, 1) / rate), 1), _RETRY_AFTER_MAX_S)


def _check_group(group: ChoiceGroup | None, slots: int, slots_set_by: str | None) -> None:
    if group is None or group.size <= slots or slots_set_by is None:
        return
    if group.prompts > 1:
        raise BadRequestError(
            f"prompt: {group.prompts} prompts with n={group.size // group.prompts} ask for "
            f"{group.size} answers, which decode together, and this model decodes at most "
            f"{slots} sequence{'s' if slots > 1 else ''} at once "
            f"({slots_set_by}): send at most {slots} answers (prompts times n) "
            "per request",
            param="prompt",
        )
    raise BadRequestError(
        f"n: {group.size} choices decode together, and this model decodes at most "
        f"{slots} sequence{'s' if slots > 1 else ''} at once ({slots_set_by}):"
        f" ask for n: {slots}{' or fewer' if slots > 1 else ''}",
        param="n",
    )


def _at_capacity(running: int, waiting: int, max_queue: int, retry_after: int) -> OverloadedError:
    return OverloadedError(
        f"the model is at capacity ({running} running, {waiting} waiting): "
        f"retry in {retry_after} s (Retry-After), or raise options.max_queue "
        f"(now {max_queue}) in routes.yaml",
        retry_after=retry_after,
    )


class Bound:
    """Admission for an engine that holds its waiting requests itself: `slots + max_queue`
    requests in the system at once, the next refused with 429 holding nothing. `counts` is
    the engine's own split of them into running and waiting (for the refusal's message)."""

    def __init__(
        self,
        *,
        slots: int,
        max_queue: int,
        counts: Callable[[], tuple[int, int]],
        slots_set_by: str | None = "options.parallel in routes.yaml",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if slots < 1 or max_queue < 0:
            raise ValueError("an admission bound needs slots >= 1 and max_queue >= 0")
        self.slots, self.max_queue, self._counts = slots, max_queue, counts
        self._slots_set_by = slots_set_by
        self._rate = _ServiceRate(clock)
        self.in_system = 0

    @property
    def running(self) -> int:
        return min(self._counts()[0], self.in_system)

    @property
    def waiting(self) -> int:
        return self.in_system - self.running

    def offer(self, group: ChoiceGroup | None = None) -> None:
        """Count one more request in, or refuse it: 429 at the bound, 400 for n choices that
        could never decode together."""
        _check_group(group, self.slots, self._slots_set_by)
        if self.in_system >= self.slots + self.max_queue:
            running = self.running
            raise _at_capacity(
                running, self.in_system - running, self.max_queue, self.retry_after()
            )
        self.in_system += 1

    def finish(self, *, served: bool = True) -> None:
        self.in_system -= 1
        if served:
            self._rate.served()

    def retry_after(self) -> int:
        return self._rate.retry_after(self.in_system - self.slots - self.max_queue + 1)


class AdmissionQueue(Generic[Item]):
    def __init__(
        self,
        *,
        slots: int,
        max_queue: int,
        abandoned: Callable[[Item], bool] = lambda item: False,
        drop: Callable[[Item], None] = lambda item: None,
        group: Callable[[Item], ChoiceGroup | None] = lambda item: None,
        # What sets `slots`, as a group too large for them is refused naming it; None: a
        # runner that takes a larger group's members one after another (one sequence at a
        # time: its choices never decode together anyway).
        slots_set_by: str | None = "options.parallel in routes.yaml",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if slots < 1 or max_queue < 0:
            raise ValueError("an admission queue needs slots >= 1 and max_queue >= 0")
        self.slots, self.max_queue = slots, max_queue
        # A waiting item whose caller went away is dropped (told through `drop`), so that it
        # holds no place in the queue.
        self._abandoned, self._drop = abandoned, drop
        self._group, self._slots_set_by = group, slots_set_by
        self._waiting: list[tuple[int, int, Item]] = []  # heap: (-priority, arrival, item)
        # The waiting siblings of a group member just taken: taken before anything else.
        self._siblings: deque[Item] = deque()
        self._taken: weakref.WeakKeyDictionary[ChoiceGroup, int] = weakref.WeakKeyDictionary()
        self._arrivals = itertools.count()
        self.running = 0
        self._rate = _ServiceRate(clock)

    @property
    def waiting(self) -> int:
        return len(self._waiting) + len(self._siblings)

    def offer(self, item: Item, priority: int = 0) -> None:
        """Queue `item`, or refuse it with 429 when every slot and queue place is taken (400
        when its group could never decode together)."""
        self._check_group(item)
        if self.running + self.waiting >= self.slots + self.max_queue:
            self._drop_abandoned()
        if self.running + self.waiting >= self.slots + self.max_queue:
            raise _at_capacity(self.running, self.waiting, self.max_queue, self.retry_after())
        heapq.heappush(self._waiting, (-priority, next(self._arrivals), item))

    def _check_group(self, item: Item) -> None:
        _check_group(self._group(item), self.slots, self._slots_set_by)

    def take(self) -> Item | None:
        """The next item to run, if a slot is free: highest priority, then first come; a group
        member only when the free slots hold every member not running yet."""
        while self.running < self.slots:
            if self._siblings:
                item = self._siblings.popleft()
            elif self._waiting and self._room_for(self._waiting[0][2]):
                item = heapq.heappop(self._waiting)[2]
            else:
                return None  # nothing waits, or a group waits for its slots: nothing jumps it
            if self._abandoned(item):
                self._drop(item)
                continue
            self.running += 1
            self._took(item)
            return item
        return None

    def _room_for(self, item: Item) -> bool:
        group = self._group(item)
        if group is None or self._abandoned(item):
            return True
        remaining = group.size - self._taken.get(group, 0)
        return self.slots - self.running >= min(remaining, self.slots)

    def _took(self, item: Item) -> None:
        """Count a group member taken, and put its waiting siblings next in line."""
        group = self._group(item)
        if group is None:
            return
        self._taken[group] = self._taken.get(group, 0) + 1
        siblings = [entry for entry in self._waiting if self._group(entry[2]) is group]
        if siblings:
            self._waiting = [entry for entry in self._waiting if entry not in siblings]
            heapq.heapify(self._waiting)
            self._siblings.extend(entry[2] for entry in sorted(siblings))

    def finish(self, *, served: bool = True) -> None:
        """A taken item left its slot; `served` ones count towards the service rate."""
        self.running -= 1
        if served:
            self._rate.served()

    def drain(self) -> list[Item]:
        """Every waiting item, in admission order, leaving the queue empty (on close)."""
        items = [*self._siblings, *(entry[2] for entry in sorted(self._waiting))]
        self._waiting.clear()
        self._siblings.clear()
        return items

    def _drop_abandoned(self) -> None:
        siblings, self._siblings = self._siblings, deque()
        for item in siblings:
            if self._abandoned(item):
                self._drop(item)
            else:
                self._siblings.append(item)
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
        return self._rate.retry_after(self.running + self.waiting - self.slots - self.max_queue + 1)
