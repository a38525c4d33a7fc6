"""One rule for a failed attempt, shared by every request that walks a plan (generation and
embeddings): answer the error, or record why the attempt failed and move on."""

from __future__ import annotations

from zest.errors import RequestError
from zest.policies import classify_failure, failure_line, may_advance
from zest.router import Attempt, RouteConfig

__all__ = ["give_up_or_record"]


def give_up_or_record(
    error: RequestError,
    attempt: Attempt,
    route: RouteConfig,
    fallbacks: list[str],
    *,
    last: bool,
    loading: bool = False,
) -> str:
    """Re-raise `error` unless it moves the request on (the answer then lists every attempt
    tried); otherwise append why to `fallbacks` and return the failure's kind."""
    kind = classify_failure(error, loading=loading)
    line = failure_line(attempt.model, attempt.device, kind, error.message)
    if last or not may_advance(kind, route):
        error.tried = [*fallbacks, line]  # even a single attempt: the answer says what failed
        raise error
    fallbacks.append(line)
    return kind or "error"
