"""Route priority reaches the batch, on the real model, behind the runner as the gateway serves
it, counted in the scheduler's steps (never timed): a high-priority prompt has its first token
before a long lower prefill ends; a lower prompt still finishes under a steady interactive load
(the aging rule); a higher request takes a lower sequence's slot when every slot is held, and
the preempted sequence resumes from its saved state with the tokens it would have had; requests
that leave while waiting, preempted or prefilling leave nothing behind; a step llama.cpp
refuses fails only the requests in it."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.engines.conftest import job_for, load_smollm2, text_of
from tests.engines.test_admission import until as poll
from zest.engines import Delta, Engine, GenerationJob
from zest.engines._admission import Admission, ChoiceGroup
from zest.engines._llama_batch import BatchScheduler
from zest.engines._runner import Runner
from zest.engines._step_cost import FixedCost
from zest.engines._step_plan import AGING_STEPS, StepBudget
from zest.errors import EngineError
from zest.router import Device, Placement

CPU = Device("cpu", frozenset({"llamacpp"}), "/proc/cpuinfo")
ARTICLE = " ".join(
    f"Paragraph {n}: the committee reviewed the budget, the library wing and the road "
    "repairs, and asked the council for a report on each before the spring session."
    for n in range(40)
)  # about 1,400 tokens: three full steps of n_batch 512


async def until(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition`, bounded only against a hang: the machine may be slow and shared."""
    await poll(condition, what, timeout=600)


def loaded(parallel: int, **options: object) -> tuple[Engine, BatchScheduler, Runner]:
    engine = load_smollm2(Placement(CPU, CPU), parallel=parallel, **options)
    scheduler = engine._runner  # type: ignore[attr-defined]
    assert isinstance(scheduler, BatchScheduler)
    runner = Runner(engine, Admission(parallel, max_queue=8, slots_set_by="options.parallel"))
    return engine, scheduler, runner


def job(engine: Engine, text: str, label: str, priority: int, **extra: Any) -> GenerationJob:
    base = job_for(engine, text, max_tokens=extra.pop("max_tokens", 2))
    return dataclasses.replace(base, priority=priority, label=label, **extra)


async def run(runner: Runner, job: GenerationJob) -> list[Delta]:
    return [delta async for delta in runner.stream(job)]


def held_steps(scheduler: BatchScheduler, monkeypatch: pytest.MonkeyPatch) -> list[set[int]]:
    """The sequences of each llama_decode the scheduler runs."""
    ctx, steps = scheduler._ctx, []
    native = ctx.decode

    def decode(entries: list[tuple[int, int, int, bool]], **options: object) -> None:
        steps.append({seq for _, _, seq, _ in entries})
        native(entries, **options)

    monkeypatch.setattr(ctx, "decode", decode)
    return steps


class Gate:
    """Holds the scheduling thread before the llama_decode for which `when` holds, until
    the test opens it: what arrives meanwhile is there when the next step is planned."""

    def __init__(
        self, scheduler: BatchScheduler, monkeypatch: pytest.MonkeyPatch, when: Callable[[], bool]
    ) -> None:
        self.reached, self.opened = threading.Event(), threading.Event()
        ctx = scheduler._ctx
        native = ctx.decode

        def decode(entries: list[tuple[int, int, int, bool]], **options: object) -> None:
            if not self.reached.is_set() and when():
                self.reached.set()
                self.opened.wait(60)
            native(entries, **options)

        monkeypatch.setattr(ctx, "decode", decode)


def produced(scheduler: BatchScheduler, label: str) -> int:
    """Tokens the running sequence labelled `label` has drawn (read on the scheduling thread
    while the gate holds it)."""
    for sequence in scheduler._running.values():
        if sequence.job.label == label and sequence.out is not None:
            return sequence.out.produced
    return 0


