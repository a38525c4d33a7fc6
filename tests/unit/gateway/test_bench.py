"""zest bench's pure parts: the summary's arithmetic and the routes file it serves."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from zest.gateway.cli._bench import (
    _PREFILL,
    Sample,
    _question,
    _routes_file,
    _stream,
    _summary,
    percentile,
)
from zest.router import LlamaCppModel, load_routes


def test_aggregate_is_every_rounds_tokens_over_every_rounds_time() -> None:
    # Two rounds of two streams, 64 tokens each, each round 2 s: 256 tokens in 4 s.
    samples = [Sample(100.0, 64, 40.0) for _ in range(4)]
    level = _summary("zest", 2, samples, 4.0)
    assert level.aggregate_tps == 64.0
    assert level.decode_tps_p50 == 40.0


def test_every_request_gets_a_prompt_no_cache_has_seen() -> None:
    first, second = _question(), _question()
    assert first != second
    assert first[:10] != second[:10]  # they differ from the first token on


def test_the_levels_run_zest_as_it_ships_and_the_prefix_measure_with_a_sized_cache(
    tmp_path: Path,
) -> None:
    routes = load_routes(_routes_file(Path("/models/m.gguf"), 2, tmp_path)).config
    plain, cached = routes.models["bench"], routes.models["cached"]
    assert isinstance(plain, LlamaCppModel)
    assert isinstance(cached, LlamaCppModel)
    assert plain.options.prefix_cache_tokens is None  # the default: one context of prefixes
    assert cached.options.prefix_cache_tokens == 4096
    assert (routes.routes["chat"].model, routes.routes["cached"].model) == ("bench", "cached")


def test_the_gateway_overhead_is_ttft_minus_the_engines_own_prefill() -> None:
    header = "prefill=cpu 212.5ms; decode=cpu"
    match = _PREFILL.search(header)
    assert match is not None
    assert float(match.group(1)) == 212.5
    samples = [Sample(220.0, 64, 80.0, 212.5), Sample(230.0, 64, 80.0, 221.0)]
    assert _summary("zest", 1, samples, 2.0).overhead_p50_ms == 8.25
    assert _summary("llama_cpp.server", 1, [Sample(220.0, 64, 80.0)], 1.0).overhead_p50_ms is None


def test_a_streamed_answer_is_read_event_by_event() -> None:
    # The gateway's own framing (several events in one read, a usage chunk without choices,
    # [DONE]) read by the bench's client: three tokens, timed from the first.
    frames = [
        {"choices": [{"delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"delta": {"content": "Hel"}}]},
        {"choices": [{"delta": {"content": "lo"}}]},
        {"choices": [{"delta": {"content": "!"}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"completion_tokens": 3}},
    ]
    body = "".join(f"data: {json.dumps(frame)}\n\n" for frame in frames) + "data: [DONE]\n\n"

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["accept"] == "text/event-stream"
        headers = {"content-type": "text/event-stream", "x-zest-pipeline": "prefill=cpu 9.5ms"}
        return httpx.Response(200, headers=headers, content=body.encode())

    async def run() -> Sample:
        transport = httpx.MockTransport(answer)
        async with httpx.AsyncClient(transport=transport) as client:
            return await _stream(client, "http://zest/v1/chat/completions", {})

    sample = asyncio.run(run())
    assert (sample.tokens, sample.engine_prefill_ms) == (3, 9.5)


def test_percentiles_interpolate_between_samples() -> None:
    ttfts = [float(n) for n in range(1, 21)]  # 1 .. 20 ms
    assert percentile(ttfts, 50) == 10.5  # the median
    assert percentile(ttfts, 95) == pytest.approx(19.05)
    assert percentile([7.0], 95) == 7.0
    level = _summary("zest", 20, [Sample(t, 8, 40.0) for t in ttfts], 1.0)
    assert (level.ttft_p50_ms, level.ttft_p95_ms) == (10.5, pytest.approx(19.05))
