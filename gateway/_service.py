"""From a validated request body to a running generation: resolve, render, budget, start.

The first delta is awaited before any response is sent, so every failure up to the first token
is still a plain JSON error with its status code.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

from engines import Delta, Engine, EngineInfo, GenerationJob, Message
from gateway._runtime import Runtime
from gateway._schemas import ChatMessage, SamplingFields
from policies import Budget, plan_budget
from router import Plan, RouteConfig, resolve

__all__ = ["Generation", "start_generation"]

Kind = Literal["chat", "completion"]


@dataclass
class Generation:
    """A generation whose first delta has arrived; `rest` streams the remainder."""

    plan: Plan
    info: EngineInfo
    budget: Budget
    first: Delta
    rest: AsyncIterator[Delta]

    def route_header(self) -> str:
        return (
            f"task={self.plan.task}; model={self.info.model}; device={self.info.device}; "
            f"engine={self.info.engine}"
        )

    async def deltas(self) -> AsyncIterator[Delta]:
        yield self.first
        if self.first.finish_reason is None:
            async for delta in self.rest:
                yield delta

    async def aclose(self) -> None:
        await self.rest.aclose()  # type: ignore[attr-defined]


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
    plan = resolve(name, kind, runtime.routes.config, runtime.devices)
    engine = runtime.engine(plan.first.model)
    info = runtime.infos[plan.first.model]
    tokens = await asyncio.to_thread(_prompt_tokens, engine, plan.route, messages, prompt)
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
    return Generation(plan, info, budget, first, stream)


def _prompt_tokens(
    engine: Engine, route: RouteConfig, messages: list[ChatMessage] | None, prompt: str | None
) -> list[int]:
    if messages is None:
        return engine.tokenize(prompt or "", add_special=True)
    chat: list[Message] = (
        [{"role": "system", "content": route.system_prompt}] if (route.system_prompt) else []
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
        label=label,
    )
