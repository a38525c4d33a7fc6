"""The last minutes of the server's figures, for the web page's live charts (GET /v1/stats/history).

Prometheus keeps the long history; this keeps ten minutes in memory, in ten-second buckets:
the requests that finished, their TTFT (median) and decode rate (mean), and the deepest queue
seen. Fed by the metrics' request records (an observer), never by the request path itself.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Timeline"]

WINDOW_S = 600
BUCKET_S = 10


@dataclass
class Timeline:
    clock: Callable[[], float] = time.time
    _finished: deque[tuple[float, float, float | None]] = field(default_factory=deque)
    _queue: deque[tuple[float, int]] = field(default_factory=deque)

    def finished(self, ttft_s: float, tokens_per_s: float | None) -> None:
        self._finished.append((self.clock(), ttft_s, tokens_per_s))
        self._forget()

    def queue_depth(self, depth: int) -> None:
        self._queue.append((self.clock(), depth))
        self._forget()

    def buckets(self) -> dict[str, Any]:
        """Every bucket of the window, oldest first (empty ones included, with nulls)."""
        self._forget()
        now = self.clock()
        first = int((now - WINDOW_S) // BUCKET_S) + 1
        rows = []
        for index in range(first, int(now // BUCKET_S) + 1):
            start = index * BUCKET_S
            rows.append(self._bucket(start, start + BUCKET_S))
        return {"window_s": WINDOW_S, "bucket_s": BUCKET_S, "buckets": rows}

    def _bucket(self, start: float, end: float) -> dict[str, Any]:
        done = [(ttft, rate) for t, ttft, rate in self._finished if start <= t < end]
        rates = [rate for _, rate in done if rate is not None]
        depths = [depth for t, depth in self._queue if start <= t < end]
        return {
            "t": start,
            "requests": len(done),
            "ttft_p50_s": round(statistics.median(t for t, _ in done), 4) if done else None,
            "tokens_per_s": round(statistics.fmean(rates), 2) if rates else None,
            "queue_depth": max(depths) if depths else None,
        }

    def _forget(self) -> None:
        horizon = self.clock() - WINDOW_S
        for series in (self._finished, self._queue):
            while series and series[0][0] < horizon:
                series.popleft()
