"""A request's n choices start together and stop together: the client leaving while they start,
or one failing before its first token, stops every other choice, started or still starting.

A scripted start stands in for each choice's walk (tests/e2e/test_cancellation.py runs the
real model): choice 0 has its first token at once, the others wait for theirs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.unit.gateway.generations import generation
from zest.engines import Delta, GenerationJob
from zest.errors import OverloadedError
from zest.gateway.serving import Drain, SamplingFields, _generation
from zest.gateway.serving._generation import Generation, start_choices
from zest.gateway.serving._routing import Routed
from zest.router import Decision, RouteConfig


class Choices:
    """What the scripted starts did: the started choices, and the ones stopped while waiting."""

    def __init__(self, failing: int | None = None) -> None:
        self.drain, self.failing = Drain(), failing
        self.started: list[Generation] = []
        self.closed: list[int] = []  # engine streams closed, by choice
        self.stopped_waiting: list[int] = []

    async def start(self, *_: Any, request_id: str, **__: Any) -> Generation:
        index = int(request_id.rpartition("-")[2]) if "-" in request_id else 0
        if index == self.failing:
            await asyncio.sleep(0.01)
            raise OverloadedError("the model is at capacity", retry_after=1)
        if index > 0:
            try:
                await asyncio.sleep(3600)  # its first token, never coming
            finally:
                self.stopped_waiting.append(index)
        stream = self.stream(index)
        gen = generation(stream, first=await anext(stream))  # as the walk awaits the first
        gen.activity, gen.job = self.drain.track(), GenerationJob.greedy([1], max_tokens=8)
        self.started.append(gen)
        return gen

    async def stream(self, index: int) -> AsyncIterator[Delta]:
        try:
            while True:
                await asyncio.sleep(0.01)
                yield Delta("x")
        finally:
            self.closed.append(index)

    def stopped(self) -> tuple[int, list[bool], list[int], list[int]]:
        cancelled = [gen.job.cancelled.is_set() for gen in self.started if gen.job]
        return self.drain.in_flight, cancelled, sorted(self.closed), sorted(self.stopped_waiting)


async def route_to_itself(runtime: Any, name: str, *_: Any, **__: Any) -> Routed:
    """Routing without a routes table: the task serves itself (as a task without rules)."""
    return Routed(name, RouteConfig(kind="chat", model="m"), Decision(name, None), ruled=False)


def begin(choices: Choices, monkeypatch: pytest.MonkeyPatch) -> asyncio.Task[list[Generation]]:
    monkeypatch.setattr(_generation, "start_generation", choices.start)
    monkeypatch.setattr(_generation, "route_request", route_to_itself)
    body = SamplingFields(n=4)
    runtime: Any = None  # the scripted starts need none
    return asyncio.ensure_future(
        start_choices(runtime, "chat", kind="chat", body=body, request_id="req_1")
    )


def test_a_client_leaving_while_the_choices_start_stops_the_started_one_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    choices = Choices()

    async def scenario() -> None:
        task = begin(choices, monkeypatch)
        while not choices.started:
            await asyncio.sleep(0.001)
        task.cancel()  # the client left: choice 0 generates, 1 to 3 wait for their first token
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    assert choices.stopped() == (0, [True], [0], [1, 2, 3])


def test_a_choice_failing_before_its_first_token_stops_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    choices = Choices(failing=2)

    async def scenario() -> None:
        with pytest.raises(OverloadedError):
            await asyncio.wait_for(begin(choices, monkeypatch), 10)  # not after the others

    asyncio.run(scenario())
    assert choices.stopped() == (0, [True], [0], [1, 3])


def test_a_batch_of_prompts_starts_n_choices_each_in_openai_s_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Choice k is prompt k // n's (OpenAI's index order), with its own request id; all the
    batch's answers are admitted together (a part left waiting for the slots another part
    holds until the answer is read would never start); the rules read the prompts joined with
    newlines, once for the whole batch."""
    started: list[dict[str, Any]] = []
    routed: list[str] = []

    async def start(*_: Any, **given: Any) -> Generation:
        started.append(given)
        stream = Choices().stream(0)
        return generation(stream, first=await anext(stream))

    async def route(runtime: Any, name: str, kind: Any, body: Any, inputs: Any, **_: Any) -> Routed:
        routed.append(inputs["prompt"])
        return await route_to_itself(runtime, name)

    monkeypatch.setattr(_generation, "start_generation", start)
    monkeypatch.setattr(_generation, "route_request", route)
    body = SamplingFields(n=2, seed=7)

    async def scenario() -> list[Generation]:
        gens = await start_choices(
            None,  # type: ignore[arg-type]
            "autocomplete",
            kind="completion",
            body=body,
            request_id="req_1",
            prompt="alpha\nomega",
            prompts=["alpha", "omega"],
        )
        await _generation.close_all(gens)
        return gens

    assert len(asyncio.run(scenario())) == 4
    assert routed == ["alpha\nomega"]
    assert [(s["prompt"], s["request_id"], s["body"].seed) for s in started] == [
        ("alpha", "req_1", 7),
        ("alpha", "req_1-1", 8),
        ("omega", "req_1-2", 7),
        ("omega", "req_1-3", 8),
    ]
    [group] = {id(s["group"]): s["group"] for s in started}.values()
    assert (group.size, group.prompts) == (4, 2)  # one group: the batch starts together
    assert {s["routed"].task for s in started} == {"autocomplete"}
