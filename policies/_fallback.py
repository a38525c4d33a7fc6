"""Which failures move a request on to its route's next attempt, and which are answered.

Pure: a failure is classified from zest's own error tree (engines translate foreign errors at
their boundary). A request advances only before its first token was sent, only when the route's
`on_failure` is next, and only for these reasons:

- load error: the attempt's model could not be loaded (missing file, engine not installed);
- device unavailable: the device (or the remote upstream) cannot be reached, or the upstream
  kept answering 503 after its retries;
- device error: the engine failed on its device before the first token;
- timeout: no first token within `timeouts.first_token_s`;
- overloaded: the upstream kept answering 429 after its retries;
- context overflow: the prompt does not fit this attempt, and `context.on_overflow` is fallback.

Everything else (a bad request, an upstream that refuses the request, a privacy refusal, the
total timeout) is answered as it is.
"""

from __future__ import annotations

from typing import Literal

from zest.errors import (
    ContextLengthExceededError,
    EngineError,
    GatewayTimeoutError,
    OverloadedError,
    RequestError,
)
from zest.router import RouteConfig

__all__ = ["FailureKind", "classify_failure", "failure_line", "may_advance"]

FailureKind = Literal[
    "load error",
    "device unavailable",
    "device error",
    "timeout",
    "overloaded",
    "context overflow",
]


def classify_failure(error: RequestError, *, loading: bool) -> FailureKind | None:
    """The kind of a failure before the first token; None for failures that are answered."""
    if isinstance(error, ContextLengthExceededError):
        return "context overflow"
    if isinstance(error, GatewayTimeoutError):
        return "timeout" if error.code == "first_token_timeout" else None
    if not error.advances:
        return None
    if loading:
        return "load error"
    if isinstance(error, OverloadedError):
        return "overloaded"
    if isinstance(error, EngineError):
        return "device error"
    return "device unavailable"


def may_advance(kind: FailureKind | None, route: RouteConfig) -> bool:
    """Whether a failure of this kind moves the request on to the route's next attempt."""
    if kind is None or route.on_failure != "next":
        return False
    return kind != "context overflow" or route.context.on_overflow == "fallback"


def failure_line(model: str, device: str, kind: FailureKind | None, message: str) -> str:
    """How a failed attempt is listed (x-zest-fallbacks, `zest.fallbacks`, explain)."""
    return f"{model} on {device}: {kind or 'error'}: {message}"
