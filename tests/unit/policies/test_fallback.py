"""Which failures move a request on to the next attempt of its route."""

from __future__ import annotations

import pytest

from zest.errors import (
    BadRequestError,
    ContextLengthExceededError,
    DeviceUnavailableError,
    EngineError,
    GatewayTimeoutError,
    OverloadedError,
    PrivacyError,
    RequestError,
    ServiceUnavailableError,
    UpstreamRejectedError,
)
from zest.policies import FailureKind, classify_failure, may_advance
from zest.router import RouteConfig


@pytest.mark.parametrize(
    ("error", "loading", "kind"),
    [
        (ServiceUnavailableError("missing file", code="model_not_available"), True, "load error"),
        (EngineError("llama.cpp could not load"), True, "load error"),
        (DeviceUnavailableError("no npu", ()), False, "device unavailable"),
        (
            ServiceUnavailableError("unreachable", code="upstream_unreachable"),
            False,
            "device unavailable",
        ),
        (EngineError("decode failed"), False, "device error"),
        (OverloadedError("429"), False, "overloaded"),
        (GatewayTimeoutError("slow", code="first_token_timeout"), False, "timeout"),
        (ContextLengthExceededError("too long"), False, "context overflow"),
        (GatewayTimeoutError("slow", code="total_timeout"), False, None),
        (BadRequestError("bad temperature"), False, None),
        (UpstreamRejectedError("401"), False, None),
        (PrivacyError("local_only"), False, None),
        (PrivacyError("local_only"), True, None),
    ],
)
def test_failures_are_classified(error: RequestError, loading: bool, kind: str | None) -> None:
    assert classify_failure(error, loading=loading) == kind


def route(**fields: object) -> RouteConfig:
    return RouteConfig.model_validate({"kind": "chat", "model": "m", **fields})


@pytest.mark.parametrize("kind", ["load error", "device unavailable", "timeout", "overloaded"])
def test_availability_failures_advance_unless_the_route_returns_errors(kind: FailureKind) -> None:
    assert may_advance(kind, route())
    assert not may_advance(kind, route(on_failure="return_error"))


def test_answered_failures_never_advance() -> None:
    assert not may_advance(None, route())


@pytest.mark.parametrize(
    ("on_overflow", "advances"), [("fallback", True), ("trim", False), ("reject", False)]
)
def test_a_context_overflow_advances_only_with_on_overflow_fallback(
    on_overflow: str, advances: bool
) -> None:
    r = route(context={"on_overflow": on_overflow})
    assert may_advance("context overflow", r) is advances
