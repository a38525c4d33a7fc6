"""Continuous batching on one device, prefix reuse and the bounded priority queue, on SmolLM2."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pytest

from tests.engines.conftest import (
    collect,
    completion_job,
    job_for,
    load_smollm2,
    stream_all,
    text_of,
    tokenizer_of,
)
from tests.engines.test_hybrid import PROMPTS
from zest.engines import Delta, Engine, GenerationJob
from zest.router import Device, Placement

CPU = Device("cpu", frozenset({"llamacpp"}), "/proc/cpuinfo")
SYSTEM = "You are a terse assistant for a bakery. " + " ".join(
    f"Rule {n}: answer politely about bread number {n}." for n in range(30)
)


def load(**options: object) -> Engine:
    return load_smollm2(Placement(CPU, CPU), **options)


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    loaded = load(parallel=4, prefix_cache_tokens=4096)
    yield loaded
    asyncio.run(loaded.close())


def test_streams_started_together_match_their_lone_outputs(engine: Engine) -> None:
    alone = [text_of(collect(engine, job_for(engine, p))) for p in PROMPTS[:2]]

    async def together() -> list[list[Delta]]:
        jobs = [job_for(engine, p) for p in PROMPTS[:2]]
        return list(await asyncio.gather(*(stream_all(engine, j) for j in jobs)))

    assert [text_of(d) for d in asyncio.run(together())] == alone


def test_each_request_keeps_its_own_limits_and_stops(engine: Engine) -> None:
    reference = text_of(collect(engine, job_for(engine, PROMPTS[1])))
    stop = reference.split()[3]
    jobs = [
        job_for(engine, PROMPTS[1], max_tokens=3),
        job_for(engine, PROMPTS[1], stop=(stop,)),
        job_for(engine, PROMPTS[0], max_tokens=5),
        job_for(engine, "Count to ten.", max_tokens=7),
    ]

    async def run() -> list[list[Delta]]:
        return list(await asyncio.gather(*(stream_all(engine, j) for j in jobs)))

    limited, stopped, short, counted = asyncio.run(run())
    assert (limited[-1].completion_tokens, limited[-1].finish_reason) == (3, "length")
    assert text_of(stopped) == reference[: reference.index(stop)]
    assert stopped[-1].finish_reason == "stop"
    assert short[-1].completion_tokens <= 5
    assert (counted[-1].completion_tokens, counted[-1].finish_reason) == (7, "length")


LONG_PROMPTS = [
    "Tell a long story about a baker.",
    "Describe the sea in great detail.",
    "List twenty fruits, one per line.",
    "Explain, step by step, how bread rises.",
]


def record_decode_calls(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Wrap the scheduler's native context: for each llama_decode call, the sequence of each
    token it carried (the scheduler calls it from its own thread)."""
    ctx = cast(Any, engine)._runner._ctx
    native = ctx.decode
    calls: list[list[int]] = []

    def decode(entries: Sequence[tuple[int, int, int, bool]]) -> None:
        calls.append([seq for _, _, seq, _ in entries])
        native(entries)

    monkeypatch.setattr(ctx, "decode", decode)
    return calls


def test_concurrent_streams_share_decode_steps(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four streams of up to 24 tokens: run one after another they would take about 96 decode
    calls; batched, each step decodes one token of every generating sequence."""
    calls = record_decode_calls(engine, monkeypatch)
    jobs = [job_for(engine, p, max_tokens=24) for p in LONG_PROMPTS]

    async def together() -> list[list[Delta]]:
        return list(await asyncio.gather(*(stream_all(engine, j) for j in jobs)))

    produced = [deltas[-1].completion_tokens for deltas in asyncio.run(together())]
    assert sum(produced) >= 60, produced  # the prompts ask for long answers
    steps = [seqs for seqs in calls if len(set(seqs)) > 1]
    # A decode step carries one token per sequence (prefill chunks carry one sequence).
    assert all(len(set(seqs)) == len(seqs) for seqs in steps)
    assert max(len(seqs) for seqs in steps) == len(jobs)  # some step decodes all four
    # About max(produced) steps plus the prefill chunks, far fewer than one call per token.
    assert len(calls) <= max(produced) + 4 * len(jobs), (len(calls), produced)
    assert len(calls) < sum(produced) / 2


def chat_job(engine: Engine, question: str) -> GenerationJob:
    prompt = tokenizer_of(engine).render_chat(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    )
    return completion_job(engine, prompt, max_tokens=8)


def test_a_shared_system_prompt_is_prefilled_once(engine: Engine) -> None:
    cold_job = chat_job(engine, "Do you sell rye?")
    cold = collect(engine, cold_job)
    warm_job = chat_job(engine, "Do you sell spelt?")
    warm = collect(engine, warm_job)
    shared = next(
        i
        for i, (a, b) in enumerate(
            zip(cold_job.prompt_tokens, warm_job.prompt_tokens, strict=False)
        )
        if a != b
    )
    assert cold[0].cached_tokens == 0
    assert shared > 300
    # Reused up to the shared prefix, leaving the prompt's last 32 tokens to be evaluated anew.
    assert warm[0].cached_tokens == min(shared, len(warm_job.prompt_tokens) - 32)
    assert warm[-1].completion_tokens >= 1
