"""Routing by content: a task's rules decide which route serves a request, before it is planned.

The decision itself is router.decide (pure; the same code `zest explain` and `zest route test`
run). Here are what it reads from a request (the routing text, metadata, flags, a token count)
and the model-backed conditions it may ask for: a similar_to embeds the text with its route
(phrases embedded once per routes table), a classify asks its route for one label (the answer
constrained to the labels). Each runs as an ordinary request of its route, only when the
evaluation reaches it, within its timeout, over at most its max_input_chars of the text, and
its result is cached by condition and text. The prompt's tokens are counted the same way: only
when a rule reaches a token condition, and not at all when the prompt's length alone says it
is over every bound of the route's token conditions.

Privacy only tightens along a rule: the target route serves with the stricter of the two
privacies, and a model-backed condition never sends a local_only route's text out.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cachetools import LRUCache, TTLCache

from zest.errors import RequestError, shown
from zest.router import (
    Classify,
    Decision,
    LoadedRoutes,
    ModelResult,
    Pending,
    ResponseFormat,
    RouteConfig,
    RouteInput,
    SimilarTo,
    decide,
    phrases_of,
    tightened,
    walk_conditions,
)

__all__ = [
    "ConditionModels",
    "ConditionObserver",
    "ConditionQuery",
    "RouteInputs",
    "Routed",
    "RoutingOracle",
    "TokenCounter",
    "route_by_content",
    "token_bound",
]

log = logging.getLogger("zest.gateway")
access = logging.getLogger("zest.access")  # the access log's (http/_access_log.py)

_TOKEN_KINDS = ("min_prompt_tokens", "max_prompt_tokens")

# Counts the prompt's tokens with the calling route's model; any count over the bound it is
# given decides every token condition alike, so one known from the prompt's length alone will do.
TokenCounter = Callable[[int], Awaitable[int]]


@dataclass(frozen=True)
class RouteInputs:
    """What of a request the rules read (docs/routing.md says which part)."""

    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    has_tools: bool = False
    has_images: bool = False


@dataclass(frozen=True)
class Routed:
    """The route that serves a request, and the decision that chose it (None: no rules)."""

    task: str
    route: RouteConfig
    decision: Decision | None = None
    ruled: bool = True  # whether the task has rules (which read the request's metadata)

    @property
    def rule_label(self) -> str | None:
        return None if self.decision is None else self.decision.rule_label


def token_bound(route: RouteConfig) -> int | None:
    """The largest bound of the route's min_/max_prompt_tokens conditions (None: it has none):
    a prompt surely longer is decided for all of them without being tokenized."""
    bounds = [
        bound
        for rule in route.rules
        for condition, _ in walk_conditions(rule.when, "")
        for kind in _TOKEN_KINDS
        if (bound := getattr(condition, kind)) is not None
    ]
    return max(bounds, default=None)


class ConditionModels(Protocol):
    """What routing asks of the serving layer: queue depths, and the models behind similar_to
    and classify, each run as an ordinary request of its route. A narrow interface, so that
    routing never imports the front door that calls it (gateway/serving/_generation.py
    implements it over the runtime)."""

    def waiting_for(self, routes: LoadedRoutes, task: str) -> int:
        """Requests waiting for a slot of the model of route `task`."""
        ...

    async def embed(
        self, via: str, texts: Sequence[str], *, privacy_of: RouteConfig
    ) -> Sequence[Sequence[float]]:
        """Route `via`'s vectors of `texts` (the caller's privacy binds it)."""
        ...

    async def answer(
        self, via: str, kind: str, body: Any, inputs: dict[str, Any], *, privacy_of: RouteConfig
    ) -> tuple[str, float, str | None]:
        """Route `via`'s answer to `body`: its text, the sum of its tokens' log
        probabilities and its finish reason (the generation stops if the wait for it is
        cancelled)."""
        ...


async def route_by_content(
    models: ConditionModels,
    routes: LoadedRoutes,
    task: str,
    route: RouteConfig,
    inputs: RouteInputs,
    *,
    count_tokens: TokenCounter,
    oracle: RoutingOracle,
    request_id: str = "-",
) -> Routed:
    """Evaluate `route`'s rules over the request; the target serves with everything it
    declares (one hop: its own rules are not applied), its privacy tightened to the caller's.
    The prompt is counted only when a rule reaches a token condition."""
    if not route.rules:
        return Routed(task, route, Decision(task, None), ruled=False)
    counted: list[int] = []
    given = RouteInput(
        inputs.text,
        inputs.metadata,
        inputs.has_tools,
        inputs.has_images,
        prompt_tokens=lambda: counted[0] if counted else None,
        waiting=lambda name: models.waiting_for(routes, name),
    )
    results: dict[SimilarTo | Classify, ModelResult] = {}
    while isinstance(outcome := decide(task, route.rules, given, results), Pending):
        condition = outcome.condition
        if condition is None:
            counted.append(await count_tokens(token_bound(route) or 0))
            continue
        query = ConditionQuery(models, routes, route, condition, inputs.text, request_id)
        results[condition] = await oracle.resolve(query)
    if outcome.route_to == task:
        return Routed(task, route, outcome)
    target = routes.config.routes[outcome.route_to]
    return Routed(outcome.route_to, tightened(target, route, task), outcome)


# Told of each model-backed evaluation: its kind (similar_to, classify), its seconds (0.0 when
# cached) and whether the result came from the cache.
ConditionObserver = Callable[[str, float, bool], None]


@dataclass(frozen=True)
class ConditionQuery:
    """One model-backed condition asked of one request's text: all that resolving it reads."""

    models: ConditionModels
    routes: LoadedRoutes
    caller: RouteConfig  # the route whose rules ask: its privacy binds the condition's route
    condition: SimilarTo | Classify
    routing_text: str
    request_id: str = "-"  # the request whose routing asks (its access line names it)

    @property
    def text(self) -> str:
        """What the model reads: the routing text's first max_input_chars characters (a
        model's time grows with its input, and a time-out cannot stop a computation that has
        begun: it ends only the wait for it)."""
        return self.routing_text[: self.condition.max_input_chars]

    @property
    def kind(self) -> str:
        return "similar_to" if isinstance(self.condition, SimilarTo) else "classify"

    def key(self) -> tuple[int, Any, str]:
        digest = hashlib.sha256(self.text.encode("utf-8", "replace")).hexdigest()
        return (self.routes.serial, self.condition, digest)


