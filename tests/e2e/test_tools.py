"""Tool calling with the official openai client against the real server and SmolLM2: the
calls parse and validate against each tool's schema (the answer is grammar-constrained)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.conftest import Server

WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
ADD: Any = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
}
ASK: Any = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=600) as made:
        yield made  # closed after the test: no socket left for the garbage collector


def assert_valid_weather_call(call: Any) -> dict[str, Any]:
    assert call.type == "function"
    assert call.id.startswith("call_")
    assert call.function.name == "get_weather"
    arguments: dict[str, Any] = json.loads(call.function.arguments)
    assert set(arguments) == {"city", "unit"}
    assert isinstance(arguments["city"], str)
    assert arguments["unit"] in {"celsius", "fahrenheit"}
    return arguments


def test_required_gives_calls_that_follow_the_tools_schema(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="chat", messages=ASK, tools=[WEATHER], tool_choice="required", temperature=0
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls
    for call in choice.message.tool_calls:
        assert_valid_weather_call(call)


def test_a_named_choice_calls_that_tool(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "What is 12 plus 30?"}],
        tools=[WEATHER, ADD],
        tool_choice={"type": "function", "function": {"name": "add"}},
        parallel_tool_calls=False,
        temperature=0,
    )
    [call] = reply.choices[0].message.tool_calls or []
    assert call.function.name == "add"
    arguments = json.loads(call.function.arguments)
    assert set(arguments) == {"a", "b"}
    assert all(isinstance(v, int | float) for v in arguments.values())


def test_none_answers_in_text(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="chat", messages=ASK, tools=[WEATHER], tool_choice="none", max_tokens=16
    )
    assert reply.choices[0].message.tool_calls is None
    assert reply.choices[0].message.content


def test_a_tool_result_in_the_history_is_taken_and_auto_answers(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(
        model="chat", messages=ASK, tools=[WEATHER], tool_choice="required", temperature=0
    )
    calls = first.choices[0].message.tool_calls or []
    history: Any = [
        *ASK,
        first.choices[0].message.model_dump(exclude_none=True),
        *[{"role": "tool", "tool_call_id": c.id, "content": "18 C, sunny"} for c in calls],
    ]
    reply = client.chat.completions.create(
        model="chat", messages=history, tools=[WEATHER], temperature=0, max_tokens=96
    )
    choice = reply.choices[0]
    # auto: a call (valid) or a direct answer, never the raw JSON form.
    if choice.finish_reason == "tool_calls":
        for call in choice.message.tool_calls or []:
            assert_valid_weather_call(call)
    else:
        assert choice.message.tool_calls is None
        assert not (choice.message.content or "").startswith('{"response"')


def test_streamed_calls_arrive_as_tool_call_deltas(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="chat",
        messages=ASK,
        tools=[WEATHER],
        tool_choice="required",
        temperature=0,
        stream=True,
    )
    deltas, finish = [], None
    for chunk in stream:
        if chunk.choices:
            deltas += chunk.choices[0].delta.tool_calls or []
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert [d.index for d in deltas] == list(range(len(deltas)))
    for delta in deltas:
        assert delta.function is not None
        assert delta.function.name == "get_weather"
        assert set(json.loads(delta.function.arguments or "")) == {"city", "unit"}


def test_the_async_client_gets_the_same_calls(server: Server) -> None:
    async def call() -> Any:
        async with openai.AsyncOpenAI(
            base_url=server.v1, api_key="unused", max_retries=0, timeout=600
        ) as aclient:
            return await aclient.chat.completions.create(
                model="chat",
                messages=ASK,
                tools=[WEATHER],
                tool_choice="required",
                temperature=0,
            )

    reply = asyncio.run(call())
    for tool_call in reply.choices[0].message.tool_calls:
        assert_valid_weather_call(tool_call)


def test_a_route_that_denies_tools_says_so(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="summarization", messages=ASK, tools=[WEATHER], tool_choice="required"
        )
    assert refused.value.param == "tools"
    assert "tools: deny in routes.yaml" in refused.value.message


def test_a_tool_choice_naming_an_unknown_tool_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="chat",
            messages=ASK,
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
    assert refused.value.param == "tool_choice"


def test_an_answer_cut_by_max_tokens_shows_no_envelope(client: openai.OpenAI) -> None:
    """Five tokens cannot finish a call: the answer is cut (length) with no content and no
    call, never the constrained JSON it was writing."""
    reply = client.chat.completions.create(
        model="chat", messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=5
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.content is None
    assert choice.message.tool_calls is None
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 5


def test_a_streamed_answer_cut_by_max_tokens_shows_no_envelope(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="chat", messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=5,
        stream=True,
    )  # fmt: skip
    text, calls, finish = "", [], None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            calls += chunk.choices[0].delta.tool_calls or []
            finish = chunk.choices[0].finish_reason or finish
    assert (text, calls, finish) == ("", [], "length")


def test_a_responses_answer_cut_by_max_output_tokens_shows_no_envelope(
    client: openai.OpenAI,
) -> None:
    tool = {"type": "function", **WEATHER["function"]}
    response = client.responses.create(
        model="chat", input="What is the weather in Paris?", tools=[tool],
        tool_choice="required", max_output_tokens=5,
    )  # fmt: skip
    assert response.status == "incomplete"
    assert response.output_text == ""
    assert [item.type for item in response.output] == ["message"]
