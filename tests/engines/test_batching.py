"""Continuous batching on one device, prefix reuse and the bounded priority queue, on SmolLM2."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pytest

from tests.engines.conftest import (
    assert_same_or_near_tie,
    collect,
    completion_job,
    job_for,
    load_smollm2,
    raw_greedy,
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


def test_a_finished_request_leaves_no_cells_in_the_kv_cache() -> None:
    """Without a prefix cache a request's cells go when it ends: nothing is left in any
    sequence's stream (with one, the slot keeps its prompt: engines/_prefix_cache.py)."""
    engine = load(parallel=4, prefix_cache_tokens=0)
    try:
        ctx = cast(Any, engine)._runner._ctx

        async def together() -> list[list[Delta]]:
            jobs = [job_for(engine, p, max_tokens=8) for p in PROMPTS[:3]]
            return list(await asyncio.gather(*(stream_all(engine, j) for j in jobs)))

        assert all(answer[-1].finish_reason for answer in asyncio.run(together()))
        last_cells = [ctx._lib.llama_memory_seq_pos_max(ctx._ctx.memory, seq) for seq in range(4)]
        assert last_cells == [-1, -1, -1, -1]  # -1: the sequence holds no cell
    finally:
        asyncio.run(engine.close())


def test_a_lone_request_matches_raw_llama_cpp_token_for_token() -> None:
    """Alone, the packed scheduler prefills in n_batch chunks and decodes a token a step, as
    llama-cpp-python does: the same greedy tokens."""
    engine = load(parallel=4, prefix_cache_tokens=0)
    try:
        for prompt in PROMPTS[:2]:
            job = job_for(engine, prompt, max_tokens=48)
            ours = text_of(collect(engine, job))
            assert ours == raw_greedy(job.prompt_tokens, 48)
    finally:
        asyncio.run(engine.close())


def test_streams_decoded_together_part_from_their_lone_outputs_only_at_near_ties(
    engine: Engine,
) -> None:
    """Under concurrency the batch's shape (other sequences' rows, prompt chunks beside them)
    changes llama.cpp's kernels by a few tenths of a logit at most: a greedy stream may pick
    another of the lone run's top tokens where that one was within NEAR_TIE of its best, and
    nowhere else."""
    prompts = [*PROMPTS[:2], *LONG_PROMPTS[:2]]
    alone = [collect(engine, job_for(engine, p, logprobs=5))[-1] for p in prompts]

    async def together() -> list[list[Delta]]:
        jobs = [job_for(engine, p, logprobs=2) for p in prompts]
        return list(await asyncio.gather(*(stream_all(engine, j) for j in jobs)))

    for lone, packed in zip(alone, asyncio.run(together()), strict=True):
        assert_same_or_near_tie(lone, packed[-1])


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

    def decode(entries: Sequence[tuple[int, int, int, bool]], **options: Any) -> None:
        calls.append([seq for _, _, seq, _ in entries])
        native(entries, **options)

    monkeypatch.setattr(ctx, "decode", decode)
    return calls


