"""From sampled tokens to client text for one sequence: end of generation, UTF-8, stops, limits."""

from __future__ import annotations

import codecs
from collections.abc import Callable

from zest.engines._base import Delta, FinishReason, GenerationJob, StageStats, TokenLogprob
from zest.engines._stops import StopMatcher

__all__ = ["SequenceOutput"]


class SequenceOutput:
    """Feed tokens with `push`; `finish` is set once the sequence is done."""

    def __init__(
        self, job: GenerationJob, piece: Callable[[int], bytes], is_eog: Callable[[int], bool]
    ) -> None:
        self.job, self._piece, self._is_eog = job, piece, is_eog
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = StopMatcher(job.stop)
        self.produced = 0
        self.finish: FinishReason | None = None
        self.logprobs: list[TokenLogprob] = []

    def push(self, token: int) -> str:
        """Account for one sampled token; return the text that may be sent now."""
        if self._is_eog(token):
            self.finish = "stop"
            return ""
        self.produced += 1
        text = self._stops.feed(self._decoder.decode(self._piece(token)))
        if self._stops.stopped:
            self.finish = "stop"
        elif self.produced >= self.job.max_tokens:
            self.finish = "length"
        return text

    def score(self, token: int, logprob: float, top: list[tuple[int, float]]) -> None:
        """Record a generated token's log probability (the end-of-generation token has none)."""
        if self._is_eog(token):
            return
        piece = self._piece(token)
        alternatives = tuple((self._text(t), self._piece(t), lp) for t, lp in top)
        self.logprobs.append(TokenLogprob(self._text(token), piece, logprob, alternatives))

    def _text(self, token: int) -> str:
        return self._piece(token).decode("utf-8", errors="replace")

    def final(self, stats: StageStats | None = None) -> Delta:
        """The last delta: held-back text, finish reason (cancelled if asked), counts, figures."""
        finish = self.finish or ("cancelled" if self.job.cancelled.is_set() else "length")
        tail = self._stops.feed(self._decoder.decode(b"", final=True)) + self._stops.flush()
        return Delta(
            tail,
            finish_reason=finish,
            completion_tokens=self.produced,
            stats=stats,
            logprobs=tuple(self.logprobs),
            stop_sequence=self._stops.matched,
        )
