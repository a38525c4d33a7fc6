"""Every path of a request gives back what it took (DESIGN.md §9): the engine's lease, the
runner's slot, the drain's count. A real runtime and pool over a scripted engine (the e2e suite
checks the same after every test on the real model, tests/e2e/invariants.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

from zest.engines import Delta, Engine, EngineInfo, GenerationJob, Inventory
from zest.gateway.serving import ChatMessage, ChatRequest, Runtime, request_scope
from zest.gateway.serving import _generation as generation
from zest.gateway.serving._generation import start_generation
from zest.router import Device, LoadedRoutes, parse_routes

ROUTES = """\
version: 1
lifecycle: {preload: []}
models:
  small: {engine: llamacpp, source: small.gguf}
routes:
  chat: {kind: chat, model: small, device: cpu}
"""
CPU = Device("cpu", frozenset({"llamacpp"}), "test")


class Endless(Engine):
    """Streams a token at a time until its stream is closed; records the closes."""

    def __init__(self) -> None:
        self.closed: list[GenerationJob] = []

    def load(self) -> EngineInfo:
        return self.info()

    def info(self) -> EngineInfo:
        return EngineInfo("llamacpp", "small", "cpu", "test", 4096, "small.gguf")

    async def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        try:
            while True:
                await asyncio.sleep(0)
                yield Delta("x")
        finally:
            self.closed.append(job)

    async def close(self) -> None:
        pass


@pytest.fixture
def served() -> tuple[Runtime, Endless]:
    routes = LoadedRoutes(parse_routes(ROUTES, "routes.yaml"), Path("/srv/routes.yaml"))
    runtime, engine = Runtime(routes, Inventory({"cpu": CPU}, ())), Endless()
    runtime.pool.factory = lambda spec: engine
    runtime.pool.verify = lambda spec: None  # no file to check: the engine is scripted
    return runtime, engine


def held(runtime: Runtime) -> tuple[int, int, int]:
    """Leases on the engine, jobs its runner counts, generations in flight."""
    [entry] = runtime.pool.loaded()
    return entry.leases, entry.runner.pending, runtime.drain.in_flight


def start(runtime: Runtime) -> Any:
    messages = [ChatMessage(role="user", content="Hi")]
    body = ChatRequest(model="chat", messages=messages)
    return start_generation(
        runtime, "chat", kind="chat", body=body, request_id="req_1", messages=messages
    )


def test_a_failure_after_the_engine_was_leased_gives_the_lease_back(
    served: tuple[Runtime, Endless], monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 32: a tool schema the envelope pushed past the depth limit raised while the job
    was built, after the lease was taken, and the lease was never given back: the model stayed
    busy for good. Whatever raises there, the lease goes back."""
    runtime, _ = served

    def broken(*_: Any) -> GenerationJob:
        raise RuntimeError("the job could not be built")

    monkeypatch.setattr(generation._Walk, "_job", broken)

    async def run() -> tuple[int, int, int]:
        with pytest.raises(RuntimeError, match="could not be built"):
            await start(runtime)
        return held(runtime)

    assert asyncio.run(run()) == (0, 0, 0)


def test_a_generation_no_path_closed_is_closed_when_its_request_ends(
    served: tuple[Runtime, Endless], caplog: pytest.LogCaptureFixture
) -> None:
    """An event stream whose client left before its first chunk never runs its body, so
    nothing of the HTTP layer closes its generation: the request's scope does."""
    runtime, engine = served

    async def run() -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        async with request_scope("POST /v1/chat/completions"):
            await start(runtime)  # ... and forgotten
            during = held(runtime)
        return during, held(runtime)

    with caplog.at_level(logging.WARNING, logger="zest.gateway"):
        during, after = asyncio.run(run())
    assert (during, after) == ((1, 1, 1), (0, 0, 0))
    assert [job.cancelled.is_set() for job in engine.closed] == [True]
    assert "POST /v1/chat/completions: 1 generation(s) left open, closed at the request's end" in (
        caplog.text
    )


def test_a_generation_closed_by_its_path_is_not_closed_again(
    served: tuple[Runtime, Endless], caplog: pytest.LogCaptureFixture
) -> None:
    runtime, engine = served

    async def run() -> tuple[int, int, int]:
        async with request_scope("POST /v1/chat/completions"):
            gen = await start(runtime)
            await gen.aclose()
        return held(runtime)

    with caplog.at_level(logging.WARNING, logger="zest.gateway"):
        assert asyncio.run(run()) == (0, 0, 0)
    assert len(engine.closed) == 1
    assert "left open" not in caplog.text
