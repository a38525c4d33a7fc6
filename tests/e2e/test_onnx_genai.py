"""The onnx-genai engine behind the real server, called with the official openai client.

Serves examples/routes/onnx-genai.yaml: the converted SmolLM2 (`make onnx-model`) on ONNX
Runtime GenAI next to the GGUF on llama.cpp.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.conftest import REPO, Server, start_server, stop_server, stream_chat

ROUTES = REPO / "examples" / "routes" / "onnx-genai.yaml"
QUESTION = [{"role": "user", "content": "List the planets of the solar system."}]


@pytest.fixture(scope="module")
def onnx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(ROUTES, tmp_path_factory.mktemp("onnx") / "zest.log")
    yield running
    stop_server(running)


@pytest.fixture
def client(onnx_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=onnx_server.v1, api_key="unused", max_retries=0, timeout=600
    ) as made:
        yield made  # closed after the test: no socket left for the garbage collector


def test_the_startup_log_names_engine_and_backend(onnx_server: Server) -> None:
    line = onnx_server.wait_for_log("model smollm2-onnx loaded:")
    assert "engine=onnx-genai device=cpu" in line
    assert "backend=onnxruntime-genai 0.18.0 (CPUExecutionProvider, 2 threads)" in line
    assert "context=4096" in line


def test_a_chat_answer_says_it_came_from_onnx_genai(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="chat", messages=QUESTION, max_tokens=24, temperature=0
    )
    assert raw.headers["x-zest-route"] == (
        "task=chat; model=smollm2-onnx; device=cpu; engine=onnx-genai"
    )
    reply = raw.parse()
    assert reply.choices[0].message.content
    assert reply.choices[0].finish_reason in {"stop", "length"}
    usage = reply.usage
    assert usage is not None
    assert 0 < usage.completion_tokens <= 24
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_streaming_gives_the_same_greedy_text_and_usage(client: openai.OpenAI) -> None:
    chunks, text = stream_chat(client, "chat", QUESTION, 24, temperature=0)
    whole = client.chat.completions.create(
        model="chat", messages=QUESTION, max_tokens=24, temperature=0
    )
    assert text
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage is not None
    assert whole.usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_max_tokens_and_stop_sequences_hold(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Write three sentences about the sea."}]
    free = client.chat.completions.create(
        model="chat", messages=messages, temperature=0, max_tokens=7
    )
    assert free.usage is not None
    assert (free.usage.completion_tokens, free.choices[0].finish_reason) == (7, "length")
    text = free.choices[0].message.content or ""
    stop = text.split()[2]
    stopped = client.chat.completions.create(
        model="chat", messages=messages, temperature=0, max_tokens=7, stop=[stop]
    )
    assert stopped.choices[0].message.content == text[: text.index(stop)]
    assert stopped.choices[0].finish_reason == "stop"


def test_completions_stream_like_they_answer(client: openai.OpenAI) -> None:
    prompt = "The quick brown fox"
    raw = client.completions.with_raw_response.create(
        model="autocomplete", prompt=prompt, max_tokens=8, temperature=0
    )
    assert raw.headers["x-zest-route"].endswith("engine=onnx-genai")
    stream = client.completions.create(
        model="autocomplete", prompt=prompt, max_tokens=8, temperature=0, stream=True
    )
    streamed = "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
    assert streamed == raw.parse().choices[0].text


def test_the_llamacpp_route_beside_it_says_so(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="chat-gguf", messages=QUESTION, max_tokens=8
    )
    assert raw.headers["x-zest-route"] == (
        "task=chat-gguf; model=smollm2-gguf; device=cpu; engine=llamacpp"
    )


def test_models_lists_the_tasks(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [
        "chat",
        "autocomplete",
        "chat-gguf",
        "chat-either",
    ]


def test_tool_calls_on_onnx_genai_follow_the_tools_schema(client: openai.OpenAI) -> None:
    """The same constrained tool use through ONNX Runtime GenAI's guidance."""
    weather: Any = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 40}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
    reply = client.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "What is the weather in Rome?"}],
        tools=[weather],
        tool_choice="required",
        temperature=0,
    )
    assert reply.choices[0].finish_reason == "tool_calls"
    for call in reply.choices[0].message.tool_calls or []:
        assert call.function.name == "get_weather"
        assert set(json.loads(call.function.arguments)) == {"city"}


def test_logit_bias_is_refused_on_onnx_genai_naming_the_way_out(client: openai.OpenAI) -> None:
    """onnxruntime-genai has no logit bias, and the route has no other attempt: a field that
    would change the answer is a 400 from the planner, naming the attempt that lacks it."""
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="chat", messages=QUESTION, max_tokens=4, logit_bias={"42": -100}
        )
    assert refused.value.param == "logit_bias"
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["message"] == (
        "task 'chat' has no attempt that can honour logit_bias: smollm2-onnx (onnx-genai) "
        "cannot honour logit_bias: remove logit_bias from the request, or route the task to a "
        "model whose engine honours it (docs/policies.md, Engines and their capabilities)"
    )


def test_an_attempt_that_cannot_give_logprobs_is_skipped_for_one_that_can(
    client: openai.OpenAI,
) -> None:
    """The same request gets the same answer whichever attempt it would reach: the planner
    skips onnx-genai (no log probabilities) for the llama.cpp fallback, and says so."""
    raw = client.chat.completions.with_raw_response.create(
        model="chat-either", messages=QUESTION, max_tokens=4, logprobs=True, temperature=0
    )
    reply = raw.parse()
    assert "model=smollm2-gguf;" in raw.headers["x-zest-route"]
    assert reply.choices[0].logprobs is not None
    assert raw.headers["x-zest-fallbacks"].startswith(
        "smollm2-onnx on any device: capability: engine 'onnx-genai' cannot honour logprobs"
    )
    plain = client.chat.completions.with_raw_response.create(
        model="chat-either", messages=QUESTION, max_tokens=4, temperature=0
    )
    assert "model=smollm2-onnx;" in plain.headers["x-zest-route"]
