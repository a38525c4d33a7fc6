"""What every answer of zest must be, whatever it was sent: the checks the hostile corpus
(test_hostile.py) and the schema fuzzer (test_fuzz.py) share."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# What an error message may never show: the server's insides.
INTERNAL = (
    "Traceback",
    "Exception",
    "KeyError",
    "ValueError",
    "TypeError",
    "AssertionError",
    "RecursionError",
    "AttributeError",
    "ImproperlyConfigured",
    "pydantic",
    "litestar",
    "msgspec",
    " object at 0x",
)
MAX_MESSAGE = 500  # characters: a message quotes at most the start of what was sent
DOCUMENTED_5XX = {503, 504}  # no device or model now; a route's timeout ran out


def check_error(status: int, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """An error answer: no 5xx but 503/504, the shape of the endpoint's dialect (OpenAI's,
    Anthropic's, MCP's JSON-RPC), a short message naming nothing internal, the request's id.
    Returns the error object, in OpenAI's fields."""
    assert status < 500 or status in DOCUMENTED_5XX, body[:600]
    assert headers["content-type"].startswith("application/json"), headers
    assert headers["x-request-id"].startswith("req_")
    parsed = json.loads(body)
    if parsed.get("type") == "error" or "jsonrpc" in parsed:
        return _check_message(_dialect_error(parsed))
    assert set(parsed) <= {"error", "zest"}, parsed
    if "zest" in parsed:  # refused after a task's rules chose its route: the decision, as told
        decision = parsed["zest"]
        assert headers["x-zest-rule"] == (decision["matched_rule"] or "default"), decision
        assert headers["x-zest-route"].startswith(f"task={decision['route_to']}"), headers
    error: dict[str, Any] = parsed["error"]
    assert {"message", "type", "param", "code"} <= set(error), error
    return _check_message(error)


def _dialect_error(parsed: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's {"type": "error", "error": {"type", "message"}, "zest": {code, param}} or
    MCP's JSON-RPC error, read into OpenAI's fields."""
    if "jsonrpc" in parsed:
        assert set(parsed) == {"jsonrpc", "id", "error"}, parsed
        error = parsed["error"]
        assert isinstance(error["code"], int), error
        data = error.get("data", {})
        return {"message": error["message"], "type": data.get("type", "invalid_request_error"),
                "param": None, "code": data.get("code")}  # fmt: skip
    assert set(parsed) <= {"type", "error", "zest"}, parsed
    assert set(parsed["error"]) == {"type", "message"}, parsed
    told = parsed.get("zest", {})
    return {**parsed["error"], "param": told.get("param"), "code": told.get("code")}


def _check_message(error: dict[str, Any]) -> dict[str, Any]:
    message = error["message"]
    assert isinstance(message, str)
    assert message
    assert isinstance(error["type"], str)
    assert error["param"] is None or isinstance(error["param"], str)
    assert error["code"] is None or isinstance(error["code"], str)
    assert len(message) <= MAX_MESSAGE, message
    assert not [word for word in INTERNAL if word in message], message
    return error


def check_stream(body: bytes) -> None:
    """Events to the end: [DONE] (OpenAI's streams), response.completed (the Responses API)
    or an error event."""
    events = [block for block in body.decode().split("\n\n") if block.strip()]
    assert events, body
    last = events[-1]
    data = [line.removeprefix("data: ") for line in last.splitlines() if line.startswith("data: ")]
    assert data, last
    if data[-1] == "[DONE]":
        return
    payload: dict[str, Any] = json.loads(data[-1])
    if payload.get("type") in {"response.completed", "response.incomplete", "message_stop"}:
        return
    error = payload.get("error") or payload.get("response", {}).get("error")
    assert isinstance(error, dict), last
    assert {"message", "type"} <= set(error), error
