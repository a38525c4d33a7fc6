"""What one soak request set out to do, how it ended, and whether that ending is what zest
documents (docs/http-api.md: Errors; docs/policies.md: Fallback chains, The remote engine).
Pure: no I/O.

A request fails when it did not end as expected:
- a disconnect the harness caused is never a failure;
- a stream must end with `data: [DONE]` or an error event: a stream that just stops (or whose
  connection breaks) is a silent cut;
- an error (status or event) is expected only where the docs say it is: an upstream that
  cuts its stream after the first token (an `engine_error` event, or a 500 for a request that
  is not streamed), zest's own full admission queue (429 `overloaded`); on the route whose
  upstream has a local fallback, every fault before the first token must still be served;
- a 5xx with no documented code, an answer without choices, or no answer within the client's
  timeout (a hang) is a failure.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

__all__ = [
    "DOCUMENTED_5XX",
    "FAULT_CYCLE",
    "Drop",
    "Ending",
    "Fault",
    "Outcome",
    "Request",
    "Verdict",
    "classify",
    "expected_errors",
    "faults_between",
]


class Fault(StrEnum):
    """How the proxy in front of the upstream misbehaves, one at a time."""

    NONE = "none"  # forwards faithfully
    RATE_LIMITED = "429"  # 429 with Retry-After: 1
    UNAVAILABLE = "503"  # 503, no Retry-After (zest backs off)
    REFUSED = "refused"  # nothing listens: connection refused
    HANG = "hang_before_headers"  # reads the request, never answers
    SILENT = "headers_then_nothing"  # 200 and event-stream headers, then silence
    CUT = "cut_mid_stream"  # forwards a few events, then drops the connection
    SLOW = "slow_tokens"  # forwards every event late


FAULT_CYCLE = tuple(Fault)


class Ending(StrEnum):
    DONE = "done"  # a stream ended with [DONE] (openai client: a finish_reason, then the end)
    ERROR_EVENT = "error_event"  # a stream ended with `data: {"error": ...}`
    BODY = "body"  # a whole JSON answer, of any status
    EOF = "eof"  # a stream ended with neither [DONE] nor an error event
    BROKEN = "broken"  # the connection broke after the answer began
    UNREACHABLE = "unreachable"  # no answer at all (refused, reset before the headers)
    TIMEOUT = "timeout"  # no end within the client's timeout
    DROPPED = "dropped"  # the harness disconnected, as planned
    HARNESS_ERROR = "harness_error"  # the harness itself failed (a failure, to be looked at)


class Drop(StrEnum):
    """A disconnect the harness causes on purpose."""

    NONE = "none"
    BEFORE_FIRST_TOKEN = "before_first_token"
    MID_STREAM = "mid_stream"


@dataclass(frozen=True)
class Request:
    """What a client sets out to do."""

    route: str  # the task named as `model`
    remote: bool  # the route's first attempt is the remote model behind the proxy
    endpoint: Literal["chat", "completions"]
    client: Literal["openai", "httpx"]
    stream: bool
    drop: Drop = Drop.NONE
    drop_after: float = 0.0  # seconds (before the first token) or content chunks (mid-stream)


@dataclass(frozen=True)
class Outcome:
    """How a request ended; times are seconds since the soak began."""

    request: Request
    started: float
    ended: float
    ending: Ending
    status: int | None = None
    error: str | None = None  # an error's code, else its type ("malformed": no choices)
    message: str = ""  # an error's message, shortened
    ttft_s: float | None = None  # to the first piece of text (streams only)
    tokens: int = 0  # content chunks (streams) or completion tokens (whole answers)
    served_by: str | None = None  # the model of x-zest-route
    faults: tuple[Fault, ...] = ()  # the upstream's faults while the request ran


@dataclass(frozen=True)
class Verdict:
    kind: str  # "ok", "disconnected", "documented:CODE", or a failure's kind
    failed: bool


# The codes the docs document for a 5xx answer (an EngineError has no code: its type).
DOCUMENTED_5XX = frozenset(
    {
        "device_unavailable",
        "model_not_available",
        "model_load_failed",
        "engine_not_configured",
        "privacy_forbidden",
        "upstream_unreachable",
        "upstream_unavailable",
        "upstream_rejected",
        "first_token_timeout",
        "total_timeout",
        "engine_error",
    }
)
_BROKEN_UPSTREAM = ("the stream broke", "the stream ended before it finished")


def expected_errors(outcome: Outcome) -> frozenset[str]:
    """The error codes this request may end with, given the faults that ran beside it."""
    codes = set()
    if outcome.status == 429 and outcome.message.startswith("the model is at capacity"):
        codes.add("overloaded")  # a full admission queue (an upstream's 429 falls back)
    cut = outcome.request.remote and Fault.CUT in outcome.faults
    if cut and any(hint in outcome.message for hint in _BROKEN_UPSTREAM):
        codes.add("engine_error")  # after the first token nothing falls back
    return frozenset(codes)


def classify(outcome: Outcome) -> Verdict:
    """Whether the request ended as zest documents, and if not, how it failed."""
    ending = outcome.ending
    plain = {
        Ending.DROPPED: Verdict("disconnected", False),
        Ending.TIMEOUT: Verdict("hang", True),
        Ending.UNREACHABLE: Verdict("unreachable", True),
        Ending.BROKEN: Verdict("broken_stream", True),
        Ending.EOF: Verdict("silent_cut", True),
        Ending.HARNESS_ERROR: Verdict("harness_error", True),
    }
    if ending in plain:
        return plain[ending]
    if ending is Ending.ERROR_EVENT:
        return _error(outcome, "unexpected_error_event")
    if outcome.status == 200:
        return Verdict("bad_answer", True) if outcome.error else Verdict("ok", False)
    return _error(outcome, _unexpected_status(outcome))


def _error(outcome: Outcome, otherwise: str) -> Verdict:
    code = outcome.error or f"http_{outcome.status}"
    if code in expected_errors(outcome):
        return Verdict(f"documented:{code}", False)
    return Verdict(otherwise, True)


def _unexpected_status(outcome: Outcome) -> str:
    status = outcome.status or 0
    if status >= 500 and outcome.error not in DOCUMENTED_5XX:
        return "undocumented_5xx"
    if outcome.request.remote and (status >= 500 or status == 429):
        return "fallback_not_taken"  # the route's local fallback should have served it
    return "unexpected_error"


def faults_between(
    history: Sequence[tuple[float, Fault]], start: float, end: float
) -> tuple[Fault, ...]:
    """The faults in force at any moment of [start, end]; `history` lists (since, fault) in
    time order, each fault lasting until the next one begins."""
    if not history:
        return ()
    times = [since for since, _ in history]
    first = max(bisect_right(times, start) - 1, 0)
    last = max(bisect_right(times, end) - 1, 0)
    seen = [fault for _, fault in history[first : last + 1]]
    return tuple(dict.fromkeys(seen))
