"""The hybrid pipeline on the real model: prefill in one context, KV handed over, decode in another.

Emulated devices (CPU threads labelled npu and gpu) make the split run for real here.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pytest

from tests.engines.conftest import (
    assert_cancelled_within_one_token,
    assert_same_or_near_tie,
    cancel_after_three,
    collect,
    job_for,
    load_smollm2,
    stream_all,
    text_of,
)
from zest.engines import Delta, Engine
from zest.router import Device, Placement, Speculation

CPU = Device("cpu", frozenset({"llamacpp"}), "/proc/cpuinfo")
NPU = Device("npu", frozenset({"llamacpp"}), "emulated", emulated=True, threads=1)
GPU = Device("gpu", frozenset({"llamacpp"}), "emulated", emulated=True, threads=1)
PROMPTS = [
    "Hi!",
    "Explain in two sentences why bread rises.",
    # Longer than n_batch (64 here): prefill runs in several chunks before the handoff.
    "Summarize this: " + " ".join(f"On day {n} the team shipped feature {n}." for n in range(40)),
]
COPY = "Repeat this text exactly: " + " ".join(f"Room {n} has {n + 2} chairs." for n in range(12))
LOOKUP = Speculation(method="prompt_lookup", tokens=8)


def load(placement: Placement) -> Engine:
    return load_smollm2(placement, n_batch=64, n_ubatch=64, prefix_cache_tokens=0)


@pytest.fixture(scope="module")
def engines() -> Iterator[tuple[Engine, Engine]]:
    single, hybrid = load(Placement(CPU, CPU)), load(Placement(NPU, GPU))
    yield single, hybrid
    asyncio.run(single.close())
    asyncio.run(hybrid.close())


@pytest.mark.parametrize("prompt", PROMPTS, ids=["short", "medium", "longer-than-n_batch"])
def test_greedy_hybrid_output_equals_one_context(
    engines: tuple[Engine, Engine], prompt: str
) -> None:
    single, hybrid = engines
    job = job_for(single, prompt)
    if prompt is PROMPTS[-1]:
        assert len(job.prompt_tokens) > 64 * 3
    # A job is used once (its stream's end cancels it): the hybrid engine gets its own.
    alone, split = collect(single, job), collect(hybrid, job_for(single, prompt))
    assert text_of(split) == text_of(alone)
    assert split[-1].completion_tokens == alone[-1].completion_tokens
    assert split[-1].finish_reason == alone[-1].finish_reason


def test_an_answer_of_one_token_is_delivered_at_once(engines: tuple[Engine, Engine]) -> None:
    """max_tokens 1: the sequence is done when the decode stage admits it, and retired there;
    its deltas went out only with the next handoff, so a lone request waited forever (found
    by tests/e2e/test_explain_serves.py). The bound is a hang's, not a speed."""
    _, hybrid = engines

    async def one_token() -> list[Delta]:
        return await asyncio.wait_for(
            stream_all(hybrid, job_for(hybrid, PROMPTS[1], max_tokens=1)), timeout=600
        )

    deltas = asyncio.run(one_token())
    assert (deltas[-1].finish_reason, deltas[-1].completion_tokens) == ("length", 1)


def test_the_handoff_is_measured_and_labelled(engines: tuple[Engine, Engine]) -> None:
    _, hybrid = engines
    deltas = collect(hybrid, job_for(hybrid, PROMPTS[1], max_tokens=12))
    first, last = deltas[0].stats, deltas[-1].stats
    assert first is not None
    assert last is not None
    assert (first.prefill_device, first.decode_device) == ("npu(emulated)", "gpu(emulated)")
    assert first.handoff_bytes is not None
    assert first.handoff_bytes > 0
    assert first.handoff_ms is not None
    assert last.decode_tokens == deltas[-1].completion_tokens - 1
    assert hybrid.info().device == "npu(emulated)->gpu(emulated)"
    assert "emulated" in hybrid.info().backend


