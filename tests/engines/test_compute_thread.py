"""Every multi-threaded llama.cpp computation of the process runs on its one compute thread
(engines/_compute.py): two chat models and an embedding model working at once, on the real
models. Each thread that calls llama_decode gets an OpenMP team of its own, and once the teams
outnumber the cores every model's decode slows down for good (docs/benchmarks.md)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import llama_cpp
import llama_cpp.llama_cpp as bindings
import pytest

from tests.engines.conftest import REPO, job_for, load_smollm2, stream_all
from zest.engines import (
    Delta,
    Engine,
    compute_bound,
    compute_executor,
    create_engine,
    on_compute_thread,
)
from zest.router import Device, Placement, load_routes

CPU = Device("cpu", frozenset({"llamacpp"}), "/proc/cpuinfo")


@pytest.fixture
def decode_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the thread each real llama_decode call ran on (the call goes through)."""
    seen: list[str] = []
    real = bindings.llama_decode

    def recorded(ctx: Any, batch: Any) -> int:
        seen.append(threading.current_thread().name)
        return int(real(ctx, batch))

    monkeypatch.setattr(llama_cpp, "llama_decode", recorded)  # NativeContext's binding
    monkeypatch.setattr(bindings, "llama_decode", recorded)  # llama_cpp.Llama's (embeddings)
    return seen


@pytest.fixture
def embedder() -> Iterator[Engine]:
    routes = load_routes(REPO / "examples" / "routes" / "embeddings.yaml")
    engine = create_engine("minilm", routes.config.models["minilm"], routes.base_dir,
                           Placement(CPU, CPU))  # fmt: skip
    engine.load()
    yield engine
    asyncio.run(engine.close())


def test_two_models_and_embeddings_compute_on_one_thread(
    decode_threads: list[str], embedder: Engine
) -> None:
    chats = [load_smollm2(Placement(CPU, CPU), n_threads=2, parallel=1) for _ in range(2)]

    async def together() -> tuple[list[Delta], list[Delta], Any]:
        first, second = (stream_all(e, job_for(e, "Name a fruit.", max_tokens=6)) for e in chats)
        return await asyncio.gather(first, second, embedder.embed(["a red apple", "a pear"]))

    try:
        first, second, vectors = asyncio.run(together())
    finally:
        for engine in chats:
            asyncio.run(engine.close())
    assert first[-1].completion_tokens >= 1
    assert second[-1].completion_tokens >= 1
    assert len(vectors.vectors) == 2
    assert len(decode_threads) >= 4  # each model's prefill and steps, and the embedding batch
    assert set(decode_threads) == {"zest-llama-compute_0"}


def test_work_runs_on_the_compute_thread_and_nests_there() -> None:
    def where() -> str:
        return threading.current_thread().name

    assert on_compute_thread(where) == "zest-llama-compute_0"
    nested = compute_executor().submit(on_compute_thread, where).result()  # no deadlock
    assert nested == "zest-llama-compute_0"
    with pytest.raises(ZeroDivisionError):
        on_compute_thread(lambda: 1 / 0)

    @compute_bound
    def labelled(prefix: str, *, suffix: str) -> str:
        return prefix + where() + suffix

    assert labelled("<", suffix=">") == "<zest-llama-compute_0>"
