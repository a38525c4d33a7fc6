"""What reaches the MCP SDK from a POST to /mcp: a body no larger than ZEST_MAX_BODY_BYTES
(refused by its declared length before any of it is read, else as soon as it grows past),
JSON as zest reads every body (UTF-8, no NaN, bounded digits and depth, no lone surrogate),
sent as JSON, and one JSON-RPC message. Anything else is a JSON-RPC error (mcp_error) saying
what to send, before the SDK's own messages, which quote its validation library's.

This screens bytes, as every endpoint's body reader does; the protocol itself is the SDK's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from zest.errors import BadRequestError, ClientDisconnectedError, RequestTooLargeError
from zest.gateway.http._body import check_media_type, read_json, refuse_lone_surrogates
from zest.gateway.http._security import body_too_large_message

__all__ = ["screened"]

# Plain ASGI, as the access log reads it: a few keys of each message.
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]

SEND = (
    'send one JSON-RPC message: {"jsonrpc": "2.0", "id": 1, "method": "tools/list"} (docs/mcp.md)'
)


async def screened(scope: MutableMapping[str, Any], receive: Receive, limit: int) -> Receive:
    """`receive` for the SDK: a POST's body read and checked here, then handed over whole."""
    if scope.get("method") != "POST":
        return receive
    headers = {name.lower(): value for name, value in scope.get("headers", ())}
    declared = headers.get(b"content-length", b"").strip()
    if declared.isdigit() and int(declared) > limit:
        raise RequestTooLargeError(body_too_large_message(limit))
    body = await _read(receive, limit)
    _check(body, headers.get(b"content-type"))
    handed = False

    async def replay() -> Message:
        nonlocal handed
        if handed:
            return await receive()  # after the body: the client's disconnect, when it comes
        handed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _read(receive: Receive, limit: int) -> bytes:
    body, more = bytearray(), True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnectedError("the client went away while sending its request")
        body += message.get("body", b"")
        if len(body) > limit:
            raise RequestTooLargeError(body_too_large_message(limit))
        more = message.get("more_body", False)
    return bytes(body)


def _check(body: bytes, content_type: bytes | None) -> None:
    check_media_type(None if content_type is None else content_type.decode("latin-1"))
    message = read_json(body)
    if isinstance(message, list):
        raise BadRequestError(
            f"a batch (a JSON array) is not part of MCP since its 2025-06-18 revision: {SEND}"
        )
    if not isinstance(message, dict):
        raise BadRequestError(f"the body is not a JSON-RPC message: {SEND}")
    refuse_lone_surrogates(message)
    _check_envelope(message)


def _check_envelope(message: dict[str, Any]) -> None:
    if message.get("jsonrpc") != "2.0":
        raise BadRequestError(f'jsonrpc: a JSON-RPC 2.0 message says "jsonrpc": "2.0": {SEND}')
    if "method" in message:
        if not isinstance(message["method"], str):
            raise BadRequestError(f"method: send the method's name as a string: {SEND}")
        return
    if "id" not in message or not ({"result", "error"} & set(message)):
        raise BadRequestError(
            "the body is neither a request (method) nor a response (id and result or error): "
            f"{SEND}"
        )