@dataclass
class RoutingOracle:
    """Model-backed results, cached by routes table, condition and text (a reload starts
    afresh: its phrases and routes may differ). One per runtime: its observers are that
    runtime's metrics."""

    results: TTLCache[tuple[int, Any, str], ModelResult] = field(
        default_factory=lambda: TTLCache(maxsize=4096, ttl=600)
    )
    phrases: LRUCache[tuple[int, str, str], list[Sequence[float]]] = field(
        default_factory=lambda: LRUCache(maxsize=256)
    )
    # The metrics observe each model-backed evaluation (the request path imports no metrics).
    observers: list[ConditionObserver] = field(default_factory=list)
    # A replay (zest route test) judges what a condition decides, not how fast: each waits at
    # least `min_timeout_s` (its model's load included) whatever its timeout_s, and a failure
    # is kept for the same condition (one cause, one try), not logged (the replay reports each
    # cause once). Serving tries a failure again with the next request, and logs it.
    min_timeout_s: float = 0.0
    replaying: bool = False
    failures: dict[tuple[Any, float], str] = field(default_factory=dict)

    async def resolve(self, query: ConditionQuery) -> ModelResult:
        key = query.key()
        if (found := self.results.get(key)) is not None:
            self._observe(query.kind, 0.0, cached=True)
            return ModelResult(found.score, found.label, found.error, cached=True)
        failure = (query.condition, self.min_timeout_s)
        if (failed := self.failures.get(failure)) is not None:
            return ModelResult(error=failed, cached=True)
        started = time.perf_counter()
        result = await self._timed(query)
        self._observe(query.kind, time.perf_counter() - started, cached=False)
        if result.error is None:  # a failure is tried again next time (unless replaying)
            self.results[key] = result
        elif self.replaying:
            self.failures[failure] = result.error
        return result

    def _observe(self, kind: str, seconds: float, *, cached: bool) -> None:
        for observer in self.observers:
            observer(kind, seconds, cached)

    async def _timed(self, query: ConditionQuery) -> ModelResult:
        """The condition's result within its timeout_s, with its own access line whatever
        its end (the asking request's cancellation too)."""
        started = time.perf_counter()
        status, result = 499, ModelResult(error="the request went away")
        try:
            status, result = await self._within_timeout(query)
        finally:
            if not self.replaying:  # a replay (zest route test) serves no request
                _access_line(query, status, time.perf_counter() - started, result.error)
        return result

    async def _within_timeout(self, query: ConditionQuery) -> tuple[int, ModelResult]:
        """The result, and the status its access line says. A time-out cancels the work: a
        classifier's generation stops at its engine's next step."""
        condition = query.condition
        timeout_s = max(condition.timeout_s, self.min_timeout_s)
        try:
            if isinstance(condition, SimilarTo):
                work = self._similarity(query, condition)
            else:
                work = _classify(query, condition)
            result = await asyncio.wait_for(work, timeout_s)
        except TimeoutError:
            return 504, ModelResult(error=f"timed out after {timeout_s:g} s")
        except RequestError as exc:
            if not self.replaying:
                log.warning("routing condition via %s failed: %s", condition.via, exc.message)
            return exc.status_code, ModelResult(error=exc.message)
        except Exception as exc:  # a fault of zest's own: logged, and on_error still decides
            log.exception("routing condition via %s failed", condition.via)
            return 500, ModelResult(error=f"failed ({type(exc).__name__}): see the server log")
        if result.error is not None:  # the model answered, but no label
            if not self.replaying:
                log.warning("routing condition via %s failed: %s", condition.via, result.error)
            return 502, result
        return 200, result

    async def _similarity(self, query: ConditionQuery, condition: SimilarTo) -> ModelResult:
        phrases = await self._phrase_vectors(query, condition)
        embedded = await query.models.embed(
            condition.via, [query.text or " "], privacy_of=query.caller
        )
        vector = embedded[0]
        return ModelResult(score=max(_cosine(vector, phrase) for phrase in phrases))

    async def _phrase_vectors(
        self, query: ConditionQuery, condition: SimilarTo
    ) -> list[Sequence[float]]:
        key = (query.routes.serial, condition.via, condition.label)
        if (vectors := self.phrases.get(key)) is None:
            phrases = list(phrases_of(query.routes.config, query.caller)[condition.label])
            embedded = await query.models.embed(condition.via, phrases, privacy_of=query.caller)
            vectors = self.phrases[key] = list(embedded)
        return vectors


