"""The Outbox: a scheduling step's deltas reach the event loop in one wake-up, in order."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from zest.engines import Delta, GenerationJob, Prompt
from zest.engines._worker import Outbox, Task


def job() -> GenerationJob:
    return GenerationJob.greedy(Prompt.completion("hi"), max_tokens=4)


def counting_wakeups(loop: asyncio.AbstractEventLoop) -> list[int]:
    """Count the loop's call_soon_threadsafe calls (each writes to its wake-up pipe)."""
    calls: list[int] = []
    real = loop.call_soon_threadsafe

    def counted(callback: Any, *args: Any) -> Any:
        calls.append(1)
        return real(callback, *args)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    return calls


def in_thread(work: Any) -> None:
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()


async def drain(task: Task) -> list[Any]:
    items = []
    while (item := await task.results.get()) is not None:
        items.append(item.text if isinstance(item, Delta) else item)
    return items


def test_a_steps_deltas_for_three_streams_wake_the_loop_once_in_order() -> None:
    asyncio.run(three_streams_one_step())


async def three_streams_one_step() -> None:
    loop = asyncio.get_running_loop()
    wakeups = counting_wakeups(loop)
    outbox = Outbox()
    tasks = [Task(job(), loop, asyncio.Queue(), outbox=outbox) for _ in range(3)]

    def step() -> None:  # as the scheduling thread sends them: interleaved, then ended
        for word in ("a", "b"):
            for number, task in enumerate(tasks):
                task.send(Delta(f"{word}{number}"))
        for task in tasks:
            task.send(None)
        assert all(task.results.empty() for task in tasks)  # held until the flush
        outbox.flush()

    in_thread(step)
    answers = await asyncio.gather(*(drain(task) for task in tasks))
    assert answers == [["a0", "b0"], ["a1", "b1"], ["a2", "b2"]]
    assert len(wakeups) == 1


def test_a_step_with_nothing_to_say_wakes_nobody() -> None:
    asyncio.run(empty_step())


async def empty_step() -> None:
    loop = asyncio.get_running_loop()
    wakeups = counting_wakeups(loop)
    in_thread(Outbox().flush)
    await asyncio.sleep(0)
    assert wakeups == []


def test_a_task_without_an_outbox_is_sent_to_at_once() -> None:
    asyncio.run(direct_send())


async def direct_send() -> None:
    task = Task(job(), asyncio.get_running_loop(), asyncio.Queue())
    in_thread(lambda: (task.send(Delta("x")), task.send(None)))
    assert await drain(task) == ["x"]


def test_a_closed_loop_cancels_the_jobs_it_would_have_carried() -> None:
    loop = asyncio.new_event_loop()
    outbox = Outbox()
    task = Task(job(), loop, asyncio.Queue(), outbox=outbox)
    loop.close()
    task.send(Delta("lost"))
    outbox.flush()
    assert task.job.cancelled.is_set()
