"""The KV cells a batch holds, counted by llama.cpp itself (engines/_kv_cells.py): every way a
sequence ends leaves no cell but the prompt its idle slot keeps for reuse, and a prompt
cancelled while it is prefilled stops within one step (issues 32 and 33, on SmolLM2)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, cast

from tests.engines.conftest import cancel_after_three, collect, job_for, stream_all
from tests.engines.test_batching import load
from tests.engines.test_hybrid import PROMPTS
from zest.engines import Delta, KvCells
from zest.errors import BadRequestError

LONG = "Summarize this: " + " ".join(f"On day {n} the team shipped feature {n}." for n in range(60))


def test_every_end_of_a_sequence_leaves_only_the_kept_prompts() -> None:
    engine = load(parallel=4, prefix_cache_tokens=4096)
    try:
        assert engine.kv_cells() == KvCells()

        async def together() -> list[list[Delta]]:
            jobs = [job_for(engine, p, max_tokens=8) for p in PROMPTS]
            return list(await asyncio.gather(*(stream_all(engine, j) for j in jobs)))

        finished = asyncio.run(together())  # three answers, side by side
        cancelled = cancel_after_three(engine, job_for(engine, LONG, max_tokens=200))
        grammar = dataclasses.replace(job_for(engine, "Hi", max_tokens=8), grammar="root ::= (")
        refused = collect_error(engine, grammar)  # llama.cpp refuses it: the job fails
        kept = engine.kv_cells()
        assert kept is not None
        assert (kept.running, kept.stray) == (0, 0), kept
        prompts = [len(job_for(engine, p).prompt_tokens) for p in [*PROMPTS, LONG]]
        assert 0 < kept.kept <= sum(prompts)  # each kept slot: its prompt, never its answer
        assert all(answer[-1].finish_reason in {"length", "stop"} for answer in finished)
        assert cancelled[-1].finish_reason == "cancelled"
        assert isinstance(refused, BadRequestError)
        # The batch's thread survived the refused grammar: it serves the next request.
        assert collect(engine, job_for(engine, "Hi!", max_tokens=4))[-1].finish_reason
    finally:
        asyncio.run(engine.close())


def collect_error(engine: Any, job: Any) -> BaseException | None:
    async def run() -> BaseException | None:
        try:
            await stream_all(engine, job)
        except Exception as exc:
            return exc
        return None

    return asyncio.run(run())


def test_a_prompt_cancelled_while_it_is_prefilled_stops_within_one_step() -> None:
    """A classify condition's time-out cancels its generation, mostly while its prompt is
    prefilled: the batch drops it at the end of the step it is in. Counted in steps of 32
    prompt tokens, never in seconds."""
    engine = load(parallel=2, n_batch=32, n_ubatch=32, prefix_cache_tokens=0)
    scheduler = cast(Any, engine)._runner
    job = job_for(engine, LONG, max_tokens=8)
    assert len(job.prompt_tokens) > 10 * 32

    async def run() -> tuple[int, int, list[Delta]]:
        stream = asyncio.ensure_future(stream_all(engine, job))
        at_cancel = await _prefilling(scheduler)
        job.cancel()
        seen = await stream
        return at_cancel, scheduler.steps, seen

    try:
        at_cancel, at_end, seen = asyncio.run(run())
        assert [d.finish_reason for d in seen] == ["cancelled"]
        assert at_end - at_cancel <= 1, (at_cancel, at_end)
        assert engine.kv_cells() == KvCells()  # nothing kept: no prefix cache here
    finally:
        asyncio.run(engine.close())


def test_a_reader_that_gives_up_while_its_prompt_is_prefilled_stops_it_within_one_step() -> None:
    """The gateway's path of a classify time-out (issue 33): asyncio cancels the wait for the
    first delta (wait_for in serving/_routing.py) and nothing calls job.cancel(); the stream,
    through the runner's admission as a lease streams, stops the job at the end of its step."""
    engine = load(parallel=2, n_batch=32, n_ubatch=32, prefix_cache_tokens=0)
    scheduler = cast(Any, engine)._runner
    job = job_for(engine, LONG, max_tokens=8)
    assert len(job.prompt_tokens) > 10 * 32

    async def run() -> tuple[int, int]:
        stream = engine.stream(job)
        first = asyncio.ensure_future(anext(stream))
        at_cancel = await _prefilling(scheduler)
        first.cancel()  # as a time-out does: the reader is gone, the job is not told
        await asyncio.wait([first])
        while scheduler.kv.running:  # the batch has dropped it (and counted its cells)
            await asyncio.sleep(0.005)
        return at_cancel, scheduler.steps

    try:
        at_cancel, at_end = asyncio.run(run())
        assert job.cancelled.is_set()
        assert at_end - at_cancel <= 1, (at_cancel, at_end)
        assert at_end * 32 < len(job.prompt_tokens)  # stopped well inside its prompt
        assert engine.kv_cells() == KvCells()
    finally:
        asyncio.run(engine.close())


async def _prefilling(scheduler: Any) -> int:
    """Once three chunks of the prompt are in: the steps begun so far."""
    while scheduler.steps < 3:
        await asyncio.sleep(0.005)
    return cast(int, scheduler.steps)
