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

from zest.engines import Ceiling, measure_ceiling, raw_llama_cpp
from zest.gateway.cli._bench_servers import Server
from zest.gateway.cli._bench_workload import Level, Sample, level, question, summary
from zest.gateway.cli._spawn import serving

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
    """`zest` is already serving; the peers are started here and stopped before returning."""
    results: list[Level] = []
    with ExitStack() as stack:
        for peer in peers:
            stack.enter_context(serving(peer.command, peer.probe, out / peer.log, name=peer.name))
        servers = [zest, *peers]
        for server in servers:
            asyncio.run(level(server.base, server.model, 1, 8))  # untimed: first-request costs
        # In process, the servers idle, just before the levels: the floor and the limit.
        raw = _raw_llama(model, threads, max_tokens, rounds)
        limit = ceiling_report()
        for concurrency in levels:  # interleaved, level by level
            for server in servers:
                samples, walls = [], 0.0
                for _ in range(rounds):
                    got, wall = asyncio.run(
                        level(server.base, server.model, concurrency, max_tokens)
                    )
                    samples += got
                    walls += wall
                results.append(summary(server.name, concurrency, samples, walls))
                print(row(results[-1]), file=sys.stderr, flush=True)
    return {
        "ceiling": limit,
        "servers": [server.name for server in servers],
        "levels": [asdict(result) for result in results],
        "raw_llama_cpp": {
            "ttft_p50_ms": statistics.median(s.ttft_ms for s in raw),
            "decode_tps_p50": statistics.median(s.decode_tps for s in raw),
        },
    }


def _raw_llama(model: Path, threads: int, max_tokens: int, rounds: int) -> list[Sample]:
    """The same request through llama-cpp-python in process: the floor for gateway overhead."""
    samples = []
    with raw_llama_cpp(model, threads=threads) as chat:
        for round_number in range(rounds + 1):  # round 0 is untimed: first-call costs
            start, times = time.perf_counter(), []
            for _ in chat([{"role": "user", "content": question()}], max_tokens):
                times.append(time.perf_counter())
            span = times[-1] - times[0]
            if round_number:
                ttft = (times[0] - start) * 1000
                samples.append(Sample(ttft, len(times), (len(times) - 1) / span))
    return samples


def row(result: Level) -> str:
    return (
        f"{result.server:<18} c={result.concurrency:<2} TTFT p50 {result.ttft_p50_ms:8.1f} ms "
        f"p95 {result.ttft_p95_ms:8.1f} ms  decode {result.decode_tps_p50:6.1f} tok/s/stream  "
        f"aggregate {result.aggregate_tps:6.1f} tok/s"
    )
