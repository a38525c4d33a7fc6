"""`zest bench`: zest against the packaged llama_cpp.server and raw llama-cpp-python, in one run.

Both servers are started here on loopback with the same model file and threads and driven with
the same streamed workload, interleaved level by level (shared machines drift: compare ratios).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from zest.engines import raw_llama_cpp
from zest.gateway.cli._spawn import serving, zest_command

__all__ = ["run_bench"]

QUESTION = "Explain in a few sentences how a refrigerator keeps food cold. " * 4
SYSTEM = " ".join(
    f"Policy {n}: answer customers of the hardware store about item {n} politely."
    for n in range(70)
)  # about 1,000 tokens


@dataclass
class Sample:
    ttft_ms: float
    tokens: int
    decode_tps: float
    # zest's own prefill time for this request (x-zest-pipeline): TTFT minus it is the time the
    # gateway added, measured on the same request, so machine drift cancels out.
    engine_prefill_ms: float | None = None


@dataclass
class Level:
    server: str
    concurrency: int
    ttft_p50_ms: float
    ttft_p95_ms: float
    decode_tps_p50: float
    aggregate_tps: float
    overhead_p50_ms: float | None = None


_PREFILL = re.compile(r"prefill=\S+ ([0-9.]+)ms")


def percentile(values: list[float], percent: int) -> float:
    """The `percent`th percentile (1 to 99), interpolated between the samples around it
    (statistics' inclusive method: p50 is the median)."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


async def _stream(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> Sample:
    start, times = time.perf_counter(), []
    async with aconnect_sse(client, "POST", url, json=body) as events:
        events.response.raise_for_status()
        prefill = _PREFILL.search(events.response.headers.get("x-zest-pipeline", ""))
        async for event in events.aiter_sse():
            if event.data == "[DONE]":
                break
            chunk = event.json()
            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                times.append(time.perf_counter())
    if not times:
        raise RuntimeError(f"{url}: the stream carried no tokens")
    span = times[-1] - times[0]
    return Sample(
        (times[0] - start) * 1000,
        len(times),
        (len(times) - 1) / span if span else 0.0,
        float(prefill.group(1)) if prefill else None,
    )


def _question() -> str:
    """The workload's prompt, new at its first token each time: no server can answer it from
    the KV of an earlier request (llama_cpp.server reuses its last prompt's prefix)."""
    return f"[{secrets.token_hex(4)}] {QUESTION}"


async def _level(
    base: str, model: str, concurrency: int, max_tokens: int
) -> tuple[list[Sample], float]:
    def body() -> dict[str, Any]:
        return {
            "model": model,
            "messages": [{"role": "user", "content": _question()}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
        }

    async with httpx.AsyncClient(timeout=600) as client:
        start = time.perf_counter()
        samples = await asyncio.gather(
            *(_stream(client, f"{base}/chat/completions", body()) for _ in range(concurrency))
        )
        return list(samples), time.perf_counter() - start


def _summary(server: str, concurrency: int, samples: list[Sample], wall: float) -> Level:
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


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _routes_file(model: Path, threads: int, folder: Path) -> Path:
    """Two entries on the same file: the concurrency levels run zest as it ships (the prefix
    cache on, as llama-server's prompt reuse is), the prefix measure with a cache sized for it."""
    path = folder / "bench-routes.yaml"
    entry = f"engine: llamacpp, source: {model}, context_length: 4096"
    path.write_text(
        "version: 1\nmodels:\n"
        f"  bench: {{{entry}, options: {{n_threads: {threads}, parallel: 8}}}}\n"
        f"  cached: {{{entry}, options: {{n_threads: {threads}, parallel: 8, "
        "prefix_cache_tokens: 4096}}\n"
        "routes:\n  chat: {kind: chat, model: bench, device: cpu, max_tokens: 512}\n"
        "  cached: {kind: chat, model: cached, device: cpu, max_tokens: 512}\n"
    )
    return path


def _raw_llama(model: Path, threads: int, max_tokens: int, rounds: int) -> list[Sample]:
    """The same request through llama-cpp-python in process: the floor for gateway overhead."""
    samples = []
    with raw_llama_cpp(model, threads=threads) as chat:
        for round_number in range(rounds + 1):  # round 0 is untimed: first-call costs
            start, times = time.perf_counter(), []
            for _ in chat([{"role": "user", "content": _question()}], max_tokens):
                times.append(time.perf_counter())
            span = times[-1] - times[0]
            if round_number:
                ttft = (times[0] - start) * 1000
                samples.append(Sample(ttft, len(times), (len(times) - 1) / span))
    return samples


async def _prefix(base: str, rounds: int) -> tuple[float, float]:
    """TTFT with a 1,000-token system prompt: cold (a new one each time) and warm (shared)."""

    async def ttft(system: str, question: str) -> float:
        body = {
            "model": "cached",
            "max_tokens": 4,
            "temperature": 0,
            "stream": True,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": question},
            ],
        }
        async with httpx.AsyncClient(timeout=600) as client:
            return (await _stream(client, f"{base}/chat/completions", body)).ttft_ms

    cold = [await ttft(f"Store {n}. {SYSTEM}", "Do you sell nails?") for n in range(rounds)]
    await ttft(SYSTEM, "Hello")  # the shared prompt is now cached
    warm = [await ttft(SYSTEM, f"Do you sell item {n}?") for n in range(rounds)]
    return statistics.median(cold), statistics.median(warm)


def run_bench(
    model: Path,
    *,
    threads: int,
    out: Path,
    levels: list[int],
    rounds: int,
    max_tokens: int,
    ports: tuple[int | None, int | None] = (None, None),
) -> dict[str, Any]:
    """`ports`: zest's and the peer's loopback ports (None: a free one)."""
    out.mkdir(parents=True, exist_ok=True)
    results: list[Level] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        zest_port, peer_port = ports[0] or _free_port(), ports[1] or _free_port()
        routes = _routes_file(model, threads, folder)
        zest_cmd = zest_command(
            "serve", "--routes", str(routes), "--port", str(zest_port), "--log-level", "warning"
        )
        peer_cmd = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--n_ctx",
            "4096",
            "--n_threads",
            str(threads),
            "--flash_attn",
            "true",
            "--interrupt_requests",
            "false",
            "--host",
            "127.0.0.1",
            "--port",
            str(peer_port),
        ]
        zest_base, peer_base = f"http://127.0.0.1:{zest_port}", f"http://127.0.0.1:{peer_port}"
        zest, peer = f"{zest_base}/v1", f"{peer_base}/v1"
        with (
            serving(zest_cmd, f"{zest_base}/api/v1/ready", out / "zest.log", name="zest serve"),
            serving(peer_cmd, f"{peer}/models", out / "llama_cpp_server.log", name="peer"),
        ):
            for base, model_name in ((zest, "chat"), (peer, "bench")):
                asyncio.run(_level(base, model_name, 1, 8))  # untimed: first-request costs
            # In process, next to the servers' runs (both idle now): the floor for overhead.
            raw = _raw_llama(model, threads, max_tokens, rounds)
            for level in levels:  # interleaved, level by level
                for name, base, model_name in (
                    ("zest", zest, "chat"),
                    ("llama_cpp.server", peer, "bench"),
                ):
                    samples, walls = [], 0.0
                    for _ in range(rounds):
                        got, wall = asyncio.run(_level(base, model_name, level, max_tokens))
                        samples += got
                        walls += wall
                    results.append(_summary(name, level, samples, walls))
                    print(_row(results[-1]), file=sys.stderr, flush=True)
            cold, warm = asyncio.run(_prefix(zest, rounds))
    report = {
        "levels": [asdict(level) for level in results],
        "raw_llama_cpp": {
            "ttft_p50_ms": statistics.median(s.ttft_ms for s in raw),
            "decode_tps_p50": statistics.median(s.decode_tps for s in raw),
        },
        "prefix_cache": {"cold_ttft_ms": cold, "warm_ttft_ms": warm},
        "threads": threads,
        "max_tokens": max_tokens,
        "rounds": rounds,
        "cpus": os.cpu_count(),
    }
    (out / "bench.json").write_text(json.dumps(report, indent=2))
    _plot(results, out / "bench.png")
    return report


def _row(level: Level) -> str:
    return (
        f"{level.server:<18} c={level.concurrency:<2} TTFT p50 {level.ttft_p50_ms:8.1f} ms "
        f"p95 {level.ttft_p95_ms:8.1f} ms  decode {level.decode_tps_p50:6.1f} tok/s/stream  "
        f"aggregate {level.aggregate_tps:6.1f} tok/s"
    )


def format_report(report: dict[str, Any]) -> str:
    levels = [Level(**level) for level in report["levels"]]
    lines = [_row(level) for level in levels]
    by = {(lv.server, lv.concurrency): lv for lv in levels}
    raw = report["raw_llama_cpp"]
    one = by.get(("zest", 1))
    if one:
        lines.append(
            f"raw llama-cpp-python: TTFT p50 {raw['ttft_p50_ms']:.1f} ms, decode "
            f"{raw['decode_tps_p50']:.1f} tok/s -> zest TTFT overhead "
            f"{one.ttft_p50_ms - raw['ttft_p50_ms']:+.1f} ms, single-stream decode "
            f"ratio {one.decode_tps_p50 / raw['decode_tps_p50']:.2f}"
        )
    if one and one.overhead_p50_ms is not None:
        lines.append(
            f"zest gateway overhead at 1 stream (TTFT minus the engine's own prefill, same "
            f"requests): p50 {one.overhead_p50_ms:.1f} ms"
        )
    four = by.get(("zest", 4)), by.get(("llama_cpp.server", 4))
    if four[0] and four[1]:
        lines.append(
            f"aggregate tokens/s at 4 streams: zest/llama_cpp.server = "
            f"{four[0].aggregate_tps / four[1].aggregate_tps:.2f}"
        )
    cache = report["prefix_cache"]
    lines.append(
        f"prefix cache (1,000-token system prompt): TTFT cold {cache['cold_ttft_ms']:.1f}"
        f" ms, warm {cache['warm_ttft_ms']:.1f} ms "
        f"({cache['warm_ttft_ms'] / cache['cold_ttft_ms']:.0%} of cold)"
    )
    return "\n".join(lines)


def _plot(levels: list[Level], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            f"matplotlib is not installed: no plot ({path}); pip install matplotlib",
            file=sys.stderr,
        )
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for server in dict.fromkeys(lv.server for lv in levels):
        mine = [lv for lv in levels if lv.server == server]
        xs = [lv.concurrency for lv in mine]
        left.plot(xs, [lv.aggregate_tps for lv in mine], marker="o", label=server)
        right.plot(xs, [lv.ttft_p95_ms for lv in mine], marker="o", label=server)
    left.set(xlabel="concurrent streams", ylabel="aggregate tokens/s", title="Throughput")
    right.set(xlabel="concurrent streams", ylabel="TTFT p95 (ms)", title="Time to first token")
    for axis in (left, right):
        axis.legend()
        axis.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
