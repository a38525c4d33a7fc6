"""Request bodies read strictly, errors that echo at most the start of what was sent, and the
500 that names nothing inside: parse_body and the error handlers in a small app wired like
create_app's (the real server takes the whole corpus in tests/e2e/test_hostile.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from litestar import Litestar, Request, Router, post
from litestar.exceptions import HTTPException
from litestar.testing import TestClient

from tests.unit.gateway.test_metrics import ROUTES
from zest.errors import RequestError, UnknownTaskError, clipped, shown
from zest.gateway.http._app import _http_error, _internal_error, _request_error
from zest.gateway.http._body import parse_body
from zest.gateway.serving import ChatRequest
from zest.router import find_route, load_routes

HI = [{"role": "user", "content": "Hi"}]


@post("/chat", status_code=200)
async def chat(request: Request[Any, Any, Any]) -> dict[str, Any]:
    return (await parse_body(request, ChatRequest)).model_dump(mode="json", exclude_none=True)


@post("/broken", status_code=200)
async def broken() -> None:
    raise KeyError("secret_internal_key")


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient[Litestar]]:
    app = Litestar(
        route_handlers=[Router("/v1", route_handlers=[chat, broken])],
        exception_handlers={
            RequestError: _request_error,
            HTTPException: _http_error,
            Exception: _internal_error,
        },
        openapi_config=None,
        logging_config=None,
    )
    with TestClient(app) as made:
        yield made


def send(client: TestClient[Litestar], raw: bytes | dict[str, Any]) -> tuple[int, dict[str, Any]]:
    content = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    reply = client.post("/v1/chat", content=content, headers={"content-type": "application/json"})
    return reply.status_code, reply.json()


BOOL = "Input should be a valid boolean"
INT = "Input should be a valid integer"
NUMBER = "Input should be a valid number"
AT_MOST = "Input should be less than or equal to"
LOOSE = [
    ({"stream": "yes"}, "stream", f"{BOOL}, got 'yes': send true or false"),
    ({"stream": 1}, "stream", f"{BOOL}, got 1: send true or false"),
    ({"logprobs": "false"}, "logprobs", f"{BOOL}, got 'false': send true or false"),
    ({"max_tokens": True}, "max_tokens", f"{INT}, got True: send a whole number"),
    ({"max_tokens": 5.0}, "max_tokens", f"{INT}, got 5.0: send a whole number"),
    ({"n": "2"}, "n", f"{INT}, got '2': send a whole number"),
    (
        {"temperature": "0.5"},
        "temperature",
        "Input should be a number, not a string, got '0.5': send a number",
    ),
    ({"top_p": True}, "top_p", f"{NUMBER}, got True: send a number"),
    ({"logit_bias": {"1": True}}, "logit_bias.1", f"{NUMBER}, got True: send a number"),
    ({"seed": 2**63}, "seed", f"{AT_MOST} 9223372036854775807, got 9223372036854775808"),
    ({"top_k": 2**31}, "top_k", f"{AT_MOST} 2147483647, got 2147483648"),
    ({"logit_bias": {"\u00b2": 1}}, "logit_bias", "logit_bias keys are token ids, got '²'"),
    (
        {"stream_options": {"include_usage": "yes"}},
        "stream_options.include_usage",
        f"{BOOL}, got 'yes': send true or false",
    ),
]


@pytest.mark.parametrize(("extra", "param", "message"), LOOSE)
def test_a_loosely_typed_value_is_a_400_naming_its_field(
    client: TestClient[Litestar], extra: dict[str, Any], param: str, message: str
) -> None:
    status, body = send(client, {"model": "chat", "messages": HI, **extra})
    assert status == 400
    assert body["error"]["param"] == param
    assert body["error"]["message"] == f"{param}: {message}"


def test_json_1e309_is_infinity_and_refused(client: TestClient[Litestar]) -> None:
    for name in ("top_p", "repeat_penalty", "temperature"):
        raw = b'{"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "%s": 1e309}'
        assert send(client, raw % name.encode()) == (
            400,
            {
                "error": {
                    "message": f"{name}: Input should be a finite number, got inf",
                    "type": "invalid_request_error",
                    "param": name,
                    "code": None,
                }
            },
        )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"model": NaN}', "NaN is not a JSON number: send a finite number"),
        (b'{"model": -Infinity}', "-Infinity is not a JSON number: send a finite number"),
        (b'{"seed": ' + b"7" * 5000 + b"}", "an integer of 5000 digits: send at most 64 digits"),
    ],
)
def test_what_python_reads_but_json_forbids_is_not_json(
    client: TestClient[Litestar], raw: bytes, message: str
) -> None:
    status, body = send(client, raw)
    assert status == 400
    assert body["error"]["message"] == f"the request body is not valid JSON: {message}"


def test_arrays_and_objects_still_fill_lists_and_nested_models(
    client: TestClient[Litestar],
) -> None:
    schema = {"name": "a", "schema": {"type": "object"}, "strict": True}
    status, body = send(
        client,
        {
            "model": "chat",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
            "stop": ["a", "b"],
            "temperature": 1,  # a JSON integer is a number
            "stream": True,
            "response_format": {"type": "json_schema", "json_schema": schema},
            "tools": [{"type": "function", "function": {"name": "f", "strict": False}}],
            "logit_bias": {"7": -100},
        },
    )
    assert status == 200, body
    assert body["temperature"] == 1.0
    assert body["response_format"]["json_schema"]["json_schema"] == {"type": "object"}


def test_a_lone_surrogate_in_a_key_is_named_and_never_echoed(client: TestClient[Litestar]) -> None:
    raw = b'{"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "\\ud800": 1}'
    status, body = send(client, raw)
    assert (status, body["error"]["param"]) == (400, "<key>")
    assert body["error"]["message"].startswith("<key>: holds a lone UTF-16 surrogate")


def test_a_body_not_sent_as_json_is_a_415(client: TestClient[Litestar]) -> None:
    reply = client.post("/v1/chat", content=b"{}", headers={"content-type": "text/plain"})
    assert reply.status_code == 415
    assert reply.json()["error"] == {
        "message": "the request body must be JSON: send 'Content-Type: application/json' "
        "(got 'text/plain')",
        "type": "invalid_request_error",
        "param": "content-type",
        "code": "unsupported_media_type",
    }


def test_a_megabyte_value_is_echoed_by_its_start_and_length(client: TestClient[Litestar]) -> None:
    huge = "x" * 1_048_576
    status, body = send(client, {"model": "chat", "messages": HI, "temperature": huge})
    assert status == 400
    assert body["error"]["message"] == (
        f"temperature: Input should be a valid number, unable to parse string as a number, "
        f"got '{'x' * 64}'…(1048576 characters)"
    )
    status, body = send(client, {"model": "chat", "messages": HI, "k" * 100_000: 1})
    assert body["error"]["param"] == "k" * 64 + "…(100000 characters)"


def test_a_megabyte_model_name_is_not_echoed_whole() -> None:
    with pytest.raises(UnknownTaskError) as info:
        find_route("m" * 1_048_576, "chat", load_routes(ROUTES).config)
    assert info.value.message == (
        f"unknown task '{'m' * 64}'…(1048576 characters): use one of autocomplete, chat, "
        "summarization (GET /v1/models lists them)"
    )


def test_shown_and_clipped_keep_short_values_whole() -> None:
    assert shown("chat") == "'chat'"
    assert shown(None) == "None"
    assert shown([1] * 100) == "[" + "1, " * 21 + "…(300 characters)"
    assert clipped("a/b") == "a/b"
    assert clipped("p" * 65) == "p" * 64 + "…(65 characters)"


def test_a_500_names_no_internal_exception(client: TestClient[Litestar]) -> None:
    reply = client.post("/v1/broken")
    assert reply.status_code == 500
    assert reply.json() == {
        "error": {
            "message": "internal error: see the server log",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    assert "KeyError" not in reply.text
    assert "secret_internal_key" not in reply.text


def test_an_assistant_turn_without_content_says_what_it_needs(client: TestClient[Litestar]) -> None:
    status, body = send(client, {"model": "chat", "messages": [{"role": "assistant"}]})
    assert (status, body["error"]["message"]) == (
        400,
        "messages.0: an assistant message needs content or tool_calls",
    )
