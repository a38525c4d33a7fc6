"""Fitting a prompt into a route's budget: measure it, then reject it or trim it, never silently.

Pure: the token counter comes in as a callable (messages -> tokens after the chat template),
supplied by the engine that will serve the attempt, so every attempt is budgeted with its own
tokenizer. Two ways to trim:

- `turns` (chat): keep every system/developer message and the newest turns; drop the oldest
  whole turns (a turn is a user message and the replies after it) until the prompt fits.
- `middle` (one long input, e.g. summarization): keep the head and the tail of the newest
  non-system message and replace its middle with a visible marker, `[… N tokens trimmed …]`.

`trimmed_tokens` is the prompt's size before minus after (the marker itself costs a few tokens,
so it can be slightly below the marker's N, which counts the text cut out).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from zest.errors import ContextLengthExceededError

__all__ = [
    "APPROXIMATION",
    "Counter",
    "Fitted",
    "PromptLimit",
    "Trimmed",
    "approximate_tokens",
    "fit_prompt",
    "trim_marker",
]

Message = Mapping[str, str]
Counter = Callable[[Sequence[Message]], int]
Strategy = Literal["turns", "middle"]
_SYSTEM_ROLES = ("system", "developer")
BYTES_PER_TOKEN = 3  # deliberately low (most tokenizers average 4+): overestimates are safer
MESSAGE_OVERHEAD = 4  # role markers of a chat template
APPROXIMATION = (
    f"approximate: 1 token per {BYTES_PER_TOKEN} UTF-8 bytes + {MESSAGE_OVERHEAD} per message"
)


def approximate_tokens(messages: Sequence[Message]) -> int:
    """A token count for models without a local tokenizer (remote ones); see APPROXIMATION."""
    return sum(
        math.ceil(len(m["content"].encode("utf-8")) / BYTES_PER_TOKEN) + MESSAGE_OVERHEAD
        for m in messages
    )


def trim_marker(tokens: int) -> str:
    return f" [… {tokens} tokens trimmed …] "


@dataclass(frozen=True)
class PromptLimit:
    """The most prompt tokens an attempt may send, and where that number comes from."""

    tokens: int
    why: str


@dataclass(frozen=True)
class Trimmed:
    strategy: Strategy
    tokens_before: int
    trimmed_tokens: int
    messages_dropped: int = 0
    # tokens_before (so trimmed_tokens) is a lower bound: the prompt was measured by its
    # length alone, being far beyond the context (counting it would cost seconds of CPU).
    at_least: bool = False


@dataclass(frozen=True)
class Fitted:
    """The prompt as it will be sent: its messages, its size, and what was trimmed."""

    messages: tuple[Message, ...]
    prompt_tokens: int
    trimmed: Trimmed | None = None


def fit_prompt(
    messages: Sequence[Message],
    *,
    count: Counter,
    limit: PromptLimit | None,
    trim: Strategy | None,
    model: str,
) -> Fitted:
    """Measure the prompt; trim it (`trim` set) or refuse it when it is over `limit`."""
    tokens = count(messages)
    if limit is None or tokens <= limit.tokens:
        return Fitted(tuple(messages), tokens)
    if trim is None:
        raise ContextLengthExceededError(
            f"the prompt is {tokens} tokens, over the limit of {limit.tokens} for model "
            f"{model!r} ({limit.why}): shorten the messages or the prompt"
        )
    trimmer = _trim_turns if trim == "turns" else _trim_middle
    fitted = trimmer(list(messages), count, limit.tokens)
    if fitted is None:
        raise _cannot_fit(tokens, limit, trim, model)
    return fitted


def _cannot_fit(tokens: int, limit: PromptLimit, trim: Strategy, model: str) -> Exception:
    kept = (
        "the system prompt(s) and the newest turn"
        if trim == "turns"
        else "the other messages, with the newest input cut to nothing,"
    )
    return ContextLengthExceededError(
        f"the prompt is {tokens} tokens and cannot be trimmed to the limit of {limit.tokens} "
        f"for model {model!r} ({limit.why}): {kept} alone do not fit; shorten them"
    )


def _trim_turns(messages: list[Message], count: Counter, limit: int) -> Fitted | None:
    """Drop the fewest oldest turns that make the prompt fit (binary search: fewer turns,
    fewer tokens); None when even the newest turn alone is too long."""
    turns = _turns(messages)
    before = count(messages)

    def keep_from(first: int) -> list[Message]:
        kept = {i for turn in turns[first:] for i in turn}
        return [m for i, m in enumerate(messages) if i in kept or m["role"] in _SYSTEM_ROLES]

    low, high, best = 1, len(turns) - 1, None
    while low <= high:
        mid = (low + high) // 2
        tokens = count(keep_from(mid))
        if tokens <= limit:
            best, high = (mid, tokens), mid - 1
        else:
            low = mid + 1
    if best is None:
        return None
    kept = keep_from(best[0])
    dropped = len(messages) - len(kept)
    return Fitted(tuple(kept), best[1], Trimmed("turns", before, before - best[1], dropped))


def _turns(messages: Sequence[Message]) -> list[list[int]]:
    """Indices of the non-system messages, grouped into turns that each start at a user message."""
    turns: list[list[int]] = []
    for index, message in enumerate(messages):
        if message["role"] in _SYSTEM_ROLES:
            continue
        if not turns or message["role"] == "user":
            turns.append([])
        turns[-1].append(index)
    return turns


def _trim_middle(messages: list[Message], count: Counter, limit: int) -> Fitted | None:
    """Keep as much of the newest input's head and tail as fits (binary search on characters)."""
    if all(m["role"] in _SYSTEM_ROLES for m in messages):
        return None  # only system messages, which are never cut: nothing to trim
    cut = _MiddleCut(messages, count)
    before = count(messages)
    # Search with the largest marker number (the real one is never larger), then write it.
    keep = _largest(lambda k: count(cut.messages(k, before)) <= limit, len(cut.text) - 1)
    while keep >= 0:
        trimmed = cut.messages(keep, cut.removed_tokens(keep))
        after = count(trimmed)
        if after <= limit:
            return Fitted(tuple(trimmed), after, Trimmed("middle", before, before - after))
        keep -= max(1, keep // 64)  # the real number tokenized longer: keep a little less
    return None


class _MiddleCut:
    """The newest non-system message with its middle replaced by a marker."""

    def __init__(self, messages: list[Message], count: Counter) -> None:
        self.target = max(i for i, m in enumerate(messages) if m["role"] not in _SYSTEM_ROLES)
        self.text = messages[self.target]["content"]
        self._messages, self._count = messages, count

    def with_content(self, content: str) -> list[Message]:
        target = self.target
        return [
            {**m, "content": content} if i == target else m for i, m in enumerate(self._messages)
        ]

    def parts(self, keep: int) -> tuple[str, str, str]:
        head, tail = keep - keep // 2, keep // 2
        end = len(self.text) - tail
        return self.text[:head], self.text[head:end], self.text[end:]

    def messages(self, keep: int, marker_tokens: int) -> list[Message]:
        head, _, tail = self.parts(keep)
        return self.with_content(head + trim_marker(marker_tokens) + tail)

    def removed_tokens(self, keep: int) -> int:
        """Tokens of the text cut out, as the model counts it in place (template excluded)."""
        removed = self._count(self.with_content(self.parts(keep)[1]))
        return max(removed - self._count(self.with_content("")), 1)


def _largest(fits: Callable[[int], bool], high: int) -> int:
    """The largest k in [0, high] for which `fits(k)` holds (monotone), or -1."""
    low, best = 0, -1
    while low <= high:
        mid = (low + high) // 2
        if fits(mid):
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best
