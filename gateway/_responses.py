"""OpenAI response shapes: one JSON body, or SSE chunks ending with `data: [DONE]`."""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from gateway._service import Generation
from router import EngineError, RequestError

__all__ = ["collect_body", "sse_events"]

log = logging.getLogger("zest.gateway")
Kind = Literal["chat", "completion"]
_OBJECT = {"chat": "chat.completion", "completion": "text_completion"}
_CHUNK_OBJECT = {"chat": "chat.completion.chunk", "completion": "text_completion"}
_ID_PREFIX = {"chat": "chatcmpl-", "completion": "cmpl-"}


def _new_id(kind: Kind) -> str:
    return _ID_PREFIX[kind] + secrets.token_hex(12)


def _usage(gen: Generation, completion_tokens: int) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": gen.prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": gen.prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": gen.first.cached_tokens},
    }
    if gen.trimmed is not None:  # extension: the prompt tokens trimmed to fit the budget
        usage["trimmed_tokens"] = gen.trimmed.trimmed_tokens
    if gen.final_stats is not None:  # extension: where each stage ran and how long it took
        usage["pipeline"] = gen.final_stats.as_dict()
    return usage


def _choice(kind: Kind, text: str, finish: str | None, *, chunk: bool) -> dict[str, Any]:
    if kind == "completion":
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    key = "delta" if chunk else "message"
    content: dict[str, Any] = {"content": text} if chunk else {"role": "assistant", "content": text}
    return {"index": 0, key: content, "logprobs": None, "finish_reason": finish}


async def collect_body(gen: Generation, kind: Kind, requested_model: str) -> dict[str, Any]:
    parts, finish, produced = [], "stop", 0
    async for delta in gen.deltas():
        parts.append(delta.text)
        if delta.finish_reason is not None:
            finish, produced = delta.finish_reason, delta.completion_tokens
    return {
        "id": _new_id(kind),
        "object": _OBJECT[kind],
        "created": int(time.time()),
        "model": requested_model,
        "choices": [_choice(kind, "".join(parts), finish, chunk=False)],
        "usage": _usage(gen, produced),
        "zest": gen.extension(),
    }


def _event(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


async def sse_events(
    gen: Generation, kind: Kind, requested_model: str, include_usage: bool
) -> AsyncIterator[bytes]:
    """SSE chunks; a failure after the first byte ends the stream with an error event."""
    base = {
        "id": _new_id(kind),
        "object": _CHUNK_OBJECT[kind],
        "created": int(time.time()),
        "model": requested_model,
    }

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return _event({**base, "choices": choices, **extra})

    try:
        if kind == "chat":
            yield chunk(
                [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ]
            )
        async for delta in gen.deltas():
            if delta.text:
                yield chunk([_choice(kind, delta.text, None, chunk=True)])
            if delta.finish_reason is not None:
                yield chunk(
                    [_choice(kind, "", delta.finish_reason, chunk=True)], zest=gen.extension()
                )
                if include_usage:
                    yield chunk([], usage=_usage(gen, delta.completion_tokens))
        yield b"data: [DONE]\n\n"
    except RequestError as exc:
        log.warning("stream for task %s failed after it began: %s", gen.plan.task, exc)
        yield _event(exc.to_body())
    except Exception as exc:
        log.exception("stream for task %s failed after it began", gen.plan.task)
        yield _event(EngineError(f"generation failed mid-stream: {type(exc).__name__}").to_body())
    finally:
        await gen.aclose()