def test_streams_decode_together(
    engines: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Token-for-token equality with lone runs is not asserted here: llama.cpp's CPU attention is
    # not bit-invariant to how full the KV cache is, so a stream decoding beside another can
    # flip a near-tie greedy token (see docs/serving.md, "Known limit").
    _, hybrid = engines
    # The first is long and already decoding when the second arrives, so they must overlap
    # (two jobs started together could, on a loaded machine, decode one after the other).
    jobs = [job_for(hybrid, "Tell a long story.", max_tokens=96), job_for(hybrid, PROMPTS[1])]
    # The decode context's steps, each with the slot of every token it carried.
    decode_ctx = cast(Any, hybrid)._runner._decode
    native_decode, steps = decode_ctx.decode, list[list[int]]()

    def decode(entries: Sequence[tuple[int, int, int, bool]], **options: Any) -> None:
        steps.append([slot for _, _, slot, _ in entries])
        native_decode(entries, **options)

    monkeypatch.setattr(decode_ctx, "decode", decode)

    async def both() -> list[list[Delta]]:
        first = hybrid.stream(jobs[0])
        head = [await anext(first)]  # decoding now
        second = asyncio.create_task(stream_all(hybrid, jobs[1]))
        return [head + [delta async for delta in first], await second]

    results = asyncio.run(both())
    for deltas in results:
        assert text_of(deltas)
        assert deltas[-1].finish_reason in {"stop", "length"}
        assert deltas[0].stats is not None
        assert deltas[0].stats.handoff_bytes
    # Together, not one after another: some step decodes both, and there are fewer steps than
    # decoded tokens (the first token of each comes from the prefill context).
    decoded = sum(deltas[-1].completion_tokens - 1 for deltas in results)
    assert max(len(set(slots)) for slots in steps) == 2
    assert len(steps) < decoded, (len(steps), decoded)


def test_cancel_during_hybrid_decode(engines: tuple[Engine, Engine]) -> None:
    _, hybrid = engines
    seen = cancel_after_three(hybrid, job_for(hybrid, "Tell a long story.", max_tokens=300))
    assert_cancelled_within_one_token(seen, 300)
    assert collect(hybrid, job_for(hybrid, "Hi", max_tokens=3))[-1].completion_tokens == 3


def test_logprobs_come_from_both_stages(engines: tuple[Engine, Engine]) -> None:
    """The first token is sampled on the prefill device, the rest on the decode device: each
    has its log probability, and greedy decoding takes the top alternative every time."""
    single, hybrid = engines
    job = dataclasses.replace(job_for(single, PROMPTS[0], max_tokens=6), logprobs=2)
    alone = collect(single, job)[-1].logprobs
    split = collect(hybrid, job_for(single, PROMPTS[0], max_tokens=6))[-1].logprobs
    assert split == ()  # not asked for: none computed
    split = collect(
        hybrid, dataclasses.replace(job_for(single, PROMPTS[0], max_tokens=6), logprobs=2)
    )[-1].logprobs
    assert [t.token for t in split] == [t.token for t in alone]
    assert len(split) == 6
    for token in split:
        assert token.top[0][0] == token.token
        assert len(token.top) == 2
    assert max(abs(a.logprob - b.logprob) for a, b in zip(split, alone, strict=True)) < 0.05


def test_the_decode_stage_speculates_too(engines: tuple[Engine, Engine]) -> None:
    """Prompt lookup runs in the hybrid pipeline's decode context as in a single one."""
    _, hybrid = engines
    plain = collect(hybrid, job_for(hybrid, COPY, max_tokens=48, logprobs=2))
    fast = collect(hybrid, job_for(hybrid, COPY, max_tokens=48, logprobs=2, speculative=LOOKUP))
    assert_same_or_near_tie(plain[-1], fast[-1])
    stats = fast[-1].stats
    assert stats is not None
    assert (stats.prefill_device, stats.decode_device) == ("npu(emulated)", "gpu(emulated)")
    assert stats.accepted_tokens > 0
