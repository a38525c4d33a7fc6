"""Token ids sent to /v1/embeddings: never read in a vocabulary they were not made in. A local
model is skipped for them (none left: a 400 that says to send the text); a remote upstream gets
them as sent, to read in its own model's vocabulary (OpenAI's contract). Scripted engines in a
real runtime (tests/e2e/test_embeddings.py runs the real model)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import pytest

from zest.engines import (
    Delta,
    EmbeddingInput,
    Embeddings,
    Engine,
    EngineInfo,
    GenerationJob,
    Inventory,
)
from zest.errors import BadRequestError
from zest.gateway.serving import Runtime, embed_inputs
from zest.router import Device, LoadedRoutes, Placement, parse_routes

ROUTES = """\
version: 1
lifecycle: {preload: []}
models:
  minilm: {engine: llamacpp, source: minilm.gguf, options: {embedding: true}}
  upstream: {engine: remote, base_url: "http://127.0.0.1:9/v1", model: text-embedding-3-small}
routes:
  local: {kind: embedding, model: minilm, device: cpu}
  either:
    kind: embedding
    model: minilm
    device: cpu
    privacy: allow_remote
    fallback: [{model: upstream}]
"""
CPU = Device("cpu", frozenset({"llamacpp"}), "test")


class Recording(Engine):
    def __init__(self, model_id: str) -> None:
        self.model_id, self.seen = model_id, list[Sequence[EmbeddingInput]]()
        self.placement = Placement(CPU, CPU)

    def load(self) -> EngineInfo:
        return self.info()

    def info(self) -> EngineInfo:
        return EngineInfo("test", self.model_id, "cpu", "test", 512, "memory")

    async def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        yield Delta("", finish_reason="stop")

    async def close(self) -> None:
        pass

    async def embed(self, texts: Sequence[EmbeddingInput], *, privacy: Any = None) -> Embeddings:
        self.seen.append(texts)
        return Embeddings(tuple((1.0,) for _ in texts), 3)


def served() -> tuple[Runtime, dict[str, Recording]]:
    routes = LoadedRoutes(parse_routes(ROUTES, "routes.yaml"), Path("/srv/routes.yaml"))
    runtime = Runtime(routes, Inventory({"cpu": CPU}, ()))
    engines = {"minilm": Recording("minilm"), "upstream": Recording("upstream")}
    runtime.pool.factory = lambda spec: engines[spec.model_id]
    runtime.pool.verify = lambda spec: None
    return runtime, engines


def test_a_local_model_never_reads_token_ids_it_says_to_send_the_text() -> None:
    runtime, engines = served()
    with pytest.raises(BadRequestError) as refused:
        asyncio.run(embed_inputs(runtime, "local", [(35, 27403, 13)]))
    assert refused.value.param == "input"
    assert refused.value.message.endswith(
        "send the text itself (langchain: OpenAIEmbeddings(..., check_embedding_ctx_length=False))"
    )
    assert engines["minilm"].seen == []  # nothing loaded, nothing read
    assert runtime.pool.loaded() == []


def test_token_ids_go_to_an_upstream_as_sent_and_texts_to_the_local_model() -> None:
    runtime, engines = served()
    done = asyncio.run(embed_inputs(runtime, "either", [(35, 27403, 13), (7,)]))
    assert done.info.model == "upstream"
    assert done.fallbacks == ["minilm: skipped: it reads no token ids (its vocabulary)"]
    assert engines["upstream"].seen == [[(35, 27403, 13), (7,)]]
    texts = asyncio.run(embed_inputs(runtime, "either", ["Dogs bark."]))
    assert texts.info.model == "minilm"
    assert engines["minilm"].seen == [["Dogs bark."]]
