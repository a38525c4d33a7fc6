"""Tool use in the constrained form: the schema each tool_choice gives, and reading answers
back into OpenAI's tool_calls (pure: the e2e tests run it on the real model)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from zest.errors import BadRequestError
from zest.gateway.serving import ChatMessage, ChatRequest, tool_use_for
from zest.gateway.serving._tools import NamedToolChoice, Tool

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
TOOLS = [
    Tool.model_validate(
        {"type": "function", "function": {"name": "weather", "parameters": WEATHER}}
    ),
    Tool.model_validate({"type": "function", "function": {"name": "time"}}),
]


def choose(name: str) -> NamedToolChoice:
    return NamedToolChoice.model_validate({"type": "function", "function": {"name": name}})


def schema_of(choice: Any, **extra: Any) -> dict[str, Any]:
    use = tool_use_for(TOOLS, choice, None, **extra)
    assert use is not None
    constraint = use.response_format().constraint()
    assert constraint is not None
    return constraint


def test_auto_may_call_any_tool_or_answer() -> None:
    calls, answer = schema_of("auto")["anyOf"]
    names = [
        item["properties"]["name"]["const"]
        for item in calls["properties"]["tool_calls"]["items"]["anyOf"]
    ]
    assert names == ["weather", "time"]
    assert answer["properties"] == {"response": {"type": "string"}}


def test_required_must_call_and_a_named_choice_calls_that_tool_only() -> None:
    required = schema_of("required")
    assert required["required"] == ["tool_calls"]
    named = schema_of(
        NamedToolChoice.model_validate({"type": "function", "function": {"name": "weather"}})
    )
    item = named["properties"]["tool_calls"]["items"]
    assert item["properties"] == {"name": {"const": "weather"}, "arguments": WEATHER}


def test_parallel_tool_calls_false_allows_one_call() -> None:
    assert schema_of("required", parallel=False)["properties"]["tool_calls"]["maxItems"] == 1


def test_none_and_no_tools_use_no_tools() -> None:
    assert tool_use_for(TOOLS, "none", None) is None
    assert tool_use_for(None, None, None) is None
    with pytest.raises(BadRequestError) as refused:
        tool_use_for(None, "required", None)
    assert refused.value.param == "tool_choice"
    with pytest.raises(BadRequestError) as unknown:
        tool_use_for(
            TOOLS,
            NamedToolChoice.model_validate({"type": "function", "function": {"name": "x"}}),
            None,
        )
    assert "use one of weather, time" in unknown.value.message


def test_a_client_response_format_shapes_the_direct_answer() -> None:
    use = tool_use_for(TOOLS, "auto", {"type": "object"})
    assert use is not None
    constraint = use.response_format().constraint()
    assert constraint is not None
    assert constraint["anyOf"][1]["properties"]["response"] == {"type": "object"}
    assert use.read('{"response": {"a": 1}}').content == '{"a": 1}'


def test_reading_calls_gives_openai_tool_calls_without_repeats() -> None:
    use = tool_use_for(TOOLS, "auto", None)
    assert use is not None
    said = {"tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}}] * 3}
    answer = use.read(json.dumps(said))
    assert answer.finish_reason == "tool_calls"
    assert answer.content is None
    [call] = answer.calls
    assert call["id"].startswith("call_")
    assert call["function"] == {"name": "weather", "arguments": '{"city": "Oslo"}'}


def test_a_direct_answer_is_content() -> None:
    use = tool_use_for(TOOLS, "auto", None)
    assert use is not None
    assert use.read('{"response": "Hello"}').content == "Hello"


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ('{"response": "Hel', "Hel"),
        ('{"response": "Caf\\u00', "Caf"),  # a cut escape is no text yet
        ('{"response": "Hello"', "Hello"),
        ('{"response": {"city": "Os', '{"city": "Os'),  # the client's format, cut
        ("{", None),
        ('{"tool_calls', None),
        ('{"tool_calls": [{"name": "weather", "argu', None),
    ],
)
def test_a_cut_answer_never_shows_the_envelope(text: str, content: str | None) -> None:
    """max_tokens cut the constrained JSON: what the answer said so far, never zest's
    envelope as text; the engine's finish_reason (length) stands."""
    use = tool_use_for(TOOLS, "auto", None)
    assert use is not None
    answer = use.read(text)
    assert (answer.content, answer.calls, answer.finish_reason) == (content, (), None)


def test_a_cut_answer_keeps_the_calls_it_completed() -> None:
    use = tool_use_for(TOOLS, "required", None)
    assert use is not None
    answer = use.read(
        '{"tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}} , {"name": "ti'
    )
    [call] = answer.calls
    assert call["function"] == {"name": "weather", "arguments": '{"city": "Oslo"}'}
    assert (answer.content, answer.finish_reason) == (None, None)


