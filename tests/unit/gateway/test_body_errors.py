"""Validation errors in the client's words: its own key path (no union members such as
`list[TextPart]` or `str`), one message for a union ("send a string or a list"), a content part
of a kind zest does not take named as such, and what to send instead (issue 14's newcomer
stumbles)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from zest.gateway.http._body_errors import validation_error
from zest.gateway.serving import ChatRequest, ResponsesRequest

HI = [{"role": "user", "content": "Hi"}]


def message(schema: type[BaseModel], body: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as invalid:
        schema.model_validate(body)
    return validation_error(invalid.value, schema).message


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio", "data": "x"}]}]},
            "messages.0.content.0.type: a content part of type 'input_audio' is not one zest "
            'takes: send text parts ({"type": "text", "text": "..."}), or image_url parts for '
            "a route whose model reads images",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages.0.content.0.image_url.url: missing required parameter",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "b": 1}]}]},
            "messages.0.content.0: a part with 'b' is not one zest takes: send text parts "
            '({"type": "text", "text": "..."}), or image_url parts for a route whose model '
            "reads images",
        ),
        (
            {"messages": [{"role": "user", "content": 5}]},
            "messages.0.content: send a string or a list of content parts, got 5",
        ),
        ({"messages": HI, "stop": 5}, "stop: send a string or a list (a JSON array), got 5"),
        (
            {"messages": HI, "tools": "x"},
            "tools: Input should be a valid list, got 'x': send a list (a JSON array)",
        ),
        (
            {"messages": HI, "stream_options": {"include_usage": "yes"}},
            "stream_options.include_usage: Input should be a valid boolean, got 'yes': send "
            "true or false",
        ),
        (
            {"messages": HI, "tool_choice": "always"},
            "tool_choice: Input should be 'auto', 'none' or 'required', got 'always'",
        ),
    ],
    ids=["audio part", "image part", "part key", "content", "union", "list", "boolean", "literal"],
)
def test_chat_bodies(body: dict[str, Any], expected: str) -> None:
    assert message(ChatRequest, {"model": "chat", **body}) == expected


def test_a_union_of_the_responses_api_is_one_message() -> None:
    assert message(ResponsesRequest, {"model": "chat", "input": 5}) == (
        "input: send a list (a JSON array) or a string, got 5"
    )
