"""Speculative decoding by prompt lookup: where the answer copies its input (a summary, an
edit, code completion), the tokens that followed the last few generated tokens somewhere in the
prompt (or the answer so far) are a good guess of what comes next.

Each step, a sequence's current token and up to `tokens` drafted ones are evaluated in the same
batch; the sampler then draws the real next token at each position in turn, and the draft is
kept as long as it agrees. Every kept token is one the model would have drawn itself at that
point (the same sampler, the same state), so the output follows the model's own distribution;
at temperature 0 it is the greedy answer. The KV cells of the rejected tail are removed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from zest.engines._output import SequenceOutput

__all__ = ["PromptLookup", "Taken", "draft_entries", "take_tokens"]

MIN_NGRAM = 2  # a single repeated token predicts too little to be worth a batch row


class PromptLookup:
    """The history (prompt, then the answer) indexed by its n-grams, for drafting."""

    def __init__(self, prompt: Sequence[int], tokens: int, ngram: int) -> None:
        self.tokens, self.ngram = tokens, ngram
        # Drafted per step, between 1 and `tokens`: what the recent steps' agreement earns (a
        # rejected row costs compute for nothing).
        self.size = tokens
        self._history: list[int] = []
        # n-gram -> where its latest occurrence that has a continuation starts
        self._seen: dict[tuple[int, ...], int] = {}
        for token in prompt:
            self.append(token)

    def append(self, token: int) -> None:
        end = len(self._history)
        for n in range(1, self.ngram + 1):
            if end >= n:  # the n-gram ending here now has `token` after it
                self._seen[tuple(self._history[end - n : end])] = end - n
        self._history.append(token)

    def record(self, drafted: int, matched: int) -> None:
        """A step's outcome: a draft held whole doubles the next one, a broken one shrinks it
        to what held (plus one)."""
        if not drafted:
            return
        self.size = min(self.size * 2, self.tokens) if matched == drafted else matched + 1

    def draft(self, limit: int) -> list[int]:
        """Up to `limit` tokens that followed the longest n-gram the history now ends with."""
        limit = min(limit, self.size)
        if limit <= 0:
            return []
        for n in range(min(self.ngram, len(self._history)), MIN_NGRAM - 1, -1):
            start = self._seen.get(tuple(self._history[-n:]))
            if start is not None:
                return self._history[start + n : start + n + limit]
        return []


def draft_entries(
    token: int, pos: int, seq: int, draft: Sequence[int]
) -> list[tuple[int, int, int, bool]]:
    """The batch rows of one generating sequence: its token, then the draft after it."""
    return [(token, pos, seq, True)] + [(t, pos + 1 + i, seq, True) for i, t in enumerate(draft)]


@dataclass(frozen=True)
class Taken:
    drawn: tuple[int, ...]  # one token per row whose output was used (the cells kept)
    matched: int  # drafted tokens the model agreed with

    @property
    def token(self) -> int:
        """The last token drawn: the next step's input."""
        return self.drawn[-1]


def take_tokens(
    sample: Callable[[int], int],
    out: SequenceOutput,
    first_index: int,
    draft: Sequence[int],
    send: Callable[[str], Any],
) -> Taken:
    """Draw the next token at each row in turn, pushing each to `out` (and its text to
    `send`), while the draft agrees and the sequence goes on."""
    drawn: list[int] = []
    for i in range(len(draft) + 1):
        token = sample(first_index + i)
        drawn.append(token)
        text = out.push(token)
        if text:
            send(text)
        if out.finish is not None or i == len(draft) or token != draft[i]:
            break
    # Drawing stopped at the first disagreement: the agreements are a prefix.
    return Taken(tuple(drawn), sum(1 for d, t in zip(draft, drawn, strict=False) if d == t))
