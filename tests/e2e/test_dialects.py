"""The routes' rules decide the same for the same text in every dialect zest speaks.

The example's routing cases (examples/routes/routing.cases.jsonl, on examples/routes/routing.yaml
with its three real models) are sent through each dialect's own endpoint; every answer must
name the rule and the route the case expects (x-zest-rule, x-zest-route), whichever door it
came in by. A dialect is only a label: the decision is the one pure function's.

SENDERS maps a dialect to a function that sends a case's text its way; a new dialect adds
its sender there. Cases that need what a dialect cannot say (metadata, which Ollama's API has
no field for; a queue held full) are sent only where they can be; a sender answers None for a
case its dialect cannot say (a completion prompt in Anthropic's Messages API, tools in an MCP
tool call).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.conftest import REPO, Server, start_server, stop_server
from tests.upstream import Behaviour, Proxy

EXAMPLE = REPO / "examples" / "routes" / "routing.yaml"
CASES = [
    json.loads(line)
    for line in (REPO / "examples" / "routes" / "routing.cases.jsonl").read_text().splitlines()
]
COMPLETION_TASKS = {"autocomplete"}


@dataclass(frozen=True)
class Case:
    """A request's routing inputs, as every dialect can send them."""

    task: str
    messages: list[dict[str, Any]] | None = None
    prompt: str | list[str] | None = None  # a list: OpenAI's batch of prompts
    tools: list[dict[str, Any]] | None = None


Sender = Callable[[Server, Case], httpx.Response | None]


def send_openai(server: Server, case: Case) -> httpx.Response:
    if case.prompt is not None:
        body: dict[str, Any] = {"model": case.task, "prompt": case.prompt, "max_tokens": 1}
        return httpx.post(f"{server.v1}/completions", json=body, timeout=900)
    body = {"model": case.task, "messages": case.messages, "max_tokens": 1}
    if case.tools:
        body["tools"] = case.tools
    return httpx.post(f"{server.v1}/chat/completions", json=body, timeout=900)


def send_ollama(server: Server, case: Case) -> httpx.Response | None:
    options = {"num_predict": 1}
    if isinstance(case.prompt, list):
        return None  # Ollama's generate takes one prompt
    if case.prompt is not None:
        body: dict[str, Any] = {"model": case.task, "prompt": case.prompt, "options": options}
        return httpx.post(f"{server.base_url}/api/generate", json=body | {"stream": False},
                          timeout=900)  # fmt: skip
    body = {"model": f"{case.task}:latest", "messages": case.messages, "options": options}
    if case.tools:
        body["tools"] = case.tools
    return httpx.post(f"{server.base_url}/api/chat", json=body | {"stream": False}, timeout=900)


def send_anthropic(server: Server, case: Case) -> httpx.Response | None:
    if case.prompt is not None:
        return None  # Anthropic's Messages API has no completions
    body: dict[str, Any] = {"model": case.task, "messages": case.messages, "max_tokens": 1}
    if case.tools:
        body["tools"] = [
            {
                "name": tool["function"]["name"],
                "description": tool["function"].get("description", ""),
                "input_schema": tool["function"].get("parameters", {"type": "object"}),
            }
            for tool in case.tools
        ]
    headers = {"anthropic-version": "2023-06-01"}
    return httpx.post(f"{server.v1}/messages", json=body, headers=headers, timeout=900)


def send_mcp(server: Server, case: Case) -> httpx.Response | None:
    """A tools/call of the task (the official mcp client): the decision comes back in the
    result's zest object, here as the headers an HTTP answer would carry."""
    from mcp import Client

    if case.tools:
        return None  # a tool call sends its task's arguments, no tools of its own
    if isinstance(case.prompt, list):
        return None  # a task's tool takes one prompt
    arguments: dict[str, Any] = {"max_tokens": 1}
    if case.prompt is not None:
        arguments["prompt"] = case.prompt
    else:
        arguments["messages"] = case.messages

    async def call() -> Any:
        async with Client(f"{server.base_url}/mcp", mode="legacy") as client:
            return await client.call_tool(case.task, arguments)

    result = asyncio.run(call())
    if result.is_error:
        return httpx.Response(result.structured_content["status"], json=result.structured_content)
    zest = result.structured_content["zest"]
    route = f"task={zest['task']}; model={zest['model']}; device={zest['device']}"
    headers = {"x-zest-rule": zest["matched_rule"] or "default", "x-zest-route": route}
    return httpx.Response(200, headers=headers)


