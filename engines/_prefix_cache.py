"""Prefix reuse across requests: recent prompts' KV kept in spare sequences of the same context.

With a unified KV cache, `llama_memory_seq_cp` only tags existing cells with another sequence
id, so keeping a prompt and reusing it later copies no data. Entries are evicted least recently
used first, within a budget of tokens (cachetools) and of spare sequence ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import cachetools

from zest.engines._llama_native import NativeContext

__all__ = ["PrefixCache"]

MIN_TOKENS = 16  # shorter prompts are not worth a sequence id
# Tokens always evaluated anew at the end of a prompt, so that the first token's logits come from
# a batch of ordinary size rather than a lone token (llama.cpp picks its kernels by batch size).
# Reused KV is still not bit-identical to a recomputed one (docs/serving.md: a near-tie may flip).
MIN_TAIL = 32


class _Entries(cachetools.LRUCache[int, tuple[int, ...]]):
    """Sequence id -> the prompt its cells hold; evicting an entry frees its cells."""

    def __init__(self, max_tokens: int, on_evict: Callable[[int], None]) -> None:
        super().__init__(maxsize=max_tokens, getsizeof=len)
        self._on_evict = on_evict

    def popitem(self) -> tuple[int, tuple[int, ...]]:
        seq, tokens = super().popitem()
        self._on_evict(seq)
        return seq, tokens


class PrefixCache:
    def __init__(self, ctx: NativeContext, seq_ids: Sequence[int], max_tokens: int) -> None:
        self._ctx, self._free = ctx, list(seq_ids)
        self._entries = _Entries(max_tokens, self._release)

    def _release(self, seq: int) -> None:
        self._ctx.forget(seq)
        self._free.append(seq)

    def reuse(self, prompt: Sequence[int], slot: int) -> int:
        """Give `slot` the longest cached prefix of `prompt`; return how many tokens it covers.

        The last MIN_TAIL prompt tokens are always evaluated (their logits sample the first
        token).
        """
        best_seq, best = -1, 0
        for seq, tokens in self._entries.items():
            shared = _common_prefix(tokens, prompt)
            if shared > best:
                best_seq, best = seq, shared
        best = min(best, len(prompt) - MIN_TAIL)
        if best < MIN_TOKENS:
            return 0
        self._entries.get(best_seq)  # a lookup marks the entry recently used
        self._ctx.copy(best_seq, slot, best)
        return best

    def keep(self, prompt: Sequence[int], slot: int) -> None:
        """Remember the prompt whose KV `slot` holds (positions [0, len(prompt)))."""
        tokens = tuple(prompt)
        if len(tokens) < MIN_TOKENS or len(tokens) > self._entries.maxsize:
            return
        for seq, cached in list(self._entries.items()):
            if cached[: len(tokens)] == tokens:  # already held by a longer entry
                self._entries.get(seq)  # a lookup marks the entry recently used
                return
            if tokens[: len(cached)] == cached:  # the new prompt extends an entry: replace it
                self._entries.pop(seq)
                self._release(seq)
        while not self._free or self._entries.currsize + len(tokens) > self._entries.maxsize:
            self._entries.popitem()
        seq = self._free.pop()
        self._ctx.copy(slot, seq, len(tokens))
        self._entries[seq] = tokens


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
