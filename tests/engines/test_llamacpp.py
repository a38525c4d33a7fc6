"""The llama.cpp engine on the real SmolLM2 model, without the HTTP layer."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines import Delta, Engine, GenerationJob, create_engine
from router import Device, EngineError, Placement, load_routes

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    routes = load_routes(REPO / "routes.yaml")
    cpu = Device("cpu", frozenset({"llamacpp"}), "/proc/cpuinfo")
    loaded = create_engine(
        "smollm2", routes.config.models["smollm2"], routes.base_dir, Placement(cpu, cpu)
    )
    loaded.load()
    yield loaded
    asyncio.run(loaded.close())


def job_for(engine: Engine, text: str, **overrides: object) -> GenerationJob:
    prompt = engine.render_chat([{"role": "user", "content": text}])
    job = GenerationJob(
        prompt_tokens=tuple(engine.tokenize(prompt, add_special=False)),
        max_tokens=32,
        temperature=0.0,
        top_p=1.0,
        top_k=40,
        min_p=0.0,
        repeat_penalty=1.0,
        frequency_penalty=0.0,
        presence_penalty=0.0,
        seed=1,
        stop=(),
    )
    return dataclasses.replace(job, **overrides)  # type: ignore[arg-type]


def collect(engine: Engine, job: GenerationJob) -> list[Delta]:
    async def run() -> list[Delta]:
        return [delta async for delta in engine.stream(job)]

    return asyncio.run(run())


def text_of(deltas: list[Delta]) -> str:
    return "".join(d.text for d in deltas)


def test_the_chat_template_comes_from_the_gguf(engine: Engine) -> None:
    prompt = engine.render_chat([{"role": "user", "content": "Hi"}])
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_greedy_generation_is_deterministic(engine: Engine) -> None:
    first = collect(engine, job_for(engine, "Name three colours."))
    second = collect(engine, job_for(engine, "Name three colours."))
    assert text_of(first) == text_of(second)
    assert first[-1].finish_reason in {"stop", "length"}
    assert first[-1].completion_tokens == second[-1].completion_tokens


def test_max_tokens_is_exact(engine: Engine) -> None:
    deltas = collect(engine, job_for(engine, "Count to fifty.", max_tokens=5))
    assert (deltas[-1].finish_reason, deltas[-1].completion_tokens) == ("length", 5)


def test_multibyte_text_is_never_split(engine: Engine) -> None:
    text = text_of(collect(engine, job_for(engine, "What is the capital of France?")))
    assert "É" in text  # the greedy answer of this model, built from two byte-level tokens
    assert "\ufffd" not in text


def test_cancel_stops_within_one_token(engine: Engine) -> None:
    job = job_for(engine, "Tell a long story.", max_tokens=300)

    async def run() -> list[Delta]:
        seen = []
        async for delta in engine.stream(job):
            seen.append(delta)
            if len(seen) == 3:
                job.cancel()
        return seen

    seen = asyncio.run(run())
    assert seen[-1].finish_reason == "cancelled"
    assert seen[-1].completion_tokens <= 4


def test_closing_the_stream_frees_the_model(engine: Engine) -> None:
    long_job = job_for(engine, "Tell a long story.", max_tokens=300)

    async def run() -> list[Delta]:
        stream = engine.stream(long_job)
        await anext(stream)
        await stream.aclose()  # type: ignore[attr-defined]
        return [d async for d in engine.stream(job_for(engine, "Hi", max_tokens=3))]

    after = asyncio.run(run())
    assert long_job.cancelled.is_set()
    assert after[-1].completion_tokens == 3


def test_an_engine_failure_is_an_engine_error_and_the_worker_survives(engine: Engine) -> None:
    broken = job_for(engine, "Hi", prompt_tokens=(10**9,))
    with pytest.raises(EngineError, match="generation failed"):
        collect(engine, broken)
    assert collect(engine, job_for(engine, "Hi", max_tokens=2))[-1].completion_tokens == 2
