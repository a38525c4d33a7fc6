"""The app's middleware that gives back what a request held when it ends (serving/_held.py):
a generation no path of the request closed is closed then, and logged."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from zest.gateway.serving import request_scope

__all__ = ["release_held"]

App = Callable[[Any, Any, Any], Awaitable[None]]


def release_held(app: App) -> App:
    async def scoped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        async with request_scope(f"{scope['method']} {scope['path']}"):
            await app(scope, receive, send)

    return scoped
