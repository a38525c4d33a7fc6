"""Anthropic's Messages API answers (/v1/messages): one message object, or its stream of events
(message_start, content_block_start, ping, content_block_delta, content_block_stop,
message_delta, message_stop; an `error` event when it fails), and errors in Anthropic's shape,
from the same generation every endpoint runs."""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from zest.engines import Delta
from zest.errors import EngineError, RequestError
from zest.gateway.http._dialect import Dialect
from zest.gateway.http._responses import zest_extension
from zest.gateway.serving import Generation, MessagesRequest

__all__ = ["ANTHROPIC", "MessageShape", "anthropic_error"]

log = logging.getLogger("zest.gateway")

# Anthropic's error type for each status zest answers (docs/anthropic.md).
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",  # no device or model can serve the route (overloaded: see below)
    504: "timeout_error",
    529: "overloaded_error",
}


# 503s that say the server cannot take the request now, as Anthropic's 529 does: draining, or
# an upstream that keeps answering 503. Other 503s (no device, a missing model file, privacy)
# are the route's, not the moment's.
_OVERLOADED = frozenset({"shutting_down", "upstream_unavailable"})


def anthropic_error(status: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """An OpenAI error body in Anthropic's shape: {"type": "error", "error": {"type",
    "message"}}, the type by the status (an unlisted 4xx: invalid_request_error, 5xx:
    api_error); zest's own code and param stay beside them, as the `zest` object does."""
    error = body.get("error", {})
    kind = _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    if status == 503 and error.get("code") in _OVERLOADED:
        kind = "overloaded_error"
    shaped: dict[str, Any] = {
        "type": "error",
        "error": {"type": kind, "message": error.get("message", "error")},
    }
    extra = {key: error[key] for key in ("code", "param") if error.get(key) is not None}
    if extra or "zest" in body:
        shaped["zest"] = {**extra, **body.get("zest", {})}
    return status, shaped


ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Anthropic's error shape: the message says what to send instead.",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
        "zest": {"type": "object"},
    },
}
ANTHROPIC = Dialect("anthropic", anthropic_error, ERROR_SCHEMA)


class MessageShape:
    """The message of one request, built as its generation goes."""

    def __init__(self, gen: Generation, request: MessagesRequest) -> None:
        self.gen, self.request = gen, request
        self.id = "msg_" + secrets.token_hex(12)

    async def body(self) -> dict[str, Any]:
        text, last = "", None
        async for delta in self.gen.deltas():
            text += delta.text
            if delta.finish_reason is not None:
                last = delta
        blocks, reason, stop = self._answer(text, last)
        message = self._message(blocks, reason, stop, last.completion_tokens if last else 0)
        return {**message, "zest": zest_extension(self.gen)}

    def _answer(
        self, text: str, last: Delta | None
    ) -> tuple[list[dict[str, Any]], str, str | None]:
        """The content blocks, stop_reason and stop_sequence of a finished generation."""
        reason, stop = self._stop_reason(last)
        if self.gen.tools is None:
            return ([_text_block(text)] if text else []), reason, stop
        answer = self.gen.tools.read(text)
        blocks = [_text_block(answer.content)] if answer.content else []
        blocks += [_tool_use_block(call) for call in answer.calls]
        return blocks, ("tool_use" if answer.finish_reason == "tool_calls" else reason), stop

    def _stop_reason(self, last: Delta | None) -> tuple[str, str | None]:
        if last is not None and last.finish_reason == "length":
            return "max_tokens", None
        sent = self.request.stop_sequences or ()
        if last is not None and last.stop_sequence is not None and last.stop_sequence in sent:
            return "stop_sequence", last.stop_sequence
        return "end_turn", None  # the model's end, or a stop of the route's own

    def _message(
        self, content: list[dict[str, Any]], reason: str | None, stop: str | None, produced: int
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.request.model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": stop,
            "usage": self._usage(produced),
        }

    def _usage(self, produced: int) -> dict[str, Any]:
        """Anthropic's counts: input_tokens are those not read from the cache (its total is
        input + cache_read_input_tokens), as zest's prefix cache reused them."""
        cached = self.gen.first.cached_tokens
        return {
            "input_tokens": self.gen.prompt_tokens - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": produced,
        }

    async def events(self) -> AsyncIterator[bytes]:
        """The stream; a failure after it began ends it with an error event."""
        try:
            yield _event("message_start", message=self._message([], None, None, 0))
            stream = self._text_events() if self.gen.tools is None else self._tool_events()
            async for event in stream:
                yield event
            yield _event("message_stop")
        except RequestError as exc:
            log.warning("message stream for %s failed: %s", self.gen.plan.task, exc)
            yield _error_event(exc)
        except Exception:
            log.exception("message stream for %s failed", self.gen.plan.task)
            yield _error_event(EngineError("generation failed mid-stream: see the server log"))
        finally:
            await self.gen.aclose()

    async def _text_events(self) -> AsyncIterator[bytes]:
        """Text as it comes: one block, a delta per piece of text."""
        yield _event("content_block_start", index=0, content_block=_text_block(""))
        yield _event("ping")
        last = None
        async for delta in self.gen.deltas():
            if delta.text:
                text = {"type": "text_delta", "text": delta.text}
                yield _event("content_block_delta", index=0, delta=text)
            if delta.finish_reason is not None:
                last = delta
        yield _event("content_block_stop", index=0)
        yield self._finished(*self._stop_reason(last), last)

    async def _tool_events(self) -> AsyncIterator[bytes]:
        """A tool-use answer is read whole (its JSON envelope is zest's), then sent as its
        blocks: its text, each call with its input as one input_json_delta."""
        yield _event("ping")
        text, last = "", None
        async for delta in self.gen.deltas():
            text += delta.text
            if delta.finish_reason is not None:
                last = delta
        blocks, reason, stop = self._answer(text, last)
        for index, block in enumerate(blocks):
            for event in _block_events(index, block):
                yield event
        yield self._finished(reason, stop, last)

    def _finished(self, reason: str, stop: str | None, last: Delta | None) -> bytes:
        usage = self._usage(last.completion_tokens if last else 0)
        return _event(
            "message_delta",
            delta={"stop_reason": reason, "stop_sequence": stop},
            usage=usage,
            zest=zest_extension(self.gen),
        )


def _block_events(index: int, block: dict[str, Any]) -> list[bytes]:
    if block["type"] == "text":
        delta = {"type": "text_delta", "text": block["text"]}
        opened = _text_block("")
    else:
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        opened = {**block, "input": {}}
    return [
        _event("content_block_start", index=index, content_block=opened),
        _event("content_block_delta", index=index, delta=delta),
        _event("content_block_stop", index=index),
    ]


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _tool_use_block(call: dict[str, Any]) -> dict[str, Any]:
    """A call of the answer as Anthropic's tool_use block (its input an object: the tool's
    input_schema is one, and the answer was constrained to it)."""
    return {
        "type": "tool_use",
        "id": "toolu_" + call["id"].removeprefix("call_"),
        "name": call["function"]["name"],
        "input": json.loads(call["function"]["arguments"]),
    }


def _event(kind: str, **fields: Any) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (
        kind.encode(),
        msgspec.json.encode({"type": kind, **fields}),
    )


def _error_event(exc: RequestError) -> bytes:
    _, body = anthropic_error(exc.status_code, exc.to_body())
    return b"event: error\ndata: %s\n\n" % msgspec.json.encode(body)
