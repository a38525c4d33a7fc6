"""The error tree: the HTTP status, whether the walk may advance and whether the client may
retry are each error's own attributes, so a handler for one status never catches another."""

from __future__ import annotations

import pytest

from zest.errors import (
    BadRequestError,
    DeviceUnavailableError,
    EngineError,
    OverloadedError,
    PrivacyError,
    RequestError,
    ServiceUnavailableError,
    ShuttingDownError,
)


@pytest.mark.parametrize("kind", [EngineError, OverloadedError])
def test_a_handler_for_503s_catches_no_crash_and_no_429(kind: type[RequestError]) -> None:
    assert not issubclass(kind, ServiceUnavailableError)
    caught = None
    try:
        raise kind("x")
    except ServiceUnavailableError as error:  # the point: it does not match
        caught = error
    except RequestError:
        pass
    assert caught is None


@pytest.mark.parametrize(
    ("error", "status", "advances", "retryable"),
    [
        (BadRequestError("x"), 400, False, False),
        (EngineError("x"), 500, True, False),
        (OverloadedError("x", retry_after=3), 429, True, True),
        (ServiceUnavailableError("x"), 503, True, True),
        (DeviceUnavailableError("x", ()), 503, True, True),
        (ShuttingDownError("x"), 503, True, True),
        (PrivacyError("x"), 503, False, True),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, RequestError) else str(value),
)
def test_each_error_says_its_status_and_whether_to_advance_or_retry(
    error: RequestError, status: int, advances: bool, retryable: bool
) -> None:
    assert (error.status_code, error.advances, error.retryable) == (status, advances, retryable)


def test_an_error_body_carries_the_zest_object_beside_the_error_when_told_one() -> None:
    plain = OverloadedError("the queue is full", retry_after=2)
    assert set(plain.to_body()) == {"error"}
    told = OverloadedError("the queue is full", retry_after=2)
    told.zest = {"task": "chat-long", "route_to": "chat-long", "matched_rule": "long"}
    assert told.to_body() == {
        "error": {
            "message": "the queue is full",
            "type": "rate_limit_error",
            "param": None,
            "code": "overloaded",
        },
        "zest": {"task": "chat-long", "route_to": "chat-long", "matched_rule": "long"},
    }
