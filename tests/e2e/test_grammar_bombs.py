"""Grammar bombs at full size against the real default server: each is refused with a 400 that
names the keyword and the limit while other users' requests are served, and the server is
still alive and serving afterwards. A grammar-heavy request (a schema at the bounds) runs
beside a plain chat without holding it: the plain answer comes while the heavy one goes on."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e

BOMBS: dict[str, tuple[dict[str, Any], str]] = {
    "max-length": ({"type": "string", "maxLength": 100000}, "maxLength 100000 is over"),
    "min-length": ({"type": "string", "minLength": 20000}, "minLength 20000 is over"),
    "max-items": ({"type": "array", "items": {}, "maxItems": 100000}, "maxItems 100000 is over"),
    "min-items": (
        {"type": "array", "items": {"type": "integer"}, "minItems": 10**7},
        "minItems 10000000 is over",
    ),
    "pattern": ({"type": "string", "pattern": "^a{0,100000}$"}, "repeats 100000 times"),
    "enum-100k": (
        {"enum": [f"value-{i}" for i in range(100_000)]},
        "more than zest's limit of 1000 enum/const values",
    ),
}


def bodies(schema: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """The schema at every place a request carries one: path and body."""
    message = [{"role": "user", "content": "x"}]
    response_format = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    return {
        "response_format": (
            "/v1/chat/completions",
            {"model": "chat", "messages": message, "response_format": response_format},
        ),
        "tools": ("/v1/chat/completions", {"model": "chat", "messages": message, "tools": [tool]}),
        "responses": (
            "/v1/responses",
            {
                "model": "chat",
                "input": "x",
                "text": {"format": {"type": "json_schema", "name": "x", "schema": schema}},
            },
        ),
        "task": ("/v1/tasks/chat", {"input": "x", "response_format": response_format}),
    }


CASES = [(bomb, entry) for bomb in BOMBS for entry in bodies({})]


@pytest.mark.parametrize(("bomb", "entry"), CASES, ids=[f"{b}/{e}" for b, e in CASES])
def test_a_full_size_bomb_is_a_400_naming_the_limit(
    http: httpx.Client, bomb: str, entry: str
) -> None:
    schema, message = BOMBS[bomb]
    path, body = bodies(schema)[entry]
    reply = http.post(path, json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert message in error["message"]
    assert "(zest's limits: docs/structured-outputs.md)" in error["message"]
    assert error["type"] == "invalid_request_error"


def test_bombs_beside_a_plain_chat_leave_it_and_the_server_serving(
    server: Server, http: httpx.Client
) -> None:
    every = [bodies(schema)[entry] for schema, _ in BOMBS.values() for entry in bodies({})]

    def plain() -> httpx.Response:
        body = {"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
        return httpx.post(f"{server.v1}/chat/completions", json=body, timeout=600)

    with ThreadPoolExecutor(4) as pool:
        chat = pool.submit(plain)
        refused = list(pool.map(lambda pb: http.post(pb[0], json=pb[1]).status_code, every))
        assert chat.result().status_code == 200, chat.result().text
    assert set(refused) == {400}
    assert http.get("/v1/health").status_code == 200
    assert plain().status_code == 200
    assert server.process.poll() is None


def test_a_grammar_heavy_request_beside_a_plain_one(server: Server) -> None:
    """A schema at the enum bound makes a constrained draw walk 1,000 alternatives; a plain
    chat sent once the heavy answer streams still answers first (bench/grammar_neighbour.py
    measures how much longer it takes than alone)."""
    values = [f"option {i}" for i in range(1000)]
    schema = {
        "type": "object",
        "properties": {"picks": {"type": "array", "items": {"enum": values}, "minItems": 8}},
        "required": ["picks"],
    }
    heavy_body = {
        "model": "chat",
        "messages": [{"role": "user", "content": "Pick eight options."}],
        "max_tokens": 200,
        "temperature": 0,
        "stream": True,
        "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}},
    }
    streaming, finished = threading.Event(), []

    def heavy() -> str:
        text = ""
        with httpx.stream(
            "POST", f"{server.v1}/chat/completions", json=heavy_body, timeout=300
        ) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line.removeprefix("data: "))
                    text += chunk["choices"][0]["delta"].get("content") or ""
                    streaming.set()
        finished.append("heavy")
        return text

    def plain() -> dict[str, Any]:
        body = {"model": "chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
        reply = httpx.post(f"{server.v1}/chat/completions", json=body, timeout=300)
        finished.append("plain")
        assert reply.status_code == 200, reply.text
        return dict(reply.json())

    with ThreadPoolExecutor(2) as pool:
        heavy_text = pool.submit(heavy)
        assert streaming.wait(120)
        answer = pool.submit(plain).result()
        picks = json.loads(heavy_text.result())["picks"]
    assert finished == ["plain", "heavy"]
    assert answer["usage"]["completion_tokens"] <= 4
    assert len(picks) >= 8
    assert set(picks) <= set(values)
