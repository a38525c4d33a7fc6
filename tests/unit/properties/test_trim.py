"""Properties of prompt trimming: within the limit, system messages kept, order kept."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zest.errors import ContextLengthExceededError
from zest.policies import Fitted, PromptLimit, fit_prompt

FAST = settings(max_examples=200, deadline=None)
SYSTEM = ("system", "developer")


def words(messages: Sequence[Mapping[str, str]]) -> int:
    """One token per word, two per message for the template: monotone, like a tokenizer."""
    return sum(len(m["content"].split()) + 2 for m in messages)


text = st.lists(st.sampled_from(["a", "bb", "ccc", "d d", "é", " ", "x\ny"]), max_size=12).map(
    "".join
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant"]), "content": text}
)
conversation = st.lists(message, min_size=1, max_size=12)


def fit(
    messages: list[dict[str, str]], limit: int, trim: Literal["turns", "middle"]
) -> Fitted | None:
    try:
        return fit_prompt(
            messages,
            count=words,
            limit=PromptLimit(limit, "test"),
            trim=trim,
            model="m",
        )
    except ContextLengthExceededError:
        return None


def is_subsequence(part: Sequence[object], whole: Sequence[object]) -> bool:
    rest = iter(whole)
    return all(any(item is candidate for candidate in rest) for item in part)


@FAST
@given(conversation, st.integers(min_value=0, max_value=60))
def test_turn_trimming_fits_keeps_system_messages_and_order(
    messages: list[dict[str, str]], limit: int
) -> None:
    fitted = fit(messages, limit, "turns")
    if fitted is None:
        # Refused only when even the system messages and the newest turn are over the limit.
        others = [i for i, m in enumerate(messages) if m["role"] not in SYSTEM]
        users = [i for i in others if messages[i]["role"] == "user"]
        newest = users[-1] if users else (others[0] if others else len(messages))
        floor = [m for i, m in enumerate(messages) if m["role"] in SYSTEM or i >= newest]
        assert words(floor) > limit
        return
    assert fitted.prompt_tokens == words(fitted.messages) <= limit
    assert is_subsequence(fitted.messages, messages)
    assert [m for m in fitted.messages if m["role"] in SYSTEM] == [
        m for m in messages if m["role"] in SYSTEM
    ]
    dropped = [m for m in messages if not any(m is kept for kept in fitted.messages)]
    assert not any(m["role"] in SYSTEM for m in dropped)
    if fitted.trimmed is None:
        assert list(fitted.messages) == messages
    else:
        assert fitted.trimmed.messages_dropped == len(dropped) > 0
        assert fitted.trimmed.tokens_before == words(messages)


@FAST
@given(conversation, st.integers(min_value=0, max_value=60))
def test_turn_trimming_keeps_the_newest_turns(messages: list[dict[str, str]], limit: int) -> None:
    fitted = fit(messages, limit, "turns")
    if fitted is None:
        return
    kept = [i for i, m in enumerate(messages) if any(m is k for k in fitted.messages)]
    others = [i for i, m in enumerate(messages) if m["role"] not in SYSTEM]
    # What is dropped is a prefix of the non-system messages: the oldest ones.
    kept_others = [i for i in kept if messages[i]["role"] not in SYSTEM]
    assert kept_others == others[len(others) - len(kept_others) :]


@FAST
@given(
    st.lists(message, min_size=0, max_size=6),
    st.text(alphabet="ab \n", max_size=120),
    st.integers(min_value=0, max_value=80),
)
def test_middle_trimming_fits_and_keeps_the_head_and_tail_of_the_newest_input(
    before: list[dict[str, str]], long: str, limit: int
) -> None:
    messages = [*before, {"role": "user", "content": long}]
    fitted = fit(messages, limit, "middle")
    if fitted is None:
        assert words(messages) > limit
        return
    assert fitted.prompt_tokens == words(fitted.messages) <= limit
    assert len(fitted.messages) == len(messages)
    target = max(i for i, m in enumerate(messages) if m["role"] not in SYSTEM)
    for i, (old, new) in enumerate(zip(messages, fitted.messages, strict=True)):
        assert new["role"] == old["role"]
        if i != target:
            assert new == old
    if fitted.trimmed is not None:
        content = fitted.messages[target]["content"]
        head, _, tail = content.partition(" [… ")
        assert long.startswith(head)
        assert long.endswith(tail.split(" tokens trimmed …] ", 1)[1])


@pytest.mark.parametrize("trim", ["turns", "middle"])
def test_only_system_messages_over_the_limit_are_refused_with_the_numbers(
    trim: Literal["turns", "middle"],
) -> None:
    messages = [{"role": "system", "content": "a b c d e f g h"}]
    with pytest.raises(ContextLengthExceededError, match="cannot be trimmed"):
        fit_prompt(messages, count=words, limit=PromptLimit(3, "test"), trim=trim, model="m")
