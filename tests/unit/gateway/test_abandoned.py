"""The line of a generation stopped before any model's queue had its job (issue 33): written
once, by the gateway, only when no runner or engine will write it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from zest.gateway.serving._abandoned import mark_handed_to_queue, stopped_line, written_when_stopped


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    mine = [r.getMessage() for r in caplog.records if r.name == "zest.gateway"]
    return [line.split(" seconds=")[0] for line in mine]


async def stopped(work: Any) -> None:
    task = asyncio.ensure_future(work)
    await asyncio.sleep(0)  # it runs until it awaits
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@written_when_stopped
async def start(runtime: Any, name: str, *, request_id: str, queue: bool = False) -> None:
    if queue:
        mark_handed_to_queue()  # a runner has it: its line is the runner's
    await asyncio.Event().wait()


def test_a_request_stopped_before_a_queue_has_its_line_and_one_queued_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="zest.gateway")

    async def scenario() -> None:
        await stopped(start(None, "chat", request_id="req_a"))
        await stopped(start(None, "chat", request_id="req_b", queue=True))

    asyncio.run(scenario())
    assert lines(caplog) == ["req_a task=chat: finish=cancelled completion_tokens=0"]
    assert caplog.records[0].getMessage().endswith(" (stopped before a model's queue had it)")


def test_a_condition_s_own_request_inside_the_routing_marks_only_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A classify condition's generation, run inside the request's routing, reaching its
    queue does not make the request itself queued: stopped then, the request has its line."""
    caplog.set_level("INFO", logger="zest.gateway")

    async def routing() -> None:
        with stopped_line("req_a", "chat"):
            with stopped_line("routing", "classifier"):
                mark_handed_to_queue()  # the condition's job reached its queue, and answered
            await asyncio.Event().wait()  # the request is still being routed

    asyncio.run(stopped(routing()))
    assert lines(caplog) == ["req_a task=chat: finish=cancelled completion_tokens=0"]
