"""The Responses API's input as the chat turns the engine is given (pure translation), and the
exact 400 of an input zest cannot read."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from zest.gateway.http._body_errors import validation_error
from zest.gateway.serving._responses_api import ResponsesRequest


def roles_and_texts(request: ResponsesRequest) -> list[tuple[str, str | None]]:
    return [(m.role, m.content if isinstance(m.content, str) else None) for m in request.messages()]


def test_instructions_are_the_first_turn_a_system_one() -> None:
    request = ResponsesRequest.model_validate(
        {"model": "chat", "input": "Name three colours.", "instructions": "Be brief."}
    )
    assert roles_and_texts(request) == [("system", "Be brief."), ("user", "Name three colours.")]


def test_text_input_without_instructions_is_one_user_turn() -> None:
    request = ResponsesRequest.model_validate({"model": "chat", "input": "Hi"})
    assert roles_and_texts(request) == [("user", "Hi")]


def test_input_items_follow_the_instructions_in_order() -> None:
    request = ResponsesRequest.model_validate(
        {
            "model": "chat",
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": "What is the weather in Paris?"},
                {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            ],
        }
    )
    assert [m.role for m in request.messages()] == ["system", "user", "assistant", "tool"]
    call = request.messages()[2].tool_calls
    assert call is not None
    assert call[0].function.name == "w"
    assert request.messages()[3].content == "sunny"


def refusal(body: dict[str, Any]) -> tuple[str | None, str]:
    """The 400 a body gets: its param and message, as the endpoint answers them."""
    with pytest.raises(ValidationError) as refused:
        ResponsesRequest.model_validate(body)
    error = validation_error(refused.value, ResponsesRequest)
    return error.param, error.message


@pytest.mark.parametrize(
    ("item", "shown"), [({"type": "reasoning", "summary": []}, "'reasoning'"), ({"type": 5}, "5")]
)
def test_an_item_of_an_unknown_type_is_named_with_the_types_zest_reads(
    item: dict[str, Any], shown: str
) -> None:
    body = {"model": "chat", "input": [{"role": "user", "content": "Hi"}, item]}
    assert refusal(body) == (
        "input.1.type",
        f"input.1.type: an item of type {shown} is not one zest reads: send message, "
        "function_call and function_call_output items, or the user's text and images as they "
        "are (strings, input_text and input_image parts)",
    )


def test_an_item_that_is_no_object_nor_text_says_what_an_item_is() -> None:
    assert refusal({"model": "chat", "input": [5]}) == (
        "input.0",
        'input.0: an input item is an object or a string: send a message ({"role": "user", '
        '"content": "..."}), a function_call or function_call_output item, or the user\'s '
        "text, got 5",
    )


def test_an_item_s_own_mistake_is_named_at_its_key() -> None:
    body = {"model": "chat", "input": [{"type": "function_call", "call_id": "c1", "name": "w"}]}
    assert refusal(body) == ("input.0.arguments", "input.0.arguments: missing required parameter")


def test_previous_response_id_says_to_send_the_whole_conversation() -> None:
    """Checked first: a client continuing a response sends only the newest items, whose call
    ids the refusal explains."""
    body = {
        "model": "chat",
        "previous_response_id": "resp_123",
        "input": [{"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
    }
    assert refusal(body) == (
        "previous_response_id",
        "previous_response_id: zest keeps no responses to continue from: send the whole "
        "conversation in input (the earlier turns, and each function_call item before its "
        "function_call_output) and leave previous_response_id out",
    )


def test_a_function_call_output_must_follow_its_call() -> None:
    body = {
        "model": "chat",
        "input": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c2", "output": "sunny"},
        ],
    }
    assert refusal(body) == (
        "input",
        "input: item 2 (function_call_output) answers call_id 'c2', which no function_call "
        "item before it has: send the function_call item (its call_id, name and arguments, "
        "as the answer gave them) before its output",
    )


# -- bare items: the user's content without a message around it (issue 33, item 6) ------------


def test_bare_strings_are_one_user_turn_and_the_text_the_rules_read() -> None:
    """Lemonade's role-less form: every bare item's text, in order, joined with newlines."""
    request = ResponsesRequest.model_validate(
        {"model": "chat", "input": ["alpha at the start", "omega at the end"]}
    )
    assert roles_and_texts(request) == [("user", "alpha at the start\nomega at the end")]
    assert request.routing_inputs().text == "alpha at the start\nomega at the end"
    assert not request.routing_inputs().has_images


def test_bare_content_parts_are_one_user_turn_with_its_image() -> None:
    request = ResponsesRequest.model_validate(
        {
            "model": "chat",
            "input": [
                {"type": "input_text", "text": "describe this picture"},
                {"type": "input_image", "image_url": "https://example.com/cat.png"},
            ],
        }
    )
    (turn,) = request.messages()
    assert turn.role == "user"
    assert turn.routing_text() == "describe this picture"
    assert turn.has_images()
    assert request.routing_inputs().text == "describe this picture"
    assert request.routing_inputs().has_images


def test_a_user_message_is_what_the_rules_read_even_beside_bare_items() -> None:
    """As Lemonade: bare items are read only when no message has the user's role; each run of
    them is still a user turn of its own, in its place."""
    request = ResponsesRequest.model_validate(
        {
            "model": "chat",
            "input": [
                {"role": "user", "content": "please escalate"},
                {"role": "assistant", "content": "Done."},
                "thanks",
                {"type": "input_text", "text": "bye"},
            ],
        }
    )
    assert roles_and_texts(request) == [
        ("user", "please escalate"),
        ("assistant", "Done."),
        ("user", "thanks\nbye"),
    ]
    assert request.routing_inputs().text == "please escalate"


def test_a_bare_output_text_part_is_refused_naming_what_is_read() -> None:
    body = {"model": "chat", "input": [{"type": "output_text", "text": "an old answer"}]}
    assert refusal(body) == (
        "input.0.type",
        "input.0.type: an item of type 'output_text' is not one zest reads: send message, "
        "function_call and function_call_output items, or the user's text and images as they "
        "are (strings, input_text and input_image parts)",
    )
