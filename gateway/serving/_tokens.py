"""Token counts the policies are given: a model's own tokenizer after its chat template, or the
approximate count for models without one (remote)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from zest.engines import Prompt, Tokenizer
from zest.policies import approximate_tokens

__all__ = ["Tokens"]


class Tokens:
    """Counts a prompt and the variants trimming tries, with one model's tokenizer (None:
    approximately). Each variant is encoded once and keeps its tokens (Prompt.encode), so the
    count made for planning is the one the attempt reuses. The policies' Measure of an
    attempt (policies.fit_attempt)."""

    def __init__(self, prompt: Prompt, tokenizer: Tokenizer | None) -> None:
        self.prompt, self.tokenizer = prompt, tokenizer
        self._variants: dict[tuple[tuple[str, str], ...], Prompt] = {}

    @property
    def exact(self) -> bool:
        """Counted with the model's own tokenizer (else approximately)."""
        return self.tokenizer is not None

    @property
    def token_bytes(self) -> int | None:
        return None if self.tokenizer is None else self.tokenizer.max_token_bytes

    def variant(self, messages: Sequence[Mapping[str, str]]) -> Prompt:
        """The prompt over `messages` (itself when they are its own), remembered."""
        key = tuple((m["role"], m["content"]) for m in messages)
        found = self._variants.get(key)
        if found is None:
            found = self._variants[key] = self.prompt.with_messages(messages)
        return found

    def count(self, messages: Sequence[Mapping[str, str]]) -> int:
        if self.tokenizer is None:
            return approximate_tokens(messages)
        floor = self.floor(messages)
        if floor is not None:  # beyond the context whatever its tokens: not worth seconds of CPU
            return floor
        return len(self.variant(messages).encode(self.tokenizer))

    def least(self, messages: Sequence[Mapping[str, str]]) -> int | None:
        """At least this many tokens, from the text's length alone (no token spans more than
        the vocabulary's longest, a character at least one byte); None: not known."""
        if self.tokenizer is None or not self.tokenizer.max_token_bytes:
            return None
        characters = sum(len(m["content"]) for m in messages)
        return -(-characters // self.tokenizer.max_token_bytes)

    def floor(self, messages: Sequence[Mapping[str, str]]) -> int | None:
        """At least this many tokens, from the text's length alone, when that is already
        beyond the model's context (None: the text is short enough to be counted)."""
        if self.tokenizer is None:
            return None
        return self.tokenizer.floor(sum(len(m["content"]) for m in messages))
