"""The remote engine against httpx.MockTransport: its stream parsing and every fault, with a
fake clock for retries (no upstream, no real sleeps), and the runner's bound in front of it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from zest.engines import Delta, GenerationJob, Prompt
from zest.engines._admission import Admission
from zest.engines._remote import RemoteEngine
from zest.engines._runner import Runner
from zest.errors import OverloadedError, RequestError, ServiceUnavailableError
from zest.router import REMOTE_DEVICE, Placement, RemoteModel

CONFIG = RemoteModel(engine="remote", base_url="http://upstream.test/v1", model="m")
HERE = Placement(REMOTE_DEVICE, REMOTE_DEVICE)


def chunk(text: str = "", finish: str | None = None, usage: dict[str, int] | None = None) -> str:
    event: dict[str, object] = {
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]
    }
    if usage:
        event = {"choices": [], "usage": usage}
    return f"data: {json.dumps(event)}\n\n"


STREAM = (
    chunk("Hel")
    + chunk("lo")
    + chunk("", "stop")
    + chunk(usage={"prompt_tokens": 5, "completion_tokens": 2})
    + "data: [DONE]\n\n"
)


def sse(body: str = STREAM) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)


class Clock:
    def __init__(self) -> None:
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def engine(handler: Callable[[httpx.Request], httpx.Response], clock: Clock) -> RemoteEngine:
    made = RemoteEngine(
        "up", CONFIG, Path("."), HERE, transport=httpx.MockTransport(handler), sleep=clock.sleep
    )
    made.load()
    return made


def job() -> GenerationJob:
    plain = GenerationJob.greedy(Prompt.chat([{"role": "user", "content": "Hi"}]), max_tokens=8)
    return replace(plain, privacy="allow_remote")


async def collect(remote: RemoteEngine) -> list[Delta]:
    try:
        return [delta async for delta in remote.stream(job())]
    finally:
        await remote.close()


def answers(
    *responses: httpx.Response,
) -> tuple[Callable[[httpx.Request], httpx.Response], list[httpx.Request]]:
    seen: list[httpx.Request] = []
    queue = list(responses)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return queue.pop(0)

    return handler, seen


def test_a_streamed_answer_becomes_deltas_with_the_upstreams_usage() -> None:
    handler, seen = answers(sse())
    deltas = asyncio.run(collect(engine(handler, Clock())))
    assert "".join(d.text for d in deltas) == "Hello"
    assert deltas[-1].finish_reason == "stop"
    assert (deltas[-1].prompt_tokens, deltas[-1].completion_tokens) == (5, 2)
    sent = json.loads(seen[0].content)
    assert (sent["model"], sent["stream"], sent["messages"]) == (
        "m",
        True,
        [{"role": "user", "content": "Hi"}],
    )


def test_a_429_with_retry_after_is_waited_for_on_the_clock_then_retried() -> None:
    clock = Clock()
    handler, seen = answers(httpx.Response(429, headers={"retry-after": "2"}, json={}), sse())
    deltas = asyncio.run(collect(engine(handler, clock)))
    assert "".join(d.text for d in deltas) == "Hello"
    assert (len(seen), clock.slept) == (2, [2.0])


def test_an_upstream_that_keeps_answering_503_is_a_503_after_its_retries() -> None:
    clock = Clock()
    handler, seen = answers(*[httpx.Response(503, json={"error": {"message": "down"}})] * 3)
    with pytest.raises(ServiceUnavailableError) as failed:
        asyncio.run(collect(engine(handler, clock)))
    assert failed.value.code == "upstream_unavailable"
    assert failed.value.message.endswith("(after 2 retries)")
    assert (len(seen), len(clock.slept)) == (3, 2)


def test_a_pool_timeout_is_zests_own_overload_not_an_unreachable_upstream() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.PoolTimeout("no connection free")

    with pytest.raises(OverloadedError) as failed:
        asyncio.run(collect(engine(handler, Clock())))
    assert failed.value.code != "upstream_unreachable"
    assert "every connection to upstream http://upstream.test/v1 is busy" in failed.value.message


def test_a_refused_connection_is_an_unreachable_upstream() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    with pytest.raises(ServiceUnavailableError) as failed:
        asyncio.run(collect(engine(handler, Clock())))
    assert failed.value.code == "upstream_unreachable"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("data: {not json\n\n", "sent an invalid event"),
        (chunk("Hel"), "the stream ended before it finished"),
        ('data: {"error": {"message": "boom"}}\n\n', "failed: boom"),
    ],
    ids=["invalid-json", "cut-short", "error-event"],
)
def test_a_broken_stream_is_an_engine_error_naming_what_broke(body: str, message: str) -> None:
    handler, _ = answers(sse(body))
    with pytest.raises(RequestError, match=message):
        asyncio.run(collect(engine(handler, Clock())))


def test_the_runner_bounds_an_upstream_to_max_in_flight_before_asking_it() -> None:
    release = asyncio.Event()
    seen: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        await release.wait()
        return sse()

    async def scenario() -> None:
        remote = RemoteEngine("up", CONFIG, Path("."), HERE, transport=httpx.MockTransport(handler))
        remote.load()
        runner = Runner(remote, Admission(slots=1, max_queue=0))

        async def run() -> list[Delta]:
            return [delta async for delta in runner.stream(job())]

        first = asyncio.ensure_future(run())
        await asyncio.sleep(0.01)
        with pytest.raises(OverloadedError) as refused:
            await run()
        assert refused.value.retry_after is not None
        assert len(seen) == 1  # the refused request never reached the upstream
        release.set()
        assert "".join(d.text for d in await first) == "Hello"
        await remote.close()

    asyncio.run(scenario())


def test_a_remote_job_stopped_before_its_end_still_has_its_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As a local job's (issue 33): finish=cancelled with what came so far; a job read to its
    end has the one line of its end."""
    caplog.set_level("INFO", logger="zest.engines")
    handler, _ = answers(sse(), sse())

    async def scenario() -> None:
        remote = engine(handler, Clock())
        try:
            deltas = remote.stream(replace(job(), label="req_a"))
            assert (await anext(deltas)).text == "Hel"
            await deltas.aclose()  # its client left
            whole = [d.text async for d in remote.stream(replace(job(), label="req_b"))]
            assert "".join(whole) == "Hello"
        finally:
            await remote.close()

    asyncio.run(scenario())
    written = [r.getMessage() for r in caplog.records if r.name == "zest.engines"]
    assert [line.split(" seconds=")[0] for line in written] == [
        "req_a: finish=cancelled prompt_tokens=unknown completion_tokens=1 max_tokens=8",
        "req_b: finish=stop prompt_tokens=5 completion_tokens=2 max_tokens=8",
    ]
