"""Which API dialect a request speaks: a label its handler carries, nothing more.

zest has one serving core and several front doors (OpenAI's API, Anthropic's Messages API, MCP,
Ollama's API). Each door translates its body into the same internal request the OpenAI
endpoints build, and its answer back; the request path (zest.gateway.serving) never knows the
dialect. What does know it is here: the handler's `opt` names its Dialect, and the error
handlers, the metrics (`zest_requests_total`'s `dialect` label) and the access line read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DIALECT", "NO_DIALECT", "OPENAI", "Dialect", "ErrorShape", "dialect_of"]

# An error answered in a dialect: (status, OpenAI's error body) -> (status, the dialect's body).
ErrorShape = Callable[[int, dict[str, Any]], tuple[int, Any]]
DIALECT = "dialect"  # the handler opt key


@dataclass(frozen=True)
class Dialect:
    """A front door's name (a metrics label) and how it shapes an error (None: OpenAI's)."""

    name: str
    error_shape: ErrorShape | None = None
    # The JSON Schema of its error body, for the OpenAPI document (None: OpenAI's).
    error_schema: dict[str, Any] | None = field(default=None, hash=False, compare=False)

    def shaped(self, status: int, body: dict[str, Any]) -> tuple[int, Any]:
        return (status, body) if self.error_shape is None else self.error_shape(status, body)


OPENAI = Dialect("openai")
NO_DIALECT = Dialect("-")  # no handler matched the request (a 404 of routing)


def dialect_of(scope: Mapping[str, Any]) -> Dialect:
    """The dialect of the handler that serves `scope`: its opt's, else OpenAI's (every
    endpoint that declares none speaks OpenAI's API); NO_DIALECT when none matched."""
    handler = scope.get("route_handler")
    if handler is None:
        return NO_DIALECT
    dialect = getattr(handler, "opt", {}).get(DIALECT)
    return dialect if isinstance(dialect, Dialect) else OPENAI
