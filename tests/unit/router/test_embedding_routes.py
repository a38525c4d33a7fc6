"""kind: embedding routes: only embedding models serve them, and embedding models serve
nothing else (each refusal names the key and the fix)."""

from __future__ import annotations

import pytest

from zest.errors import ConfigError
from zest.router import parse_routes

MODELS = """\
version: 1
models:
  minilm: {engine: llamacpp, source: m.gguf, options: {embedding: true}}
  smol: {engine: llamacpp, source: s.gguf}
routes:
"""


def problems(routes: str) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        parse_routes(MODELS + routes, "routes.yaml")
    return refused.value.problems


def test_an_embedding_route_on_an_embedding_model_is_valid() -> None:
    config = parse_routes(MODELS + "  embed: {kind: embedding, model: minilm}\n", "routes.yaml")
    assert config.routes["embed"].kind == "embedding"


def test_an_embedding_route_needs_an_embedding_model() -> None:
    assert problems("  embed: {kind: embedding, model: smol}\n") == [
        "routes.yaml: routes.embed.model: 'smol' is not an embedding model, and this is a kind: "
        "embedding route: use a llamacpp model with options.embedding: true (or a remote model)"
    ]


def test_an_embedding_model_serves_no_chat_route() -> None:
    assert problems("  chat: {kind: chat, model: minilm}\n") == [
        "routes.yaml: routes.chat.model: 'minilm' is an embedding model (options.embedding: "
        "true): it cannot serve a chat route; route it with kind: embedding"
    ]
