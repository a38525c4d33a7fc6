"""What routing a request may cost: the prompt is tokenized only when a rule reaches a token
condition, and not at all when its length alone is over every bound; a model-backed condition
reads at most its max_input_chars of the text, and a time-out stops its classifier's
generation instead of leaving it running."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.unit.gateway.generations import generation
from zest.engines import Delta, Embeddings, Inventory, Prompt, Tokenizer
from zest.gateway.serving import (
    ChatMessage,
    ChatRequest,
    Runtime,
    _conditions,
    _embedding,
    _generation,
    route_request,
)
from zest.gateway.serving._conditions import ServingConditions
from zest.gateway.serving._routing import ConditionQuery, RoutingOracle
from zest.router import (
    Classify,
    Condition,
    Decision,
    Device,
    LoadedRoutes,
    RouteInput,
    Rule,
    SimilarTo,
    decide,
    parse_routes,
)

ROUTES = """\
version: 1
lifecycle: {preload: []}
models:
  small: {engine: llamacpp, source: small.gguf}
  vectors: {engine: llamacpp, source: vectors.gguf, options: {embedding: true}}
phrases: {code: [a phrase]}
routes:
  chat:
    kind: chat
    model: small
    rules:
      - {id: code, when: {keywords_any: ["def "]}, to: chat-long}
      - {id: long, when: {min_prompt_tokens: 3000}, to: chat-long}
      - {id: short, when: {max_prompt_tokens: 20}, to: chat-long}
  chat-long: {kind: chat, model: small}
  classifier: {kind: chat, model: small}
  embed: {kind: embedding, model: vectors}
