"""A one-line transfer progress bar on stderr: bytes, total when known, rate.

Redrawn in place on a terminal; elsewhere (a log, CI) only the final line is printed, so that
logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress", "human_size"]

_REDRAW_EVERY_S = 0.1
_BAR_WIDTH = 24


def human_size(size: float) -> str:
    """1536 -> '1.5 KB' (powers of 1000, as download tools show them)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


class Progress:
    """Counts the bytes of one transfer and shows them; `done()` prints the final line."""

    def __init__(self, label: str, total: int | None, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = total
        self.received = 0
        self._stream = stream or sys.stderr
        self._live = self._stream.isatty()
        self._started = time.monotonic()
        self._drawn = 0.0

    def update(self, count: int) -> None:
        self.received += count
        now = time.monotonic()
        if self._live and now - self._drawn >= _REDRAW_EVERY_S:
            self._drawn = now
            self._stream.write(f"\r{self.line()}\x1b[K")
            self._stream.flush()

    def done(self) -> None:
        line = f"\r{self.line()}\x1b[K" if self._live else self.line()
        self._stream.write(line + "\n")
        self._stream.flush()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self._started, 1e-6)
        rate = f"{human_size(self.received / elapsed)}/s"
        if not self.total:
            return f"{self.label}  {human_size(self.received)}  {rate}"
        share = min(self.received / self.total, 1.0)
        filled = round(share * _BAR_WIDTH)
        bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
        sizes = f"{human_size(self.received)} / {human_size(self.total)}"
        return f"{self.label}  [{bar}] {share:4.0%}  {sizes}  {rate}"
