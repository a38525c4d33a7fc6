"""A job that never started still has its one line (issue 33): one its caller left while it
waited in an engine's waiting room, and one its closing engine never ran."""

from __future__ import annotations

import asyncio

import pytest

from zest.engines import GenerationJob
from zest.engines._worker import Task, WaitingRoom


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    mine = [r.getMessage() for r in caplog.records if r.name == "zest.engines"]
    return [line.split(" seconds=")[0] for line in mine]


def test_a_job_left_in_the_waiting_room_and_one_never_run_each_have_their_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="zest.engines")

    async def scenario() -> list[object]:
        room, results = WaitingRoom(slots=1), asyncio.Queue[object]()
        loop = asyncio.get_running_loop()
        jobs = [GenerationJob.greedy([1, 2], max_tokens=4, label=f"req_{n}") for n in "abc"]
        for job in jobs:
            room.submit(Task(job, loop, results))
        jobs[1].cancel()  # its caller left while it waited
        assert room.next() is not None  # req_a runs
        room.done()
        assert room.next() is not None  # req_b is dropped on the way: req_c's turn
        room.close()
        room.submit(Task(GenerationJob.greedy([1], max_tokens=4, label="req_d"), loop, results))
        await asyncio.sleep(0)  # the ends are delivered on the loop
        return [results.get_nowait() for _ in range(results.qsize())]

    ended = asyncio.run(scenario())
    assert ended == [None, None]  # req_b and req_d: no output, at once
    assert lines(caplog) == [
        "req_b: finish=cancelled prompt_tokens=2 completion_tokens=0 max_tokens=4",
        "req_d: finish=cancelled prompt_tokens=1 completion_tokens=0 max_tokens=4",
    ]
    assert [r.getMessage().rsplit(" (", 1)[1] for r in caplog.records] == [
        "left before its engine started it)",
        "its engine closed before it started)",
    ]
