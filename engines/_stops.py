"""Stop sequences over a stream of text pieces: emit what is safe, hold back a possible stop."""

from __future__ import annotations

__all__ = ["StopMatcher"]


class StopMatcher:
    """Feed generated text piece by piece; get back the text that may be sent to the client.

    Text that could be the start of a stop sequence is held back until it is decided, so a
    client never sees any part of a stop sequence.
    """

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._pending = ""
        self.stopped = False
        self.matched: str | None = None  # the stop sequence that ended the text

    def feed(self, piece: str) -> str:
        """Return the text to emit now; sets `stopped` once a stop sequence has been seen."""
        if self.stopped:
            return ""
        text = self._pending + piece
        if (found := self._first_completed(text)) is not None:
            cut, self.matched = found
            self.stopped, self._pending = True, ""
            return text[:cut]
        keep = self._held_back_length(text)
        self._pending = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def _first_completed(self, text: str) -> tuple[int, str] | None:
        """Where the stop that completes first in `text` starts, and that stop (as if
        generated character by character, so that the answer never depends on how the text
        was chunked); at equal ends, the longer stop."""
        found = [(i + len(s), i, s) for s in self._stops if (i := text.find(s)) >= 0]
        if not found:
            return None
        _, start, stop = min(found)
        return start, stop

    def flush(self) -> str:
        """At the end of generation: release what was held back (no stop followed)."""
        text, self._pending = self._pending, ""
        return "" if self.stopped else text

    def _held_back_length(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a stop sequence."""
        longest = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:size]):
                    longest = size
                    break
        return longest
