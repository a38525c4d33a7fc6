"""What a replica says about a request (gateway/http/_fleet.py): x-zest-replica on every answer
the app sends, errors included, and the affinity key of a generation request, computed the
way clients compute it with zest.affinity_key. The real fleet is tested end to end in
tests/e2e/test_fleet.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from litestar import Litestar, get
from litestar.exceptions import HTTPException
from litestar.testing import TestClient

from zest import affinity_key
from zest.errors import RequestError, ServiceUnavailableError
from zest.gateway.http._app import _http_error, _request_error
from zest.gateway.http._fleet import replica_header, request_affinity
from zest.gateway.serving import ChatMessage, Settings


@get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@get("/busy")
async def busy() -> None:
    raise ServiceUnavailableError("try again")


@pytest.fixture
def client() -> Iterator[TestClient[Litestar]]:
    app = Litestar(
        route_handlers=[health, busy],
        exception_handlers={RequestError: _request_error, HTTPException: _http_error},
        before_send=[replica_header("zest-7 \r\n(eu)")],
        openapi_config=None,
        logging_config=None,
    )
    with TestClient(app) as running:
        yield running


@pytest.mark.parametrize(("path", "status"), [("/health", 200), ("/busy", 503), ("/nope", 404)])
def test_every_answer_names_the_replica(
    client: TestClient[Litestar], path: str, status: int
) -> None:
    answer = client.get(path)
    assert answer.status_code == status
    assert answer.headers["x-zest-replica"] == "zest-7 (eu)"  # one line, whatever was set


def test_the_replica_is_named_by_its_setting_else_host_and_port() -> None:
    assert Settings(replica_name="zest-2").replica() == "zest-2"
    assert Settings(port=9001).replica() == f"{socket.gethostname()}:9001"


MESSAGES = [
    ChatMessage(role="system", content="Be brief."),
    ChatMessage(role="user", content=[{"type": "text", "text": "Hi"}]),  # type: ignore[list-item]
]


def test_a_chat_request_is_keyed_as_a_client_computes_it() -> None:
    sent = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert request_affinity({}, "chat", messages=MESSAGES) == affinity_key(sent, "chat")


def test_a_completion_is_keyed_by_its_prompt() -> None:
    key = request_affinity({}, "autocomplete", prompt="def f():")
    assert key == affinity_key("def f():", "autocomplete")


def test_the_clients_session_id_then_its_key_win() -> None:
    both = {"x-session-id": "s-1", "x-zest-affinity": "k-1"}
    assert request_affinity(both, "chat", messages=MESSAGES) == "s-1"
    assert request_affinity({"x-zest-affinity": "k-1"}, "chat", messages=MESSAGES) == "k-1"
