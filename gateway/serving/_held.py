"""What a request holds is given back when the request ends, whatever path it took.

A generation holds a slot of its engine (a lease, a place in the admission queue, KV cells)
until its stream is closed. Every path of the HTTP layer closes its generations, but a path
that never starts the body closes nothing: an event stream whose client left before its first
chunk (the server cancels the body's task before it first runs the iterator, and a generator
never started runs no `finally`), or an answer whose headers failed to build. A slot kept so
holds the model busy for good: keep_alive never unloads it, a retired engine is never freed.

So each HTTP request runs in a scope (the app's `release_held` middleware), every generation
started inside it is held by the scope (its routing conditions' generations included: they run
in the request's task or in tasks it started, which share the scope), and the scope closes
whatever is still open when the request ends. A generation closed there is a path that forgot
it: it is logged, so the path gets fixed, and still leaks nothing.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Protocol

__all__ = ["Closable", "hold", "request_scope"]

log = logging.getLogger("zest.gateway")


class Closable(Protocol):
    """A generation, as the scope sees it."""

    @property
    def released(self) -> bool: ...

    def stop(self) -> None: ...

    async def aclose(self) -> None: ...


_HELD: ContextVar[list[Closable] | None] = ContextVar("zest_held", default=None)


def hold(held: Closable) -> None:
    """Hold `held` until the request in whose scope it started ends (outside any: nothing)."""
    scope = _HELD.get()
    if scope is not None:
        scope.append(held)


@asynccontextmanager
async def request_scope(label: str) -> AsyncIterator[None]:
    """Run a request; whatever it started and left open is closed when it ends."""
    scope: list[Closable] = []
    token = _HELD.set(scope)
    try:
        yield
    finally:
        _HELD.reset(token)
        left = [held for held in scope if not held.released]
        if left:
            log.warning(
                "%s: %d generation(s) left open, closed at the request's end", label, len(left)
            )
            for held in left:  # all stopped before the first await, as close_all does
                held.stop()
            for held in left:
                await held.aclose()
