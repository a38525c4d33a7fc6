"""Resolving a request into a Plan: which model runs on which device(s), in which order, and why.

Pure: devices and queue depths come in as data (see router._placement for the cost model).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from router._errors import BadRequestError, DeviceUnavailableError, UnknownTaskError
from router._placement import DEVICE_ORDER, Device, Placement, describe_devices, parse_device
from router._schema import RouteConfig, RoutesFile

__all__ = ["Attempt", "Plan", "find_route", "plan_route"]

Kind = Literal["chat", "completion"]
_ENDPOINT = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}


@dataclass(frozen=True)
class Attempt:
    """One way to serve the request: a model on a placement, and why it was chosen."""

    model: str
    placement: Placement
    reason: str

    @property
    def device(self) -> str:
        return self.placement.label


@dataclass(frozen=True)
class Plan:
    task: str
    route: RouteConfig
    attempts: tuple[Attempt, ...]
    removed: tuple[str, ...] = ()
    devices_found: str = ""

    @property
    def first(self) -> Attempt:
        return self.attempts[0]


def find_route(name: str, kind: Kind | None, routes: RoutesFile) -> RouteConfig:
    """The route for a task name (or a model id when exposed); `kind` is the endpoint's."""
    route = routes.routes.get(name)
    if route is None and routes.expose_models and name in routes.models:
        route = RouteConfig(kind=kind or "chat", model=name)
    if route is None:
        known = sorted(routes.routes) + (sorted(routes.models) if routes.expose_models else [])
        raise UnknownTaskError(
            f"unknown task {name!r}: use one of {', '.join(known)} (GET /v1/models lists them)"
        )
    if kind is not None and route.kind != kind:
        raise BadRequestError(
            f"task {name!r} is a {route.kind} route: call {_ENDPOINT[route.kind]} "
            f"or POST /v1/tasks/{name} instead",
            param="model",
        )
    return route


@dataclass
class _Planner:
    task: str
    route: RouteConfig
    usable: dict[str, Device]
    found: str
    load: Mapping[str, int]
    attempts: list[Attempt] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def add(self, prefill: str, decode: str, reason: str) -> None:
        placement = Placement(self.usable[prefill], self.usable[decode])
        self.attempts.append(Attempt(self.route.model, placement, reason))

    def queue(self, name: str) -> int:
        return self.load.get(name, 0)


def plan_route(
    task: str,
    route: RouteConfig,
    *,
    engine: str,
    devices: Mapping[str, Device],
    load: Mapping[str, int] | None = None,
    prompt_tokens: int = 0,
    can_split: bool = True,
) -> Plan:
    """Order the attempts for one request; raise 503 when no allowed device can serve it."""
    usable = {name: dev for name, dev in devices.items() if engine in dev.engines}
    planner = _Planner(task, route, usable, describe_devices(devices), load or {})
    wanted = parse_device(route.device)
    if wanted is None:
        _plan_auto(planner, prompt_tokens, can_split)
    else:
        _plan_pinned(planner, wanted)
    _plan_cpu_fallback(planner)
    if not planner.attempts:
        raise _no_device_error(planner)
    return Plan(task, route, tuple(planner.attempts), tuple(planner.removed), planner.found)


def _plan_auto(p: _Planner, prompt_tokens: int, can_split: bool) -> None:
    threshold = p.route.hybrid_min_prompt_tokens
    if prompt_tokens >= threshold and {"npu", "gpu"} <= p.usable.keys() and can_split:
        p.add(
            "npu",
            "gpu",
            f"auto: prompt of {prompt_tokens} tokens >= {threshold}, npu and gpu "
            "found: prefill on npu, decode on gpu",
        )
        return
    allowed = [d for d in DEVICE_ORDER if d in p.usable and (d != "cpu" or p.route.allow_cpu)]
    if "cpu" in p.usable and not p.route.allow_cpu:
        p.removed.append(f"cpu: allow_cpu is false for route {p.task!r}")
    if not allowed:
        return
    best = min(allowed, key=lambda d: (p.queue(d), DEVICE_ORDER.index(d)))
    queues = ", ".join(f"{d} {p.queue(d)}" for d in allowed)
    why = (
        f"prompt of {prompt_tokens} tokens < {threshold}"
        if "npu" in allowed and "gpu" in allowed
        else f"found {', '.join(allowed)}"
    )
    p.add(best, best, f"auto: {why}; shortest queue, fastest first (queued: {queues})")


def _plan_pinned(p: _Planner, wanted: tuple[str, str]) -> None:
    names = dict.fromkeys(wanted)
    missing = [d for d in names if d not in p.usable]
    if "cpu" in names and not p.route.allow_cpu:
        p.removed.append(f"{p.route.device}: runs on cpu but allow_cpu is false")
    elif missing:
        verb = "is" if len(missing) == 1 else "are"
        p.removed.append(
            f"{p.route.device}: {' and '.join(missing)} {verb} not available (found: {p.found})"
        )
    else:  # a pinned split goes to the engine even when auto would not split for it
        p.add(wanted[0], wanted[1], f"device {p.route.device} pinned by the route")


def _plan_cpu_fallback(p: _Planner) -> None:
    if any(a.placement.key == "cpu" for a in p.attempts) or "cpu" not in p.usable:
        return
    if not p.route.allow_cpu:
        return
    if not p.attempts:
        p.add(
            "cpu",
            "cpu",
            f"fallback to cpu: {p.removed[-1]}; allow_cpu is true"
            if p.removed
            else "fallback to cpu: allow_cpu is true",
        )
    elif p.route.on_failure == "next":
        p.add(
            "cpu",
            "cpu",
            f"fallback to cpu if {p.attempts[0].device} fails before the first "
            "token (on_failure: next, allow_cpu: true)",
        )
    else:
        p.removed.append("cpu fallback: on_failure is return_error")


def _no_device_error(p: _Planner) -> DeviceUnavailableError:
    if p.route.allow_cpu:
        policy = "and no other device that can run this model is allowed"
    else:
        policy = f"and the fallback to cpu is forbidden by routes.{p.task}.allow_cpu: false"
    return DeviceUnavailableError(
        f"route {p.task!r} needs device {p.route.device!r}, which is not usable here "
        f"(found: {p.found}), {policy}: declare the device (ZEST_EMULATE_DEVICES, e.g. "
        f"npu=cpu:1, for an emulated one) or change routes.{p.task}.device",
        tuple(p.removed),
    )
