"""Resolving a request (task name, endpoint kind) into a Plan: what runs, where, and why."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from router._errors import BadRequestError, ServiceUnavailableError, UnknownTaskError
from router._schema import RouteConfig, RoutesFile

__all__ = ["Attempt", "Plan", "resolve"]

Kind = Literal["chat", "completion"]
_ENDPOINT = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}


@dataclass(frozen=True)
class Attempt:
    """One way to serve the request: a model on a concrete device, and why it was chosen."""

    model: str
    device: str
    reason: str


@dataclass(frozen=True)
class Plan:
    task: str
    route: RouteConfig
    attempts: tuple[Attempt, ...]

    @property
    def first(self) -> Attempt:
        return self.attempts[0]


def resolve(name: str, kind: Kind, routes: RoutesFile, devices: Collection[str]) -> Plan:
    """Pick the route for `name` (a task, or a model id when exposed) and place it on a device."""
    route = _route_for(name, kind, routes)
    if route.kind != kind:
        raise BadRequestError(
            f"task {name!r} is a {route.kind} route: call {_ENDPOINT[route.kind]} "
            f"or POST /v1/tasks/{name} instead",
            param="model",
        )
    device, reason = _place(name, route, devices)
    return Plan(task=name, route=route, attempts=(Attempt(route.model, device, reason),))


def _route_for(name: str, kind: Kind, routes: RoutesFile) -> RouteConfig:
    if name in routes.routes:
        return routes.routes[name]
    if routes.expose_models and name in routes.models:
        return RouteConfig(kind=kind, model=name)
    known = sorted(routes.routes)
    if routes.expose_models:
        known += sorted(routes.models)
    raise UnknownTaskError(
        f"unknown task {name!r}: use one of {', '.join(known)} (GET /v1/models lists them)"
    )


def _place(task: str, route: RouteConfig, devices: Collection[str]) -> tuple[str, str]:
    found = ", ".join(sorted(devices)) or "none"
    if route.device == "auto":
        device = "gpu" if "gpu" in devices else "cpu"
        return device, f"device auto: {device} is the fastest device found ({found})"
    needed = ("npu", "gpu") if route.device == "hybrid" else (route.device,)
    missing = [d for d in needed if d not in devices]
    if missing:
        raise ServiceUnavailableError(
            f"route {task!r} needs device {route.device!r} but {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not available (found: {found}); "
            f"no fallback is configured, so the request was not run elsewhere: "
            f"set routes.{task}.device to one of the devices found",
            code="device_unavailable",
        )
    if route.device == "hybrid":
        return "npu->gpu", "device hybrid: prefill on npu, decode on gpu"
    return route.device, f"device pinned to {route.device} by the route"
