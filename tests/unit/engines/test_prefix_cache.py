"""Which slot a prompt starts in and what its stream keeps: the prefix cache's policy, over a
record of the KV calls it makes (tests/engines/test_batching.py runs it on the real model)."""

from __future__ import annotations

from typing import Any, cast

from zest.engines._prefix_cache import COPY_MIN, MIN_TAIL, MIN_TOKENS, PrefixCache


class Streams:
    """What each sequence's KV stream holds, as the calls leave it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def copy_stream(self, src: int, dst: int) -> None:
        self.calls.append(("copy", src, dst))

    def forget_from(self, seq: int, start: int) -> None:
        self.calls.append(("cut", seq, start))

    def forget(self, seq: int) -> None:
        self.calls.append(("forget", seq))


SYSTEM = tuple(range(1000, 1200))  # a 200-token shared prefix


def prompt(*tail: int) -> tuple[int, ...]:
    return SYSTEM + tuple(tail) + tuple(range(5000, 5000 + MIN_TAIL))


def cache(kept: int = 8, max_tokens: int = 4096) -> tuple[PrefixCache, Streams]:
    streams = Streams()
    return PrefixCache(cast(Any, streams), kept=kept, max_tokens=max_tokens), streams


def test_a_prompt_starts_in_the_free_slot_that_holds_most_of_it() -> None:
    prefixes, streams = cache()
    first = prompt(1, 2, 3)
    assert prefixes.reuse(first, 2) == 0  # nothing held yet: the stream is cleared
    prefixes.hold(first, 2)
    prefixes.release(2, keep=True)
    assert prefixes.choose(prompt(7), free=[0, 1, 2, 3]) == 2
    assert prefixes.reuse(prompt(7), 2) == len(SYSTEM)
    # The answer went when the request ended (only the prompt is kept), the rest of the old
    # prompt goes now; nothing was copied from anywhere.
    assert streams.calls == [("cut", 2, 0), ("cut", 2, len(first)), ("cut", 2, len(SYSTEM))]


def test_a_slot_keeps_its_prompt_and_nothing_of_its_answer() -> None:
    prefixes, streams = cache()
    first = prompt(1, 2, 3)
    prefixes.reuse(first, 0)
    prefixes.hold(first, 0)
    streams.calls.clear()
    prefixes.release(0, keep=True)  # its stream holds the prompt and the answer after it
    assert streams.calls == [("cut", 0, len(first))]
    assert prefixes.kept() == {0: len(first)}


def test_without_a_shared_prefix_an_empty_slot_goes_before_a_warm_one() -> None:
    prefixes, _ = cache()
    prefixes.reuse(prompt(1), 0)
    prefixes.hold(prompt(1), 0)
    prefixes.release(0, keep=True)
    unrelated = tuple(range(9000, 9100))
    assert prefixes.choose(unrelated, free=[0, 1]) == 1  # slot 0's conversation stays warm
    assert prefixes.choose(unrelated, free=[0]) == 0


def test_the_slot_idle_longest_is_the_one_given_up() -> None:
    prefixes, _ = cache()
    for seq in (0, 1):
        other = tuple(range(seq * 1000 + 20000, seq * 1000 + 20100))
        prefixes.reuse(other, seq)
        prefixes.hold(other, seq)
        prefixes.release(seq, keep=True)
    assert prefixes.choose(tuple(range(9000, 9100)), free=[1, 0]) == 0


def test_a_longer_prefix_in_a_busy_slot_is_copied_in_whole_and_cut_back() -> None:
    prefixes, streams = cache()
    prefixes.reuse(prompt(1), 0)
    prefixes.hold(prompt(1), 0)  # slot 0 is still decoding: its prompt is held
    streams.calls.clear()
    assert prefixes.reuse(prompt(2), 1) == len(SYSTEM)
    assert streams.calls == [("copy", 0, 1), ("cut", 1, len(SYSTEM))]


def test_a_copy_needs_copy_min_more_tokens_than_the_slot_holds_itself() -> None:
    prefixes, streams = cache()
    short = SYSTEM[: COPY_MIN - 1] + tuple(range(7000, 7100))
    prefixes.reuse(SYSTEM + tuple(range(8000, 8100)), 0)
    prefixes.hold(SYSTEM + tuple(range(8000, 8100)), 0)
    prefixes.reuse(short, 1)
    prefixes.hold(short, 1)
    prefixes.release(1, keep=True)
    streams.calls.clear()
    # Slot 1 holds COPY_MIN - 1 tokens of it; slot 0 all 200: 137 more, worth a copy.
    assert prefixes.reuse(prompt(3), 1) == len(SYSTEM)
    assert streams.calls[0] == ("copy", 0, 1)
    # A prompt that slot 0 covers only a few tokens further than slot 1: no copy.
    streams.calls.clear()
    prefixes.hold(prompt(3), 1)
    nearly = (*SYSTEM, 1, 2)
    near = nearly + tuple(range(6000, 6000 + MIN_TAIL))
    prefixes.hold(near, 0)
    assert prefixes.reuse(near, 1) == len(SYSTEM)
    assert streams.calls == [("cut", 1, len(SYSTEM))]


def test_the_prompts_last_tokens_are_always_evaluated() -> None:
    prefixes, _ = cache()
    same = prompt(4)
    prefixes.reuse(same, 0)
    prefixes.hold(same, 0)
    prefixes.release(0, keep=True)
    assert prefixes.reuse(same, 0) == len(same) - MIN_TAIL


def test_a_short_shared_prefix_is_evaluated_anew() -> None:
    prefixes, streams = cache()
    little = SYSTEM[: MIN_TOKENS - 1]
    prefixes.hold(little + tuple(range(100)), 0)
    prefixes.release(0, keep=True)
    assert prefixes.reuse(little + tuple(range(7000, 7100)), 0) == 0
    assert streams.calls[-1] == ("cut", 0, 0)


def test_idle_slots_past_the_bound_forget_the_least_recent_prompt() -> None:
    prefixes, streams = cache(kept=1)
    for seq in (0, 1):
        prefixes.hold(prompt(seq), seq)
        prefixes.release(seq, keep=True)
    assert ("forget", 0) in streams.calls
    assert prefixes.choose(prompt(0), free=[0, 1]) == 1  # slot 1 still shares the system part


def test_an_error_forgets_the_stream_and_a_prompt_past_the_budget_is_not_kept() -> None:
    prefixes, streams = cache(max_tokens=100)
    prefixes.hold(prompt(1), 0)  # 233 tokens: longer than the budget
    prefixes.release(0, keep=True)
    assert ("forget", 0) in streams.calls
    assert prefixes.reuse(prompt(1), 0) == 0
    prefixes, streams = cache()
    prefixes.hold(prompt(1), 0)
    prefixes.release(0, keep=False)
    assert streams.calls == [("forget", 0)]
    assert prefixes.reuse(prompt(1), 1) == 0