def test_a_high_priority_first_token_comes_before_a_low_priority_prefill_ends() -> None:
    engine, scheduler, runner = loaded(parallel=2, prefix_cache_entries=1)
    low = job(engine, f"Summarize: {ARTICLE}", "low", 0)
    high = job(engine, "Complete: def add(a, b):", "high", 50)

    async def scenario() -> tuple[list[Delta], list[Delta]]:
        summary = asyncio.ensure_future(run(runner, low))
        await until(lambda: scheduler.steps >= 1, "the low-priority prefill began")
        completion = await run(runner, high)
        return completion, await summary

    try:
        completion, summary = asyncio.run(scenario())
    finally:
        asyncio.run(engine.close())
    assert completion[-1].finish_reason is not None
    assert summary[-1].finish_reason is not None
    high_at, low_at = scheduler.first_token_steps["high"], scheduler.first_token_steps["low"]
    # Without priority in the batch, the low prompt takes every step's budget until its
    # prefill ends (step 3), and the high one starts only then (step 4).
    assert high_at < low_at, (high_at, low_at)


def test_a_lower_prompt_finishes_under_a_steady_interactive_load_by_the_aging_rule() -> None:
    """Lower work gets nothing beside the completions (beside: 0) and 8-token steps alone
    (guarded: its route's model serves priority 50), yet its prompt still moves: MIN_CHUNK
    tokens every AGING_STEPS steps, and it finishes while completions keep coming."""
    engine, scheduler, runner = loaded(parallel=2, prefix_cache_entries=1)
    scheduler.cost = FixedCost(StepBudget(full=512, guarded=8, beside=0))
    short = ARTICLE[: len(ARTICLE) // 10]  # about 140 tokens: 18 steps at least
    low = job(engine, f"Summarize: {short}", "low", 0, peak_priority=50)

    async def scenario() -> tuple[list[Delta], int]:
        summary = asyncio.ensure_future(run(runner, low))
        served = 0
        while not summary.done():  # one completion in flight at every moment
            high = job(engine, "Complete: def add(a, b):", f"high-{served}", 50, max_tokens=8)
            await run(runner, high)
            served += 1
        return await summary, served

    try:
        summary, served = asyncio.run(scenario())
    finally:
        asyncio.run(engine.close())
    assert summary[-1].finish_reason is not None
    assert served >= 2, served
    assert scheduler.first_token_steps["low"] > scheduler.first_token_steps["high-0"]


def test_a_higher_request_preempts_a_lower_sequence_when_every_slot_is_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two summaries decode in both slots; an autocomplete takes one's slot at the next step
    (its state saved), has its first token in the step after, and the summary resumes and
    finishes all its tokens."""
    engine, scheduler, runner = loaded(parallel=2)
    lows = [
        job(engine, f"Summarize report {n}: {ARTICLE[:600]}", f"low-{n}", 0, max_tokens=24)
        for n in range(2)
    ]
    high = job(engine, "Complete: def add(a, b):", "high", 50, max_tokens=4)
    gate = Gate(
        scheduler, monkeypatch, lambda: all(produced(scheduler, j.label) >= 4 for j in lows)
    )

    async def scenario() -> tuple[list[list[Delta]], list[Delta], int, int]:
        summaries = [asyncio.ensure_future(run(runner, j)) for j in lows]
        await until(gate.reached.is_set, "both summaries decode")
        completion = asyncio.ensure_future(run(runner, high))
        await until(lambda: scheduler.waiting == 1, "the autocomplete reached the scheduler")
        arrived, saved = scheduler.steps, 0
        gate.opened.set()
        await until(lambda: scheduler.preemptions == 1, "a summary was preempted")
        saved = scheduler.saved_bytes
        done = await asyncio.gather(*summaries)
        return done, await completion, arrived, saved

    try:
        summaries, completion, arrived, saved = asyncio.run(scenario())
    finally:
        asyncio.run(engine.close())
    assert scheduler.preemptions == 1
    assert saved > 0  # the preempted summary's KV state, in host memory meanwhile
    assert scheduler.first_token_steps["high"] <= arrived + 2  # M steps for a 20-token prompt
    for deltas in summaries:
        assert deltas[-1].finish_reason == "length"
        assert deltas[-1].completion_tokens == 24
    assert completion[-1].finish_reason is not None
    assert (scheduler.running, scheduler.waiting, scheduler.saved_bytes) == (0, 0, 0)
    assert runner.pending == 0


def preempted_text(
    monkeypatch: pytest.MonkeyPatch, low: Callable[[Engine], GenerationJob]
) -> tuple[str, str, int]:
    """(the low job's text when preempted after 6 tokens, the same job's text alone, the
    number of preemptions): one slot, so the low job's every step is a step of its own."""
    engine, scheduler, runner = loaded(parallel=1)
    alone = asyncio.run(run(runner, low(engine)))
    asyncio.run(engine.close())

    engine, scheduler, runner = loaded(parallel=1)
    gate = Gate(scheduler, monkeypatch, lambda: produced(scheduler, "low") >= 6)
    high = job(engine, "Complete: def add(a, b):", "high", 50, max_tokens=8)

    async def scenario() -> list[Delta]:
        first = asyncio.ensure_future(run(runner, low(engine)))
        await until(gate.reached.is_set, "the low job decodes")
        second = asyncio.ensure_future(run(runner, high))
        await until(lambda: scheduler.waiting == 1, "the high job reached the scheduler")
        gate.opened.set()
        await second
        return await first

    try:
        preempted = asyncio.run(scenario())
    finally:
        asyncio.run(engine.close())
    assert scheduler.first_token_steps["high"] < scheduler.first_token_steps["low"] + 30
    return text_of(preempted), text_of(alone), scheduler.preemptions


def test_a_preempted_sequence_gives_the_greedy_tokens_it_would_have_without_preemption(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def low(engine: Engine) -> GenerationJob:
        return job(engine, "Write a short story about a lighthouse.", "low", 0, max_tokens=32)

    preempted, alone, preemptions = preempted_text(monkeypatch, low)
    assert preemptions == 1
    assert preempted == alone


def test_a_preempted_sequence_keeps_its_sampler_state_at_a_users_temperature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its seeded sampler (and its penalties' history) travel with it: at temperature 0.8 and
    a seed, the preempted answer is the one it gives alone."""

    def low(engine: Engine) -> GenerationJob:
        found = job(engine, "Write a short story about a lighthouse.", "low", 0, max_tokens=32)
        return dataclasses.replace(found, temperature=0.8, seed=7, repeat_penalty=1.1)

    preempted, alone, preemptions = preempted_text(monkeypatch, low)
    assert preemptions == 1
    assert preempted == alone


def test_requests_that_leave_while_waiting_preempted_or_prefilling_leave_nothing_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine, scheduler, runner = loaded(parallel=1)
    steps = held_steps(scheduler, monkeypatch)
    low = job(engine, f"Summarize: {ARTICLE[:600]}", "low", 0, max_tokens=200)
    high = job(engine, "Complete: def add(a, b):", "high", 50, max_tokens=200)
    waiter = job(engine, "Hi", "waiter", 0)
    prefilling = job(engine, f"Summarize: {ARTICLE}", "prefilling", 0)

    async def scenario() -> tuple[int, list[BaseException | list[Delta]]]:
        first = asyncio.ensure_future(run(runner, low))
        await until(lambda: "low" in scheduler.first_token_steps, "the low job decodes")
        second = asyncio.ensure_future(run(runner, high))
        await until(lambda: scheduler.preemptions == 1, "the low job was preempted")
        saved = scheduler.saved_bytes
        third = asyncio.ensure_future(run(runner, waiter))  # waits: nothing below it runs
        await until(lambda: scheduler.waiting == 2, "the waiter reached the scheduler")
        first.cancel()  # preempted
        third.cancel()  # waiting
        await until(lambda: scheduler.waiting == 0, "both dropped")
        second.cancel()  # decoding
        fourth = asyncio.ensure_future(run(runner, prefilling))
        await until(lambda: scheduler.running == 1, "the long prompt prefills")
        fourth.cancel()  # prefilling
        ended = await asyncio.gather(first, second, third, fourth, return_exceptions=True)
        await until(lambda: scheduler.running == 0, "every slot free")
        # llama.cpp's own count of the context's cells, taken after the step that dropped
        # them: none held by a running sequence, none beyond a free slot's kept prompt.
        await until(lambda: scheduler.kv.running == 0, "the cells counted after that step")
        return saved, ended

    try:
        saved, ended = asyncio.run(scenario())
        assert saved > 0
        assert all(isinstance(result, asyncio.CancelledError) for result in ended)
        assert (scheduler.running, scheduler.waiting, scheduler.saved_bytes) == (0, 0, 0)
        assert runner.pending == 0
        assert runner.waiting == 0
        assert scheduler._free == [0]
        assert scheduler.kv.stray == 0
        # The model still serves, and whole: a request after them all runs to its end.
        after = asyncio.run(run(runner, job(engine, "Hi", "after", 0, max_tokens=4)))
        assert after[-1].finish_reason is not None
    finally:
        asyncio.run(engine.close())
    assert steps  # the scheduler ran steps throughout


def test_a_step_llama_cpp_refuses_fails_only_the_requests_in_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A high-priority request's steps leave the lower one's rows out (beside: 0); the first
    of them fails: that request's stream ends with the error, the lower one finishes, and the
    scheduler serves the next request."""
    engine, scheduler, runner = loaded(parallel=2, prefix_cache_tokens=0)
    scheduler.cost = FixedCost(StepBudget(full=512, guarded=512, beside=0))
    ctx, failed = scheduler._ctx, []
    native = ctx.decode

    def decode(entries: list[tuple[int, int, int, bool]], **options: object) -> None:
        seqs = {seq for _, _, seq, _ in entries}
        if not failed and seqs == {1}:  # the high request's, alone (the low one holds seq 0)
            failed.append(len(entries))
            raise EngineError(
                "generation failed: llama.cpp could not decode (llama_decode returned 1)"
            )
        native(entries, **options)

    monkeypatch.setattr(ctx, "decode", decode)
    low = job(engine, "Write a short story about a lighthouse.", "low", 0, max_tokens=24)
    high = job(engine, "Complete: def add(a, b):", "high", 50, max_tokens=8)

    async def scenario() -> tuple[list[Delta], BaseException | list[Delta], list[Delta]]:
        first = asyncio.ensure_future(run(runner, low))
        await until(lambda: "low" in scheduler.first_token_steps, "the low job decodes")
        second = await asyncio.gather(run(runner, high), return_exceptions=True)
        after = await run(runner, job(engine, "Hi", "after", 50, max_tokens=4))
        return await first, second[0], after

    try:
        low_deltas, high_result, after = asyncio.run(scenario())
    finally:
        asyncio.run(engine.close())
    assert failed
    assert isinstance(high_result, EngineError)
    assert "llama_decode returned 1" in high_result.message
    assert low_deltas[-1].completion_tokens == 24
    assert after[-1].finish_reason is not None
    assert (scheduler.running, scheduler.waiting) == (0, 0)


def test_the_aging_rule_bounds_how_long_a_lower_decode_sits_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Beside a higher request's steps, the lower sequence's decode row sits out (beside: 0)
    but comes back at least every AGING_STEPS steps."""
    engine, scheduler, runner = loaded(parallel=2, prefix_cache_tokens=0)
    scheduler.cost = FixedCost(StepBudget(full=512, guarded=512, beside=0))
    steps = held_steps(scheduler, monkeypatch)
    low = job(engine, "Write a short story about a lighthouse.", "low", 0, max_tokens=64)
    high = job(engine, "Write a poem about the sea.", "high", 50, max_tokens=40)

    async def scenario() -> None:
        first = asyncio.ensure_future(run(runner, low))
        await until(lambda: "low" in scheduler.first_token_steps, "the low job decodes")
        await run(runner, high)
        await first

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(engine.close())
    beside = [seqs for seqs in steps if 1 in seqs]  # while the high request ran
    sat_out = [0 not in seqs for seqs in beside]
    assert any(sat_out), "the lower decode never sat out"
    longest = max(len(run) for run in "".join("x" if s else "." for s in sat_out).split("."))
    assert longest < AGING_STEPS


def test_choices_beyond_the_slots_sent_past_the_runner_fail_instead_of_waiting_forever() -> None:
    """The runner refuses them with 400; a caller that skips it gets an error event, and the
    scheduler does not spin on requests no slot can take."""
    engine, scheduler, _ = loaded(parallel=1)
    pair = ChoiceGroup(2)
    jobs = [job(engine, "Hi", f"choice-{n}", 0, group=pair) for n in range(2)]

    async def direct(one: GenerationJob) -> list[Delta]:
        return [delta async for delta in engine.stream(one)]

    async def scenario() -> list[BaseException | list[Delta]]:
        return await asyncio.gather(*(direct(one) for one in jobs), return_exceptions=True)

    try:
        results = asyncio.run(scenario())
        steps = scheduler.steps
    finally:
        asyncio.run(engine.close())
    for result in results:
        assert isinstance(result, EngineError)
        assert "more choices than the model's 1 slot(s)" in result.message
    assert steps <= 2
