"""The streamed requests every phase of `zest bench` sends, and what is read off them."""

from __future__ import annotations

import asyncio
import re
import secrets
import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import aconnect_sse

__all__ = ["Level", "Sample", "level", "percentile", "question", "stream", "summary"]

QUESTION = "Explain in a few sentences how a refrigerator keeps food cold. " * 4
PREFILL = re.compile(r"prefill=\S+ ([0-9.]+)ms")


@dataclass
class Sample:
    ttft_ms: float
    tokens: int
    decode_tps: float
    # zest's own prefill time for this request (x-zest-pipeline): TTFT minus it is the time the
    # gateway added, measured on the same request, so machine drift cancels out.
    engine_prefill_ms: float | None = None
    total_ms: float = 0.0  # request sent -> last token
    usage: dict[str, Any] | None = None  # the usage chunk, where the request asked for one


@dataclass
class Level:
    server: str
    concurrency: int
    ttft_p50_ms: float
    ttft_p95_ms: float
    decode_tps_p50: float
    aggregate_tps: float
    overhead_p50_ms: float | None = None


def percentile(values: list[float], percent: int) -> float:
    """The `percent`th percentile (1 to 99), interpolated between the samples around it
    (statistics' inclusive method: p50 is the median)."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


async def stream(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    first_token: asyncio.Event | None = None,
) -> Sample:
    """One streamed request. Tokens are counted from the usage chunk where there is one (a
    speculative step can carry several tokens in one event), else one per content event.
    `first_token`, if given, is set when the first token arrives."""
    start, times, usage = time.perf_counter(), [], None
    async with aconnect_sse(client, "POST", url, json=body) as events:
        events.response.raise_for_status()
        prefill = PREFILL.search(events.response.headers.get("x-zest-pipeline", ""))
        async for event in events.aiter_sse():
            if event.data == "[DONE]":
                break
            chunk = event.json()
            usage = chunk.get("usage") or usage
            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                times.append(time.perf_counter())
                if first_token is not None:
                    first_token.set()
    if not times:
        raise RuntimeError(f"{url}: the stream carried no tokens")
    tokens = int(usage["completion_tokens"]) if usage else len(times)
    span = times[-1] - times[0]
    return Sample(
        (times[0] - start) * 1000,
        tokens,
        (tokens - 1) / span if span else 0.0,
        float(prefill.group(1)) if prefill else None,
        (times[-1] - start) * 1000,
        usage,
    )


def question() -> str:
    """The workload's prompt, new at its first token each time: no server can answer it from
    the KV of an earlier request (llama-server and llama_cpp.server reuse a prompt's prefix)."""
    return f"[{secrets.token_hex(4)}] {QUESTION}"


def chat_body(model: str, content: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        **extra,
    }


async def level(
    base: str, model: str, concurrency: int, max_tokens: int
) -> tuple[list[Sample], float]:
    """`concurrency` fresh questions sent at once; their samples and the wall time of all."""
    async with httpx.AsyncClient(timeout=600) as client:
        start = time.perf_counter()
        samples = await asyncio.gather(
            *(
                stream(client, f"{base}/chat/completions", chat_body(model, question(), max_tokens))
                for _ in range(concurrency)
            )
        )
        return list(samples), time.perf_counter() - start


def summary(server: str, concurrency: int, samples: list[Sample], wall: float) -> Level:
    ttfts = [s.ttft_ms for s in samples]
    overheads = [s.ttft_ms - s.engine_prefill_ms for s in samples if s.engine_prefill_ms]
    return Level(
        server,
        concurrency,
        percentile(ttfts, 50),
        percentile(ttfts, 95),
        statistics.median(s.decode_tps for s in samples),
        sum(s.tokens for s in samples) / wall,  # every round's tokens over every round's time
        statistics.median(overheads) if overheads else None,
    )
