"""The drain's bookkeeping: an interruption lands as the shutdown error where a generation
awaits its engine, or at its next await when it was busy elsewhere; nothing else is touched."""

from __future__ import annotations

import asyncio

import pytest

from zest.errors import ShuttingDownError
from zest.gateway.serving import Drain


def test_an_interruption_ends_the_await_on_the_engine_as_the_error() -> None:
    async def scenario() -> None:
        drain = Drain(grace_s=0.05)
        activity = drain.track()

        async def generation() -> None:
            try:
                with activity.awaiting():
                    await asyncio.sleep(60)  # the engine's next delta, never coming
            finally:
                activity.close()  # as a generation's end does

        task = asyncio.ensure_future(generation())
        await asyncio.sleep(0)
        await asyncio.wait_for(drain.run(), 10)  # grace over: interrupted
        with pytest.raises(ShuttingDownError) as ended:
            await task
        assert ended.value.code == "shutting_down"
        assert not task.cancelled()  # the cancellation was turned into the error

    asyncio.run(scenario())


def test_a_generation_busy_elsewhere_meets_the_error_at_its_next_await() -> None:
    activity = Drain().track()
    activity.interrupt(Drain().refusal())
    with pytest.raises(ShuttingDownError), activity.awaiting():
        raise AssertionError("never reached: the error comes first")


def test_a_cancellation_that_is_not_the_drain_s_stays_a_cancellation() -> None:
    async def scenario() -> None:
        activity = Drain().track()

        async def generation() -> None:
            with activity.awaiting():
                await asyncio.sleep(60)

        task = asyncio.ensure_future(generation())
        await asyncio.sleep(0)
        task.cancel()  # a client gone: not the drain's business
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())


def test_the_drain_waits_for_what_finishes_within_the_grace() -> None:
    async def scenario() -> float:
        drain = Drain(grace_s=30)
        activity = drain.track()
        asyncio.get_running_loop().call_later(0.05, activity.close)
        started = asyncio.get_running_loop().time()
        await drain.run()
        assert activity.error is None  # finished on its own: never interrupted
        return asyncio.get_running_loop().time() - started

    assert asyncio.run(scenario()) < 5


def test_work_tracked_once_draining_is_refused_at_once() -> None:
    drain = Drain(grace_s=7)
    drain.draining = True
    activity = drain.track()
    with pytest.raises(ShuttingDownError) as refused:
        activity.check()
    assert refused.value.headers["retry-after"] == "7"
    assert refused.value.message.startswith("the server is shutting down and takes no new")
