"""Properties of completion budgets: what is granted fits the context and the route's cap."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zest.errors import BadRequestError, ContextLengthExceededError
from zest.policies import Budget, plan_budget, prompt_limit

FAST = settings(max_examples=200, deadline=None)

tokens = st.integers(min_value=0, max_value=5000)
positive = st.integers(min_value=1, max_value=5000)


def budget(prompt: int, requested: int | None, cap: int, context: int | None) -> Budget | Exception:
    try:
        return plan_budget(
            prompt_tokens=prompt,
            requested=requested,
            route_cap=cap,
            context_length=context,
            model="m",
        )
    except (BadRequestError, ContextLengthExceededError) as exc:
        return exc


@FAST
@given(tokens, st.none() | positive, positive, st.none() | positive)
def test_a_grant_fits_the_context_the_cap_and_the_request(
    prompt: int, requested: int | None, cap: int, context: int | None
) -> None:
    granted = budget(prompt, requested, cap, context)
    if isinstance(granted, Exception):
        assert context is not None  # an unknown context is the upstream's to enforce
        return
    assert granted.prompt_tokens == prompt
    assert 1 <= granted.max_tokens <= cap
    if requested is not None:
        assert granted.max_tokens <= requested
        assert granted.clamped_from == (requested if requested > cap else None)
    else:
        assert granted.clamped_from is None
    if context is not None:
        assert prompt + granted.max_tokens <= context


@FAST
@given(tokens, st.none() | positive, positive, positive)
def test_refusals_happen_only_when_nothing_fits(
    prompt: int, requested: int | None, cap: int, context: int
) -> None:
    granted = budget(prompt, requested, cap, context)
    wanted = cap if requested is None else min(requested, cap)
    room = context - prompt
    if isinstance(granted, ContextLengthExceededError):  # a BadRequestError itself
        assert room < 1 or (requested is not None and wanted > room)
    elif isinstance(granted, BadRequestError):
        assert requested is not None
        assert requested > context
    elif isinstance(granted, Exception):
        raise AssertionError(f"unexpected {granted!r}")
    elif requested is None:
        assert granted.max_tokens == min(cap, room)
    else:
        assert granted.max_tokens == wanted


@FAST
@given(
    st.none() | positive,
    st.none() | positive,
    st.integers(min_value=0, max_value=5000),
    st.booleans(),
)
def test_the_prompt_limit_is_the_smallest_that_applies(
    max_prompt: int | None, context: int | None, reserve: int, trimming: bool
) -> None:
    limit = prompt_limit(
        task="chat",
        max_prompt_tokens=max_prompt,
        context_length=context,
        reserve=reserve,
        trimming=trimming,
    )
    candidates = [] if max_prompt is None else [max_prompt]
    if trimming and context is not None and context > reserve:
        candidates.append(context - reserve)
    if not candidates:
        assert limit is None
    else:
        assert limit is not None
        assert limit.tokens == min(candidates) >= 1
