"""A loopback HTTP proxy in front of the real upstream (llama_cpp.server) that fails in one way
at a time, as `fault` says (see outcomes.Fault). The ideas of tests/upstream.py's counting proxy
(429 with Retry-After, delays, slow and cut streams), on plain asyncio streams so that it can also
stop listening (connection refused) and answer only half (headers, then nothing).

It speaks just enough HTTP/1.1 for zest's remote engine: a request with a Content-Length body,
one request per connection (it answers `connection: close`), the answer relayed line by line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections import Counter

import httpx

from .outcomes import Fault

__all__ = ["CUT_AFTER_EVENTS", "SLOW_EVENT_S", "FaultProxy", "bind_loopback"]

CUT_AFTER_EVENTS = 3  # a cut stream forwards this many events, then drops the connection
SLOW_EVENT_S = 0.4  # a slow stream waits this long before each event after the first
_HANG_CAP_S = 600.0  # a hanging answer waits at most this long for the client to go away
_REASONS = {200: "OK", 429: "Too Many Requests", 503: "Service Unavailable"}


def bind_loopback() -> socket.socket:
    """A socket bound to a free loopback port, not yet listening (connections are refused)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


class FaultProxy:
    """Forwards to `target` (the upstream's root URL) or misbehaves as `fault` says."""

    def __init__(self, target: str, sock: socket.socket) -> None:
        self.target = target.rstrip("/")
        self.port = int(sock.getsockname()[1])
        self.fault = Fault.NONE
        self.in_flight = 0  # requests being answered now (the end-of-run check wants 0)
        self.seen: Counter[Fault] = Counter()  # requests that met each fault
        self._sock: socket.socket | None = sock
        self._server: asyncio.Server | None = None
        self._client: httpx.AsyncClient | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def v1(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(120, connect=5))
        await self._listen()

    async def set_fault(self, fault: Fault) -> None:
        """Switch to `fault`; requests already being answered keep the one they met."""
        if fault is Fault.REFUSED and self._server is not None:
            self._server.close()  # stops listening; connections already open go on
            self._server = None
        elif fault is not Fault.REFUSED and self._server is None:
            await self._listen()
        self.fault = fault

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
        if self._sock is not None:  # never listened
            self._sock.close()

    async def _listen(self) -> None:
        if self._sock is not None:
            sock, self._sock = self._sock, None
            self._server = await asyncio.start_server(self._handle, sock=sock)
        else:  # the same port again, after a refused phase
            self._server = await asyncio.start_server(
                self._handle, "127.0.0.1", self.port, reuse_address=True
            )

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        self.in_flight += 1
        try:
            request = await _read_request(reader)
            if request is not None:
                fault = self.fault
                self.seen[fault] += 1
                await self._answer(fault, request, reader, writer)
        except (ConnectionError, OSError, httpx.HTTPError):
            pass  # the client went away, or the upstream did: the connection ends here
        except asyncio.CancelledError:
            # Stopping: end quietly (asyncio 3.11's stream callback would print a cancelled
            # handler's CancelledError as an error).
            pass
        finally:
            self.in_flight -= 1
            if task is not None:
                self._handlers.discard(task)
            writer.close()

    async def _answer(
        self,
        fault: Fault,
        request: tuple[str, bytes],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        if fault is Fault.RATE_LIMITED:
            await _json(writer, 429, "slow down", {"retry-after": "1"})
        elif fault is Fault.UNAVAILABLE:
            await _json(writer, 503, "the upstream is unavailable", {})
        elif fault is Fault.REFUSED:  # accepted just before the listener closed: reset it
            writer.transport.abort()
        elif fault is Fault.HANG:
            await _until_closed(reader)
        elif fault is Fault.SILENT:
            await _head(writer, 200, "text/event-stream")
            await _until_closed(reader)
        else:
            await self._forward(fault, request, reader, writer)

    async def _forward(
        self,
        fault: Fault,
        request: tuple[str, bytes],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        assert self._client is not None, "start() first"
        path, body = request
        headers = {"content-type": "application/json"}
        url = self.target + path
        async with self._client.stream("POST", url, content=body, headers=headers) as upstream:
            kind = upstream.headers.get("content-type", "application/json")
            await _head(writer, upstream.status_code, kind)
            events = 0
            async for line in upstream.aiter_lines():
                if reader.at_eof():
                    return  # zest went away: closing the upstream stream stops its generation
                if line.startswith("data:"):
                    if fault is Fault.CUT and events == CUT_AFTER_EVENTS:
                        writer.transport.abort()  # no chunked terminator: a broken stream
                        return
                    if fault is Fault.SLOW and events:
                        await asyncio.sleep(SLOW_EVENT_S)
                    events += 1
                await _chunk(writer, (line + "\n").encode())
            writer.write(b"0\r\n\r\n")
            await writer.drain()


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
    """(path, body) of one request; None when the client sent no whole request."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        fields = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
        length = int({k.strip().lower(): v for k, v in fields.items()}.get("content-length", 0))
        return path, await reader.readexactly(length)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, IndexError, ValueError):
        return None


async def _head(writer: asyncio.StreamWriter, status: int, kind: str) -> None:
    reason = _REASONS.get(status, "Status")
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {kind}\r\n"
        "transfer-encoding: chunked\r\nconnection: close\r\n\r\n".encode("latin-1")
    )
    await writer.drain()


async def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
    await writer.drain()


async def _json(
    writer: asyncio.StreamWriter, status: int, message: str, headers: dict[str, str]
) -> None:
    body = json.dumps({"error": {"message": message, "type": "proxy_fault"}}).encode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    writer.write(
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n{extra}"
        "connection: close\r\n\r\n".encode("latin-1")
        + body
    )
    await writer.drain()


async def _until_closed(reader: asyncio.StreamReader) -> None:
    """Wait, sending nothing, until the client closes the connection (or a long cap)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_HANG_CAP_S):
            while await reader.read(1024):
                pass
