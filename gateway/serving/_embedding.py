"""An embedding request walking its route's plan: the first attempt that answers serves all of
its inputs; failures move it on as the route's fallback policy says, as for generation."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pydantic import BaseModel

from zest.engines import EmbeddingInput, Embeddings, EngineInfo
from zest.errors import BadRequestError, RequestError
from zest.gateway.serving._attempts import give_up_or_record
from zest.gateway.serving._clients import Caller, Ticket
from zest.gateway.serving._door import open_door
from zest.gateway.serving._events import RequestEvents
from zest.gateway.serving._runtime import Runtime
from zest.router import (
    Attempt,
    Plan,
    RouteConfig,
    RoutesFile,
    find_route,
    route_for_client,
    tightened,
)

__all__ = ["MAX_INPUTS", "Embedded", "embed_inputs"]

log = logging.getLogger("zest.gateway")

# Inputs one request may carry (OpenAI's own limit).
MAX_INPUTS = 2048


class _NoBody(BaseModel):
    """An embedding request's body as its admission reads it: no completion tokens."""


_NO_BODY = _NoBody()


@dataclass
class Embedded:
    """The vectors, and what served them (shown in headers and the zest object)."""

    plan: Plan
    attempt: Attempt
    info: EngineInfo
    result: Embeddings
    fallbacks: list[str] = field(default_factory=list)
    # Headers the answer carries for its caller (the client's x-ratelimit-*).
    headers: dict[str, str] = field(default_factory=dict)


async def embed_inputs(
    runtime: Runtime,
    name: str,
    texts: Sequence[EmbeddingInput],
    events: RequestEvents | None = None,
    *,
    privacy_of: RouteConfig | None = None,
    caller: Caller | None = None,
) -> Embedded:
    """`texts`: texts, or token ids of the model's vocabulary. `privacy_of`: the route whose
    text this is (a routing condition's): the embedding route's privacy is tightened to it,
    so a local_only route's text never leaves. `caller`: who sends it (every front door says;
    None: zest itself): admitted first, held to its privacy floor, its tokens counted."""
    ticket = None
    if caller is not None:
        ticket = (
            await open_door(runtime, caller, name, kind="embedding", body=_NO_BODY, inputs={})
        ).ticket
    try:
        done = await _embed(
            runtime, name, texts=texts, events=events, privacy_of=privacy_of, caller=caller
        )
    except BaseException:
        if ticket is not None:
            ticket.release()
        raise
    if ticket is not None:
        done.headers = ticket.headers
        _settle(ticket, done.result.prompt_tokens)
    return done


def _settle(ticket: Ticket, tokens: int) -> None:
    ticket.used = tokens
    ticket.release()


async def _embed(
    runtime: Runtime,
    name: str,
    *,
    texts: Sequence[EmbeddingInput],
    events: RequestEvents | None,
    privacy_of: RouteConfig | None,
    caller: Caller | None,
) -> Embedded:
    events = events or RequestEvents()
    events.task_named(name)
    if not texts or len(texts) > MAX_INPUTS:
        raise BadRequestError(f"send between 1 and {MAX_INPUTS} inputs", param="input")
    if any(not text for text in texts):
        raise BadRequestError(
            "an input is empty: send some text (or token ids) in each", param="input"
        )
    routes = runtime.routes
    route = find_route(name, "embedding", routes.config)
    if caller is not None:
        route = route_for_client(route, caller.name, caller.client)
    if privacy_of is not None:
        route = tightened(route, privacy_of)
    plan = runtime.plan(routes, name, route, prompt_tokens=0)
    fallbacks: list[str] = []
    if any(not isinstance(text, str) for text in texts):
        plan = _upstreams_only(plan, routes.config, fallbacks)
    for index, attempt in enumerate(plan.attempts):
        fallbacks += attempt.skipped
        events.attempt(attempt.model, attempt.device)
        try:
            async with await runtime.acquire(routes, attempt.model, attempt.placement) as lease:
                result = await lease.engine.embed(texts, privacy=route.privacy)
                return Embedded(plan, attempt, lease.info, result, fallbacks)
        except RequestError as error:
            last = index + 1 == len(plan.attempts)
            kind = give_up_or_record(error, attempt, route, fallbacks, last=last)
            log.warning("task=%s: %s, trying the next attempt", name, fallbacks[-1])
            events.fell_back(kind)
    raise AssertionError("a plan always has at least one attempt")


def _upstreams_only(plan: Plan, config: RoutesFile, skipped: list[str]) -> Plan:
    """The attempts that may read token ids: remote upstreams, which read them in their own
    model's vocabulary (OpenAI's contract, and an OpenAI upstream's cl100k_base). A local
    model would read them in its own, which is never the one a client tokenized with: the
    ids clients send are OpenAI's cl100k_base (langchain's OpenAIEmbeddings sends them by
    default), and decoding those offline needs a BPE file no well-kept package ships. So a
    local attempt is skipped, and none left is a 400 that says to send the text."""
    remote = [a for a in plan.attempts if not config.models[a.model].local]
    local = [a.model for a in plan.attempts if a not in remote]
    if not remote:
        raise BadRequestError(
            f"input holds token ids, and task {plan.task!r} embeds with {_listed(local)}, which "
            "would read them in its own vocabulary, not in the one they were made with "
            "(OpenAI's cl100k_base, as langchain's OpenAIEmbeddings sends them by default): "
            "send the text itself (langchain: OpenAIEmbeddings(..., "
            "check_embedding_ctx_length=False))",
            param="input",
        )
    skipped += [f"{model}: skipped: it reads no token ids (its vocabulary)" for model in local]
    return replace(plan, attempts=tuple(remote))


def _listed(models: list[str]) -> str:
    names = list(dict.fromkeys(models))
    return "model " + repr(names[0]) if len(names) == 1 else "models " + ", ".join(map(repr, names))
