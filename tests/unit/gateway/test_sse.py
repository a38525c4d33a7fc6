"""SSE framing of a stream that fails after it began: it ends with an error event, never a cut.

The engine side of failures is tested on the real model in tests/engines; here a scripted
delta source stands in so the gateway's framing can be checked for a failure at any point.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from tests.unit.gateway.generations import failing_after_one, generation
from zest.engines import Delta
from zest.gateway.http._responses import sse_events
from zest.gateway.serving._generation import Generation


def events(gen: Generation, include_usage: bool = False) -> list[Any]:
    async def run() -> list[bytes]:
        return [e async for e in sse_events(gen, "chat", "chat", include_usage)]

    raw = b"".join(asyncio.run(run())).decode()
    frames = [f.removeprefix("data: ") for f in raw.split("\n\n") if f]
    return [f if f == "[DONE]" else json.loads(f) for f in frames]


def test_a_failure_mid_stream_ends_with_an_error_event() -> None:
    frames = events(generation(failing_after_one()))
    texts = [f["choices"][0]["delta"].get("content") for f in frames[:-1]]
    assert texts == ["", "Hello", " world"]
    assert frames[-1] == {
        "error": {
            "message": "generation failed: decode returned -1",
            "type": "engine_error",
            "param": None,
            "code": None,
        }
    }


async def finishing() -> AsyncIterator[Delta]:
    yield Delta("!", finish_reason="stop", completion_tokens=2)


def test_a_finished_stream_ends_with_usage_then_done() -> None:
    frames = events(generation(finishing()), include_usage=True)
    assert frames[-1] == "[DONE]"
    assert frames[-2]["choices"] == []
    assert frames[-2]["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "total_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert frames[-3]["choices"][0]["finish_reason"] == "stop"
    assert frames[-3]["zest"]["device"] == "cpu"
