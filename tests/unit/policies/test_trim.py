"""Fitting prompts into budgets: trimming turns or the middle, refusing with the numbers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from zest.errors import ContextLengthExceededError
from zest.policies import (
    Fitted,
    PromptLimit,
    Trimmed,
    approximate_tokens,
    fit_prompt,
    plan_budget,
    prompt_limit,
    trim_marker,
)

LIMIT = PromptLimit(30, "routes.chat.context.max_prompt_tokens")


def words(messages: Sequence[Mapping[str, str]]) -> int:
    """A counter for the tests: one token per word, two per message for the template."""
    return sum(len(m["content"].split()) + 2 for m in messages)


def msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


SYSTEM = msg("system", "be brief")  # 4 tokens
CHAT = [
    SYSTEM,
    msg("user", "one " * 8),  # 10
    msg("assistant", "two " * 8),  # 10
    msg("user", "three " * 8),  # 10
    msg("assistant", "four " * 8),  # 10
    msg("user", "five " * 4),  # 6
]


def test_a_prompt_within_the_limit_is_left_alone() -> None:
    assert fit_prompt(CHAT[:2], count=words, limit=LIMIT, trim="turns", model="m") == Fitted(
        tuple(CHAT[:2]), 14
    )


def test_no_limit_means_no_trimming() -> None:
    fitted = fit_prompt(CHAT, count=words, limit=None, trim="turns", model="m")
    assert (fitted.prompt_tokens, fitted.trimmed) == (50, None)


def test_turns_drops_the_oldest_whole_turns_and_keeps_the_system_prompt() -> None:
    fitted = fit_prompt(CHAT, count=words, limit=LIMIT, trim="turns", model="m")
    assert fitted.messages == (SYSTEM, CHAT[3], CHAT[4], CHAT[5])
    assert fitted.prompt_tokens == 30
    assert fitted.trimmed == Trimmed(
        "turns", tokens_before=50, trimmed_tokens=20, messages_dropped=2
    )


def test_turns_drops_only_as_many_turns_as_needed() -> None:
    fitted = fit_prompt(CHAT, count=words, limit=PromptLimit(29, "x"), trim="turns", model="m")
    assert fitted.messages == (SYSTEM, CHAT[5])
    assert fitted.trimmed == Trimmed("turns", 50, 40, messages_dropped=4)


def test_turns_keeps_system_messages_wherever_they_are() -> None:
    late_system = msg("developer", "answer in French")  # 5
    messages = [*CHAT[:3], late_system, *CHAT[3:]]
    fitted = fit_prompt(messages, count=words, limit=PromptLimit(20, "x"), trim="turns", model="m")
    assert fitted.messages == (SYSTEM, late_system, CHAT[5])
    assert fitted.prompt_tokens == 15


def test_an_assistant_message_before_any_user_message_is_a_turn_of_its_own() -> None:
    messages = [SYSTEM, msg("assistant", "hello " * 20), msg("user", "hi")]
    fitted = fit_prompt(messages, count=words, limit=PromptLimit(10, "x"), trim="turns", model="m")
    assert fitted.messages == (SYSTEM, messages[2])


def test_turns_that_cannot_fit_are_refused_with_the_numbers() -> None:
    with pytest.raises(ContextLengthExceededError) as info:
        fit_prompt(CHAT, count=words, limit=PromptLimit(9, "a context"), trim="turns", model="m")
    assert info.value.code == "context_length_exceeded"
    assert info.value.message == (
        "the prompt is 50 tokens and cannot be trimmed to the limit of 9 for model 'm' "
        "(a context): the system prompt(s) and the newest turn alone do not fit; shorten them"
    )


def test_reject_refuses_an_overlong_prompt_with_the_numbers() -> None:
    with pytest.raises(ContextLengthExceededError) as info:
        fit_prompt(CHAT, count=words, limit=LIMIT, trim=None, model="smollm2")
    assert info.value.message == (
        "the prompt is 50 tokens, over the limit of 30 for model 'smollm2' "
        "(routes.chat.context.max_prompt_tokens): shorten the messages or the prompt"
    )


def chars(messages: Sequence[Mapping[str, str]]) -> int:
    """One token per character, three per message: fine-grained enough to cut anywhere."""
    return sum(len(m["content"]) + 3 for m in messages)


def test_middle_keeps_head_and_tail_and_marks_the_cut() -> None:
    text = "HEAD-" + "x" * 500 + "-TAIL"
    messages = [SYSTEM, msg("user", text)]
    fitted = fit_prompt(
        messages, count=chars, limit=PromptLimit(120, "x"), trim="middle", model="m"
    )
    assert fitted.messages[0] == SYSTEM
    content = fitted.messages[1]["content"]
    assert content.startswith("HEAD-x")
    assert content.endswith("x-TAIL")
    head, marker_and_tail = content.split(" [… ", 1)
    removed = int(marker_and_tail.split(" tokens trimmed …] ", 1)[0])
    tail = marker_and_tail.split(" tokens trimmed …] ", 1)[1]
    assert removed == len(text) - len(head) - len(tail)  # the marker counts the text cut out
    assert abs(len(head) - len(tail)) <= 1
    assert fitted.prompt_tokens <= 120
    assert fitted.prompt_tokens > 110  # as much as fits is kept
    assert fitted.trimmed == Trimmed(
        "middle", chars(messages), chars(messages) - fitted.prompt_tokens
    )


def test_middle_cuts_the_newest_input_of_a_completion_prompt() -> None:
    prompt = [msg("user", "a" * 50 + "b" * 50)]
    fitted = fit_prompt(prompt, count=chars, limit=PromptLimit(60, "x"), trim="middle", model="m")
    [only] = fitted.messages
    # Searched with the largest possible number (103), written with the real one (69).
    assert only["content"] == "a" * 16 + trim_marker(69) + "b" * 15
    assert fitted.prompt_tokens == 59


def test_middle_refuses_when_the_rest_alone_is_too_long() -> None:
    messages = [msg("system", "s" * 100), msg("user", "u" * 100)]
    with pytest.raises(ContextLengthExceededError) as info:
        fit_prompt(messages, count=chars, limit=PromptLimit(50, "x"), trim="middle", model="m")
    assert info.value.message == (
        "the prompt is 206 tokens and cannot be trimmed to the limit of 50 for model 'm' (x): "
        "the other messages, with the newest input cut to nothing, alone do not fit; shorten "
        "them"
    )


def test_the_approximate_count_is_three_bytes_per_token_plus_four_per_message() -> None:
    assert approximate_tokens([msg("user", "abcdefg")]) == 3 + 4
    assert approximate_tokens([msg("system", ""), msg("user", "é" * 3)]) == 4 + 2 + 4


def test_the_prompt_limit_is_the_tighter_one_and_says_where_it_comes_from() -> None:
    def limit(**kw: object) -> PromptLimit | None:
        fields = {"task": "chat", "max_prompt_tokens": 6000, "context_length": 8192}
        return prompt_limit(**{**fields, "reserve": 512, "trimming": True, **kw})  # type: ignore[arg-type]

    assert limit() == PromptLimit(6000, "routes.chat.context.max_prompt_tokens")
    assert limit(max_prompt_tokens=None) == PromptLimit(
        7680, "a context of 8192 tokens less 512 for the completion"
    )
    assert limit(trimming=False, max_prompt_tokens=None) is None
    assert limit(context_length=None, max_prompt_tokens=None) is None
    assert limit(context_length=6100) == PromptLimit(
        5588, "a context of 6100 tokens less 512 for the completion"
    )


def test_an_unknown_context_grants_the_capped_request() -> None:
    def budget(requested: int | None) -> tuple[int, int | None]:
        granted = plan_budget(
            prompt_tokens=9000, requested=requested, route_cap=256, context_length=None, model="m"
        )
        return granted.max_tokens, granted.clamped_from

    assert budget(None) == (256, None)
    assert budget(100) == (100, None)
    assert budget(1000) == (256, 1000)
