"""The runner around every engine: admission (the bound, priority, 429 with Retry-After, a
request's n choices together) on the event loop, over engines that only count what reaches
them (the real engines run behind the same runner in tests/engines and tests/e2e)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, Callable, Coroutine
from dataclasses import replace
from typing import Any

import pytest

from zest.engines import Delta, Engine, EngineInfo, GenerationJob
from zest.engines._admission import Admission, ChoiceGroup
from zest.engines._runner import Runner
from zest.errors import BadRequestError, OverloadedError


def sync(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


class HeldEngine(Engine):
    """Every generation waits for `release`; `started` lists the jobs that reached it."""

    name = "held"

    def __init__(self) -> None:
        self.started: list[str] = []
        self.release = asyncio.Event()

    def load(self) -> EngineInfo:
        return self.info()

    def info(self) -> EngineInfo:
        return EngineInfo("held", "m", "cpu", "test", 64, "memory")

    async def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        self.started.append(job.label)
        await self.release.wait()
        yield Delta(text="x", finish_reason="stop", completion_tokens=1)

    async def close(self) -> None:
        pass


def job(label: str, priority: int = 0, **extra: Any) -> GenerationJob:
    return replace(GenerationJob.greedy([1], max_tokens=1, label=label), priority=priority, **extra)


async def run(runner: Runner, j: GenerationJob) -> list[Delta]:
    return [delta async for delta in runner.stream(j)]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@sync
async def test_the_runner_lets_through_as_many_as_the_slots_and_queues_the_rest() -> None:
    engine = HeldEngine()
    runner = Runner(engine, Admission(slots=2, max_queue=4))
    tasks = [asyncio.ensure_future(run(runner, job(str(i)))) for i in range(4)]
    await settle()
    assert engine.started == ["0", "1"]
    assert (runner.pending, runner.waiting) == (4, 2)
    engine.release.set()
    await asyncio.gather(*tasks)
    assert engine.started == ["0", "1", "2", "3"]
    assert (runner.pending, runner.waiting) == (0, 0)


@sync
async def test_past_the_bound_a_request_is_a_429_with_retry_after_holding_nothing() -> None:
    engine = HeldEngine()
    runner = Runner(engine, Admission(slots=1, max_queue=1))
    tasks = [asyncio.ensure_future(run(runner, job(str(i)))) for i in range(2)]
    await settle()
    with pytest.raises(OverloadedError) as refused:
        await run(runner, job("2"))
    assert refused.value.retry_after is not None
    assert "the model is at capacity (1 running, 1 waiting)" in refused.value.message
    assert runner.pending == 2
    engine.release.set()
    await asyncio.gather(*tasks)


@sync
async def test_waiting_requests_run_by_priority_then_arrival() -> None:
    engine = HeldEngine()
    runner = Runner(engine, Admission(slots=1, max_queue=8))
    first = asyncio.ensure_future(run(runner, job("first")))
    await settle()
    rest = [
        asyncio.ensure_future(run(runner, job(label, priority)))
        for label, priority in [("low", 0), ("high", 50), ("low2", 0), ("high2", 50)]
    ]
    await settle()
    engine.release.set()
    await asyncio.gather(first, *rest)
    assert engine.started == ["first", "high", "high2", "low", "low2"]


@sync
async def test_a_request_abandoned_while_waiting_leaves_the_queue_and_never_runs() -> None:
    engine = HeldEngine()
    runner = Runner(engine, Admission(slots=1, max_queue=4))
    running = asyncio.ensure_future(run(runner, job("running")))
    waiting = asyncio.ensure_future(run(runner, job("gone")))
    await settle()
    waiting.cancel()
    await settle()
    engine.release.set()
    await running
    assert engine.started == ["running"]
    assert runner.pending == 0


@sync
async def test_a_requests_choices_are_admitted_together_or_refused_past_the_slots() -> None:
    engine = HeldEngine()
    runner = Runner(engine, Admission(slots=2, max_queue=4, slots_set_by="options.parallel"))
    group = ChoiceGroup(3)
    with pytest.raises(BadRequestError, match="n: 3 choices decode together"):
        await run(runner, job("a", group=group))
    pair = ChoiceGroup(2)
    blocker = asyncio.ensure_future(run(runner, job("blocker")))
    await settle()
    choices = [asyncio.ensure_future(run(runner, job(f"c{i}", group=pair))) for i in range(2)]
    await settle()
    assert engine.started == ["blocker"]  # one slot free: the pair waits for both
    engine.release.set()
    await asyncio.gather(blocker, *choices)
    assert sorted(engine.started[1:]) == ["c0", "c1"]


class SchedulingEngine(HeldEngine):
    """An engine that holds its waiting requests itself (as the llama.cpp batch does): every
    request reaches it at once; it says how many hold a slot."""

    name = "scheduling"

    def __init__(self, slots: int) -> None:
        super().__init__()
        self.slots = slots

    def own_queue(self) -> SchedulingEngine:
        return self

    @property
    def running(self) -> int:
        return min(len(self.started), self.slots)

    @property
    def waiting(self) -> int:
        return max(len(self.started) - self.slots, 0)


@sync
async def test_an_engine_with_its_own_queue_gets_every_request_within_the_bound_at_once() -> None:
    """The runner only counts: no second waiting list, no slot bookkeeping on the loop."""
    engine = SchedulingEngine(slots=1)
    runner = Runner(engine, Admission(slots=1, max_queue=2, slots_set_by="options.parallel"))
    tasks = [asyncio.ensure_future(run(runner, job(str(i), priority=i))) for i in range(3)]
    await settle()
    assert engine.started == ["0", "1", "2"]  # the engine orders them, not the runner
    assert (runner.pending, runner.waiting) == (3, 2)
    with pytest.raises(OverloadedError) as refused:
        await run(runner, job("3"))
    assert "the model is at capacity (1 running, 2 waiting)" in refused.value.message
    assert runner.pending == 3  # the refusal holds nothing
    with pytest.raises(BadRequestError, match="n: 2 choices decode together"):
        await run(runner, job("pair", group=ChoiceGroup(2)))
    engine.release.set()
    await asyncio.gather(*tasks)
    assert (runner.pending, runner.waiting) == (0, 0)


@sync
async def test_a_request_that_leaves_an_engine_with_its_own_queue_gives_its_place_back() -> None:
    engine = SchedulingEngine(slots=1)
    runner = Runner(engine, Admission(slots=1, max_queue=0))
    held = asyncio.ensure_future(run(runner, job("held")))
    await settle()
    held.cancel()
    await settle()
    assert runner.pending == 0
    engine.release.set()
    assert [d.text for d in await run(runner, job("next"))] == ["x"]


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "zest.engines"]


def test_a_job_left_while_it_waits_still_has_its_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every generation has one line however it ends (issue 33): a caller that leaves while its
    job waits for a slot gets the engine's form of it from the runner, and the job that reached
    the engine none from the runner (the engine writes its own)."""
    caplog.set_level("INFO", logger="zest.engines")

    async def scenario() -> None:
        engine = HeldEngine()
        runner = Runner(engine, Admission(slots=1, max_queue=4))
        running = asyncio.ensure_future(run(runner, job("req_a task=t model=m device=cpu")))
        waiting = asyncio.ensure_future(run(runner, job("req_b task=t model=m device=cpu")))
        await settle()
        assert runner.waiting == 1
        waiting.cancel()  # its client left
        await settle()
        engine.release.set()
        await running

    asyncio.run(scenario())
    (line,) = lines(caplog)
    assert line.startswith(
        "req_b task=t model=m device=cpu: finish=cancelled prompt_tokens=1 completion_tokens=0 "
        "max_tokens=1 seconds="
    )
    assert line.endswith(" (left while waiting for a slot)")
