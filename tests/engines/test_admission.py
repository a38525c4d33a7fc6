"""The runner's admission in front of every local engine kind, on the real model: the bound
(`parallel + max_queue` accepted, the next refused with 429 holding nothing) and priority order.
Each kind's runner is made from the admission the kind declares for its model's options.

llamacpp runs the batch scheduler, hybrid the prefill/decode pipeline on emulated devices,
onnx-genai the one-at-a-time worker (`make onnx-model`)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncGenerator, Callable

import pytest

from tests.engines.conftest import job_for, load_smollm2
from tests.engines.test_hybrid import GPU, NPU
from tests.engines.test_onnx_genai import onnx_engine
from zest.engines import Delta, Engine, engine_kind
from zest.engines._runner import Runner
from zest.errors import OverloadedError
from zest.router import Device, Placement

CPU = Device("cpu", frozenset({"llamacpp"}), "/proc/cpuinfo")
MAX_QUEUE = 2


def llamacpp() -> Engine:
    return load_smollm2(Placement(CPU, CPU), parallel=2, max_queue=MAX_QUEUE)


def hybrid() -> Engine:
    return load_smollm2(Placement(NPU, GPU), parallel=2, max_queue=MAX_QUEUE)


def onnx_genai() -> Engine:
    engine = onnx_engine(options={"n_threads": 2, "max_queue": MAX_QUEUE})
    engine.load()
    return engine


# (engine maker, its slots: sequences that run at once)
KINDS: dict[str, tuple[Callable[[], Engine], int]] = {
    "llamacpp": (llamacpp, 2),
    "hybrid": (hybrid, 2),
    "onnx-genai": (onnx_genai, 1),
}


async def until(condition: Callable[[], bool], what: str, timeout: float = 300.0) -> None:
    """Poll `condition` with a bound against a hang (the engines' threads move on their own
    clock; a loaded machine's step may take seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened within {timeout} s: {what}")
        await asyncio.sleep(0.005)


def runner_of(engine: Engine) -> Runner:
    config = engine.config  # type: ignore[attr-defined]
    return Runner(engine, engine_kind(config.engine).admission(config))


async def occupy(runner: Runner, slots: int) -> list[AsyncGenerator[Delta, None]]:
    """`slots` long generations, each past its first token: every slot is running."""
    engine = runner.engine
    busy = [
        runner.stream(job_for(engine, f"Tell story {n}.", max_tokens=400)) for n in range(slots)
    ]
    await asyncio.gather(*(anext(stream) for stream in busy))
    return busy


async def scenario(engine: Engine, slots: int) -> tuple[OverloadedError, list[str], int]:
    runner = runner_of(engine)
    busy = await occupy(runner, slots)
    first_token: list[str] = []

    async def run(name: str, priority: int) -> None:
        job = dataclasses.replace(job_for(engine, "Hi", max_tokens=2), priority=priority)
        async for _ in runner.stream(job):
            if name not in first_token:
                first_token.append(name)

    low = asyncio.create_task(run("low", 0))
    await until(lambda: runner.pending == slots + 1, "the low-priority request queued")
    high = asyncio.create_task(run("high", 5))
    await until(lambda: runner.pending == slots + 2, "the high-priority request queued")

    refused_stream = runner.stream(job_for(engine, "Hi", max_tokens=2))
    with pytest.raises(OverloadedError) as refused:
        await anext(refused_stream)
    pending_after_refusal = runner.pending

    await busy[0].aclose()  # one slot frees: the high-priority request must take it
    await until(lambda: bool(first_token), "a queued request started")
    for stream in busy[1:]:
        await stream.aclose()
    await asyncio.wait_for(asyncio.gather(low, high), timeout=300)  # a hang guard
    await until(lambda: runner.pending == 0, "the runner is idle again")
    return refused.value, first_token, pending_after_refusal


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_bound_refuses_with_429_holding_nothing_and_priority_orders_admission(
    kind: str,
) -> None:
    make, slots = KINDS[kind]
    engine = make()
    try:
        refused, order, pending_after_refusal = asyncio.run(scenario(engine, slots))
    finally:
        asyncio.run(engine.close())
    assert refused.status_code == 429
    assert refused.outcome_label == "overloaded"
    assert int(refused.headers["retry-after"]) >= 1
    assert f"({slots} running, {MAX_QUEUE} waiting)" in refused.message
    # slots running + max_queue waiting were accepted; the refused one added nothing.
    assert pending_after_refusal == slots + MAX_QUEUE
    assert order == ["high", "low"]
