"""The hostile-input corpus against a real `zest serve`: every case's status is one it may
get, no 5xx but a documented 503/504, every error in OpenAI's shape (short, naming no internal
exception), every accepted stream closed by [DONE] or an error event, and the server alive."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.e2e.conftest import REPO, Server, start_server, stop_server
from tests.e2e.hostile_corpus import (
    ADMIN_KEY,
    ANY,
    KEY,
    LIMIT,
    Case,
    bad_json,
    extreme_numbers,
    field_abuse,
    hostile_strings,
)
from tests.e2e.hostile_http import body_limit, headers, methods, paths
from tests.e2e.rawhttp import Reply, send

ROUTES = REPO / "tests" / "e2e" / "routes" / "hostile.yaml"
CORPUS: list[Case] = [
    *bad_json(),
    *hostile_strings(),
    *extreme_numbers(),
    *field_abuse(),
    *paths(),
    *methods(),
    *headers(),
    *body_limit(),
]
# What an error message may never show: the server's insides.
INTERNAL = (
    "Traceback",
    "Exception",
    "KeyError",
    "ValueError",
    "TypeError",
    "AssertionError",
    "RecursionError",
    "AttributeError",
    "ImproperlyConfigured",
    "pydantic",
    "litestar",
    "msgspec",
    " object at 0x",
)
MAX_MESSAGE = 500  # characters: a message quotes at most the start of what was sent
CLIENTS = 4  # requests in flight at once: the corpus is sent as a few busy clients would


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = {
        "ZEST_API_KEYS": KEY.decode(),
        "ZEST_ADMIN_KEY": ADMIN_KEY.decode(),
        "ZEST_MAX_BODY_BYTES": str(LIMIT),
        "ZEST_CORS_ORIGINS": "",
    }
    running = start_server(ROUTES, tmp_path_factory.mktemp("hostile") / "zest.log", env)
    yield running
    assert running.process.poll() is None, running.log()  # alive after the whole corpus
    stop_server(running)


@pytest.fixture(scope="module")
def replies(hostile: Server) -> dict[str, Reply]:
    """Every case's answer, the corpus sent by CLIENTS clients at once (each case's test then
    reads its own)."""
    port = int(hostile.base_url.rsplit(":", 1)[1])
    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = pool.map(lambda case: send(port, case.raw), CORPUS)
        return {case.id: reply for case, reply in zip(CORPUS, answers, strict=True)}


def test_the_corpus_is_large_and_its_ids_unique() -> None:
    assert len(CORPUS) >= 300
    assert [id for id, n in Counter(c.id for c in CORPUS).items() if n > 1] == []


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_a_hostile_request_gets_a_clean_answer(replies: dict[str, Reply], case: Case) -> None:
    reply = replies[case.id]
    assert reply.status in case.statuses, f"{reply.status}: {reply.body[:600]!r}"
    if case.by_server:  # refused before zest: the HTTP server's own short text answer
        assert reply.status == 0 or reply.media_type == "text/plain"
        return
    if case.raw.startswith(b"HEAD "):  # GET's status and headers, never a body
        assert reply.body == b""
    elif reply.status >= 400:
        check_error(reply, case)
    elif reply.media_type == "text/event-stream":
        check_stream(reply)
    elif reply.status == 200:
        assert reply.media_type in {"application/json", "text/plain"}, reply.headers
        if reply.media_type == "application/json":
            assert isinstance(reply.json(), dict)


def check_error(reply: Reply, case: Case) -> None:
    assert reply.status < 500 or reply.status in {503, 504}, reply.body[:600]
    assert reply.media_type == "application/json", reply.headers
    assert reply.headers["x-request-id"].startswith("req_")
    body = reply.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    message = error["message"]
    assert isinstance(message, str)
    assert message
    assert isinstance(error["type"], str)
    assert error["param"] is None or isinstance(error["param"], str)
    assert error["code"] is None or isinstance(error["code"], str)
    assert len(message) <= MAX_MESSAGE, message
    assert not [word for word in INTERNAL if word in message], message
    if case.param is not ANY:
        assert error["param"] == case.param, message
    assert case.message in message


def check_stream(reply: Reply) -> None:
    """Events to the end: [DONE] (OpenAI's streams), response.completed (the Responses API)
    or an error event."""
    events = [block for block in reply.body.decode().split("\n\n") if block.strip()]
    assert events, reply.body
    last = events[-1]
    data = [line.removeprefix("data: ") for line in last.splitlines() if line.startswith("data: ")]
    assert data, last
    if data[-1] == "[DONE]":
        return
    payload: dict[str, Any] = json.loads(data[-1])
    if payload.get("type") in {"response.completed", "response.incomplete"}:
        return
    error = payload.get("error") or payload.get("response", {}).get("error")
    assert isinstance(error, dict), last
    assert {"message", "type"} <= set(error), error
