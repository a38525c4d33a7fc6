"""Token counters the policies are given: an engine's own tokenizer after its chat template, or
the approximate count for engines without one (remote)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from zest.engines import Engine
from zest.policies import Counter, approximate_tokens

__all__ = ["Tokens", "counter_for"]

Kind = Literal["chat", "completion"]


class Tokens:
    """An engine's tokens for a prompt given as messages (a completion prompt is one message
    whose content is the prompt); remembers the last prompt it encoded."""

    def __init__(self, engine: Engine, kind: Kind) -> None:
        self.engine, self.kind = engine, kind
        self._last: tuple[tuple[tuple[str, str], ...], list[int]] | None = None

    def encode(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        key = tuple((m["role"], m["content"]) for m in messages)
        if self._last is None or self._last[0] != key:
            self._last = (key, self._encode(messages))
        return self._last[1]

    def _encode(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        if self.kind == "completion":
            return self.engine.tokenize(messages[0]["content"], add_special=True)
        rendered = self.engine.render_chat([dict(m) for m in messages])
        return self.engine.tokenize(rendered, add_special=False)

    def count(self, messages: Sequence[Mapping[str, str]]) -> int:
        return len(self.encode(messages))


def counter_for(engine: Engine, kind: Kind) -> Counter:
    """Messages -> prompt tokens with the engine's own tokenizer, or approximately."""
    return Tokens(engine, kind).count if engine.has_tokenizer else approximate_tokens
