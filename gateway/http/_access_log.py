"""The access log: one line per HTTP request, written when it is over, abandoned ones included,
and never with a credential in it.

uvicorn writes its access line when an answer's headers go out, and not at all once the client
is gone: a request abandoned before its first token (queued, prefilling, loading its model) left
no line. `AccessLog` wraps the app instead and writes each request's line when it ends: the
status sent (499 when the client left before any answer), the request id, the API dialect its
endpoint speaks (openai, anthropic, ...: `-` when no endpoint matched), the caller (a named
client's name, never its key; anonymous, admin; `-` where no key was asked), how long it took,
and whether the client left early. Values of key-like query parameters (`?api_key=`, `token=`, ...)
are replaced before the line is written.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from zest.gateway.http._callers import caller_name
from zest.gateway.http._dialect import dialect_of

__all__ = ["AccessLog", "RedactCredentials", "redact_query"]

log = logging.getLogger("zest.access")
CLIENT_GONE = 499  # nginx's code: the client closed the connection before the answer
# Plain ASGI: the middleware reads a few keys of each message and passes every one on.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Any, Any, Any], Awaitable[None]]

# A parameter named like a credential: key, api_key, x-api-key, token, access_token, secret, ...
_SECRET_PARAM = re.compile(
    r"(?P<name>(?<![^&])(?:[\w.-]*[_.-])?(?:api_?key|key|token|secret|password|auth|"
    r"authorization))=(?P<value>[^&]*)",
    re.I,
)


def redact_query(target: str) -> str:
    """`path?api_key=sk-1&n=2` -> `path?api_key=[redacted]&n=2`."""
    path, sep, query = target.partition("?")
    if not sep:
        return target
    return path + "?" + _SECRET_PARAM.sub(lambda m: f"{m['name']}=[redacted]", query)


class RedactCredentials(logging.Filter):
    """On uvicorn.access (an app served by another uvicorn set-up): its args are (client,
    method, path with query, version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], redact_query(args[2]), *args[3:])
        return True


@dataclass
class _Exchange:
    """What one request's messages showed: the status sent, the request id, whether the whole
    answer went out, whether the client left."""

    status: int | None = None
    request_id: str = "-"
    complete: bool = False
    gone: bool = False

    def seen_sent(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            for name, value in message.get("headers", ()):
                if name.lower() == b"x-request-id":
                    self.request_id = value.decode("latin-1")
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete = True

    def outcome(self, failed: bool) -> tuple[int, str]:
        """The status to log, and what happened when the answer did not simply go out."""
        if self.gone and (self.status is None or self.status == CLIENT_GONE):
            return CLIENT_GONE, " (the client left before the answer)"
        if self.status is None:
            return 500, " (the app failed before answering)" if failed else ""
        if self.gone and not self.complete:
            return self.status, " (the client left mid-answer)"
        return self.status, ""


class AccessLog:
    """ASGI middleware: every HTTP request's access line, once it is over."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, exchange = time.perf_counter(), _Exchange()
        target = _target(scope)  # as sent: a mounted app's router rewrites the scope's path
        scope.setdefault("state", {})  # where the guard puts the caller, read back below

        async def watched_receive() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                exchange.gone = True
            return message

        async def watched_send(message: Message) -> None:
            exchange.seen_sent(message)
            await send(message)

        failed = True
        try:
            await self.app(scope, watched_receive, watched_send)
            failed = False
        finally:
            status, note = exchange.outcome(failed)
            log.info(
                '%s - "%s %s HTTP/%s" %d %s %s %s %.3fs%s',
                _client(scope),
                scope["method"],
                redact_query(target),
                scope.get("http_version", "1.1"),
                status,
                exchange.request_id,
                dialect_of(scope).name,  # the app's router put the handler in the scope
                caller_name(scope),  # a client's name, never its key (- where none was asked)
                time.perf_counter() - started,
                note,
            )


def _client(scope: Scope) -> str:
    client: Any = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "-"


def _target(scope: Scope) -> str:
    path = scope.get("root_path", "") + scope["path"]
    query = scope.get("query_string", b"").decode("latin-1")
    return f"{path}?{query}" if query else path
