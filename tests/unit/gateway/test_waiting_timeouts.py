"""The time-out path of a request that waits for a slot: the route's first_token_s (or total_s)
ends the wait with a 504, and nothing of the request is left to steer or hold anything.

Where the engine holds its waiting requests itself (the llama.cpp batch scheduler,
engines/_llama_batch.py), the runner has already handed the request over: the time-out closes
the stream, the bridge (engines/_worker.py stream_task) marks the job cancelled, the runner's
count drops at once, and the scheduler's next step drops the request (engines/_step_plan.py:
an abandoned request is neither admitted nor a reason to preempt). Where the runner queues
them itself, the request leaves its queue and never reaches the engine.

The engines here never answer, so the time-out is the only way out: nothing depends on the
machine's speed."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, Callable, Coroutine
from dataclasses import replace
from typing import Any

import pytest

from zest.engines import Delta, Engine, EngineInfo, GenerationJob
from zest.engines._admission import Admission
from zest.engines._runner import Runner
from zest.engines._step_plan import Running, StepBudget, StepState, Waiting, plan_step
from zest.engines._worker import Task, stream_task
from zest.errors import GatewayTimeoutError
from zest.gateway.serving._timeouts import Deadline, first_delta, next_delta
from zest.router import RouteTimeouts


def sync(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


class SilentScheduler(Engine):
    """Holds its waiting requests itself, as the batch scheduler does, through the real bridge
    (stream_task), and never answers: `tasks` are what reached it, `slots` of them running."""

    name = "silent"

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.tasks: list[Task] = []

    def own_queue(self) -> SilentScheduler:
        return self

    @property
    def running(self) -> int:
        return min(len(self._live()), self.slots)

    @property
    def waiting(self) -> int:
        return max(len(self._live()) - self.slots, 0)

    def _live(self) -> list[Task]:
        return [t for t in self.tasks if not t.job.cancelled.is_set()]

    def load(self) -> EngineInfo:
        return self.info()

    def info(self) -> EngineInfo:
        return EngineInfo("silent", "m", "cpu", "test", 64, "memory")

    def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        return stream_task(self.tasks.append, job)

    async def close(self) -> None:
        pass


class SilentEngine(SilentScheduler):
    """The same, but the runner queues its requests (no own queue: an onnx-genai worker)."""

    def own_queue(self) -> None:  # type: ignore[override]
        return None


def job(label: str, priority: int = 0) -> GenerationJob:
    return replace(GenerationJob.greedy([1], max_tokens=1, label=label), priority=priority)


async def first_within(runner: Runner, j: GenerationJob, timeouts: RouteTimeouts) -> Delta:
    """As the front door waits for an attempt's first delta: a failure closes the stream."""
    stream = runner.stream(j)
    try:
        return await first_delta(stream, Deadline.start("chat", timeouts), "m on cpu")
    except BaseException:
        await stream.aclose()
        raise


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@sync
async def test_a_request_timed_out_in_the_schedulers_queue_is_a_504_and_holds_nothing() -> None:
    engine = SilentScheduler(slots=1)
    runner = Runner(engine, Admission(slots=1, max_queue=1))
    held = asyncio.ensure_future(first_within(runner, job("held"), RouteTimeouts()))
    await settle()
    urgent = job("urgent", priority=50)
    with pytest.raises(GatewayTimeoutError) as timed_out:
        await first_within(runner, urgent, RouteTimeouts(first_token_s=0.01))
    assert timed_out.value.status_code == 504
    assert timed_out.value.code == "first_token_timeout"
    assert timed_out.value.message == (
        "route 'chat': no first token from m on cpu within timeouts.first_token_s (0.01s)"
    )
    assert urgent.cancelled.is_set()  # what the scheduler reads of it
    assert (runner.pending, runner.waiting) == (1, 0)
    # Its place in the bound is free again: a next request is taken, not refused with a 429.
    later = asyncio.ensure_future(first_within(runner, job("later"), RouteTimeouts()))
    await settle()
    assert [t.job.label for t in engine.tasks] == ["held", "urgent", "later"]
    assert (runner.pending, runner.waiting) == (2, 1)
    for waiter in (held, later):
        waiter.cancel()
    await asyncio.gather(held, later, return_exceptions=True)
    assert runner.pending == 0


