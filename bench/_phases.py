"""The phases of `zest bench` that measure zest on its own: cold start, prefill at several
prompt sizes, single-stream decode, end-to-end latency, prefix reuse, speculation on a
summarization route, and a sustained load that reports its drift minute by minute."""

from __future__ import annotations

import asyncio
import statistics
import time
from importlib import resources
from pathlib import Path
from typing import Any

import httpx

from zest.bench._servers import Server, free_port, zest_server
from zest.bench._spawn import serving
from zest.bench._workload import (
    Sample,
    chat_body,
    percentile,
    question,
    stream,
)

__all__ = [
    "cold_start",
    "decode",
    "latency",
    "prefill",
    "prefix",
    "speculation",
    "sustained",
]

SYSTEM = " ".join(
    f"Policy {n}: answer customers of the hardware store about item {n} politely."
    for n in range(70)
)  # about 1,000 tokens
PASSAGE = (
    "The harbour town woke slowly. Fishing boats came back with the tide, gulls argued over "
    "the nets, and the baker on the corner opened his shutters to the smell of warm bread. "
)  # about 40 tokens: prompts of a given size are cut from repeats of it
SUMMARY_SYSTEM = (
    "Summarize the article for a newsletter in two or three paragraphs. Keep its names, "
    "figures and key phrases as they are written."
)
_USAGE = {"stream_options": {"include_usage": True}}


def cold_start(model: Path, threads: int, folder: Path, rounds: int) -> dict[str, Any]:
    """Process start -> ready (every model of the routes loaded), and the model load alone
    (from /v1/loaded), for a fresh `zest serve` on a one-route file."""
    routes = folder / "cold-routes.yaml"
    routes.write_text(
        "version: 1\nmodels:\n"
        f"  bench: {{engine: llamacpp, source: {model}, options: {{n_threads: {threads}}}}}\n"
        "routes:\n  chat: {kind: chat, model: bench, device: cpu}\n"
    )
    ready, load = [], []
    for _ in range(rounds):
        server = zest_server(routes, free_port())
        start = time.perf_counter()
        with serving(server.command, server.probe, folder / "cold.log", name="zest serve"):
            ready.append(time.perf_counter() - start)
            loaded = httpx.get(server.base + "/loaded", timeout=30).json()["data"]
            load.append(sum(entry["load_s"] for entry in loaded))
    return {"ready_s_p50": statistics.median(ready), "model_load_s_p50": statistics.median(load)}


def _url(server: Server) -> str:
    return f"{server.base}/chat/completions"


async def _one(server: Server, body: dict[str, Any]) -> Sample:
    async with httpx.AsyncClient(timeout=900) as client:
        return await stream(client, _url(server), body)


