"""bench/soak.py's fault proxy on loopback, in front of a tiny fake upstream that streams six
events: each fault does what the soak counts on (no model, a second or two in all)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from zest.bench._soak import proxy as proxy_module
from zest.bench._soak.outcomes import Fault
from zest.bench._soak.proxy import CUT_AFTER_EVENTS, FaultProxy, bind_loopback

EVENTS = [f'data: {{"n": {n}}}' for n in range(5)] + ["data: [DONE]"]
BODY = {"model": "m", "stream": True}


async def _fake_upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    await reader.readexactly(length)
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
        b"connection: close\r\n\r\n"
    )
    for event in EVENTS:
        data = (event + "\n\n").encode()
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    writer.close()


@asynccontextmanager
async def running() -> AsyncIterator[FaultProxy]:
    upstream = await asyncio.start_server(_fake_upstream, "127.0.0.1", 0)
    port = upstream.sockets[0].getsockname()[1]
    proxy = FaultProxy(f"http://127.0.0.1:{port}", bind_loopback())
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()
        upstream.close()


def run(test: Callable[[FaultProxy, httpx.AsyncClient], Awaitable[None]]) -> None:
    async def main() -> None:
        async with running() as proxy, httpx.AsyncClient(timeout=0.5) as client:
            await test(proxy, client)

    asyncio.run(main())


async def lines(proxy: FaultProxy, client: httpx.AsyncClient) -> list[str]:
    url = f"{proxy.v1}/chat/completions"
    async with client.stream("POST", url, json=BODY) as response:
        assert response.status_code == 200
        return [line async for line in response.aiter_lines() if line]


def test_healthy_it_forwards_the_whole_stream() -> None:
    async def test(proxy: FaultProxy, client: httpx.AsyncClient) -> None:
        assert await lines(proxy, client) == EVENTS
        assert proxy.seen == {Fault.NONE: 1}

    run(test)


@pytest.mark.parametrize(("fault", "status"), [(Fault.RATE_LIMITED, 429), (Fault.UNAVAILABLE, 503)])
def test_it_answers_the_overloaded_statuses(fault: Fault, status: int) -> None:
    async def test(proxy: FaultProxy, client: httpx.AsyncClient) -> None:
        await proxy.set_fault(fault)
        answer = await client.post(f"{proxy.v1}/chat/completions", json=BODY)
        assert answer.status_code == status
        assert answer.headers.get("retry-after") == ("1" if status == 429 else None)
        assert answer.json()["error"]["type"] == "proxy_fault"

    run(test)


def test_refused_stops_listening_and_the_same_port_serves_again_after() -> None:
    async def test(proxy: FaultProxy, client: httpx.AsyncClient) -> None:
        await proxy.set_fault(Fault.REFUSED)
        with pytest.raises(httpx.ConnectError):
            await client.post(f"{proxy.v1}/chat/completions", json=BODY)
        await proxy.set_fault(Fault.NONE)
        assert await lines(proxy, client) == EVENTS

    run(test)


def test_a_hang_sends_nothing_and_ends_when_the_client_goes() -> None:
    async def test(proxy: FaultProxy, client: httpx.AsyncClient) -> None:
        await proxy.set_fault(Fault.HANG)
        with pytest.raises(httpx.ReadTimeout):
            await client.post(f"{proxy.v1}/chat/completions", json=BODY)
        for _ in range(50):  # the client closed its connection: the proxy lets go
            if not proxy.in_flight:
                break
            await asyncio.sleep(0.02)
        assert proxy.in_flight == 0

    run(test)


def test_silent_sends_the_headers_then_nothing() -> None:
    async def test(proxy: FaultProxy, client: httpx.AsyncClient) -> None:
        await proxy.set_fault(Fault.SILENT)
        url = f"{proxy.v1}/chat/completions"
        async with client.stream("POST", url, json=BODY) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream"
            with pytest.raises(httpx.ReadTimeout):
                await response.aread()

    run(test)


def test_a_cut_drops_the_connection_after_a_few_events() -> None:
    async def read_until_cut(proxy: FaultProxy, client: httpx.AsyncClient, got: list[str]) -> None:
        async with client.stream("POST", f"{proxy.v1}/chat/completions", json=BODY) as response:
            async for line in response.aiter_lines():
                if line:
                    got.append(line)  # one by one: the events before the cut are kept

    async def test(proxy: FaultProxy, client: httpx.AsyncClient) -> None:
        await proxy.set_fault(Fault.CUT)
        got: list[str] = []
        with pytest.raises(httpx.RemoteProtocolError):
            await read_until_cut(proxy, client, got)
        assert got == EVENTS[:CUT_AFTER_EVENTS]

    run(test)


def test_slow_delays_every_event_after_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy_module, "SLOW_EVENT_S", 0.05)

    async def test(proxy: FaultProxy, client: httpx.AsyncClient) -> None:
        await proxy.set_fault(Fault.SLOW)
        started = time.monotonic()
        assert await lines(proxy, client) == EVENTS
        assert time.monotonic() - started >= 0.05 * (len(EVENTS) - 1)

    run(test)
