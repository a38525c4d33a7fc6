"""Route priority reaches the batch, on the real model: a high-priority prompt admitted while
a long low-priority prompt is being prefilled has its first token before that prefill ends,
counted in the scheduler's steps (never timed)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools

import pytest

from tests.engines.conftest import job_for, load_smollm2
from tests.engines.test_admission import until
from zest.engines import Delta, Engine, GenerationJob
from zest.engines._admission import Admission
from zest.engines._llama_batch import BatchScheduler
from zest.engines._runner import Runner
from zest.engines._step_plan import MIN_YIELD, QueuePause
from zest.router import Device, Placement

CPU = Device("cpu", frozenset({"llamacpp"}), "/proc/cpuinfo")
ARTICLE = " ".join(
    f"Paragraph {n}: the committee reviewed the budget, the library wing and the road "
    "repairs, and asked the council for a report on each before the spring session."
    for n in range(40)
)  # about 1,400 tokens: three full steps of n_batch 512


async def run(engine: Engine | Runner, job: GenerationJob) -> list[Delta]:
    return [delta async for delta in engine.stream(job)]


async def complete_while(
    engine: Engine,
    summary: asyncio.Future[list[Delta]],
    name: str = "high",
    *,
    via: Runner | None = None,
) -> int:
    """High-priority completions back to back until `summary` is done, sent to `engine` (or
    `via` its runner); how many were served (labelled name-0, name-1, ...)."""
    served = 0
    while not summary.done():
        high = dataclasses.replace(
            job_for(engine, "Complete: def add(a, b):", max_tokens=8),
            priority=50,
            label=f"{name}-{served}",
        )
        await run(via or engine, high)
        served += 1
    return served


def test_a_high_priority_first_token_comes_before_a_low_priority_prefill_ends() -> None:
    engine = load_smollm2(Placement(CPU, CPU), parallel=2, prefix_cache_entries=1)
    scheduler = engine._runner  # type: ignore[attr-defined]
    assert isinstance(scheduler, BatchScheduler)
    low = dataclasses.replace(
        job_for(engine, f"Summarize: {ARTICLE}", max_tokens=2), priority=0, label="low"
    )
    high = dataclasses.replace(
        job_for(engine, "Complete: def add(a, b):", max_tokens=2), priority=50, label="high"
    )

    async def scenario() -> tuple[list[Delta], list[Delta]]:
        summary = asyncio.ensure_future(run(engine, low))
        await until(lambda: scheduler.steps >= 1, "the low-priority prefill began")
        completion = await run(engine, high)
        return completion, await summary

    try:
        completion, summary = asyncio.run(scenario())
    finally:
        asyncio.run(engine.close())
    assert completion[-1].finish_reason is not None
    assert summary[-1].finish_reason is not None  # the yielding prompt was not starved
    high_at, low_at = scheduler.first_token_steps["high"], scheduler.first_token_steps["low"]
    # Before priority reached the batch, the low prompt took every step's budget until its
    # prefill ended (step 3), and the high one started only then (step 4).
    assert high_at < low_at, (high_at, low_at)


def test_a_yielding_prompt_finishes_under_a_steady_interactive_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The aging rule: a lower prompt yields to higher work but is never paused (the oldest
    yielding prompt gets at least MIN_YIELD tokens of every step), so a summary finishes while
    completions keep coming back to back."""
    engine = load_smollm2(Placement(CPU, CPU), parallel=2, prefix_cache_entries=1)
    scheduler = engine._runner  # type: ignore[attr-defined]
    assert isinstance(scheduler, BatchScheduler)
    # The yielding share pinned to its floor, as a slow or busy machine measures it: the
    # document's ~140 tokens then take about 18 steps, more than one 8-token completion's, on
    # any machine (the share a fast machine measures would prefill it in 3).
    monkeypatch.setattr("zest.engines._llama_batch.yield_tokens", lambda *_: MIN_YIELD)
    short = ARTICLE[: len(ARTICLE) // 10]
    low = dataclasses.replace(
        job_for(engine, f"Summarize: {short}", max_tokens=2), priority=0, label="low"
    )

    async def scenario() -> tuple[list[Delta], int]:
        summary = asyncio.ensure_future(run(engine, low))
        served = await complete_while(engine, summary)  # one in flight at every moment
        return await summary, served

    try:
        summary, served = asyncio.run(scenario())
    finally:
        asyncio.run(engine.close())
    assert summary[-1].finish_reason is not None
    # The load held while the summary ran: completions came one after another the whole time,
    # and the summary's prompt, yielding, took several of their steps to prefill.
    assert served >= 2, served
    assert scheduler.first_token_steps["low"] > scheduler.first_token_steps["high-0"]


def test_a_yielding_prompt_pauses_for_queued_requests_and_still_finishes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two high-priority requests at every moment on two slots: one decodes beside the
    summary, the other waits for a slot. The summary's prefill pauses while one waits (steps
    of the high rows alone) but, by the aging rule, still gets its chunk every AGING_S (0.2 s
    here), so it finishes while the load holds."""
    monkeypatch.setattr(
        "zest.engines._llama_batch.QueuePause", functools.partial(QueuePause, aging_s=0.2)
    )
    engine = load_smollm2(Placement(CPU, CPU), parallel=2, prefix_cache_entries=1)
    scheduler = engine._runner  # type: ignore[attr-defined]
    assert isinstance(scheduler, BatchScheduler)
    ctx, steps = scheduler._ctx, []
    native = ctx.decode

    def decode(entries: list[tuple[int, int, int, bool]], **options: object) -> None:
        steps.append({seq for _, _, seq, _ in entries})
        native(entries, **options)

    monkeypatch.setattr(ctx, "decode", decode)
    # About 700 tokens: the first step (before any high request) takes 512 of them, the rest
    # yield.
    low = dataclasses.replace(
        job_for(engine, f"Summarize: {ARTICLE[: len(ARTICLE) // 2]}", max_tokens=2),
        priority=0,
        label="low",
    )

    # Behind the runner, as the gateway serves it: the one waiting for a slot waits in its
    # queue, which the runner tells the engine of (Engine.note_queued).
    runner = Runner(engine, Admission(slots=2, max_queue=8))

    async def scenario() -> tuple[list[Delta], int]:
        summary = asyncio.ensure_future(run(runner, low))
        await until(lambda: scheduler.steps >= 1, "the summary's prefill began")
        loops = (complete_while(engine, summary, name, via=runner) for name in ("a", "b"))
        served = await asyncio.gather(*loops)
        return await summary, sum(served)

    try:
        summary, served = asyncio.run(scenario())
    finally:
        asyncio.run(engine.close())
    assert summary[-1].finish_reason is not None  # never starved
    assert served >= 2, served
    low_seq = 0  # it came first: the lowest free sequence
    first = scheduler.first_token_steps["low"]
    while_prefilling = steps[1:first]
    paused = [seqs for seqs in while_prefilling if low_seq not in seqs]
    assert paused, "the summary never paused for a queued request"
    assert len(paused) < len(while_prefilling)  # and was served in between