def _sized_prompt(tokens: int) -> str:
    """A fresh prompt of about `tokens` tokens (no KV cache has seen its first token)."""
    return question()[:11] + PASSAGE * max(1, tokens // 40)


def prefill(server: Server, sizes: list[int], rounds: int) -> list[dict[str, Any]]:
    """zest's prefill tokens/s at each prompt size: the prompt's tokens over the engine's own
    prefill time (x-zest-pipeline), and the client's TTFT."""
    rows = []
    for size in sizes:
        samples = [
            asyncio.run(_one(server, chat_body("long", _sized_prompt(size), 1, **_USAGE)))
            for _ in range(rounds)
        ]
        prompt = statistics.median(s.usage["prompt_tokens"] for s in samples if s.usage)
        engine_ms = statistics.median(s.engine_prefill_ms or s.ttft_ms for s in samples)
        rows.append(
            {
                "prompt_tokens": prompt,
                "prefill_tps": prompt / engine_ms * 1000,
                "ttft_p50_ms": statistics.median(s.ttft_ms for s in samples),
            }
        )
    return rows


def decode(server: Server, rounds: int, max_tokens: int = 256) -> dict[str, Any]:
    """Single-stream decode tokens/s on a long answer."""
    body = chat_body(
        "chat", "Write a long story about a lighthouse keeper and a storm.", max_tokens, **_USAGE
    )
    samples = [asyncio.run(_one(server, body)) for _ in range(rounds)]
    return {
        "decode_tps_p50": statistics.median(s.decode_tps for s in samples),
        "tokens_p50": statistics.median(s.tokens for s in samples),
    }


def latency(server: Server, rounds: int, max_tokens: int = 16) -> dict[str, Any]:
    """End-to-end latency of short non-streamed answers, one at a time."""
    times = []
    with httpx.Client(timeout=300) as client:
        for _ in range(rounds * 5):
            body = chat_body("chat", question(), max_tokens, stream=False)
            start = time.perf_counter()
            client.post(_url(server), json=body).raise_for_status()
            times.append((time.perf_counter() - start) * 1000)
    return {
        "requests": len(times),
        "max_tokens": max_tokens,
        "p50_ms": percentile(times, 50),
        "p95_ms": percentile(times, 95),
    }


def prefix(server: Server, rounds: int) -> dict[str, Any]:
    """TTFT with a 1,000-token system prompt: cold (a new one each time) and warm (shared)."""

    def ttft(system: str, user: str) -> float:
        body = chat_body("cached", user, 4)
        body["messages"].insert(0, {"role": "system", "content": system})
        return asyncio.run(_one(server, body)).ttft_ms

    cold = [ttft(f"Store {n}. {SYSTEM}", "Do you sell nails?") for n in range(rounds)]
    ttft(SYSTEM, "Hello")  # the shared prompt is now cached
    warm = [ttft(SYSTEM, f"Do you sell item {n}?") for n in range(rounds)]
    return {"cold_ttft_ms": statistics.median(cold), "warm_ttft_ms": statistics.median(warm)}


def speculation(
    server: Server,
    rounds: int,
    max_tokens: int = 256,
    *,
    routes: tuple[str, str] = ("summarize", "summarize-lookup"),
    system: str | None = SUMMARY_SYSTEM,
    greedy: bool = True,
) -> dict[str, Any]:
    """One summarization route without and with prompt-lookup speculation (`routes`) on a
    ~1,000-token article, interleaved round by round with the order alternating: decode
    tokens/s of each, and how many drafted tokens were accepted. `system`: a system turn of the
    request (None: the route's own); `greedy=False`: the route's own sampling."""
    article = resources.files(__package__).joinpath("bench_article.txt").read_text()
    runs: dict[str, list[Sample]] = {route: [] for route in routes}
    for round_number in range(rounds + 1):  # round 0 untimed: the article's prefix is cached
        for route in routes if round_number % 2 else routes[::-1]:
            body = chat_body(route, article, max_tokens, **_USAGE)
            if system is not None:
                body["messages"].insert(0, {"role": "system", "content": system})
            if not greedy:
                del body["temperature"]
            sample = asyncio.run(_one(server, body))
            if round_number:
                runs[route].append(sample)
    plain, lookup = (runs[route] for route in routes)
    drafted = sum((s.usage or {}).get("speculative", {}).get("drafted_tokens", 0) for s in lookup)
    accepted = sum((s.usage or {}).get("speculative", {}).get("accepted_tokens", 0) for s in lookup)
    plain_tps = statistics.median(s.decode_tps for s in plain)
    lookup_tps = statistics.median(s.decode_tps for s in lookup)
    return {
        "prompt_tokens": (plain[0].usage or {}).get("prompt_tokens"),
        "decode_tps_p50": plain_tps,
        "lookup_decode_tps_p50": lookup_tps,
        "ratio": lookup_tps / plain_tps,
        "acceptance": accepted / drafted if drafted else 0.0,
    }


def sustained(server: Server, pid: int, streams: int, minutes: float) -> dict[str, Any]:
    """`streams` clients in a closed loop for `minutes`: tokens/s, TTFT p50 and zest's RSS
    minute by minute, and the drift of tokens/s per minute (least-squares slope over the mean)."""
    done: list[tuple[float, Sample]] = []
    rss: list[float | None] = []
    start = time.perf_counter()
    deadline = start + minutes * 60

    async def client() -> None:
        async with httpx.AsyncClient(timeout=600) as http:
            while time.perf_counter() < deadline:
                sample = await stream(http, _url(server), chat_body("chat", question(), 64))
                done.append((time.perf_counter(), sample))

    async def watch_memory() -> None:
        while time.perf_counter() < deadline:
            await asyncio.sleep(min(60.0, max(deadline - time.perf_counter(), 0.0)))
            rss.append(_rss_mib(pid))

    async def run() -> None:
        await asyncio.gather(watch_memory(), *(client() for _ in range(streams)))

    asyncio.run(run())
    rows = _per_minute(done, start, minutes)
    for row, mib in zip(rows, rss, strict=False):
        row["rss_mib"] = mib
    return {"streams": streams, "minutes": rows, "drift_per_minute": _drift(rows)}


def _per_minute(
    done: list[tuple[float, Sample]], start: float, minutes: float
) -> list[dict[str, Any]]:
    rows = []
    for minute in range(max(1, int(minutes))):
        mine = [s for t, s in done if minute * 60 <= t - start < (minute + 1) * 60]
        rows.append(
            {
                "minute": minute + 1,
                "requests": len(mine),
                "tokens_per_s": sum(s.tokens for s in mine) / 60,
                "ttft_p50_ms": percentile([s.ttft_ms for s in mine], 50) if mine else None,
            }
        )
    return rows


def _drift(rows: list[dict[str, Any]]) -> float:
    """Tokens/s change per minute as a fraction of the mean (0: steady; -0.02: 2% slower a
    minute)."""
    ys = [float(row["tokens_per_s"]) for row in rows]
    if len(ys) < 2 or not statistics.mean(ys):
        return 0.0
    slope = statistics.linear_regression(range(len(ys)), ys).slope
    return slope / statistics.mean(ys)


def _rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return float(line.split()[1]) / 1024
    except OSError:
        return None
    return None
