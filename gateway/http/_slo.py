"""Per-route SLOs: each route's recent requests, judged against the objectives of its `slo`.

A route with an slo keeps a sliding window of its requests that reached a first token: their
time to first token, and their decode rate when they finished with more than one token. The
window (its last `window` seconds, at most MAX_SAMPLES requests) is judged whenever a request
joins it and whenever it is read (a scrape, GET /v1/stats):

- `ttft_p95` is missed while the window's 95th percentile TTFT (nearest rank) exceeds
  `ttft_p95_s`;
- `tokens_per_s` is missed while the window's median decode rate is below `min_tokens_per_s`.

An objective with nothing to judge (an empty window) is met. An objective going from met to
missed is one *breach*: counted once and reported once, however many requests it stays missed
for; it is met again once the window's figure is back within target (or the window empties).
Pure: the clock is given, and what to do with a breach is the caller's `report`.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from zest.router import Slo, format_duration

__all__ = ["MAX_SAMPLES", "Change", "Judgement", "RouteState", "SloTracker", "nearest_rank"]

# The requests a window keeps at most (the most recent): a p95 over them is a steady figure,
# and judging them stays cheap at every request.
MAX_SAMPLES = 2048
TTFT_P95 = "ttft_p95"
TOKENS_PER_S = "tokens_per_s"


def nearest_rank(values: list[float], fraction: float) -> float:
    """The `fraction` percentile of `values` by nearest rank: a value that was measured."""
    ordered = sorted(values)
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


@dataclass(frozen=True)
class Sample:
    at: float
    ttft_s: float
    tokens_per_s: float | None


@dataclass(frozen=True)
class Judgement:
    """One objective of a route over its window: the target, the window's figure, the verdict."""

    objective: str
    target: float
    value: float | None  # None: no request to judge
    ok: bool

    def describe(self) -> str:
        """e.g. `ttft_p95 0.412 s (target <= 5 s)`."""
        unit, sign = (" s", "<=") if self.objective == TTFT_P95 else (" tokens/s", ">=")
        value = "n/a" if self.value is None else f"{self.value:.3g}{unit}"
        return f"{self.objective} {value} (target {sign} {self.target:g}{unit})"


@dataclass(frozen=True)
class RouteState:
    """A route's window as judged at one moment."""

    route: str
    window_s: float
    requests: int
    ttft_p95_s: float | None
    tokens_per_s: float | None  # the window's median decode rate
    judgements: tuple[Judgement, ...]

    @property
    def ok(self) -> bool:
        return all(j.ok for j in self.judgements)

    def as_stats(self, breaches: Mapping[str, int]) -> dict[str, Any]:
        """The route's entry of GET /v1/stats' `slo`."""
        return {
            "ok": self.ok,
            "window_s": self.window_s,
            "requests": self.requests,
            "ttft_p95_s": _rounded(self.ttft_p95_s),
            "tokens_per_s": _rounded(self.tokens_per_s),
            "objectives": {
                j.objective: {
                    "target": j.target,
                    "value": _rounded(j.value),
                    "ok": j.ok,
                    "breaches": breaches.get(j.objective, 0),
                }
                for j in self.judgements
            },
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


@dataclass(frozen=True)
class Change:
    """An objective that went from met to missed (a breach), or back."""

    state: RouteState
    judgement: Judgement

    @property
    def breached(self) -> bool:
        return not self.judgement.ok

    def describe(self) -> str:
        """The log line: route, objective, measured value, target and the window."""
        what = "SLO breached" if self.breached else "SLO met again"
        window = format_duration(self.state.window_s)
        return (
            f"{what}: route {self.state.route}: {self.judgement.describe()} over the last "
            f"{window} ({self.state.requests} requests)"
        )


def judge(route: str, slo: Slo, samples: list[Sample]) -> RouteState:
    """The window's figures and each objective's verdict."""
    ttfts = [s.ttft_s for s in samples]
    rates = [s.tokens_per_s for s in samples if s.tokens_per_s is not None]
    p95 = nearest_rank(ttfts, 0.95) if ttfts else None
    median = statistics.median(rates) if rates else None
    figures = {TTFT_P95: p95, TOKENS_PER_S: median}
    judgements = tuple(
        Judgement(name, target, figures[name], _met(name, figures[name], target))
        for name, target in slo.objectives().items()
    )
    return RouteState(route, slo.window, len(samples), p95, median, judgements)


def _met(objective: str, value: float | None, target: float) -> bool:
    if value is None:  # nothing to judge
        return True
    return value <= target if objective == TTFT_P95 else value >= target


class SloTracker:
    """The windows of every route with an slo, their breaches, and which objectives are missed.

    Routes are judged with the slo given at each call, so a reload's new objectives apply at
    once. `report` hears every change (a breach, or an objective met again)."""

    def __init__(
        self,
        report: Callable[[Change], None] = lambda change: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._report = report
        self._clock = clock
        self._lock = threading.Lock()  # requests end and scrapes read from any thread
        self._windows: dict[str, deque[Sample]] = {}
        self._missed: set[tuple[str, str]] = set()
        self._breaches: dict[tuple[str, str], int] = {}

    def observe(
        self, route: str, slo: Slo, ttft_s: float, tokens_per_s: float | None
    ) -> RouteState:
        """A request of `route` reached its first token (and its decode rate, if it has one)."""
        with self._lock:
            window = self._windows.setdefault(route, deque(maxlen=MAX_SAMPLES))
            window.append(Sample(self._clock(), ttft_s, tokens_per_s))
            state, changes = self._judge(route, slo)
        self._tell(changes)
        return state

    def judge_all(self, slos: Mapping[str, Slo]) -> list[RouteState]:
        """Every route of `slos`, judged now; routes and objectives no longer there are
        forgotten."""
        with self._lock:
            self._forget(slos)
            judged = [self._judge(route, slo) for route, slo in slos.items()]
        for _, changes in judged:
            self._tell(changes)
        return [state for state, _ in judged]

    def breaches(self, route: str) -> dict[str, int]:
        """The breaches counted for each objective of `route`."""
        with self._lock:
            return {obj: n for (where, obj), n in self._breaches.items() if where == route}

    def _tell(self, changes: list[Change]) -> None:
        for change in changes:  # outside the lock: a report may read the tracker
            self._report(change)

    def _judge(self, route: str, slo: Slo) -> tuple[RouteState, list[Change]]:
        state = judge(route, slo, self._recent(route, slo.window))
        changes = [Change(state, j) for j in state.judgements if self._changed(route, j)]
        return state, changes

    def _recent(self, route: str, window_s: float) -> list[Sample]:
        window = self._windows.get(route)
        if window is None:
            return []
        since = self._clock() - window_s
        while window and window[0].at < since:
            window.popleft()
        return list(window)

    def _changed(self, route: str, judgement: Judgement) -> bool:
        """Note the verdict; True when it differs from the last one (a breach, or met again)."""
        key = (route, judgement.objective)
        self._breaches.setdefault(key, 0)
        if judgement.ok != (key in self._missed):
            return False
        if judgement.ok:
            self._missed.discard(key)
        else:
            self._missed.add(key)
            self._breaches[key] += 1
        return True

    def _forget(self, slos: Mapping[str, Slo]) -> None:
        for route in [r for r in self._windows if r not in slos]:
            del self._windows[route]
        judged = {(route, name) for route, slo in slos.items() for name in slo.objectives()}
        self._missed &= judged
        self._breaches = {key: n for key, n in self._breaches.items() if key in judged}