def test_concurrent_streams_share_decode_steps(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four streams of up to 24 tokens: run one after another they would take about 96 decode
    calls; packed, each step holds one row of every generating sequence, and the prompts are
    prefilled in the same calls (no call of their own)."""
    calls = record_decode_calls(engine, monkeypatch)
    jobs = [job_for(engine, p, max_tokens=24) for p in LONG_PROMPTS]

    async def together() -> list[list[Delta]]:
        return list(await asyncio.gather(*(stream_all(engine, j) for j in jobs)))

    produced = [deltas[-1].completion_tokens for deltas in asyncio.run(together())]
    assert sum(produced) >= 60, produced  # the prompts ask for long answers
    # Some step decodes all four, one row each.
    assert any(sorted(seqs) == sorted(set(seqs)) and len(seqs) == len(jobs) for seqs in calls)
    # About max(produced) steps: at most one more per prompt that arrived between steps.
    assert len(calls) <= max(produced) + len(jobs), (len(calls), produced)
    assert len(calls) < sum(produced) / 2


def test_prompts_waiting_together_are_prefilled_in_one_step(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prompts queued while a step runs are all packed into the next one (llama-server's
    policy), up to the step's budget: their first tokens come from the same call."""
    calls = record_decode_calls(engine, monkeypatch)
    jobs = [job_for(engine, p, max_tokens=2) for p in LONG_PROMPTS]

    async def together() -> list[list[Delta]]:
        return list(await asyncio.gather(*(stream_all(engine, j) for j in jobs)))

    asyncio.run(together())
    # Every prompt is short (< n_batch): one call holds the prompts of several sequences.
    assert max(len(set(seqs)) for seqs in calls) >= 2
    assert len(calls) <= 2 * len(jobs)


def chat_job(
    engine: Engine, question: str, system: str = SYSTEM, **overrides: object
) -> GenerationJob:
    prompt = tokenizer_of(engine).render_chat(
        [{"role": "system", "content": system}, {"role": "user", "content": question}]
    )
    return completion_job(engine, prompt, **{"max_tokens": 8, **overrides})


def shared_prefix(a: GenerationJob, b: GenerationJob) -> int:
    pairs = zip(a.prompt_tokens, b.prompt_tokens, strict=False)
    return next(i for i, (x, y) in enumerate(pairs) if x != y)


def test_a_shared_system_prompt_is_prefilled_once(engine: Engine) -> None:
    cold_job = chat_job(engine, "Do you sell rye?")
    cold = collect(engine, cold_job)
    warm_job = chat_job(engine, "Do you sell spelt?")
    warm = collect(engine, warm_job)
    shared = shared_prefix(cold_job, warm_job)
    assert cold[0].cached_tokens == 0
    assert shared > 300
    # Reused up to the shared prefix, leaving the prompt's last 32 tokens to be evaluated anew.
    assert warm[0].cached_tokens == min(shared, len(warm_job.prompt_tokens) - 32)
    assert warm[-1].completion_tokens >= 1


def test_a_prefix_held_by_a_busy_slot_is_copied_from_its_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request that shares the system prompt of one still decoding starts in another slot
    with a copy of that slot's stream, cut back to the shared prefix: its answer is the one a
    cold run gives (to a near-tie), so the copied cells hold that prefix's K and V."""
    engine = load(parallel=2, prefix_cache_tokens=4096)
    ctx = cast(Any, engine)._runner._ctx
    copies: list[tuple[int, int]] = []
    native = ctx.copy_stream
    monkeypatch.setattr(ctx, "copy_stream", lambda s, d: (copies.append((s, d)), native(s, d)))
    busy = chat_job(engine, "Do you sell rye? Tell me about every loaf.", max_tokens=48)
    later = chat_job(engine, "Do you sell spelt?", logprobs=2)

    async def beside_a_busy_slot() -> list[Delta]:
        started = asyncio.Event()

        async def first() -> list[Delta]:
            deltas = []
            async for delta in engine.stream(busy):
                deltas.append(delta)
                started.set()
            return deltas

        running = asyncio.ensure_future(first())
        await started.wait()  # the first prompt is in its slot's KV, and it is decoding
        answer = await stream_all(engine, later)
        assert not running.done(), "the first request ended before the second one started"
        await running
        return answer

    try:
        copied = asyncio.run(beside_a_busy_slot())
    finally:
        asyncio.run(engine.close())
    cold = load(parallel=1, prefix_cache_tokens=0)
    try:
        lone = collect(cold, chat_job(cold, "Do you sell spelt?", logprobs=5))
    finally:
        asyncio.run(cold.close())
    assert copies == [(0, 1)]
    shared = shared_prefix(busy, later)
    assert shared > 300
    # Up to the shared prefix, the prompt's last 32 tokens evaluated anew.
    assert copied[0].cached_tokens == min(shared, len(later.prompt_tokens) - 32)
    assert_same_or_near_tie(lone[-1], copied[-1])


def test_prefix_cache_entries_bound_the_prompts_kept() -> None:
    """One entry: a second system prompt evicts the first, whose next request starts cold."""
    engine = load(parallel=1, prefix_cache_tokens=4096, prefix_cache_entries=1)
    other = SYSTEM.replace("bakery", "cheese shop").replace("bread", "cheese")
    try:
        collect(engine, chat_job(engine, "Do you sell rye?"))
        collect(engine, chat_job(engine, "Do you sell brie?", other))
        evicted = collect(engine, chat_job(engine, "Do you sell spelt?"))
        kept = collect(engine, chat_job(engine, "Do you sell spelt?", SYSTEM))
    finally:
        asyncio.run(engine.close())
    assert evicted[0].cached_tokens == 0
    assert kept[0].cached_tokens > 300  # the bakery prompt came back in as the one entry
