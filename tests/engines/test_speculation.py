"""Speculative decoding by prompt lookup on SmolLM2: where the answer copies its input, drafts
are accepted and fewer steps are needed; the greedy output is the one without speculation
(or parts from it only at a near-tie, as a batch of several rows may); the figures report it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pytest

from tests.engines.conftest import (
    assert_same_or_near_tie,
    collect,
    job_for,
    load_smollm2,
    text_of,
)
from zest.engines import Engine
from zest.router import Device, Placement, Speculation

CPU = Device("cpu", frozenset({"llamacpp"}), "/proc/cpuinfo")
ARTICLE = (
    "The river town of Elm Ford opened its new library on Saturday. The library has three "
    "floors, a reading garden and a room for children. The mayor said the library cost two "
    "million pounds and took four years to build. Volunteers moved thirty thousand books from "
    "the old building in one week. The library will open every day from nine until eight."
)
COPY = f"Repeat this text exactly, word for word:\n\n{ARTICLE}"
LOOKUP = Speculation(method="prompt_lookup", tokens=8)


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    loaded = load_smollm2(Placement(CPU, CPU), parallel=2, prefix_cache_tokens=0)
    yield loaded
    asyncio.run(loaded.close())


def count_steps(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    ctx = cast(Any, engine)._runner._ctx
    native, steps = ctx.decode, []

    def decode(entries: Sequence[tuple[int, int, int, bool]], **options: Any) -> None:
        steps.append(len(entries))
        native(entries, **options)

    monkeypatch.setattr(ctx, "decode", decode)
    return steps


def test_a_copying_answer_accepts_drafts_in_fewer_steps(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain_job = job_for(engine, COPY, max_tokens=64, logprobs=2)
    plain = collect(engine, plain_job)
    steps = count_steps(engine, monkeypatch)
    fast = collect(engine, job_for(engine, COPY, max_tokens=64, logprobs=2, speculative=LOOKUP))
    assert_same_or_near_tie(plain[-1], fast[-1])
    stats = fast[-1].stats
    assert stats is not None
    assert stats.accepted_tokens > 0
    # Each accepted draft token is a step saved: one step per token drawn, less those. The
    # first token comes from the prefill; the end-of-turn token that ends a "stop" answer is
    # drawn (and may be drafted and accepted, copied from the prompt's template) but is not a
    # completion token.
    decoded = fast[-1].completion_tokens - 1 + (fast[-1].finish_reason == "stop")
    assert len(steps) <= decoded - stats.accepted_tokens + 2
    assert len(steps) < decoded * 0.8
    assert stats.speculation()["acceptance_rate"] == round(
        stats.accepted_tokens / stats.drafted_tokens, 3
    )


def test_an_answer_that_copies_nothing_is_unchanged(engine: Engine) -> None:
    question = "Name three animals that live in the sea."
    plain = collect(engine, job_for(engine, question, max_tokens=32, logprobs=2))
    fast = collect(engine, job_for(engine, question, max_tokens=32, logprobs=2, speculative=LOOKUP))
    assert_same_or_near_tie(plain[-1], fast[-1])


def test_limits_and_stops_hold_with_drafts(engine: Engine) -> None:
    limited = collect(engine, job_for(engine, COPY, max_tokens=5, speculative=LOOKUP))
    assert (limited[-1].completion_tokens, limited[-1].finish_reason) == (5, "length")
    reference = text_of(collect(engine, job_for(engine, COPY, max_tokens=40)))
    stop = reference.split()[6]
    stopped = collect(
        engine, job_for(engine, COPY, max_tokens=40, stop=(stop,), speculative=LOOKUP)
    )
    assert stopped[-1].finish_reason == "stop"
    assert text_of(stopped) == reference[: reference.index(stop)]
