"""/v1/responses (OpenAI's Responses API) with the official openai client on the real server:
text in and out, instructions, streaming events, tools and text.format."""

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
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=600) as made:
        yield made  # closed after the test: no socket left for the garbage collector


def test_text_in_text_out_with_instructions_and_usage(client: openai.OpenAI) -> None:
    raw = client.responses.with_raw_response.create(
        model="chat",
        input="Name three colours.",
        instructions="Answer in one short sentence.",
        max_output_tokens=32,
        temperature=0,
        store=False,
    )
    assert raw.headers["x-zest-ignored"] == "store"
    assert raw.headers["x-zest-route"].startswith("task=chat; model=smollm2;")
    response = raw.parse()
    assert response.status in {"completed", "incomplete"}
    assert response.output_text
    assert response.output[0].type == "message"
    usage = response.usage
    assert usage is not None
    assert 0 < usage.output_tokens <= 32
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    # The instructions are the system turn: the same prompt as the chat API's.
    chat = client.chat.completions.create(
        model="chat",
        messages=[
            {"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": "Name three colours."},
        ],
        max_tokens=1,
    )
    assert chat.usage is not None
    assert chat.usage.prompt_tokens == usage.input_tokens
    # Not the answers' text: two greedy runs of one prompt can part at a near-tie (docs/serving.md,
    # Prefix reuse), and on CI this one did. tests/unit/gateway/test_responses_request.py
    # checks the turns themselves.


def test_the_stream_is_typed_events_ending_with_the_whole_response(
    client: openai.OpenAI,
) -> None:
    whole = client.responses.create(
        model="chat", input="Name a fruit.", max_output_tokens=16, temperature=0
    )
    stream = client.responses.create(
        model="chat", input="Name a fruit.", max_output_tokens=16, temperature=0, stream=True
    )
    kinds, text, final = [], "", None
    for event in stream:
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
        if event.type in {"response.completed", "response.incomplete"}:  # cut at 16 tokens
            final = event.response
    assert kinds[:3] == [
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert final is not None
    assert kinds[-1] == f"response.{final.status}"
    assert "response.output_text.delta" in kinds
    assert final is not None
    assert text == final.output_text == whole.output_text


def test_tools_give_function_calls_and_take_their_outputs(client: openai.OpenAI) -> None:
    first = client.responses.create(
        model="chat", input="What is the weather in Oslo?", tools=[WEATHER],
        tool_choice="required", temperature=0,
    )  # fmt: skip
    calls = [item for item in first.output if item.type == "function_call"]
    assert calls
    for call in calls:
        assert call.name == "get_weather"
        assert set(json.loads(call.arguments)) == {"city"}
    history: Any = [
        {"role": "user", "content": "What is the weather in Oslo?"},
        *[call.model_dump(exclude_none=True) for call in calls],
        *[{"type": "function_call_output", "call_id": c.call_id, "output": "12 C"} for c in calls],
    ]
    second = client.responses.create(
        model="chat", input=history, tools=[WEATHER], max_output_tokens=48, temperature=0
    )
    assert second.output


def test_a_streamed_tool_call_arrives_whole(client: openai.OpenAI) -> None:
    stream = client.responses.create(
        model="chat", input="Weather in Rome?", tools=[WEATHER], tool_choice="required",
        temperature=0, stream=True,
    )  # fmt: skip
    done = [e for e in stream if e.type == "response.function_call_arguments.done"]
    assert done
    assert all(set(json.loads(e.arguments)) == {"city"} for e in done)


def test_text_format_constrains_the_answer(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}},
        "required": ["city"],
        "additionalProperties": False,
    }
    response = client.responses.create(
        model="chat",
        input="Name a city, as JSON.",
        text={"format": {"type": "json_schema", "name": "city", "schema": schema}},
        temperature=0,
    )
    assert set(json.loads(response.output_text)) == {"city"}


def test_the_async_client(server: Server) -> None:
    async def run() -> str:
        async with openai.AsyncOpenAI(base_url=server.v1, api_key="u", max_retries=0) as aclient:
            response = await aclient.responses.create(
                model="chat", input="Say hello.", max_output_tokens=8
            )
            return response.output_text

    assert asyncio.run(run())


def test_previous_response_id_is_refused_saying_why(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="chat", input="Hi", previous_response_id="resp_1")
    assert refused.value.param == "previous_response_id"


def test_the_fields_clients_send_by_default_are_taken_and_named(client: openai.OpenAI) -> None:
    """openai-agents sends include: [] on every request; none of these may be a 400."""
    raw = client.responses.with_raw_response.create(
        model="chat", input="Say hi.", max_output_tokens=4, include=[], truncation="disabled",
        background=False, store=False, user="u-1", service_tier="auto",
        reasoning={"effort": "low"}, prompt_cache_key="k", safety_identifier="s",
        prompt_cache_retention="24h", text={"verbosity": "low"},
    )  # fmt: skip
    assert raw.headers["x-zest-ignored"] == (
        "store, user, safety_identifier, prompt_cache_key, prompt_cache_retention, "
        "service_tier, reasoning, include, truncation, background, text.verbosity"
    )
    assert raw.parse().output_text


def test_background_is_refused_saying_why(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="chat", input="Hi", background=True)
    assert refused.value.param == "background"
    assert "zest answers while the request is open" in refused.value.message


def test_logprobs_come_with_the_text_when_included(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="chat", input="Name a colour.", max_output_tokens=6, temperature=0,
        include=["message.output_text.logprobs"], top_logprobs=2,
    )  # fmt: skip
    part = response.output[0].content[0]  # type: ignore[union-attr]
    assert part.type == "output_text"
    assert part.logprobs
    assert "".join(p.token for p in part.logprobs) == part.text
    assert all(len(p.top_logprobs) == 2 and p.logprob <= 0 for p in part.logprobs)
    streamed = client.responses.create(
        model="chat", input="Name a colour.", max_output_tokens=6, temperature=0,
        include=["message.output_text.logprobs"], top_logprobs=2, stream=True,
    )  # fmt: skip
    done = [e for e in streamed if e.type == "response.output_text.done"]
    assert [len(e.logprobs) for e in done] == [len(part.logprobs)]


def test_stream_deltas_are_obfuscated_unless_declined(client: openai.OpenAI) -> None:
    def deltas(**extra: Any) -> list[Any]:
        stream = client.responses.create(
            model="chat", input="Name a fruit.", max_output_tokens=8, stream=True, **extra
        )
        return [e for e in stream if e.type == "response.output_text.delta"]

    padded = deltas()
    assert padded
    assert all((len(e.delta.encode()) + len(e.obfuscation)) % 32 == 0 for e in padded)
    plain = deltas(stream_options={"include_obfuscation": False})
    assert plain
    assert all(not hasattr(e, "obfuscation") for e in plain)


def test_max_tool_calls_bounds_the_calls(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="chat", input="What is the weather in Oslo, Rome and Paris?", tools=[WEATHER],
        tool_choice="required", max_tool_calls=1, temperature=0,
    )  # fmt: skip
    assert [item.type for item in response.output] == ["function_call"]
    assert response.max_tool_calls == 1
    none = client.responses.create(
        model="chat", input="What is the weather in Oslo?", tools=[WEATHER], max_tool_calls=0,
        max_output_tokens=8,
    )  # fmt: skip
    assert [item.type for item in none.output] == ["message"]
