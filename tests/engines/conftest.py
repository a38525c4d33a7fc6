"""Helpers for the engine tests: jobs as the gateway builds them, and collecting a stream."""

from __future__ import annotations

import asyncio
import dataclasses

from engines import Delta, Engine, GenerationJob


def completion_job(engine: Engine, prompt: str, **overrides: object) -> GenerationJob:
    """A greedy job for `prompt` as it is (a completion route's job)."""
    tokens = tuple(engine.tokenize(prompt, add_special=False))
    job = GenerationJob.greedy(tokens, max_tokens=32)
    return dataclasses.replace(job, **overrides)  # type: ignore[arg-type]


def job_for(engine: Engine, text: str, **overrides: object) -> GenerationJob:
    """A greedy job for one user message through the model's chat template (a chat route's)."""
    prompt = engine.render_chat([{"role": "user", "content": text}])
    return completion_job(engine, prompt, **overrides)


def collect(engine: Engine, job: GenerationJob) -> list[Delta]:
    async def run() -> list[Delta]:
        return [delta async for delta in engine.stream(job)]

    return asyncio.run(run())


def text_of(deltas: list[Delta]) -> str:
    return "".join(d.text for d in deltas)
