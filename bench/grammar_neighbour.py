"""A plain 4-token chat beside a grammar-heavy request, against the same chat alone.

    .venv/bin/python bench/grammar_neighbour.py [--rounds 5] [--values 1000]

The bundled SmolLM2 is loaded in this process (llama.cpp, 2 threads, 4 slots). The heavy request
answers in a JSON Schema at zest's enum bound (`--values` enum values): every draw its grammar
has to constrain walks them all. Each round runs the plain chat alone, then again once the heavy
request is decoding; the rounds interleave, so the ratio (beside / alone) is steadier than the
absolute times on these shared machines. Issue 22's target: the median ratio at most 2.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.engines.conftest import job_for, load_smollm2
from zest.engines import Engine, GenerationJob
from zest.router import ResponseFormat


def heavy_format(values: int) -> ResponseFormat:
    schema = {
        "type": "object",
        "properties": {
            "picks": {
                "type": "array",
                "items": {"enum": [f"option {i}" for i in range(values)]},
                "minItems": 8,
            }
        },
        "required": ["picks"],
    }
    return ResponseFormat.model_validate(
        {"type": "json_schema", "json_schema": {"name": "picks", "schema": schema}}
    )


async def seconds(
    engine: Engine, job: GenerationJob, started: asyncio.Event | None = None
) -> float:
    begun = time.perf_counter()
    async for _ in engine.stream(job):
        if started is not None:
            started.set()
    return time.perf_counter() - begun


async def one_round(engine: Engine, fmt: ResponseFormat) -> tuple[float, float, float]:
    def plain() -> GenerationJob:
        return job_for(engine, "Say hi to Bob.", max_tokens=4)

    heavy = dataclasses.replace(
        job_for(engine, "Pick eight options.", max_tokens=200), response_format=fmt
    )
    alone = await seconds(engine, plain())
    decoding = asyncio.Event()
    heavy_run = asyncio.create_task(seconds(engine, heavy, decoding))
    await decoding.wait()
    beside = await seconds(engine, plain())
    return alone, beside, await heavy_run


async def main(rounds: int, values: int) -> None:
    engine = load_smollm2("cpu", parallel=4)
    fmt = heavy_format(values)
    warm = dataclasses.replace(job_for(engine, "Warm up.", max_tokens=2), response_format=fmt)
    await seconds(engine, warm)  # the grammar's check, once (it is cached by schema)
    ratios = []
    for number in range(1, rounds + 1):
        alone, beside, heavy = await one_round(engine, fmt)
        ratios.append(beside / alone)
        print(
            f"round {number}: plain alone {alone * 1000:.0f} ms, beside the heavy request "
            f"{beside * 1000:.0f} ms ({beside / alone:.2f}x); heavy request {heavy:.2f} s"
        )
    print(f"median ratio beside/alone: {statistics.median(ratios):.2f}x (target <= 2x)")
    await engine.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--values", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.values))
