"""The events of one generation request, as the request path emits them.

The request path calls these methods and knows nothing of who listens: the metrics
(`zest.gateway.http`'s RequestRecord) are one observer; the default observer does nothing.
"""

from __future__ import annotations

from typing import Any

from zest.engines import Delta

__all__ = ["ForwardingEvents", "RequestEvents"]


class RequestEvents:
    """What happens to one request, from its arrival to its end; every method does nothing."""

    def task_named(self, name: str) -> None:
        """The request names this task (or model id)."""

    def routed(self, task: str, rule: str) -> None:
        """The named task's rules chose `rule` (its id, or "default": none matched)."""

    def attempt(self, model: str, device: str) -> None:
        """An attempt of the plan is being tried."""

    def fell_back(self, kind: str) -> None:
        """An attempt failed with `kind` (policies.FailureKind) and the request moved on."""

    def first_token(self, gen: Any) -> None:
        """The first delta arrived: `gen`, the Generation (gateway/serving/_generation.py),
        is what serves the request. Typed Any here, so that this module imports nothing of
        the request path that emits its events (an observer names the type it reads)."""

    def delta(self, delta: Delta) -> None:
        """A delta was handed to the client; the final one ends the request."""

    def failed(self, error: BaseException) -> None:
        """An error ended the request (before or after its first token)."""

    def closed(self) -> None:
        """The response was closed; a request not ended yet lost its client."""


class ForwardingEvents(RequestEvents):
    """Hands every event on to `inner`: an observer that adds to some events overrides those
    and calls super() for the forwarding."""

    def __init__(self, inner: RequestEvents) -> None:
        self.inner = inner

    def task_named(self, name: str) -> None:
        self.inner.task_named(name)

    def routed(self, task: str, rule: str) -> None:
        self.inner.routed(task, rule)

    def attempt(self, model: str, device: str) -> None:
        self.inner.attempt(model, device)

    def fell_back(self, kind: str) -> None:
        self.inner.fell_back(kind)

    def first_token(self, gen: Any) -> None:
        self.inner.first_token(gen)

    def delta(self, delta: Delta) -> None:
        self.inner.delta(delta)

    def failed(self, error: BaseException) -> None:
        self.inner.failed(error)

    def closed(self) -> None:
        self.inner.closed()
