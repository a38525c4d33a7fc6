"""One attempt's prompt and budget (policies.fit_attempt): what serving runs on each attempt and
explain prints, the per-attempt limit of an overflow fallback, and explain's wording of it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from zest.errors import BadRequestError, ContextLengthExceededError
from zest.policies import (
    AttemptFit,
    AttemptTerms,
    UniformMeasure,
    attempt_terms,
    describe_fit,
    fit_attempt,
    uniform_prompt,
)
from zest.router import RouteConfig

Message = Mapping[str, str]


@dataclass(frozen=True)
class Words:
    """A measure for the tests: one token per word, two per message for the template."""

    exact: bool = True
    token_bytes: int | None = None

    def count(self, messages: Sequence[Message]) -> int:
        return sum(len(m["content"].split()) + 2 for m in messages)

    def floor(self, messages: Sequence[Message]) -> int | None:
        return None


def route(**fields: Any) -> RouteConfig:
    return RouteConfig.model_validate({"kind": "chat", "model": "m", "max_tokens": 256, **fields})


def terms(
    given: RouteConfig, *, model: str = "m", window: int | None = 2048, requested: int | None = None
) -> AttemptTerms:
    return attempt_terms("t", given, model, window, requested=requested)


def fit(
    tokens: int, given: RouteConfig | None = None, **options: Any
) -> tuple[AttemptFit, AttemptTerms]:
    held = terms(given or route(), **options)
    return fit_attempt(uniform_prompt(tokens), measure=UniformMeasure(), terms=held), held


def explained(tokens: int, given: RouteConfig | None = None, **options: Any) -> str:
    found, held = fit(tokens, given, **options)
    return describe_fit(found, held, exact=False)


def refusal(tokens: int, given: RouteConfig, **options: Any) -> str:
    with pytest.raises(ContextLengthExceededError) as info:
        fit(tokens, given, **options)
    return info.value.message


def test_a_prompt_that_fits_says_how_much_answer_it_leaves() -> None:
    assert explained(100) == "fits (up to 256 tokens of answer)"
    assert explained(1900) == "fits, but the context of 2048 leaves only 148 tokens of answer"
    assert explained(100, requested=16) == "fits (up to 16 tokens of answer)"
    assert explained(100, window=None) == (
        "fits (up to 256 tokens of answer; the upstream's undeclared context has the last word)"
    )


def test_a_prompt_over_the_route_s_limit_is_refused_with_the_numbers() -> None:
    assert refusal(851, route(context={"max_prompt_tokens": 200})) == (
        "the prompt is 851 tokens, over the limit of 200 for model 'm' "
        "(routes.t.context.max_prompt_tokens): shorten the messages or the prompt"
    )
    assert refusal(5000, route()) == (
        "this model's maximum context length is 2048 tokens, but the prompt is 5000 tokens "
        "('m'): shorten the messages or the prompt"
    )


def test_one_message_cannot_be_trimmed_by_turns() -> None:
    """The issue's case: one 584-token message on max_prompt_tokens 200, trim by turns. The
    server answers 400; explain said 'trimmed … about 384 cut'."""
    given = route(context={"max_prompt_tokens": 200, "on_overflow": "trim", "trim": "turns"})
    assert refusal(584, given) == (
        "the prompt is 584 tokens and cannot be trimmed to the limit of 200 for model 'm' "
        "(routes.t.context.max_prompt_tokens): the system prompt(s) and the newest turn alone "
        "do not fit; shorten them"
    )


def test_trimming_the_middle_says_how_much_it_cut() -> None:
    given = route(context={"on_overflow": "trim", "trim": "middle"})
    found, held = fit(3000, given)
    assert found.fitted.prompt_tokens <= 1792
    assert found.fitted.trimmed is not None
    assert describe_fit(found, held, exact=False) == (
        "trimmed (middle): 3000 tokens, over the limit of 1792 (a context of 2048 tokens less "
        f"256 for the completion): about {found.fitted.trimmed.trimmed_tokens} cut"
    )


def test_trimming_turns_says_how_many_messages_went() -> None:
    given = route(context={"max_prompt_tokens": 12, "on_overflow": "trim"})
    chat = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "one two three"},
        {"role": "assistant", "content": "four five"},
        {"role": "user", "content": "six"},
    ]
    held = terms(given)
    found = fit_attempt(chat, measure=Words(), terms=held)
    assert found.fitted.messages == (chat[0], chat[3])
    assert describe_fit(found, held) == (
        "trimmed (turns): 16 tokens, over the limit of 12 (routes.t.context.max_prompt_tokens): "
        "9 cut (2 message(s) dropped)"
    )


def test_the_request_s_max_tokens_is_what_trimming_leaves_room_for() -> None:
    given = route(context={"on_overflow": "trim", "trim": "middle"})
    found, _ = fit(3000, given, requested=48)
    assert found.limit is not None
    assert found.limit.tokens == 2000
    assert found.budget.max_tokens == 48


def test_a_max_tokens_beyond_the_context_is_a_bad_request_not_an_overflow() -> None:
    with pytest.raises(BadRequestError) as info:
        fit(10, requested=5000)
    assert not isinstance(info.value, ContextLengthExceededError)
    assert info.value.param == "max_tokens"


def test_an_empty_prompt_counted_by_the_model_s_tokenizer_is_refused() -> None:
    held = terms(route())
    with pytest.raises(BadRequestError) as info:
        fit_attempt(uniform_prompt(0), measure=UniformMeasure(exact=True), terms=held)
    assert info.value.message == "the prompt is empty: send some text"
    assert info.value.param == "prompt"


# --- the overflow fallback is judged per attempt ------------------------------------------------


def test_the_route_s_max_prompt_tokens_binds_its_own_model_only() -> None:
    """A fallback to another model is judged by that model's window: on_overflow: fallback
    reaches the bigger model it exists for."""
    given = route(
        context={"max_prompt_tokens": 200, "on_overflow": "fallback"}, fallback=[{"model": "big"}]
    )
    assert terms(given).max_prompt_tokens == 200
    assert terms(given, model="big").max_prompt_tokens is None
    assert refusal(584, given).startswith("the prompt is 584 tokens, over the limit of 200 ")
    found, _ = fit(584, given, model="big", window=32768)
    assert (found.fitted.prompt_tokens, found.budget.max_tokens) == (584, 256)


def test_a_fallback_beyond_its_own_window_still_overflows() -> None:
    given = route(context={"max_prompt_tokens": 200, "on_overflow": "fallback"})
    assert refusal(5000, given, model="big", window=4096) == (
        "this model's maximum context length is 4096 tokens, but the prompt is 5000 tokens "
        "('big'): shorten the messages or the prompt"
    )


def test_a_trimming_fallback_trims_to_its_own_window() -> None:
    given = route(context={"max_prompt_tokens": 200, "on_overflow": "trim", "trim": "middle"})
    own, _ = fit(3000, given)
    bigger, _ = fit(3000, given, model="big", window=4096)
    assert own.limit is not None
    assert own.limit.tokens == 200
    assert bigger.limit is not None
    assert bigger.limit.tokens == 4096 - 256
