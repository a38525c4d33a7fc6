"""A Generation over a scripted delta source, for the gateway's framing and recording tests (the
engine side runs on the real model in tests/engines)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from zest.engines import Delta, EngineInfo
from zest.errors import EngineError
from zest.gateway.serving._generation import Generation
from zest.policies import Budget, Trimmed
from zest.router import Attempt, Device, Placement, Plan, RouteConfig

CPU = Device("cpu", frozenset({"llamacpp"}), "/proc/cpuinfo")


async def failing_after_one() -> AsyncIterator[Delta]:
    yield Delta(" world")
    raise EngineError("generation failed: decode returned -1")


def generation(
    rest: AsyncIterator[Delta], *, first: Delta | None = None, trimmed: Trimmed | None = None
) -> Generation:
    route = RouteConfig(kind="chat", model="m")
    placement = Placement(CPU, CPU)
    return Generation(
        plan=Plan("chat", route, (Attempt("m", placement, "test"),)),
        attempt=Attempt("m", placement, "test"),
        info=EngineInfo("llamacpp", "m", "cpu", "llama.cpp", 128, "m.gguf"),
        budget=Budget(3, 8),
        first=first or Delta("Hello"),
        rest=rest,
        trimmed=trimmed,
    )
