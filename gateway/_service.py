"""From a validated request body to a running generation: route, count, plan, try attempts.

The first delta is awaited before any response is sent, so every failure up to the first token
is still a plain JSON error with its status code, and a failing attempt can give way to the next
one (`on_failure: next`). After the first token, failures end the stream with an error event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from engines import Delta, Engine, EngineInfo, GenerationJob, Message, StageStats
from gateway._runtime import Runtime
from gateway._schemas import ChatMessage, SamplingFields
from policies import Budget, plan_budget
from router import (
    Attempt,
    BadRequestError,
    Plan,
    RouteConfig,
    ServiceUnavailableError,
    find_route,
)

__all__ = ["Generation", "prompt_tokens_for", "start_generation"]

log = logging.getLogger("zest.gateway")
Kind = Literal["chat", "completion"]


@dataclass
class Generation:
    """A generation whose first delta has arrived; `rest` streams the remainder."""

    plan: Plan
    attempt: Attempt
    info: EngineInfo
    budget: Budget
    first: Delta
    rest: AsyncIterator[Delta]
    fallbacks: list[str] = field(default_factory=list)
    final_stats: StageStats | None = None

    def headers(self) -> dict[str, str]:
        headers = {
            "x-zest-route": f"task={self.plan.task}; model={self.info.model}; "
            f"device={self.info.device}; engine={self.info.engine}",
            "x-zest-plan": self.attempt.reason,
        }
        if self.fallbacks:
            headers["x-zest-fallbacks"] = " | ".join(self.fallbacks)
        stats = self.final_stats or self.first.stats
        if stats is not None:
            headers["x-zest-pipeline"] = pipeline_header(stats)
        return headers

    def extension(self) -> dict[str, Any]:
        """The `zest` object of a response: what served the request and what was applied."""
        info: dict[str, Any] = {
            "task": self.plan.task,
            "model": self.info.model,
            "device": self.info.device,
            "engine": self.info.engine,
            "reason": self.attempt.reason,
            "max_tokens": self.budget.max_tokens,
        }
        if self.budget.clamped_from is not None:
            info["max_tokens_clamped_from"] = self.budget.clamped_from
        if self.fallbacks:
            info["fallbacks"] = self.fallbacks
        return info

    async def deltas(self) -> AsyncIterator[Delta]:
        yield self.first
        if self.first.finish_reason is None:
            async for delta in self.rest:
                if delta.stats is not None:
                    self.final_stats = delta.stats
                yield delta
        elif self.first.stats is not None:
            self.final_stats = self.first.stats

    async def aclose(self) -> None:
        await self.rest.aclose()  # type: ignore[attr-defined]


def pipeline_header(stats: StageStats) -> str:
    figures = stats.as_dict()
    parts = [f"prefill={stats.prefill_device} {figures['prefill_ms']}ms"]
    if stats.handoff_bytes is not None:
        parts.append(f"handoff={figures['handoff_ms']}ms {stats.handoff_bytes}B")
    decode = f"decode={stats.decode_device}"
    if figures["decode_tokens_per_s"] is not None:
        decode += f" {figures['decode_tokens_per_s']}tok/s"
    return "; ".join([*parts, decode])


async def start_generation(
    runtime: Runtime,
    name: str,
    *,
    kind: Kind,
    body: SamplingFields,
    request_id: str,
    messages: list[ChatMessage] | None = None,
    prompt: str | None = None,
) -> Generation:
    route = find_route(name, kind, runtime.routes.config)
    tokenizer = await runtime.tokenizer_for(route.model)
    tokens = await asyncio.to_thread(prompt_tokens_for, tokenizer, route, messages, prompt)
    if not tokens:
        raise BadRequestError("the prompt is empty: send some text", param="prompt")
    plan = runtime.plan(name, route, prompt_tokens=len(tokens))
    fallbacks: list[str] = []
    for index, attempt in enumerate(plan.attempts):
        try:
            gen = await _try_attempt(
                runtime, plan, attempt=attempt, tokens=tokens, body=body, request_id=request_id
            )
        except ServiceUnavailableError as exc:
            if index + 1 == len(plan.attempts) or route.on_failure != "next":
                raise
            log.warning(
                "%s task=%s: %s failed before the first token, trying %s: %s",
                request_id,
                name,
                attempt.device,
                plan.attempts[index + 1].device,
                exc.message,
            )
            fallbacks.append(f"{attempt.device}: {exc.message}")
            continue
        gen.fallbacks = fallbacks
        return gen
    raise AssertionError("a plan always has at least one attempt")


async def _try_attempt(
    runtime: Runtime,
    plan: Plan,
    *,
    attempt: Attempt,
    tokens: list[int],
    body: SamplingFields,
    request_id: str,
) -> Generation:
    engine = await runtime.engine_for(attempt.model, attempt.placement)
    info = runtime.infos[(attempt.model, attempt.placement.key)]
    budget = plan_budget(
        prompt_tokens=len(tokens),
        requested=body.requested_max_tokens(),
        route_cap=plan.route.max_tokens,
        context_length=info.context_length,
        model=info.model,
    )
    label = f"{request_id} task={plan.task} model={info.model} device={info.device}"
    stream = engine.stream(_job(tokens, budget, plan.route, body, label))
    try:
        first = await anext(stream)
    except BaseException:
        await stream.aclose()  # type: ignore[attr-defined]
        raise
    return Generation(plan, attempt, info, budget, first, stream)


def prompt_tokens_for(
    engine: Engine, route: RouteConfig, messages: list[ChatMessage] | None, prompt: str | None
) -> list[int]:
    if messages is None:
        return engine.tokenize(prompt or "", add_special=True)
    chat: list[Message] = (
        [{"role": "system", "content": route.system_prompt}] if route.system_prompt else []
    )
    chat += [{"role": _role(m.role), "content": m.text()} for m in messages]
    return engine.tokenize(engine.render_chat(chat), add_special=False)


def _role(role: str) -> str:
    # OpenAI's newer "developer" role is the system role of every chat template we serve.
    return "system" if role == "developer" else role


def _job(
    tokens: list[int], budget: Budget, route: RouteConfig, body: SamplingFields, label: str
) -> GenerationJob:
    defaults = route.sampling

    def pick(value: float | None, default: float) -> float:
        return default if value is None else value

    return GenerationJob(
        prompt_tokens=tuple(tokens),
        max_tokens=budget.max_tokens,
        temperature=pick(body.temperature, defaults.temperature),
        top_p=pick(body.top_p, defaults.top_p),
        top_k=body.top_k if body.top_k is not None else defaults.top_k,
        min_p=pick(body.min_p, defaults.min_p),
        repeat_penalty=pick(body.repeat_penalty, defaults.repeat_penalty),
        frequency_penalty=body.frequency_penalty or 0.0,
        presence_penalty=body.presence_penalty or 0.0,
        seed=body.seed if body.seed is not None else defaults.seed,
        # The route's stops always apply (they shape the task); the request may add more.
        stop=tuple(dict.fromkeys(defaults.stop + body.stops())),
        priority=route.priority,
        label=label,
    )