"""
CPU = Device("cpu", frozenset({"llamacpp"}), "test")


class CountingTokenizer(Tokenizer):
    """One token per character, no token longer than 4 bytes; counts what it tokenizes."""

    key = "counting"
    max_token_bytes = 4
    control = re.compile("<[|]im_start[|]>")  # known: text is not tokenized to look for it

    def __init__(self) -> None:
        self.tokenized = 0

    def render_chat(self, messages: Sequence[Mapping[str, str]]) -> str:
        return "".join(m["content"] for m in messages)

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool = True) -> list[int]:
        self.tokenized += len(text)
        return [ord(c) for c in text]


def runtime(tokenizer: Tokenizer) -> Runtime:
    routes = LoadedRoutes(parse_routes(ROUTES, "routes.yaml"), Path("/srv/routes.yaml"))
    serving = Runtime(routes, Inventory({"cpu": CPU}, ()))

    async def the_tokenizer(routes: LoadedRoutes, model_id: str) -> Tokenizer:
        return tokenizer

    serving.tokenizer = the_tokenizer  # type: ignore[method-assign]
    return serving


def route(text: str, tokenizer: CountingTokenizer) -> str | None:
    serving = runtime(tokenizer)
    messages = [ChatMessage(role="user", content=text)]
    body = ChatRequest(model="chat", messages=messages)

    async def run() -> str | None:
        try:
            routed = await route_request(serving, "chat", "chat", body, {"messages": messages})
        finally:
            await serving.close()
        return routed.rule_label

    return asyncio.run(run())


def test_a_rule_matched_before_any_token_condition_counts_nothing() -> None:
    tokenizer = CountingTokenizer()
    assert route("def f(): pass", tokenizer) == "code"
    assert tokenizer.tokenized == 0


def test_a_prompt_whose_length_is_over_every_bound_is_not_tokenized() -> None:
    """12,004 characters are at least 3,001 tokens of at most 4 bytes: over 3,000 and 20."""
    tokenizer = CountingTokenizer()
    assert route("x" * 12_004, tokenizer) == "long"
    assert tokenizer.tokenized == 0


def test_a_prompt_its_length_cannot_decide_is_counted_once() -> None:
    """11,996 characters may be as few as 2,999 tokens: counted, they are 11,996."""
    tokenizer = CountingTokenizer()
    assert route("x" * 11_996, tokenizer) == "long"
    assert tokenizer.tokenized == 11_996
    tokenizer = CountingTokenizer()
    assert route("x" * 100, tokenizer) == "default"  # neither 3,000 nor 20 or fewer
    assert tokenizer.tokenized == 100


def test_count_prompt_over_a_bound_gives_the_least_count_of_a_longer_prompt() -> None:
    tokenizer = CountingTokenizer()
    serving = runtime(tokenizer)
    prompt = Prompt.chat([{"role": "user", "content": "é" * 4_001}])

    async def run() -> tuple[int, int]:
        try:
            routes = serving.routes
            least = await serving.count_prompt(routes, "small", prompt, over=1_000)
            exact = await serving.count_prompt(routes, "small", prompt, over=1_001)
        finally:
            await serving.close()
        return least, exact

    assert asyncio.run(run()) == (1_001, 4_001)  # 4,001 characters: 1,001 tokens at least


def query(condition: SimilarTo | Classify, text: str) -> ConditionQuery:
    serving = runtime(CountingTokenizer())
    caller = serving.routes.config.routes["chat"]
    models = ServingConditions(serving, _generation.start_generation)
    return ConditionQuery(models, serving.routes, caller, condition, text)


def test_a_similarity_embeds_at_most_max_input_chars_of_the_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    embedded: list[Any] = []

    async def embed_inputs(runtime: Any, name: str, texts: Any, **_: Any) -> Any:
        embedded.append(list(texts))
        result = Embeddings(tuple((1.0, 0.0) for _ in texts), 1)
        return _embedding.Embedded(None, None, None, result)  # type: ignore[arg-type]

    monkeypatch.setattr(_conditions, "embed_inputs", embed_inputs)
    condition = SimilarTo(via="embed", label="code", min_score=0.5, max_input_chars=5)
    asked = query(condition, "abcdefgh" * 1000)
    found = asyncio.run(RoutingOracle().resolve(asked))
    assert found.score == pytest.approx(1.0)
    assert embedded == [["a phrase"], ["abcde"]]


def test_a_classifier_that_times_out_has_its_generation_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stopped: list[bool] = []

    class Endless:
        async def deltas(self) -> AsyncGenerator[Any, None]:
            await asyncio.Event().wait()  # never answers
            yield None

        async def aclose(self) -> None:
            stopped.append(True)

    async def start_generation(*_: Any, **__: Any) -> Endless:
        return Endless()

    monkeypatch.setattr(_generation, "start_generation", start_generation)
    condition = Classify(
        via="classifier", labels=("code", "other"), prompt="Code?", label="code", timeout_s=0.05
    )
    found = asyncio.run(RoutingOracle().resolve(query(condition, "def f(): pass")))
    assert found.error == "timed out after 0.05 s"
    assert stopped == [True]


def classify_answering(
    monkeypatch: pytest.MonkeyPatch, *deltas: Delta
) -> tuple[list[Any], Classify]:
    """A classifier whose generation answers `deltas`; the bodies it was asked with."""
    asked: list[Any] = []

    async def start_generation(*_: Any, body: Any, **__: Any) -> Any:
        asked.append(body)

        async def rest() -> AsyncIterator[Delta]:
            for delta in deltas[1:]:
                yield delta

        return generation(rest(), first=deltas[0])

    monkeypatch.setattr(_generation, "start_generation", start_generation)
    condition = Classify(
        via="classifier",
        labels=("code", "prose", "ça-va"),
        prompt="Code?",
        label="code",
        on_error="default_label",
        default_label="prose",
    )
    return asked, condition


@pytest.mark.parametrize(
    ("deltas", "why"),
    [
        (
            (Delta('"co'), Delta("", finish_reason="length")),
            "cut at its max_tokens: `zest check` says how far to raise "
            "routes.classifier.max_tokens",
        ),
        (
            (Delta('"co', finish_reason="stop"),),
            "it stopped inside a label: does routes.classifier.sampling.stop hold part of one?",
        ),
    ],
    ids=["max-tokens", "stop"],
)
def test_a_cut_label_is_an_error_that_on_error_decides(
    monkeypatch: pytest.MonkeyPatch, deltas: tuple[Delta, ...], why: str
) -> None:
    """issue 32: json.loads of the cut answer was a 500; now the condition errs, the trace
    says so, and on_error decides (here: default_label)."""
    _, condition = classify_answering(monkeypatch, *deltas)
    found = asyncio.run(RoutingOracle().resolve(query(condition, "def f(): pass")))
    assert found.error == f"the classifier's answer '\"co' is none of its labels ({why})"
    rules = (Rule(id="code", when=Condition(classify=condition), to="chat-long"),)
    decision = decide("chat", rules, RouteInput("def f(): pass"), {condition: found})
    assert isinstance(decision, Decision)
    assert (decision.route_to, decision.default_used) == ("chat", True)  # label prose: no match
    [entry] = decision.trace
    assert (entry.result, entry.error, entry.label) == (False, found.error, "prose")


def test_a_whole_label_is_read_and_its_max_tokens_sized_from_the_longest_label(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked, condition = classify_answering(
        monkeypatch, Delta('"ça-va"'), Delta("", finish_reason="length")
    )
    found = asyncio.run(RoutingOracle().resolve(query(condition, "def f(): pass")))
    assert (found.label, found.error) == ("ça-va", None)  # whole, though max_tokens was reached
    # '"ça-va"' is 8 bytes in UTF-8, the most tokens any tokenizer may write it in.
    assert [body.max_tokens for body in asked] == [8]


def test_a_condition_that_times_out_writes_its_access_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def start_generation(*_: Any, **__: Any) -> Any:
        await asyncio.Event().wait()  # never starts

    monkeypatch.setattr(_generation, "start_generation", start_generation)
    condition = Classify(
        via="classifier", labels=("code", "other"), prompt="Code?", label="code", timeout_s=0.05
    )
    asked = replace(query(condition, "def f(): pass"), request_id="req_1")
    with caplog.at_level(logging.INFO, logger="zest.access"):
        asyncio.run(RoutingOracle().resolve(asked))
    [line] = [r.getMessage() for r in caplog.records if r.name == "zest.access"]
    assert re.fullmatch(
        r'routing - "CLASSIFY classifier" 504 req_1 0\.\d{3}s \(timed out after 0\.05 s\)', line
    ), line


def test_each_model_backed_condition_s_request_has_its_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Answered, timed out or abandoned with its request, a condition's request writes one
    access line (issue 33); a cached result made no request and writes none."""

    async def embed_inputs(runtime: Any, name: str, texts: Any, **_: Any) -> Any:
        if texts != ["a phrase"] and texts[0] != "answered":
            await asyncio.Event().wait()  # never answers
        result = Embeddings(tuple((1.0, 0.0) for _ in texts), 1)
        return _embedding.Embedded(None, None, None, result)  # type: ignore[arg-type]

    monkeypatch.setattr(_conditions, "embed_inputs", embed_inputs)
    condition = SimilarTo(via="embed", label="code", min_score=0.5, timeout_s=0.05)
    serving, oracle = runtime(CountingTokenizer()), RoutingOracle()
    caller = serving.routes.config.routes["chat"]

    def asked(text: str) -> ConditionQuery:
        models = ServingConditions(serving, _generation.start_generation)
        return ConditionQuery(models, serving.routes, caller, condition, text)

    async def scenario() -> None:
        await oracle.resolve(asked("answered"))
        await oracle.resolve(asked("answered"))  # cached: no request
        await oracle.resolve(asked("slow"))  # times out
        abandoned = asyncio.ensure_future(oracle.resolve(asked("left")))
        await asyncio.sleep(0)  # it runs until it awaits the embedding
        abandoned.cancel()
        with pytest.raises(asyncio.CancelledError):
            await abandoned

    with caplog.at_level(logging.INFO, logger="zest.access"):
        asyncio.run(scenario())
    written = [r.getMessage() for r in caplog.records if r.name == "zest.access"]
    assert [re.sub(r" \d+\.\d{3}s", " Ns", line) for line in written] == [
        'routing - "SIMILAR_TO embed" 200 - Ns',
        'routing - "SIMILAR_TO embed" 504 - Ns (timed out after 0.05 s)',
        'routing - "SIMILAR_TO embed" 499 - Ns (the request went away)',
    ]