def test_max_tool_calls_bounds_the_calls_of_an_answer() -> None:
    assert schema_of("required", max_calls=2)["properties"]["tool_calls"]["maxItems"] == 2
    assert schema_of("required", max_calls=99)["properties"]["tool_calls"]["maxItems"] == 4
    assert tool_use_for(TOOLS, "auto", None, max_calls=0) is None
    with pytest.raises(BadRequestError) as refused:
        tool_use_for(TOOLS, "required", None, max_calls=0)
    assert (refused.value.param, refused.value.message) == (
        "max_tool_calls",
        "max_tool_calls is 0, so no tool may be called, but tool_choice asks for a call: "
        "raise max_tool_calls or leave tool_choice out",
    )


def test_history_is_written_in_the_form_the_model_answers_in() -> None:
    request = ChatRequest.model_validate(
        {
            "model": "chat",
            "messages": [
                {"role": "user", "content": "Weather in Oslo?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "12 C, rain"},
            ],
            "tools": [t.model_dump() for t in TOOLS],
        }
    )
    sent = [m.as_sent() for m in request.messages]
    assert sent[1] == {
        "role": "assistant",
        "content": '{"tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}}]}',
    }
    assert sent[2] == {"role": "user", "content": "Result of tool call call_1: 12 C, rain"}


def test_only_an_assistant_turn_that_calls_tools_may_have_no_content() -> None:
    with pytest.raises(ValueError, match="a user message needs content"):
        ChatMessage.model_validate({"role": "user", "content": None})


def pointed(root: dict[str, Any], ref: str) -> Any:
    target: Any = root
    for part in ref.removeprefix("#/").split("/"):
        target = target[int(part)] if isinstance(target, list) else target[part]
    return target


@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_a_tools_local_references_point_into_its_own_parameters(choice: str) -> None:
    """The parameters sit inside the envelope: their `#/$defs/...` are rewritten to where
    they now are, and resolve to the tool's own definitions."""
    place = {"type": "object", "properties": {"city": {"type": "string"}}}
    parameters = {
        "type": "object",
        "properties": {"from": {"$ref": "#/$defs/place"}, "to": {"$ref": "#/$defs/place"}},
        "$defs": {"place": place},
    }
    tools = [
        Tool.model_validate({"type": "function", "function": {"name": "time"}}),
        Tool.model_validate(
            {"type": "function", "function": {"name": "route", "parameters": parameters}}
        ),
    ]
    use = tool_use_for(tools, choose("route") if choice == "named" else choice, None)
    assert use is not None
    envelope = use.response_format().constraint()
    assert envelope is not None
    text = json.dumps(envelope)
    refs = [part.split('"')[0] for part in text.split('"$ref": "')[1:]]
    assert len(refs) == 2
    for ref in refs:
        assert ref.endswith("/properties/arguments/$defs/place")
        assert pointed(envelope, ref) == place


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def tool(name: str, parameters: dict[str, Any]) -> Tool:
    return Tool.model_validate(
        {"type": "function", "function": {"name": name, "parameters": parameters}}
    )


@pytest.mark.parametrize("choice", ["auto", "required", "one"])
def test_parameters_at_the_depth_limit_are_constrained_whatever_the_envelope_adds(
    choice: str,
) -> None:
    """issue 32: parameters 13 to 16 deep were a 500 (the envelope's levels were counted
    against the client's 16) that leaked the request's slot."""
    tools = [tool("one", nested(16)), tool("two", nested(16))]
    picked: Any = choose("one") if choice == "one" else choice
    use = tool_use_for(tools, picked, nested(16))
    assert use is not None
    constraint = use.response_format().constraint()
    assert constraint is not None
    # Each tool called, and (auto) the client's answer format beside the calls.
    expected = {"auto": 3, "required": 2, "one": 1}[choice]
    assert json.dumps(constraint).count(json.dumps(nested(16))) == expected


def test_the_tools_together_are_bounded_as_the_one_grammar_they_make() -> None:
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(1100)}}
    with pytest.raises(BadRequestError) as refused:
        tool_use_for([tool("one", wide), tool("two", wide)], "auto", None)
    assert refused.value.param == "tools"
    assert refused.value.message == (
        "tools.1.function.parameters.properties.p898: the schema has more than zest's limit of "
        "2000 subschemas: split the task or simplify it (zest's limits: "
        "docs/structured-outputs.md) (the tools' parameters and the answer's format are "
        "counted together: they make one grammar)"
    )


def test_a_responses_request_names_its_own_paths() -> None:
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(1999)}}
    with pytest.raises(BadRequestError) as refused:
        tool_use_for(
            [tool("one", {"type": "object"})],
            "auto",
            wide,
            parameters_at="tools.{index}.parameters",
            answer_at="text.format.schema",
        )
    assert refused.value.message.startswith(
        "text.format.schema.properties.p1998: the schema has more than zest's limit"
    )
