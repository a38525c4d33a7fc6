"""SSE framing of a stream that fails after it began: it ends with an error event, never a cut.

The engine side of failures is tested on the real model in tests/engines; here a scripted
delta source stands in so the gateway's framing can be checked for a failure at any point.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio

from tests.unit.gateway.generations import failing_after_one, generation
from zest.engines import Delta, GenerationJob
from zest.gateway.http._responses import sse_events
from zest.gateway.serving import Drain
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


async def endless(closed: list[int], index: int) -> AsyncIterator[Delta]:
    try:
        while True:
            await asyncio.sleep(0.01)
            yield Delta("x")
    finally:
        closed.append(index)  # as the engine's stream cancels its job when closed


def test_a_client_leaving_a_stream_of_n_choices_stops_every_choice() -> None:
    """Litestar tears a stream down, as its client leaves, by cancelling an anyio scope (which
    cancels every later await too): every choice is stopped all the same, its job cancelled,
    its engine stream closed, and none is left for a shutdown to wait for."""

    async def scenario() -> tuple[int, list[bool], list[int], int]:
        drain, closed, chunks = Drain(), [], 0
        gens = [generation(endless(closed, index)) for index in range(3)]
        for gen in gens:
            gen.activity, gen.job = drain.track(), GenerationJob.greedy([1], max_tokens=8)

        async def read() -> None:
            nonlocal chunks
            async for _ in sse_events(gens, "chat", "chat", include_usage=False):
                chunks += 1

        async with anyio.create_task_group() as group:
            group.start_soon(read)
            while chunks < 10:
                await asyncio.sleep(0.01)
            group.cancel_scope.cancel()  # the client left
        await asyncio.sleep(0.1)  # the choices' tasks unwind
        cancelled = [gen.job.cancelled.is_set() for gen in gens if gen.job is not None]
        return drain.in_flight, cancelled, sorted(closed), chunks

    in_flight, cancelled, closed, chunks = asyncio.run(scenario())
    assert chunks >= 10
    assert (in_flight, cancelled, closed) == (0, [True, True, True], [0, 1, 2])
