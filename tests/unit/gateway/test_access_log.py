"""The access log middleware over bare ASGI apps: one line per request once it is over, the
abandoned ones included (the real server's lines: tests/e2e/test_cancellation.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import pytest

from zest.gateway.http import AccessLog

Scope = Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

SCOPE: dict[str, Any] = {
    "type": "http",
    "method": "POST",
    "path": "/v1/completions",
    "root_path": "",
    "query_string": b"api_key=sk-secret&n=2",
    "http_version": "1.1",
    "client": ("127.0.0.1", 50123),
}


async def answer(send: Send, status: int, *, more: bool = False) -> None:
    headers = [(b"x-request-id", b"req_0123"), (b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"{}", "more_body": more})


async def served(scope: Scope, receive: Receive, send: Send) -> None:
    await answer(send, 200)


async def abandoned(scope: Scope, receive: Receive, send: Send) -> None:
    """As zest answers a client gone before its first token: a 499 nobody reads."""
    while (await receive())["type"] != "http.disconnect":
        pass
    await answer(send, 499)


async def cut_mid_stream(scope: Scope, receive: Receive, send: Send) -> None:
    await answer(send, 200, more=True)
    while (await receive())["type"] != "http.disconnect":
        pass


async def crashing(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError("boom")


def run(app: Any) -> None:
    messages: list[Message] = [{"type": "http.request", "body": b"{}", "more_body": False}]
    messages.append({"type": "http.disconnect"})

    async def receive() -> Message:
        return messages.pop(0)

    async def send(message: Message) -> None:
        pass

    asyncio.run(AccessLog(app)(dict(SCOPE), receive, send))


def line(caplog: pytest.LogCaptureFixture) -> str:
    (record,) = [r for r in caplog.records if r.name == "zest.access"]
    return record.getMessage()


@pytest.mark.parametrize(
    ("app", "status", "note"),
    [
        (served, 200, ""),
        (abandoned, 499, " (the client left before the answer)"),
        (cut_mid_stream, 200, " (the client left mid-answer)"),
    ],
)
def test_every_request_leaves_one_line_when_it_ends(
    caplog: pytest.LogCaptureFixture, app: Any, status: int, note: str
) -> None:
    caplog.set_level(logging.INFO, logger="zest.access")
    run(app)
    logged = line(caplog)
    head = '127.0.0.1:50123 - "POST /v1/completions?api_key=[redacted]&n=2 HTTP/1.1"'
    assert logged.startswith(f"{head} {status} req_0123 ")
    assert logged.endswith(f"s{note}")
    assert "sk-secret" not in logged


def test_an_app_that_fails_before_answering_is_logged_as_a_500(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="zest.access")
    with pytest.raises(RuntimeError):
        run(crashing)
    assert " 500 - " in line(caplog)
    assert line(caplog).endswith("s (the app failed before answering)")


def test_other_scopes_pass_through_unlogged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="zest.access")
    seen: list[str] = []

    async def lifespan(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["type"])

    async def nothing(message: Message | None = None) -> Message:
        return {}

    asyncio.run(AccessLog(lifespan)({"type": "lifespan"}, nothing, nothing))
    assert seen == ["lifespan"]
    assert not [r for r in caplog.records if r.name == "zest.access"]


def test_the_line_names_the_dialect_of_the_endpoint_that_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The handler's opt names its dialect (the router puts the handler in the scope the
    access log wrapped); an endpoint that names none speaks OpenAI's; no endpoint: `-`."""
    from litestar import Litestar, get
    from litestar.testing import TestClient

    from zest.gateway.http._dialect import DIALECT, Dialect

    @get("/plain", sync_to_thread=False)
    def plain() -> str:
        return "ok"

    @get("/other", opt={DIALECT: Dialect("other")}, sync_to_thread=False)
    def other() -> str:
        return "ok"

    caplog.set_level(logging.INFO, logger="zest.access")
    app = Litestar([plain, other], logging_config=None)
    with TestClient(AccessLog(app)) as client:  # type: ignore[arg-type]
        for path in ("/plain", "/other", "/nowhere"):
            client.get(path)
    lines = [r.getMessage() for r in caplog.records if r.name == "zest.access"]
    assert [line.split('" ')[1].split()[2] for line in lines] == ["openai", "other", "-"]
