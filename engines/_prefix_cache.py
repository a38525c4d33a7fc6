"""Prefix reuse across requests: each slot's KV stream keeps its last prompt after the request.

The batch context gives every sequence a KV stream of its own (as llama-server's `--parallel`
does), so a step's attention for one sequence runs over that sequence's cells only. In the
unified cache before it, every row attended over every cell in use, other requests' and kept
prompts' alike: with three ~1,600-token summaries a 512-token chunk took 1.14x as long as with
a stream each, 1.29x with two kept prompts beside them (bench/kv_occupancy.py, issue 25).

So a kept prompt lives in its idle slot's own stream, where it costs the other requests nothing
and reserves no memory beyond the slots'. A request starts in the free slot whose kept prompt
shares the longest prefix with its own (else an empty one, else the least recently used), keeps
that prefix and drops the rest. Where another slot (busy or idle) holds a longer prefix, its
whole stream is copied (llama.cpp copies between streams only whole, a memcpy of the stream's
cells) and cut back to the prefix: only for at least COPY_MIN more tokens, which cost more to
prefill than the copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the policy runs on any object with these three calls (unit tests: a record)
    from zest.engines._llama_native import NativeContext

__all__ = ["COPY_MIN", "MIN_TAIL", "MIN_TOKENS", "PrefixCache"]

MIN_TOKENS = 16  # shorter shared prefixes are evaluated anew
# Tokens always evaluated anew at the end of a prompt, so that the first token's logits come from
# a batch of ordinary size rather than a lone token (llama.cpp picks its kernels by batch size).
# Reused KV is still not bit-identical to a recomputed one (docs/serving.md: a near-tie may flip).
MIN_TAIL = 32
# More shared tokens than the slot's own that make copying another slot's stream worth it: a
# 4,096-cell stream of SmolLM2 at f16 is 94 MB (tens of ms to copy), 64 tokens' prefill ~0.2 s.
COPY_MIN = 64


class PrefixCache:
    """What each slot's stream holds, and which slot a prompt should start in."""

    def __init__(self, ctx: NativeContext, *, kept: int, max_tokens: int) -> None:
        self._ctx = ctx
        self._kept, self._max_tokens = kept, max_tokens  # idle slots kept warm; longest prompt
        self._held: dict[int, tuple[int, ...]] = {}  # seq -> the tokens at positions [0, n)
        self._idle: list[int] = []  # slots keeping a prompt while free, least recent first

    def choose(self, prompt: Sequence[int], free: Sequence[int]) -> int:
        """The free slot to start `prompt` in: the one sharing the longest prefix with it, else
        an empty one, else the one idle longest."""
        best, shared = None, MIN_TOKENS - 1
        for seq in free:
            common = _common_prefix(self._held.get(seq, ()), prompt)
            if common > shared:
                best, shared = seq, common
        if best is not None:
            return best
        empty = [seq for seq in free if seq not in self._held]
        if empty:
            return min(empty)
        return next((seq for seq in self._idle if seq in free), min(free))

    def reuse(self, prompt: Sequence[int], seq: int) -> int:
        """Keep the longest cached prefix of `prompt` in `seq` (its own, or a copy of another
        slot's stream) and drop the rest; how many tokens it covers. The last MIN_TAIL prompt
        tokens are always evaluated (their logits sample the first token)."""
        if seq in self._idle:
            self._idle.remove(seq)
        limit = len(prompt) - MIN_TAIL
        own = min(_common_prefix(self._held.get(seq, ()), prompt), limit)
        source, other = seq, own
        for held_by, tokens in self._held.items():
            common = min(_common_prefix(tokens, prompt), limit)
            if held_by != seq and common >= other + COPY_MIN:
                source, other = held_by, common
        if source != seq:
            self._ctx.copy_stream(source, seq)
            own = other
        keep = own if own >= MIN_TOKENS else 0
        self._ctx.forget_from(seq, keep)
        self._held[seq] = tuple(prompt[:keep])
        return keep

    def hold(self, prompt: Sequence[int], seq: int) -> None:
        """`seq`'s cells now hold `prompt` (its prefill ended): later prompts may start from it."""
        if len(prompt) <= self._max_tokens:
            self._held[seq] = tuple(prompt)

    def restored(self, tokens: Sequence[int], seq: int) -> None:
        """`seq`'s stream now holds a resumed sequence's saved state, whose first tokens are
        `tokens` (its prompt, or the part of it prefilled before it was preempted)."""
        if seq in self._idle:
            self._idle.remove(seq)
        if tokens and len(tokens) <= self._max_tokens:
            self._held[seq] = tuple(tokens)
        else:
            self._held.pop(seq, None)

    def release(self, seq: int, *, keep: bool) -> None:
        """`seq`'s request ended: its stream keeps the prompt for the next request (least recent
        dropped past `kept` idle slots), or, after an error, forgets everything."""
        if not keep or seq not in self._held:
            self._drop(seq)
            return
        # Its answer's cells go: only the prompt is ever reused, and a kept cell is counted.
        self._ctx.forget_from(seq, len(self._held[seq]))
        self._idle.append(seq)
        while len(self._idle) > self._kept:
            self._drop(self._idle[0])

    def kept(self) -> dict[int, int]:
        """The cells each idle slot keeps: its kept prompt's tokens."""
        return {seq: len(self._held[seq]) for seq in self._idle}

    def _drop(self, seq: int) -> None:
        self._ctx.forget(seq)
        self._held.pop(seq, None)
        if seq in self._idle:
            self._idle.remove(seq)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