SENDERS: dict[str, Sender] = {
    "openai": send_openai,
    "ollama": send_ollama,
    "anthropic": send_anthropic,
    "mcp": send_mcp,
}


def _case(raw: dict[str, Any]) -> Case | None:
    """The case as every dialect can send it (None: it needs more than text and tools)."""
    request = raw["request"]
    if "waiting" in raw or "metadata" in request or "input" in request:
        return None
    if raw["task"] in COMPLETION_TASKS:
        return Case(raw["task"], prompt=request["prompt"])
    return Case(raw["task"], messages=request["messages"], tools=request.get("tools"))


SENDABLE = [(raw["name"], raw["expect"], case) for raw in CASES if (case := _case(raw))]


@pytest.fixture(scope="module")
def proxy() -> Iterator[Proxy]:
    """A counting upstream that answers every request 500 (nothing behind it)."""
    running = Proxy("http://127.0.0.1:9/v1", Behaviour(status=500))
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, proxy: Proxy) -> Iterator[Server]:
    """The example's routes, with a local_only route whose rule sends on to a remote one."""
    routes: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    routes["models"]["upstream"] = {
        "engine": "remote",
        "base_url": proxy.v1,
        "model": "upstream-model",
        "retries": 0,
    }
    routes["routes"]["chat-open"] = {
        "kind": "chat",
        "model": "upstream",
        "fallback": [{"model": "smollm2"}],
        "privacy": "allow_remote",
        "max_tokens": 8,
    }
    routes["routes"]["private"] = {
        "kind": "chat",
        "model": "smollm2",
        "max_tokens": 8,
        "rules": [{"id": "open", "when": {"keywords_any": ["open"]}, "to": "chat-open"}],
    }
    folder = tmp_path_factory.mktemp("dialects")
    path = folder / "routes.yaml"
    path.write_text(yaml.safe_dump(routes, sort_keys=False))
    running = start_server(path, folder / "zest.log", {"ZEST_WATCH": "false"})
    # The rules' model-backed conditions have time limits (timeout_s): their models are
    # loaded first, so that no case's decision depends on how long a load takes here.
    for task in ("classifier", "embed"):
        loaded = httpx.post(f"{running.v1}/load", json={"model": task}, timeout=900)
        assert loaded.status_code == 200, loaded.text
    yield running
    stop_server(running)


def decided(answer: httpx.Response) -> tuple[str, str]:
    """The rule that decided and the route that served, as the answer's headers say."""
    assert answer.status_code == 200, answer.text
    return answer.headers["x-zest-rule"], answer.headers["x-zest-route"].split(";")[0]


def test_every_dialect_has_cases_to_send() -> None:
    assert len(SENDABLE) >= 14
    assert {expect["rule"] for _, expect, _ in SENDABLE} >= {"code", "math", "agent", "long"}


@pytest.mark.parametrize(("name", "expect", "case"), SENDABLE, ids=[n for n, _, _ in SENDABLE])
def test_the_same_text_is_routed_the_same_in_every_dialect(
    server: Server, name: str, expect: dict[str, Any], case: Case
) -> None:
    answers = {dialect: send(server, case) for dialect, send in SENDERS.items()}
    seen = {dialect: decided(answer) for dialect, answer in answers.items() if answer is not None}
    expected = (expect["rule"], f"task={expect['route']}")
    assert seen == dict.fromkeys(seen, expected), name
    # Every case goes through two dialects at least; a prompt list, only OpenAI's can say.
    assert {"openai", "ollama"} <= set(seen) or (isinstance(case.prompt, list) and "openai" in seen)


@pytest.mark.parametrize("dialect", sorted(SENDERS))
def test_a_local_only_request_never_reaches_the_upstream_in_any_dialect(
    server: Server, proxy: Proxy, dialect: str
) -> None:
    proxy.requests.clear()
    case = Case("private", messages=[{"role": "user", "content": "open the pod bay doors"}])
    answer = SENDERS[dialect](server, case)
    assert answer is not None
    assert decided(answer) == ("open", "task=chat-open")
    assert answer.headers["x-zest-route"].startswith("task=chat-open; model=smollm2;")
    assert proxy.requests == []  # privacy only tightens along a rule, whatever the door
