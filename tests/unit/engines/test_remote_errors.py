"""The remote engine's boundary: upstream answers become zest errors; when to retry."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

from zest.engines._remote import retry_delay, translate_status
from zest.errors import (
    BadRequestError,
    ContextLengthExceededError,
    EngineError,
    OverloadedError,
    RequestError,
    ServiceUnavailableError,
    UpstreamRejectedError,
)
from zest.router import RemoteModel

CONFIG = RemoteModel(engine="remote", base_url="http://127.0.0.1:9/v1", model="m")
LLAMA_CPP_OVERFLOW = (
    b'{"error":{"message":"This model\'s maximum context length is 256 tokens. However, you '
    b"requested 436 tokens (431 in the messages, 5 in the completion). Please reduce the length "
    b'of the messages or completion.","type":"invalid_request_error","param":"messages",'
    b'"code":"context_length_exceeded"}}'
)


@pytest.mark.parametrize(
    ("status", "body", "kind", "message"),
    [
        (
            400,
            LLAMA_CPP_OVERFLOW,
            ContextLengthExceededError,
            "upstream http://127.0.0.1:9/v1, model 'up': This model's maximum context length is "
            "256 tokens. However, you requested 436 tokens (431 in the messages, 5 in the "
            "completion). Please reduce the length of the messages or completion.",
        ),
        (
            422,
            b'{"detail": "temperature: must be <= 2"}',
            BadRequestError,
            "upstream http://127.0.0.1:9/v1 refused the request (422): temperature: must be <= 2",
        ),
        (
            401,
            b'{"error": {"message": "bad key sk-abc"}}',
            UpstreamRejectedError,
            "upstream http://127.0.0.1:9/v1 refused the credentials (401): check the key in the "
            "variable named by models.up.api_key_env",
        ),
        (
            404,
            b"Not Found",
            UpstreamRejectedError,
            "upstream http://127.0.0.1:9/v1 answered 404: Not Found: check "
            "models.up.base_url and model",
        ),
        (
            429,
            b'{"error": {"message": "rate limited"}}',
            OverloadedError,
            "upstream http://127.0.0.1:9/v1 is overloaded (429): rate limited",
        ),
        (
            503,
            b"",
            ServiceUnavailableError,
            "upstream http://127.0.0.1:9/v1 is unavailable (503): no message",
        ),
        (
            500,
            b'{"error": {"message": "CUDA error"}}',
            EngineError,
            "upstream http://127.0.0.1:9/v1 failed (500): CUDA error",
        ),
    ],
)
def test_upstream_answers_become_zest_errors(
    status: int, body: bytes, kind: type[RequestError], message: str
) -> None:
    error = translate_status(status, body, "up", CONFIG)
    assert type(error) is kind
    assert error.message == message


def test_an_unavailable_upstream_is_a_503_not_a_rate_limit() -> None:
    """An upstream that answers 503 is down: its client's client gets a 503 too (a 429 would
    tell it to slow down, which is not the trouble)."""
    error = translate_status(503, b"", "up", CONFIG)
    assert (error.status_code, error.error_type, error.code) == (
        503,
        "service_unavailable",
        "upstream_unavailable",
    )


def test_the_credentials_error_never_echoes_the_upstreams_message() -> None:
    error = translate_status(401, b'{"error": {"message": "bad key sk-abc"}}', "up", CONFIG)
    assert "sk-abc" not in error.message


def answer(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers)


def test_retry_after_in_seconds_is_honoured() -> None:
    assert retry_delay(answer(429, **{"retry-after": "2"}), 0, CONFIG) == 2.0


def test_retry_after_as_an_http_date_is_honoured() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    delay = retry_delay(answer(503, **{"retry-after": when}), 0, CONFIG)
    assert delay is None  # 30 s > max_retry_wait_s (10): not worth waiting for
    patient = CONFIG.model_copy(update={"max_retry_wait_s": 60.0})
    delay = retry_delay(answer(503, **{"retry-after": when}), 0, patient)
    assert delay is not None
    assert 25 < delay <= 30


def test_without_retry_after_the_backoff_doubles_up_to_the_cap() -> None:
    delays = [retry_delay(answer(502), attempt, CONFIG) for attempt in range(6)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_client_errors_are_not_retried(status: int) -> None:
    assert retry_delay(answer(status, **{"retry-after": "1"}), 0, CONFIG) is None
