"""Benchmark: the hybrid pipeline (emulated npu 1 thread -> gpu 1 thread) against one context
with 2 threads, in one process, interleaved run by run (shared machines drift: compare ratios).

    .venv/bin/python bench/hybrid.py [--runs 3] [--prompt-tokens 1024] [--gen-tokens 128]

1. One request, a prompt of --prompt-tokens and --gen-tokens generated: TTFT, decode tokens/s,
   handoff ms and bytes.
2. Interference: a stream is decoding when a request with a 2,000-token prompt arrives; the
   inter-token latency (p50/p99) of the ongoing stream while the other prompt is prefilled, and
   the newcomer's TTFT.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from zest.engines import Engine, GenerationJob, Prompt, create_engine
from zest.router import Device, LlamaCppModel, Placement, load_routes

REPO = Path(__file__).resolve().parents[1]
CPU2 = Device("cpu", frozenset({"llamacpp"}), "/proc/cpuinfo")
NPU1 = Device("npu", frozenset({"llamacpp"}), "emulated", emulated=True, threads=1)
GPU1 = Device("gpu", frozenset({"llamacpp"}), "emulated", emulated=True, threads=1)


def model_config() -> tuple[LlamaCppModel, Path]:
    routes = load_routes(REPO / "routes.yaml")
    base = routes.config.models["smollm2"]
    options = base.options.model_copy(update={"n_threads": 2, "parallel": 2})
    return base.model_copy(update={"context_length": 4096, "options": options}), routes.base_dir


def chat_tokens(engine: Engine, content: str) -> tuple[int, ...]:
    """One user message through the model's chat template, as the model's tokens."""
    tokenizer = engine.tokenizer()
    assert tokenizer is not None, "the bench runs local engines"
    return tokenizer.encode(Prompt.chat([{"role": "user", "content": content}]))


def prompt_of(engine: Engine, tokens: int, salt: str) -> tuple[int, ...]:
    words = " ".join(f"{salt} item {n} is on shelf {n % 7}." for n in range(tokens))
    ids = chat_tokens(engine, words)
    return tuple(ids[: tokens - 8]) + tuple(ids[-8:])  # keep the assistant turn's opening


def job(prompt: tuple[int, ...], max_tokens: int) -> GenerationJob:
    return GenerationJob.greedy(prompt, max_tokens=max_tokens)


@dataclass
class Trace:
    start: float
    times: list[float] = field(default_factory=list)
    handoff_ms: float | None = None
    handoff_bytes: int | None = None

    @property
    def ttft_ms(self) -> float:
        return (self.times[0] - self.start) * 1000

    @property
    def decode_tps(self) -> float:
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])

    def gaps_ms(self, since: float, until: float) -> list[float]:
        pairs = zip(self.times, self.times[1:], strict=False)
        return [(b - a) * 1000 for a, b in pairs if since <= b <= until]


async def traced(engine: Engine, j: GenerationJob) -> Trace:
    trace = Trace(time.perf_counter())
    task = asyncio.current_task()
    if task is not None:
        task.trace = trace  # type: ignore[attr-defined]  # read by started()
    async for delta in engine.stream(j):
        if delta.stats is not None and trace.handoff_ms is None:
            trace.handoff_ms, trace.handoff_bytes = (
                delta.stats.handoff_ms,
                delta.stats.handoff_bytes,
            )
        trace.times.append(time.perf_counter())  # one timestamp per delta (~ one token)
    return trace


async def interference(
    engine: Engine, short: tuple[int, ...], long: tuple[int, ...]
) -> tuple[list[float], float]:
    ongoing = asyncio.create_task(traced(engine, job(short, 256)))
    while not started(ongoing):  # the newcomer arrives once the first stream is decoding
        await asyncio.sleep(0.01)
    arrived = time.perf_counter()
    newcomer = await traced(engine, job(long, 8))
    first = await ongoing
    return first.gaps_ms(arrived, newcomer.times[0]), newcomer.ttft_ms


def started(task: asyncio.Task[Trace]) -> bool:
    return bool(getattr(task, "trace", None) and task.trace.times)  # type: ignore[attr-defined]


def pct(values: list[float], percent: int) -> float:
    """As zest bench computes it: statistics' inclusive percentiles (p50 is the median)."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--gen-tokens", type=int, default=128)
    args = parser.parse_args()
    config, base = model_config()
    engines = {
        "one context, 2 threads": create_engine("smollm2", config, base, Placement(CPU2, CPU2)),
        "hybrid npu(1)->gpu(1)": create_engine("smollm2", config, base, Placement(NPU1, GPU1)),
    }
    for engine in engines.values():
        engine.load()
    any_engine = next(iter(engines.values()))
    prompt = prompt_of(any_engine, args.prompt_tokens, "a")
    long = prompt_of(any_engine, 2000, "c")
    short = chat_tokens(any_engine, "Write a long numbered list of 300 fruits, one per line.")
    single: dict[str, list[Trace]] = {name: [] for name in engines}
    gaps: dict[str, list[float]] = {name: [] for name in engines}
    ttfts: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(args.runs):  # interleaved: both configurations see the same machine state
        for name, engine in engines.items():
            single[name].append(asyncio.run(traced(engine, job(prompt, args.gen_tokens))))
            g, t = asyncio.run(interference(engine, short, long))
            gaps[name] += g
            ttfts[name].append(t)
    report(args, single, gaps, ttfts)
    for engine in engines.values():
        asyncio.run(engine.close())


def report(
    args: argparse.Namespace,
    single: dict[str, list[Trace]],
    gaps: dict[str, list[float]],
    ttfts: dict[str, list[float]],
) -> None:
    med = statistics.median
    print(
        f"1. one request: {args.prompt_tokens}-token prompt, {args.gen_tokens} tokens "
        f"(median of {args.runs} runs)"
    )
    print(
        f"{'configuration':<24} {'TTFT ms':>9} {'decode tok/s':>13} {'handoff ms':>11} "
        f"{'handoff bytes':>14}"
    )
    for name, traces in single.items():
        hand = [t.handoff_ms for t in traces if t.handoff_ms is not None]
        nbytes = traces[0].handoff_bytes
        print(
            f"{name:<24} {med([t.ttft_ms for t in traces]):>9.1f} "
            f"{med([t.decode_tps for t in traces]):>13.1f} "
            f"{(f'{med(hand):.1f}' if hand else '-'):>11} {(nbytes or '-'):>14}"
        )
    (_, one), (_, split) = single.items()
    ttft = med([t.ttft_ms for t in split]) / med([t.ttft_ms for t in one])
    decode = med([t.decode_tps for t in split]) / med([t.decode_tps for t in one])
    print(f"ratio hybrid/one-context: TTFT {ttft:.2f}, decode tokens/s {decode:.2f}")
    print("\n2. a stream decoding while a 2,000-token prompt arrives")
    print(
        f"{'configuration':<24} {'ITL p50 ms':>11} {'ITL p99 ms':>11} {'gaps':>6} "
        f"{'newcomer TTFT ms':>17}"
    )
    for name, itl in gaps.items():
        print(
            f"{name:<24} {pct(itl, 50):>11.1f} {pct(itl, 99):>11.1f} "
            f"{len(itl):>6} {med(ttfts[name]):>17.1f}"
        )


if __name__ == "__main__":
    main()
