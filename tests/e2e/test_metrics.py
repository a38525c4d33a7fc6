"""Metrics and stats end to end: real requests on the real model move the scraped counters.

The server is the session's (other modules use it too), so every check is on the difference
between a scrape before and one after this module's requests.
"""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.e2e.conftest import Server, stream_chat
from tests.e2e.prometheus import scrape, total

QUESTION = [{"role": "user", "content": "Name three colours."}]
SERVED_MODEL = {"model": "smollm2", "device": "cpu"}
SERVED = {"task": "chat", **SERVED_MODEL}


@pytest.fixture
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=600)


def test_metrics_are_served_at_the_top_level_and_under_both_prefixes(server: Server) -> None:
    for path in ("/metrics", "/api/v1/metrics", "/v1/metrics"):
        samples = scrape(server.base_url + path)
        assert total(samples, "zest_loaded_models") == 1
        assert total(samples, "zest_model_loaded", engine="llamacpp", **SERVED_MODEL) == 1
        assert total(samples, "zest_device_info", device="cpu", emulated="false") == 1
        assert total(samples, "zest_queue_depth", model="smollm2", device="cpu") == 0


def test_requests_move_the_counters_by_what_they_did(server: Server, client: openai.OpenAI) -> None:
    before = scrape(f"{server.base_url}/metrics")
    reply = client.chat.completions.create(model="chat", messages=QUESTION, max_tokens=8)
    asked = time.monotonic()
    chunks, _ = stream_chat(client, "chat", QUESTION, 8)
    spent = time.monotonic() - asked  # what the stream took, seen from here
    invalid = httpx.post(
        f"{server.v1}/chat/completions", json={"model": "chat", "messages": []}, timeout=300
    )
    after = scrape(f"{server.base_url}/metrics")

    assert invalid.status_code == 400
    streamed = chunks[-1].usage
    assert reply.usage is not None
    assert streamed is not None

    def moved(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert moved("zest_requests_total", **SERVED, outcome="ok") == 2
    assert moved("zest_requests_total", task="chat", outcome="bad_request") == 1
    assert moved("zest_completion_tokens_total", **SERVED) == (
        reply.usage.completion_tokens + streamed.completion_tokens
    )
    assert moved("zest_prompt_tokens_total", **SERVED) == (
        reply.usage.prompt_tokens + streamed.prompt_tokens
    )
    assert moved("zest_time_to_first_token_seconds_count", **SERVED) == 2
    assert moved("zest_inter_token_latency_seconds_count", **SERVED) > 0
    assert moved("zest_pipeline_stage_seconds_count", stage="prefill", device="cpu") == 2

    stats = httpx.get(f"{server.base_url}/api/v1/stats", timeout=300).json()  # the stream
    assert stats["output_tokens"] == streamed.completion_tokens
    assert stats["prompt_tokens"] == streamed.prompt_tokens
    # Lemonade's input_tokens: the prompt less what the prefix cache (on by default) reused.
    details = streamed.prompt_tokens_details
    cached = (details.cached_tokens if details else None) or 0
    assert cached > 0  # the route's system prompt and examples, shared with `reply`
    assert stats["input_tokens"] == streamed.prompt_tokens - cached
    assert (stats["task"], stats["model"], stats["device"]) == ("chat", "smollm2", "cpu")
    assert 0 < stats["time_to_first_token"] <= spent  # seconds, within the stream's own time
    assert len(stats["decode_token_times"]) <= streamed.completion_tokens - 1
    assert stats["tokens_per_second"] is None or stats["tokens_per_second"] > 0
