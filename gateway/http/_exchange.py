"""What every generation endpoint does around the request path, whatever its dialect: the
request's id, the headers every answer carries, cancelling the work when the client leaves,
and a streamed answer's response (OpenAI's SSE; other dialects pass their media type)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from litestar import Request
from litestar.response import Stream

from zest.errors import ClientDisconnectedError
from zest.gateway.http._body import IGNORED
from zest.gateway.http._fleet import AFFINITY_STATE
from zest.gateway.serving import Generation

__all__ = [
    "event_stream",
    "metadata_read",
    "request_headers",
    "request_id_of",
    "unless_disconnected",
]

T = TypeVar("T")
_REQUEST_ID = "zest_request_id"  # request.state key


def metadata_read(request: Request[Any, Any, Any], gen: Generation) -> None:
    """`metadata` changed nothing unless the task's rules read it (x-zest-ignored says so)."""
    ignored = request.state.get(IGNORED)
    if ignored and "metadata" in ignored and gen.ruled:
        request.state[IGNORED] = [name for name in ignored if name != "metadata"]


def request_id_of(request: Request[Any, Any, Any]) -> str:
    """The request's id, made once: its answer, error or log lines all carry the same."""
    request_id = request.state.get(_REQUEST_ID)
    if not isinstance(request_id, str):
        request_id = request.state[_REQUEST_ID] = "req_" + secrets.token_hex(8)
    return request_id


def request_headers(request: Request[Any, Any, Any], request_id: str) -> dict[str, str]:
    """The request's id, its affinity key (generations), and the fields it sent that changed
    nothing (never ignored silently)."""
    headers = {"x-request-id": request_id}
    if affinity := request.state.get(AFFINITY_STATE):
        headers["x-zest-affinity"] = affinity
    if ignored := request.state.get(IGNORED):
        headers["x-zest-ignored"] = ", ".join(ignored)
    return headers


async def unless_disconnected(request: Request[Any, Any, Any], work: Awaitable[T]) -> T:
    """Await `work`, cancelling it if the client goes away first (its generation stops too)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task  # let the generation unwind before the stream is closed
        raise ClientDisconnectedError("the client went away before the answer was complete")
    return task.result()


async def _disconnect(request: Request[Any, Any, Any]) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def event_stream(
    events: AsyncIterator[bytes],
    headers: dict[str, str],
    media_type: str = "text/event-stream",
) -> Stream:
    """A streamed answer (server-sent events by default), never cached or buffered by a
    proxy."""
    return Stream(
        events,
        media_type=media_type,
        headers={**headers, "cache-control": "no-cache", "x-accel-buffering": "no"},
    )
