"""Who used what (GET /v1/usage, the web page's usage table): requests and tokens by client,
task and model over the last minute, hour and day, as this replica served them.

Each finished request is counted once, when its record ends (http/_metrics.py), in a bucket of
its time: 5-second buckets for the last hour, minute buckets for the last day, so the minute's
figures are exact to 5 seconds and the day's to a minute. A fleet's figures are the sum of its
replicas' (or the Prometheus counters' `client` label, summed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["WINDOWS", "UsageLedger"]

# The windows shown, in seconds.
WINDOWS = {"minute": 60, "hour": 3600, "day": 86400}
_FINE_S, _COARSE_S = 5, 60  # bucket widths: the hour's, and the day's


@dataclass
class _Counts:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, other: _Counts) -> None:
        self.requests += other.requests
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


@dataclass
class _Series:
    """One (client, task, model)'s buckets: fine ones for the hour, coarse for the day."""

    fine: dict[int, _Counts] = field(default_factory=dict)
    coarse: dict[int, _Counts] = field(default_factory=dict)

    def add(self, now: float, counts: _Counts) -> None:
        for buckets, width in ((self.fine, _FINE_S), (self.coarse, _COARSE_S)):
            buckets.setdefault(int(now // width), _Counts()).add(counts)

    def prune(self, now: float) -> None:
        for buckets, width, keep in (
            (self.fine, _FINE_S, WINDOWS["hour"]),
            (self.coarse, _COARSE_S, WINDOWS["day"]),
        ):
            oldest = int((now - keep) // width)
            for bucket in [b for b in buckets if b <= oldest]:
                del buckets[bucket]

    def total(self, now: float, seconds: int) -> _Counts:
        """The counts of the last `seconds` (to a bucket's width)."""
        buckets, width = (
            (self.fine, _FINE_S)
            if seconds <= WINDOWS["hour"]
            else (
                self.coarse,
                _COARSE_S,
            )
        )
        first = int(now // width) - seconds // width + 1
        found = _Counts()
        for bucket, counts in buckets.items():
            if bucket >= first:
                found.add(counts)
        return found

    @property
    def empty(self) -> bool:
        return not self.coarse


class UsageLedger:
    """Requests and tokens by (client, task, model), over the last day."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.series: dict[tuple[str, str, str], _Series] = {}
        self._pruned_at = 0.0

    def count(self, client: str, task: str, model: str, prompt: int, completion: int) -> None:
        now = self.clock()
        key = (client, task, model)
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = _Series()
        series.add(now, _Counts(1, prompt, completion))
        if now - self._pruned_at >= _COARSE_S:  # at most once a minute
            self._prune(now)

    def _prune(self, now: float) -> None:
        self._pruned_at = now
        for key, series in list(self.series.items()):
            series.prune(now)
            if series.empty:
                del self.series[key]

    def rows(self, clients: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """One row per (client, task, model) with its figures in each window; `clients`:
        only theirs (None: everyone's)."""
        now = self.clock()
        self._prune(now)
        wanted = None if clients is None else set(clients)
        rows = []
        for (client, task, model), series in sorted(self.series.items()):
            if wanted is not None and client not in wanted:
                continue
            row: dict[str, Any] = {"client": client, "task": task, "model": model}
            for window, seconds in WINDOWS.items():
                row[window] = series.total(now, seconds).as_dict()
            rows.append(row)
        return rows