@sync
async def test_a_request_past_its_total_s_while_waiting_is_a_504_total_timeout() -> None:
    engine = SilentScheduler(slots=1)
    runner = Runner(engine, Admission(slots=1, max_queue=1))
    timed = job("timed")
    with pytest.raises(GatewayTimeoutError) as timed_out:
        await first_within(runner, timed, RouteTimeouts(total_s=0.01))
    assert timed_out.value.code == "total_timeout"
    assert timed_out.value.message == (
        "route 'chat': the request took longer than timeouts.total_s (0.01s)"
    )
    assert timed.cancelled.is_set()
    assert runner.pending == 0


@sync
async def test_a_request_timed_out_in_the_runners_queue_never_reaches_its_engine() -> None:
    engine = SilentEngine(slots=1)
    runner = Runner(engine, Admission(slots=1, max_queue=1))
    held = asyncio.ensure_future(first_within(runner, job("held"), RouteTimeouts()))
    await settle()
    with pytest.raises(GatewayTimeoutError):
        await first_within(runner, job("queued"), RouteTimeouts(first_token_s=0.01))
    # Its queue place is free for the next request (the queue drops it when it looks again).
    later = asyncio.ensure_future(first_within(runner, job("later"), RouteTimeouts()))
    await settle()
    held.cancel()
    await asyncio.gather(held, return_exceptions=True)
    await settle()
    assert [t.job.label for t in engine.tasks] == ["held", "later"]
    later.cancel()
    await asyncio.gather(later, return_exceptions=True)
    assert (runner.pending, runner.waiting) == (0, 0)


@sync
async def test_the_total_limit_ends_a_stream_that_stopped_between_deltas() -> None:
    """next_delta: the same limit once the first delta came (a running sequence whose steps
    stopped: its stream is closed and its job cancelled, which frees its slot)."""
    engine = SilentScheduler(slots=1)
    runner = Runner(engine, Admission(slots=1, max_queue=0))
    running = job("running")
    stream = runner.stream(running)
    await settle()
    deadline = Deadline.start("chat", RouteTimeouts(total_s=0.01))
    with pytest.raises(GatewayTimeoutError, match=r"longer than timeouts\.total_s"):
        await next_delta(stream, deadline)
    await stream.aclose()
    assert running.cancelled.is_set()
    assert runner.pending == 0


BUDGET = StepBudget(full=64, guarded=16, beside=4)


def test_a_timed_out_waiter_is_dropped_and_preempts_nobody() -> None:
    """What the scheduler does with the cancelled job at its next step: a high priority that
    timed out while waiting takes no slot and no running sequence's place."""
    lower = Running(1, 0, arrival=1, remaining=0)
    urgent = Waiting(2, 50, arrival=2, remaining=8)
    live = plan_step(StepState((lower,), (urgent,), 0, step=3), BUDGET)
    assert (live.preempted, live.admitted) == ((1,), (2,))
    gone = replace(urgent, abandoned=True)
    plan = plan_step(StepState((lower,), (gone,), 0, step=3), BUDGET)
    assert (plan.dropped, plan.preempted, plan.admitted, plan.rows) == ((2,), (), (), ((1, 1),))


def test_a_preempted_sequence_that_timed_out_is_dropped_and_never_resumes() -> None:
    """Its saved state goes with it (engines/_llama_batch.py _drop_waiting)."""
    running = Running(3, 50, arrival=3, remaining=0, shielded=True)
    preempted = Waiting(1, 0, arrival=1, remaining=0, since=2, preempted=True, abandoned=True)
    plan = plan_step(StepState((running,), (preempted,), 1, step=40), BUDGET)
    assert (plan.dropped, plan.admitted, plan.rows) == ((1,), (), ((3, 1),))
