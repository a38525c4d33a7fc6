"""Anthropic's Messages API request read into the request every endpoint builds (pure): the
chat turns, tools and tool choice, sampling, what the rules read, x-zest-ignored, and the
errors in Anthropic's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from zest.gateway.http._anthropic_shape import anthropic_error
from zest.gateway.serving import MessagesRequest

WEATHER = {"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
PIXEL = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}


def request(messages: list[dict[str, Any]], **fields: Any) -> MessagesRequest:
    return MessagesRequest.model_validate(
        {"model": "chat", "max_tokens": 8, "messages": messages, **fields}
    )


def test_a_tool_round_trip_reads_as_openais_history() -> None:
    body = request(
        [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Let me see."}, CALL]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "rain",
                        "is_error": True,
                    },
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
        system=[{"type": "text", "text": "Be brief."}],
        tools=[WEATHER],
    )
    turns = [turn.as_sent() for turn in body.chat()]
    assert turns == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me see."},
        {
            "role": "assistant",
            "content": json.dumps(
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
            ),
        },
        {"role": "user", "content": "Result of tool call toolu_1 (get_weather): Error: rain"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert body.routing_inputs().text == "And tomorrow?"
    assert body.routing_inputs().has_tools is True


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, ("auto", True)),
        ({"type": "any"}, ("required", True)),
        (
            {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
            ("get_weather", False),
        ),
    ],
)
def test_tool_choice_is_openais(choice: dict[str, Any], expected: tuple[str, bool]) -> None:
    use = request(
        [{"role": "user", "content": "Hi"}], tools=[WEATHER], tool_choice=choice
    ).tool_use()
    assert use is not None
    assert (use.choice, use.parallel) == expected


def test_tool_choice_none_calls_no_tool_but_the_rules_still_see_tools() -> None:
    body = request(
        [{"role": "user", "content": "Hi"}], tools=[WEATHER], tool_choice={"type": "none"}
    )
    assert body.tool_use() is None
    assert body.routing_inputs().has_tools is True


def test_an_image_is_an_image_url_part_and_routable() -> None:
    body = request([{"role": "user", "content": [PIXEL, {"type": "text", "text": "What?"}]}])
    (turn,) = body.chat()
    assert turn.has_images()
    assert json.loads(turn.as_sent()["content_parts"])[0] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBO"},
    }
    assert body.routing_inputs().has_images is True


def test_sampling_and_metadata_are_the_chat_requests() -> None:
    body = request(
        [{"role": "user", "content": "Hi"}],
        temperature=0.4,
        top_k=20,
        stop_sequences=["END"],
        metadata={"user_id": "u-1"},
    )
    sampling = body.sampling()
    assert (sampling.max_tokens, sampling.temperature, sampling.top_k) == (8, 0.4, 20)
    assert sampling.stops() == ("END",)
    assert sampling.metadata == {"user_id": "u-1"}
    assert body.routing_inputs().metadata == {"user_id": "u-1"}
    assert body.ignored() == ["metadata"]  # unless a rule reads it


def test_fields_that_change_nothing_are_named() -> None:
    body = request(
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}],
            }
        ],
        thinking={"type": "enabled", "budget_tokens": 1024},
        output_config={"effort": "low"},
        tools=[{**WEATHER, "defer_loading": True}],
        service_tier="auto",
    )
    assert body.ignored() == [
        "service_tier",
        "thinking",
        "output_config.effort",
        "cache_control",
        "tools.defer_loading",
    ]
    assert (
        request([{"role": "user", "content": "Hi"}], thinking={"type": "disabled"}).ignored() == []
    )


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}],
            "message 0's block 0 (tool_result) answers tool_use_id 'x', which no tool_use block "
            "before it has",
        ),
        (
            [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
            "the last message is an assistant turn",
        ),
        (
            [{"role": "assistant", "content": [PIXEL]}, {"role": "user", "content": "a"}],
            "image blocks are not sent in assistant messages",
        ),
        ([{"role": "user", "content": [PIXEL] * 101}], "101 images: send at most 100"),
    ],
)
def test_a_conversation_zest_cannot_read_is_refused_saying_why(
    messages: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        request(messages)


@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (400, None, "invalid_request_error"),
        (401, "invalid_api_key", "authentication_error"),
        (403, "host_not_allowed", "permission_error"),
        (404, "model_not_found", "not_found_error"),
        (413, None, "request_too_large"),
        (429, "overloaded", "rate_limit_error"),
        (500, None, "api_error"),
        (502, "upstream_rejected", "api_error"),
        (503, "shutting_down", "overloaded_error"),
        (503, "upstream_unavailable", "overloaded_error"),
        (503, "device_unavailable", "api_error"),
        (504, "total_timeout", "timeout_error"),
    ],
)
def test_errors_are_anthropics_type_by_status(status: int, code: str | None, kind: str) -> None:
    body = {"error": {"message": "why", "type": "x", "param": None, "code": code}}
    assert anthropic_error(status, body) == (
        status,
        {
            "type": "error",
            "error": {"type": kind, "message": "why"},
            **({"zest": {"code": code}} if code else {}),
        },
    )
