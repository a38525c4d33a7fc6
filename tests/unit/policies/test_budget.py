"""Completion budgets: defaults, clamping to the route's cap, and context overflow."""

from __future__ import annotations

import pytest

from zest.errors import BadRequestError, ContextLengthExceededError
from zest.policies import Budget, plan_budget


def budget(prompt: int, requested: int | None, cap: int = 256, context: int = 1024) -> Budget:
    return plan_budget(
        prompt_tokens=prompt, requested=requested, route_cap=cap, context_length=context, model="m"
    )


def test_no_request_takes_the_route_cap() -> None:
    assert budget(100, None) == Budget(100, 256)


def test_no_request_shrinks_to_the_room_left_in_the_context() -> None:
    assert budget(1000, None) == Budget(1000, 24)


def test_a_request_within_the_cap_is_granted() -> None:
    assert budget(100, 32) == Budget(100, 32)


def test_a_request_above_the_cap_is_clamped_and_says_so() -> None:
    assert budget(100, 300) == Budget(100, 256, clamped_from=300)


def test_a_prompt_that_fills_the_context_is_refused_with_the_numbers() -> None:
    with pytest.raises(ContextLengthExceededError) as info:
        budget(1024, None)
    assert info.value.code == "context_length_exceeded"
    assert info.value.message == (
        "this model's maximum context length is 1024 tokens, but the prompt is 1024 tokens "
        "('m'): shorten the messages or the prompt"
    )


def test_prompt_plus_completion_over_the_context_is_refused() -> None:
    with pytest.raises(ContextLengthExceededError) as info:
        budget(900, 200)
    assert info.value.message == (
        "this model's maximum context length is 1024 tokens, but you requested 1100 tokens "
        "(900 in the prompt, 200 for the completion; model 'm'): reduce the prompt or "
        "max_tokens to at most 124"
    )


def test_an_absurd_max_tokens_is_a_bad_request() -> None:
    with pytest.raises(BadRequestError) as info:
        budget(10, 10**9)
    assert info.value.param == "max_tokens"
    assert info.value.message == (
        "max_tokens is 1000000000 but model 'm' has a context of 1024 tokens: ask for at most 1014"
    )


def test_a_prompt_that_fills_the_context_is_the_error_whatever_max_tokens_asks() -> None:
    """Not 'ask for at most -654' (found by tests/e2e/test_explain_serves.py)."""
    with pytest.raises(ContextLengthExceededError) as info:
        budget(1500, 10**5)
    assert info.value.message == (
        "this model's maximum context length is 1024 tokens, but the prompt is 1500 tokens "
        "('m'): shorten the messages or the prompt"
    )
