"""Every field of OpenAI's Responses request is taken: honoured, named as ignored (its value
changes nothing here), or refused saying why zest cannot honour that value."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from openai.types.responses.response_create_params import ResponseCreateParamsStreaming
from pydantic import ValidationError

from zest.gateway.http._body_errors import validation_error
from zest.gateway.serving import IGNORED_FIELDS, ResponsesRequest

BASE = {"model": "chat", "input": "Hi"}


def refusal(**fields: Any) -> tuple[str | None, str]:
    with pytest.raises(ValidationError) as refused:
        ResponsesRequest.model_validate({**BASE, **fields})
    error = validation_error(refused.value, ResponsesRequest)
    return error.param, error.message


def test_every_field_of_openai_s_request_is_read_or_ignored() -> None:
    """The installed openai client's own schema: a field OpenAI adds shows up here."""
    fields = set(typing.get_type_hints(ResponseCreateParamsStreaming))
    taken = set(ResponsesRequest.model_fields) | set(IGNORED_FIELDS)
    assert fields - taken == set()


def test_the_fields_openai_agents_sends_by_default_are_taken_and_named() -> None:
    request = ResponsesRequest.model_validate(
        {
            **BASE,
            "include": [],
            "truncation": "disabled",
            "background": False,
            "text": {"verbosity": "low"},
            "prompt_cache_options": {"ttl": "30m"},
            "image": {"context_compression": "auto"},
            "access_programs": {"cyber": "standard"},
            "context_management": [],
            "stream_options": {"include_obfuscation": False},  # no stream: nothing to obfuscate
            "max_tool_calls": 2,  # no tools: nothing to count
            "top_logprobs": 3,  # no include of the logprobs: none to list
            "conversation": None,  # null is no value
        }
    )
    assert request.ignored() == [
        "include",
        "top_logprobs",
        "max_tool_calls",
        "truncation",
        "stream_options",
        "background",
        "prompt_cache_options",
        "access_programs",
        "image",
        "context_management",
        "text.verbosity",
    ]


def test_what_zest_honours_is_not_named() -> None:
    request = ResponsesRequest.model_validate(
        {
            **BASE,
            "include": ["message.output_text.logprobs", "reasoning.encrypted_content"],
            "top_logprobs": 3,
            "truncation": "auto",
            "stream": True,
            "stream_options": {"include_obfuscation": False},
            "tools": [{"type": "function", "name": "w"}],
            "max_tool_calls": 1,
        }
    )
    assert request.ignored() == []
    sampling = request.sampling()
    assert (sampling.logprob_count(), sampling.trims_to_fit()) == (3, True)
    assert not request.obfuscated()
    tools = request.tool_use()
    assert tools is not None
    assert tools.call_limit() == 1


def test_logprobs_come_with_their_include_and_alternatives_with_top_logprobs() -> None:
    asked = ResponsesRequest.model_validate({**BASE, "include": ["message.output_text.logprobs"]})
    assert asked.sampling().logprob_count() == 0
    assert (
        ResponsesRequest.model_validate({**BASE, "top_logprobs": 5}).sampling().logprob_count()
        is None
    )
    assert ResponsesRequest.model_validate(BASE).obfuscated()  # OpenAI's default


@pytest.mark.parametrize(
    ("fields", "param", "why"),
    [
        (
            {"background": True},
            "background",
            "zest answers while the request is open and keeps no responses to fetch later: "
            "send background: false (stream: true shows the answer as it comes)",
        ),
        (
            {"conversation": "conv_1"},
            "conversation",
            "zest keeps no conversations: send the whole conversation in input and leave "
            "conversation out",
        ),
        (
            {"prompt": {"id": "pmpt_1"}},
            "prompt",
            "zest keeps no prompt templates: send the prompt's text in instructions and input, "
            "and leave prompt out",
        ),
        (
            {"moderation": {"model": "omni-moderation-latest"}},
            "moderation",
            "zest runs no moderation model: leave moderation out",
        ),
        (
            {"context_management": [{"type": "compaction", "compact_threshold": 1000}]},
            "context_management",
            "zest does not compact conversations: leave context_management out (truncation: "
            "auto trims an input too long by the route's context policy)",
        ),
        (
            {"prompt_cache_options": {"prewarm": True}},
            "prompt_cache_options.prewarm",
            "zest answers every request: it does not warm a cache without answering: leave "
            "prewarm out",
        ),
    ],
)
def test_a_value_zest_cannot_honour_is_refused_saying_why(
    fields: dict[str, Any], param: str, why: str
) -> None:
    assert refusal(**fields) == (param, f"{param}: {why}")


def test_an_unknown_include_value_is_refused() -> None:
    param, message = refusal(include=["message.output_text.bogus"])
    assert param == "include.0"
    assert message.startswith("include.0: Input should be 'message.output_text.logprobs', ")


def test_a_misspelt_field_is_matched_to_its_own_name() -> None:
    assert refusal(includes=[]) == (
        "includes",
        "includes: unknown parameter: did you mean 'include'?",
    )
    assert refusal(truncate="auto") == (
        "truncate",
        "truncate: unknown parameter: did you mean 'truncation'?",
    )
