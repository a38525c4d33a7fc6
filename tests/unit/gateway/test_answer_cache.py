"""The response cache's key and lookup (serving/_answer_cache.py): what makes two requests the
same answer, what is never kept, and a kept answer served only while its model's files are the
ones that made it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zest.engines import Delta, EngineInfo
from zest.gateway.serving import ChatMessage, ChatRequest
from zest.gateway.serving._answer_cache import AnswerCache, KeptAnswer, determined
from zest.router import LoadedRoutes, Plan, RouteConfig, parse_routes

CONFIG = parse_routes(
    """\
version: 1
models:
  m: {engine: llamacpp, source: m.gguf}
routes:
  chat: {kind: chat, model: m, cache: {ttl_s: 60, max_entries: 2}}
  warm: {kind: chat, model: m, cache: {ttl_s: 60}, sampling: {temperature: 0.8, seed: 7}}
  plain: {kind: chat, model: m}
""",
    "routes.yaml",
)
ROUTES = LoadedRoutes(CONFIG, Path("routes.yaml"))


def body(text: str = "hi", **fields: Any) -> ChatRequest:
    return ChatRequest(model="chat", messages=[ChatMessage(role="user", content=text)], **fields)


def key(task: str, sent: ChatRequest, *, local_only: bool = False) -> Any:
    route: RouteConfig = CONFIG.routes[task]
    inputs = {"messages": sent.messages}
    return AnswerCache().key(
        ROUTES, task, route, local_only=local_only, kind="chat", body=sent, inputs=inputs
    )


def test_only_determined_requests_of_routes_with_a_cache_have_a_key() -> None:
    assert key("chat", body(temperature=0)) is not None
    assert key("chat", body(temperature=0.7, seed=3)) is not None  # a seed fixes it
    assert key("chat", body(temperature=0.7)) is None  # the route's 0.7 default: not fixed
    assert key("warm", body()) is not None  # the route's own seed
    assert key("plain", body(temperature=0)) is None  # no cache on the route
    assert determined(CONFIG.routes["warm"], body(temperature=1.0))


def test_the_same_answer_is_the_same_key_and_nothing_else_is() -> None:
    same = key("chat", body(temperature=0)).request
    assert key("chat", body(temperature=0, stream=True)).request == same  # delivery only
    assert key("chat", body("ho", temperature=0)).request != same
    assert key("chat", body(temperature=0, max_tokens=5)).request != same
    assert key("chat", body(temperature=0), local_only=True).request != same
    assert key("warm", body(temperature=0)).table != key("chat", body(temperature=0)).table


def test_a_kept_answer_is_served_while_its_model_has_the_same_files() -> None:
    cache, found = AnswerCache(), key("chat", body(temperature=0))
    info = EngineInfo("llamacpp", "m", "cpu", "llama.cpp", 2048, "m.gguf")
    plan = Plan("chat", CONFIG.routes["chat"], ())
    deltas = ((Delta("hi"), Delta("", "stop", 1)),)
    attempt: Any = None  # what served it: only a replay reads it
    cache.keep(found, KeptAnswer("m", "aa" * 32, plan, attempt, info, deltas, {}))
    assert cache.find(found, lambda _: "aa" * 32) is not None
    assert cache.find(found, lambda _: "bb" * 32) is None  # the file was replaced
    assert cache.find(found, lambda _: False) is None  # not loaded: not known to be the same
    assert cache.entries() == 1
