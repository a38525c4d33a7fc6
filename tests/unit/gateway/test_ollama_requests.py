"""Ollama's request bodies read into the request the OpenAI endpoints build (pure: no server)."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from zest.gateway.http._ollama import ollama_error
from zest.gateway.http._ollama_shapes import ollama_tool_calls
from zest.gateway.serving import OllamaChatRequest, OllamaGenerateRequest, ToolAnswer
from zest.gateway.serving._ollama_options import KeepAlive, parse_keep_alive
from zest.gateway.serving._ollama_requests import ollama_task
from zest.gateway.serving._requests import ImagePart, TextPart

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"


@pytest.mark.parametrize(
    ("name", "task"),
    [("chat", "chat"), ("chat:latest", "chat"), ("chat:7b", "chat:7b"), (":latest", "")],
)
def test_latest_is_the_task_itself(name: str, task: str) -> None:
    assert ollama_task(name) == task


@pytest.mark.parametrize(
    ("sent", "seconds"),
    [
        (0, 0.0),
        ("0", 0.0),
        (300, 300.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("300ms", 0.3),
        ("2.5s", 2.5),
        (-1, None),
        ("-1m", None),
        (1e12, None),  # longer than any server runs: forever
    ],
)
def test_keep_alive_reads_seconds_and_go_durations(sent: object, seconds: float | None) -> None:
    kept = parse_keep_alive(sent)
    assert kept == KeepAlive(seconds)
    assert kept.unload is (seconds == 0)


@pytest.mark.parametrize("sent", ["soon", True, [], "5 minutes", math.inf, "1e999"])
def test_keep_alive_that_is_no_duration_is_refused(sent: object) -> None:
    with pytest.raises(ValueError, match="is not a duration: send seconds"):
        parse_keep_alive(sent)


def test_chat_becomes_openais_messages_sampling_and_tools() -> None:
    request = OllamaChatRequest.model_validate(
        {
            "model": "chat:latest",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather?", "images": [PNG]},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"function": {"name": "w", "arguments": {"city": "Oslo"}}}],
                },
                {"role": "tool", "content": "4 degrees", "tool_name": "w"},
            ],
            "tools": [{"type": "function", "function": {"name": "w", "parameters": {}}}],
            "options": {
                "temperature": 0.4,
                "seed": 7,
                "num_predict": 12,
                "stop": "\n",
                "num_ctx": 1024,
                "num_gpu": 1,
            },
            "format": {"type": "object"},
            "think": True,
        }
    )
    assert request.task() == "chat"
    system, user, assistant, tool = request.chat_messages()
    assert system.role == "system"
    assert isinstance(user.content, list)
    text, image = user.content
    assert isinstance(text, TextPart)
    assert isinstance(image, ImagePart)
    assert text.text == "Weather?"
    assert image.image_url.url == f"data:image/png;base64,{PNG}"
    assert user.has_images()
    assert assistant.tool_calls is not None
    assert json.loads(assistant.tool_calls[0].function.arguments) == {"city": "Oslo"}
    assert (tool.role, tool.name, tool.text()) == ("tool", "w", "4 degrees")
    sampling = request.sampling()
    assert (sampling.temperature, sampling.seed, sampling.max_tokens) == (0.4, 7, 12)
    assert sampling.stops() == ("\n",)
    assert sampling.context_cap() == 1024
    assert sampling.stream is True  # Ollama's default
    assert sampling.response_format is not None
    assert sampling.response_format.constraint() == {"type": "object"}
    use = request.tool_use()
    assert use is not None
    assert use.answer_schema == {"type": "object"}  # format: the direct answer's schema
    assert request.ignored() == ["think", "options.num_gpu"]


@pytest.mark.parametrize(("predict", "tokens"), [(-1, None), (-2, None), (5, 5)])
def test_num_predict_minus_one_is_the_routes_limit(predict: int, tokens: int | None) -> None:
    request = OllamaGenerateRequest.model_validate(
        {"model": "autocomplete", "prompt": "x", "options": {"num_predict": predict}}
    )
    assert request.sampling().max_tokens == tokens


def test_generate_reads_system_images_and_load_only() -> None:
    loads = OllamaGenerateRequest.model_validate({"model": "chat", "keep_alive": 0})
    assert loads.loads_only()
    assert loads.kept() == KeepAlive(0.0)
    asked = OllamaGenerateRequest.model_validate(
        {"model": "chat", "prompt": "Hi", "system": "Be kind.", "format": "json"}
    )
    assert [m.role for m in asked.chat_messages()] == ["system", "user"]
    assert asked.response_format() is not None
    assert asked.sampling().response_format is not None


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"prompt": "x", "raw": True, "system": "s"}, "there is no system turn"),
        ({"prompt": "x", "raw": True, "images": [PNG]}, "raw: true sends the prompt as text"),
        ({"prompt": "x", "template": "{{ .Prompt }}"}, "takes no Go template"),
        ({"prompt": "x", "context": [1, 2]}, "returns no token context"),
        ({"prompt": "x", "images": ["aGVsbG8="]}, "is not a PNG, JPEG, GIF or WebP image"),
        ({"prompt": "x", "images": ["%%%"]}, "image 0 is not base64"),
        ({"prompt": "x", "images": [PNG] * 17}, "at most 16 items"),
        ({"prompt": "x", "format": "yaml"}, 'send "json" or a JSON Schema object'),
        ({"prompt": "x", "options": {"temprature": 1}}, "did you mean 'temperature'?"),
        ({"prompt": "x", "options": {"num_predict": 0}}, "num_predict 0 asks for no tokens"),
        ({"prompt": "x", "keep_alive": "soon"}, "keep_alive 'soon' is not a duration"),
    ],
)
def test_what_generate_cannot_do_is_refused_saying_why(body: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        OllamaGenerateRequest.model_validate({"model": "chat", **body})


def test_tool_calls_come_back_with_arguments_as_objects() -> None:
    answer = ToolAnswer(
        None,
        (
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "w", "arguments": '{"city": "Oslo"}'},
            },
        ),
    )
    assert ollama_tool_calls(answer) == [
        {"function": {"index": 0, "name": "w", "arguments": {"city": "Oslo"}}}
    ]


def test_errors_take_ollamas_shape_and_name_its_endpoints() -> None:
    body = {
        "error": {
            "message": "unknown task 'x': use one of chat (GET /v1/models lists them)",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",
        }
    }
    assert ollama_error(404, body) == (
        404,
        {"error": "unknown task 'x': use one of chat (GET /api/tags lists them)"},
    )
