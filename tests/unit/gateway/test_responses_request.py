"""The Responses API's input as the chat turns the engine is given (pure translation)."""

from __future__ import annotations

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
