"""Routing's model-backed conditions served on the runtime: what gateway/serving/_routing.py's
ConditionModels asks (queue depths, a similar_to's vectors, a classify's answer), each run as
an ordinary request of its route.

The generation's front door (`start_generation`) routes requests itself, so it is handed in
by the caller rather than imported: routing never imports what calls it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from zest.engines import Delta
from zest.gateway.serving._embedding import embed_inputs
from zest.gateway.serving._runtime import Runtime
from zest.router import LoadedRoutes, RouteConfig

__all__ = ["ServingConditions"]


class _Answer(Protocol):
    def deltas(self) -> AsyncIterator[Delta]: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class ServingConditions:
    runtime: Runtime
    # gateway/serving/_generation.py's start_generation.
    start: Callable[..., Awaitable[_Answer]]

    def waiting_for(self, routes: LoadedRoutes, task: str) -> int:
        return self.runtime.waiting_for(routes, task)

    async def embed(
        self, via: str, texts: Sequence[str], *, privacy_of: RouteConfig
    ) -> Sequence[Sequence[float]]:
        embedded = await embed_inputs(self.runtime, via, list(texts), privacy_of=privacy_of)
        return embedded.result.vectors

    async def answer(
        self, via: str, kind: str, body: Any, inputs: dict[str, Any], *, privacy_of: RouteConfig
    ) -> tuple[str, float, str | None]:
        gen = await self.start(
            self.runtime,
            via,
            kind=kind,
            body=body,
            request_id="routing",
            privacy_of=privacy_of,
            **inputs,
        )
        answer, logprob, finish = "", 0.0, None
        try:  # a time-out cancels the wait here: the generation stops with it
            async for delta in gen.deltas():
                answer += delta.text
                logprob += sum(token.logprob for token in delta.logprobs)
                finish = delta.finish_reason or finish
        finally:
            await gen.aclose()
        return answer, logprob, finish
