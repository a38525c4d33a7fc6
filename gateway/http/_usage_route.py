"""GET /v1/usage: requests and tokens by client, task and model over the last minute, hour
and day (http/_usage.py), and each named client's limits and requests running. The admin key
reads everyone's; a named client reads its own (an open loopback server: everyone's)."""

from __future__ import annotations

from typing import Any

from litestar import Request, get

from zest.gateway.http._auth import OWN_OR_ADMIN
from zest.gateway.http._callers import caller_of
from zest.gateway.http._metrics import Metrics
from zest.gateway.http._usage import WINDOWS
from zest.gateway.serving import Runtime

__all__ = ["usage"]


@get("/usage", opt={OWN_OR_ADMIN: True})
async def usage(
    request: Request[Any, Any, Any], metrics: Metrics, runtime: Runtime
) -> dict[str, Any]:
    caller = caller_of(request)
    own = caller.client is not None
    clients = runtime.routes.config.clients
    shown = [caller.name] if own else list(clients)
    gate = runtime.clients
    return {
        "object": "usage",
        "windows": list(WINDOWS),
        "data": metrics.usage.rows([caller.name] if own else None),
        "clients": {
            name: {
                "tasks": clients[name].tasks,
                "privacy": clients[name].privacy,
                "priority": clients[name].priority,
                "limits": clients[name].limits.model_dump(),
                "running": gate.running.get(name, 0),
            }
            for name in shown
            if name in clients
        },
        "limits_store": {
            "shared": gate.shared,
            "on_store_error": gate.on_store_error,
            "problem": gate.store_problem,
        },
    }
