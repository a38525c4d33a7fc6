"""The MCP server (/mcp, Streamable HTTP) with the official mcp client on the real server:
initialize, tools/list (each task a tool, and list_tasks), tools/call for chat and
summarization, failures as isError results, both protocol eras (the initialize handshake and
2026's per-request envelope), the app's keys, Host and Origin checks, privacy through the
rules, and tools/list_changed when a reload changes the tasks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.conftest import HOSTILE_KEY, Server, start_server, stop_server
from tests.e2e.dialect_routes import write_routes
from tests.e2e.prometheus import scrape, total
from tests.upstream import Proxy

TASKS = ["chat", "summarization", "autocomplete", "remote-chat", "chat-open", "private", "looks"]
HELLO = [{"role": "user", "content": "Say hello."}]
TEXT = (
    "The city council met on Tuesday and agreed to rebuild the old bridge over the river "
    "next spring, after engineers found cracks in two of its pillars."
)
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
ACCEPT = {"accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, upstream_proxy: Proxy
) -> Iterator[tuple[Server, Path]]:
    folder = tmp_path_factory.mktemp("mcp")
    routes = write_routes(folder, upstream_proxy)
    running = start_server(routes, folder / "zest.log", {"ZEST_EMULATE_DEVICES": ""})
    yield running, routes
    stop_server(running)


@pytest.fixture
def zest(served: tuple[Server, Path]) -> Server:
    return served[0]


@asynccontextmanager
async def connected(
    server: Server, mode: str = "legacy", headers: dict[str, str] | None = None, **options: Any
) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers=headers or {}, timeout=600)
    transport = streamable_http_client(f"{server.base_url}/mcp", http_client=http)
    async with http, Client(transport, mode=mode, **options) as client:  # type: ignore[arg-type]
        yield client


def run(scenario: Any) -> Any:
    return asyncio.run(scenario)


def test_initialize_lists_each_task_as_a_tool(zest: Server) -> None:
    async def scenario() -> Any:
        async with connected(zest) as client:
            assert client.protocol_version == "2025-11-25"
            assert client.server_info is not None
            assert client.server_info.name == "zest"
            tools = client.server_capabilities.tools
            assert tools is not None
            assert tools.list_changed is True  # a reload changes them
            return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in run(scenario())}
    assert list(tools) == [*TASKS, "list_tasks"]
    assert tools["chat"].description == "General assistant chat."
    assert tools["chat"].input_schema["required"] == ["messages"]
    assert tools["autocomplete"].input_schema["required"] == ["prompt"]
    assert tools["chat"].input_schema["properties"]["max_tokens"]["maximum"] == 64
    assert set(tools["summarization"].input_schema["properties"]) == {
        "messages",
        "max_tokens",
        "temperature",
    }


def test_chat_and_summarization_answer_through_their_tools(zest: Server) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with connected(zest) as client:
            chat = await client.call_tool(
                "chat", {"messages": HELLO, "max_tokens": 8, "temperature": 0.7}
            )
            summary = await client.call_tool(
                "summarization", {"messages": [{"role": "user", "content": TEXT}]}
            )
            return chat, summary

    chat, summary = run(scenario())
    for result, task in ((chat, "chat"), (summary, "summarization")):
        assert result.is_error is False
        assert result.content[0].type == "text"
        assert result.content[0].text == result.structured_content["text"]
        assert result.content[0].text.strip()
        assert result.structured_content["zest"]["task"] == task
        assert result.structured_content["finish_reason"] in {"stop", "length"}
    assert 0 < chat.structured_content["usage"]["completion_tokens"] <= 8
    # The route's system prompt is part of what summarization reads.
    assert summary.structured_content["usage"]["prompt_tokens"] > 40


def test_the_2026_protocol_serves_the_same_tools(zest: Server) -> None:
    async def scenario() -> tuple[str, list[str], Any]:
        async with connected(zest, mode="auto") as client:
            names = [tool.name for tool in (await client.list_tools()).tools]
            answer = await client.call_tool("autocomplete", {"prompt": "Once upon a time"})
            return client.protocol_version, names, answer

    version, names, answer = run(scenario())
    assert version == "2026-07-28"
    assert names == [*TASKS, "list_tasks"]
    assert answer.is_error is False
    assert answer.structured_content["zest"]["task"] == "autocomplete"


def test_list_tasks_says_each_kind_model_and_device(zest: Server) -> None:
    async def scenario() -> Any:
        async with connected(zest) as client:
            return await client.call_tool("list_tasks", {})

    result = run(scenario())
    assert result.is_error is False
    tasks = {task["name"]: task for task in result.structured_content["tasks"]}
    assert list(tasks) == TASKS
    assert tasks["chat"] == {
        "name": "chat",
        "kind": "chat",
        "model": "smollm2",
        "device": "cpu",
        "description": "General assistant chat.",
    }
    assert tasks["remote-chat"]["device"] == "remote"
    assert json.loads(result.content[0].text) == result.structured_content


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        (
            "nope",
            {},
            "unknown tool 'nope': use one of chat, summarization, autocomplete, remote-chat, "
            "chat-open, private, looks, list_tasks (tools/list)",
        ),
        (
            "chat",
            {"messages": []},
            "messages: List should have at least 1 item after validation, not 0, got []",
        ),
        ("chat", {"prompt": "Hi"}, "prompt: unknown parameter: remove it (docs/mcp.md lists them)"),
        (
            "chat",
            {"messages": HELLO, "temperature": 3},
            "temperature: Input should be less than or equal to 2, got 3",
        ),
    ],
)
def test_a_failure_is_an_error_result_with_zests_message(
    zest: Server, tool: str, arguments: dict[str, Any], message: str
) -> None:
    async def scenario() -> Any:
        async with connected(zest) as client:
            return await client.call_tool(tool, arguments)

    result = run(scenario())
    assert result.is_error is True
    assert result.content[0].text == message
    assert result.structured_content["error"]["message"] == message


def test_a_refused_generation_is_an_error_result(zest: Server, proxy: Proxy) -> None:
    proxy.behaviour.status = 401  # the upstream refuses: zest's 502, as an error result

    async def scenario() -> Any:
        async with connected(zest) as client:
            return await client.call_tool("remote-chat", {"messages": HELLO})

    result = run(scenario())
    assert result.is_error is True
    assert result.structured_content["status"] == 502
    assert result.structured_content["error"]["code"] == "upstream_rejected"
    assert result.content[0].text == result.structured_content["error"]["message"]


def test_a_local_only_call_never_reaches_the_upstream(zest: Server, proxy: Proxy) -> None:
    async def scenario() -> Any:
        async with connected(zest) as client:
            return await client.call_tool(
                "private", {"messages": [{"role": "user", "content": "open the pod bay doors"}]}
            )

    result = run(scenario())
    assert result.is_error is False
    decided = result.structured_content["zest"]
    assert (decided["route_to"], decided["matched_rule"], decided["model"]) == (
        "chat-open",
        "open",
        "smollm2",
    )
    assert proxy.requests == []


def test_calls_are_counted_and_logged_as_mcp(zest: Server) -> None:
    before = total(scrape(f"{zest.base_url}/metrics"), "zest_requests_total", dialect="mcp")

    async def scenario() -> Any:
        async with connected(zest) as client:
            return await client.call_tool("chat", {"messages": HELLO, "max_tokens": 2})

    run(scenario())
    scraped = scrape(f"{zest.base_url}/metrics")
    assert total(scraped, "zest_requests_total", dialect="mcp", task="chat", outcome="ok") >= 1
    assert total(scraped, "zest_requests_total", dialect="mcp") == before + 1
    line = zest.wait_for_log('"POST /mcp HTTP/1.1" 200 req_').split()
    assert line[-3:-1] == ["mcp", "anonymous"]  # the dialect, then the caller (no client)


# The app's guards, as for every endpoint


def test_keys_host_and_origin_are_checked_as_for_the_api(hostile: Server) -> None:
    url = f"{hostile.base_url}/mcp"
    key = {"authorization": f"Bearer {HOSTILE_KEY}", **ACCEPT}
    missing = httpx.post(url, json=INITIALIZE, headers=ACCEPT, timeout=60)
    assert missing.status_code == 401
    assert missing.headers["x-request-id"].startswith("req_")
    assert missing.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32001,
            "message": "missing API key: send 'Authorization: Bearer <key>'; the keys are set "
            "with ZEST_API_KEYS",
            "data": {"type": "invalid_request_error", "code": "invalid_api_key"},
        },
    }
    rebound = httpx.post(url, json=INITIALIZE, headers={**key, "host": "evil.example"}, timeout=60)
    assert rebound.status_code == 403
    assert rebound.json()["error"]["data"]["code"] == "host_not_allowed"
    page = httpx.post(
        url, json=INITIALIZE, headers={**key, "origin": "http://evil.example"}, timeout=60
    )
    assert page.status_code == 403
    assert page.json()["error"]["data"]["code"] == "origin_not_allowed"

    async def scenario() -> Any:
        async with connected(hostile, headers={"authorization": f"Bearer {HOSTILE_KEY}"}) as client:
            return await client.call_tool("chat", {"messages": HELLO})

    assert run(scenario()).is_error is False


def test_a_body_that_is_not_one_json_rpc_message_is_refused_saying_what_to_send(
    zest: Server,
) -> None:
    reply = httpx.post(f"{zest.base_url}/mcp", json=[INITIALIZE], headers=ACCEPT, timeout=60)
    assert reply.status_code == 400
    assert reply.json()["error"]["message"] == (
        "a batch (a JSON array) is not part of MCP since its 2025-06-18 revision: send one "
        'JSON-RPC message: {"jsonrpc": "2.0", "id": 1, "method": "tools/list"} (docs/mcp.md)'
    )


# A reload changes the tools, and says so


def test_a_reload_that_changes_the_tasks_tells_the_clients(served: tuple[Server, Path]) -> None:
    server, routes = served
    original = routes.read_text()
    added = original + (
        "  haiku:\n    kind: chat\n    model: smollm2\n    device: cpu\n    max_tokens: 24\n"
        "    description: A haiku about the user's text.\n"
    )

    async def reload(text: str) -> None:
        routes.write_text(text)
        async with httpx.AsyncClient(timeout=600) as http:
            reply = await http.post(f"{server.base_url}/api/v1/admin/reload")
            assert reply.status_code == 200, reply.text

    async def scenario() -> tuple[list[str], list[str]]:
        changed = asyncio.Event()

        async def told(message: Any) -> None:
            if getattr(message, "method", None) == "notifications/tools/list_changed":
                changed.set()

        async with connected(server, message_handler=told) as legacy:
            await reload(added)
            await asyncio.wait_for(changed.wait(), 60)  # a guard: it comes with the reload
            after = [tool.name for tool in (await legacy.list_tools()).tools]
        async with connected(server, mode="auto") as modern:
            async with modern.listen(tools_list_changed=True) as subscription:
                await reload(original)
                await asyncio.wait_for(anext(aiter(subscription)), 60)
            restored = [tool.name for tool in (await modern.list_tools()).tools]
        return after, restored

    try:
        after, restored = run(scenario())
    finally:
        routes.write_text(original)
    assert after == [*TASKS, "haiku", "list_tasks"]
    assert restored == [*TASKS, "list_tasks"]
