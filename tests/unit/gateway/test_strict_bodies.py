"""Request bodies read strictly, errors that echo at most the start of what was sent, and the
500 that names nothing inside: the real create_app (its handlers, parse_body, its exception
handlers) on a runtime that can load nothing, so no model runs; where a body must get past
parsing, its handler's one step after parsing (_respond) is replaced to capture what it was
given (the real server takes the whole corpus in tests/e2e/test_hostile.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litestar import Litestar, Response
from litestar.testing import TestClient

from tests.unit.gateway.test_metrics import ROUTES
from zest.engines import Inventory
from zest.errors import UnknownTaskError, clipped, shown
from zest.gateway.http import _app, create_app
from zest.gateway.serving import Runtime, Settings
from zest.router import Device, find_route, load_routes

# Litestar 2.25 warns, building create_app's routes, of what Litestar 3 will need: not this
# test's subject (as in test_openapi.py).
pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)

HI = [{"role": "user", "content": "Hi"}]
NO_ENGINE = Inventory({"cpu": Device("cpu", frozenset(), "test")}, ())


@pytest.fixture(scope="module")
def client() -> TestClient[Litestar]:
    runtime = Runtime(load_routes(ROUTES), NO_ENGINE)
    # Not entered: the lifespan (the warm start) never runs. TestClient's Host is
    # testserver.local, not a loopback name, so it is allowed here.
    app = create_app(runtime, Settings(allowed_hosts="testserver.local"))
    return TestClient(app)


@pytest.fixture
def given(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What chat/completions passed on after parsing; its answer is a stand-in's 200."""
    bodies: list[Any] = []

    async def capture(*args: Any, **_: Any) -> Response[dict[str, bool]]:
        bodies.append(args[4])  # _respond(request, runtime, task, kind, body, ...)
        return Response({"captured": True}, status_code=200)

    monkeypatch.setattr(_app, "_respond", capture)
    return bodies


def send(client: TestClient[Litestar], raw: bytes | dict[str, Any]) -> tuple[int, dict[str, Any]]:
    content = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    reply = client.post(
        "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
    )
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
        (
            '{"model": "chat"}'.encode("utf-16"),
            "it is not UTF-8 ('utf-8' codec can't decode byte 0xff in position 0: invalid start "
            "byte): send a JSON object in UTF-8",
        ),
    ],
)
def test_what_python_reads_but_json_forbids_is_not_json(
    client: TestClient[Litestar], raw: bytes, message: str
) -> None:
    status, body = send(client, raw)
    assert status == 400
    assert body["error"]["message"] == f"the request body is not valid JSON: {message}"


def test_arrays_and_objects_still_fill_lists_and_nested_models(
    client: TestClient[Litestar], given: list[Any]
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
    assert (status, body) == (200, {"captured": True})
    [parsed] = given
    assert parsed.temperature == 1.0
    assert parsed.stop == ["a", "b"]
    assert parsed.logit_bias == {"7": -100.0}
    dumped = parsed.model_dump(mode="json", exclude_none=True)
    assert dumped["response_format"]["json_schema"]["json_schema"] == {"type": "object"}


def test_a_lone_surrogate_in_a_key_is_named_and_never_echoed(client: TestClient[Litestar]) -> None:
    raw = b'{"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "\\ud800": 1}'
    status, body = send(client, raw)
    assert (status, body["error"]["param"]) == (400, "<key>")
    assert body["error"]["message"].startswith("<key>: holds a lone UTF-16 surrogate")


def test_a_body_not_sent_as_json_is_a_415(client: TestClient[Litestar]) -> None:
    reply = client.post(
        "/v1/chat/completions", content=b"{}", headers={"content-type": "text/plain"}
    )
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


def test_a_500_names_no_internal_exception(
    client: TestClient[Litestar], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_: Any, **__: Any) -> None:
        raise KeyError("secret_internal_key")

    monkeypatch.setattr(_app, "_respond", broken)
    reply = client.post(
        "/v1/chat/completions",
        content=json.dumps({"model": "chat", "messages": HI}).encode(),
        headers={"content-type": "application/json"},
    )
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
