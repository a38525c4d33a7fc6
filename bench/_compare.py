"""The servers phase: zest, llama-server and llama_cpp.server under the same streamed load,
interleaved level by level, next to raw llama-cpp-python and the hardware ceiling measured in
the same run (shared machines drift: every figure is read as a ratio within the run)."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

from zest.bench._baseline import RawChat, raw_llama_cpp
from zest.bench._ceiling import Ceiling, measure_ceiling
from zest.bench._servers import Server
from zest.bench._spawn import serving
from zest.bench._workload import Level, Sample, level, question, summary
from zest.engines import compute_bound

__all__ = ["PROMPT_TOKENS", "ceiling", "compare_servers", "row"]

PROMPT_TOKENS = 64  # about the templated question's length: the ceiling's prompt size


def ceiling(model: Path, threads: int, levels: list[int], prefill_sizes: list[int]) -> Ceiling:
    return measure_ceiling(
        model, threads=threads, streams=sorted(set(levels)), prompt_sizes=prefill_sizes
    )


def compare_servers(
    zest: Server,
    peers: list[Server],
    *,
    model: Path,
    threads: int,
    out: Path,
    levels: list[int],
    rounds: int,
    max_tokens: int,
    ceiling_report: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    """`zest` is already serving; the peers are started here and stopped before returning.

    Rounds are interleaved server by server (the order alternating), and at one stream raw
    llama-cpp-python runs in the same rotation, so a busy spell of the shared machine falls on
    every contender alike."""
    results: list[Level] = []
    raw: list[Sample] = []
    with ExitStack() as stack:
        for peer in peers:
            stack.enter_context(serving(peer.command, peer.probe, out / peer.log, name=peer.name))
        chat = stack.enter_context(raw_llama_cpp(model, threads=threads))
        servers = [zest, *peers]
        for server in servers:
            asyncio.run(level(server.base, server.model, 1, 8))  # untimed: first-request costs
        _raw_request(chat, 8)  # untimed: first-call costs
        limit = ceiling_report()  # in process, the servers idle: the limit
        for concurrency in levels:
            samples: dict[str, list[Sample]] = {server.name: [] for server in servers}
            walls = dict.fromkeys(samples, 0.0)
            for round_number in range(rounds):
                order = servers if round_number % 2 == 0 else servers[::-1]
                for server in order:
                    got, wall = asyncio.run(
                        level(server.base, server.model, concurrency, max_tokens)
                    )
                    samples[server.name] += got
                    walls[server.name] += wall
                if concurrency == 1:
                    raw.append(_raw_request(chat, max_tokens))
            for server in servers:
                results.append(
                    summary(server.name, concurrency, samples[server.name], walls[server.name])
                )
                print(row(results[-1]), file=sys.stderr, flush=True)
        if not raw:  # no 1-stream level: raw measured on its own
            raw = [_raw_request(chat, max_tokens) for _ in range(rounds)]
    return {
        "ceiling": limit,
        "servers": [server.name for server in servers],
        "levels": [asdict(result) for result in results],
        "raw_llama_cpp": {
            "ttft_p50_ms": statistics.median(s.ttft_ms for s in raw),
            "decode_tps_p50": statistics.median(s.decode_tps for s in raw),
        },
    }


@compute_bound  # where the ceiling's steps run: a second OpenMP team would slow both
def _raw_request(chat: RawChat, max_tokens: int) -> Sample:
    """The same request through llama-cpp-python in process: the floor for gateway overhead."""
    start, times = time.perf_counter(), []
    for _ in chat([{"role": "user", "content": question()}], max_tokens):
        times.append(time.perf_counter())
    span = times[-1] - times[0]
    return Sample((times[0] - start) * 1000, len(times), (len(times) - 1) / span)


def row(result: Level) -> str:
    return (
        f"{result.server:<18} c={result.concurrency:<2} TTFT p50 {result.ttft_p50_ms:8.1f} ms "
        f"p95 {result.ttft_p95_ms:8.1f} ms  decode {result.decode_tps_p50:6.1f} tok/s/stream  "
        f"aggregate {result.aggregate_tps:6.1f} tok/s"
    )