def _access_line(query: ConditionQuery, status: int, seconds: float, error: str | None) -> None:
    """A model-backed condition's generation is a request of its route: it writes its line in
    the access log, as the HTTP request that asked for it writes its own."""
    access.info(
        'routing - "%s %s" %d %s %.3fs%s',
        query.kind.upper(),
        query.condition.via,
        status,
        query.request_id,
        seconds,
        f" ({error})" if error else "",
    )


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norms if norms else 0.0


async def _classify(query: ConditionQuery, condition: Classify) -> ModelResult:
    """One label from the classify route, its answer constrained to the labels (a JSON
    string among them); the score is the answer's probability under the model."""
    via = query.routes.config.routes[condition.via]
    body, inputs = _classifier_request(condition, via.kind, query.text)
    answer, logprob, finish = await query.models.answer(
        condition.via, via.kind, body, inputs, privacy_of=query.caller
    )
    label = _label_in(answer, condition.labels)
    if label is None:  # cut short, or stopped inside the label: on_error decides
        return ModelResult(error=_no_label(answer, finish, condition.via))
    score = math.exp(logprob) if condition.min_score is not None else None
    return ModelResult(score=score, label=label)


def _label_in(answer: str, labels: Sequence[str]) -> str | None:
    """The label the classifier's answer names (None: it names none, e.g. it was cut)."""
    try:
        said = json.loads(answer)
    except json.JSONDecodeError:
        return None
    return said if isinstance(said, str) and said in labels else None


def _no_label(answer: str, finish: str | None, via: str) -> str:
    if finish == "length":
        why = f"cut at its max_tokens: `zest check` says how far to raise routes.{via}.max_tokens"
    elif finish == "stop":
        why = f"it stopped inside a label: does routes.{via}.sampling.stop hold part of one?"
    else:
        why = f"finish_reason {finish}"
    return f"the classifier's answer {shown(answer)} is none of its labels ({why})"


def _classifier_request(condition: Classify, kind: str, text: str) -> tuple[Any, dict[str, Any]]:
    """The classifier's request body and inputs: the prompt as a system turn before the text
    (a chat route), or written as a completion."""
    from zest.gateway.serving._requests import ChatMessage, ChatRequest, CompletionRequest

    answer_format = ResponseFormat.model_validate(
        {
            "type": "json_schema",
            "json_schema": {"name": "label", "schema": {"enum": list(condition.labels)}},
        }
    )
    common: dict[str, Any] = {
        "model": condition.via,
        "temperature": 0.0,
        "max_tokens": condition.answer_tokens(),  # the longest label, a token a byte at worst
        "response_format": answer_format,
    }
    if kind == "chat":
        body = ChatRequest(
            messages=[
                ChatMessage(role="system", content=condition.prompt),
                ChatMessage(role="user", content=text or " "),
            ],
            logprobs=condition.min_score is not None,
            **common,
        )
        return body, {"messages": body.messages}
    prompt = _completion_prompt(condition.prompt, text)
    completion = CompletionRequest(
        prompt=prompt, logprobs=0 if condition.min_score is not None else None, **common
    )
    return completion, {"prompt": prompt}


def _completion_prompt(prompt: str, text: str) -> str:
    """A completion route's classifier prompt: `{input}` stands for the text, else it follows."""
    if "{input}" in prompt:
        return prompt.replace("{input}", text)
    return f"{prompt}{text}"
