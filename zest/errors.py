"""The one exception tree of zest: every error zest raises on purpose, in this leaf module.

    ZestError
    ├── ConfigError                 routes.yaml is invalid (file, key path, fix for each problem)
    ├── CommandError                a CLI command cannot go on (the message says what to do)
    │   ├── PullError               `zest models pull` could not fetch the model
    │   ├── EvalFileError           an eval file is unusable (one problem per line)
    │   └── ConversionError         `python -m zest.engines.convert` failed at a step
    └── RequestError                answered to a client: HTTP status, OpenAI type/code, outcome
        ├── BadRequestError         400 invalid_request_error
        │   └── ContextLengthExceededError   400 code=context_length_exceeded
        ├── AuthenticationError     401 code=invalid_api_key (WWW-Authenticate: Bearer)
        ├── PermissionDeniedError   403 permission_error: an admin route without the admin key,
        │   │                       a Host or a web page's Origin the server does not take
        │   └── TaskNotAllowedError code=task_not_allowed: a named client calls a task its
        │                           routes.yaml entry does not list
        ├── UnknownTaskError        404 code=model_not_found
        ├── RequestTooLargeError    413 a body over ZEST_MAX_BODY_BYTES, refused before it is
        │                           read whole (where Litestar does not read it: /mcp)
        ├── UnsupportedMediaTypeError 415 code=unsupported_media_type: a body not sent as JSON
        ├── ModelBusyError          409 code=model_busy: unloading a model that serves requests
        ├── ClientDisconnectedError 499 the client went away (nobody reads it; names the outcome)
        ├── UpstreamRejectedError   502 code=upstream_rejected (the upstream refused: auth, 404)
        ├── GatewayTimeoutError     504 code=first_token_timeout | total_timeout
        ├── OverloadedError         429 code=overloaded: a model's queue is full (Retry-After),
        │                           or the upstream kept answering 429
        ├── RateLimitedError        429 code=rate_limit_exceeded: a named client is over one of
        │                           its limits (Retry-After, x-ratelimit-*); holds nothing
        ├── EngineError             500 an engine failed while generating (foreign errors chained)
        └── ServiceUnavailableError 503 (model not loaded, engine not installed; code
            │                       model_load_failed: its files would not load;
            │                       upstream_unavailable: the upstream kept answering 503)
            ├── DeviceUnavailableError  no allowed device can serve the route
            ├── ModelFileMissingError   code=model_not_available: the model's file is not here
            ├── ModelDigestMismatchError code=model_digest_mismatch: the file is not the pinned one
            ├── PrivacyError        code=privacy_forbidden: a remote engine refused the request
            ├── LimitsUnavailableError code=limits_unavailable: the limits' store cannot be
            │                       reached and ZEST_LIMITS_ON_STORE_ERROR=deny (Retry-After)
            └── ShuttingDownError   code=shutting_down: the server drains (Retry-After)

Each RequestError class declares its HTTP status, OpenAI `type`, its metrics `outcome` label,
and two answers as attributes, never as ancestry: `advances` (an attempt failing with it may
move the request on) and `retryable` (the client may send it again later). A handler for 503s
catches no crash and no 429. All are declared explicitly (a request's outcome is its `code`
when it has one, else the class's `outcome`): renaming a class changes no dashboard.
`error_body` is the one place an OpenAI error body is built, and `shown` (or `clipped`) the
one way a message quotes what the client sent: capped, so a megabyte of input is never
echoed back whole. Engines translate foreign exceptions at their boundary (`raise
EngineError(...) from exc`); when an error moves a request on to its next attempt is
zest.policies' business.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "ClientDisconnectedError",
    "CommandError",
    "ConfigError",
    "ContextLengthExceededError",
    "ConversionError",
    "DeviceUnavailableError",
    "EngineError",
    "EvalFileError",
    "GatewayTimeoutError",
    "LimitsUnavailableError",
    "ModelBusyError",
    "ModelDigestMismatchError",
    "ModelFileMissingError",
    "OverloadedError",
    "PermissionDeniedError",
    "PrivacyError",
    "PullError",
    "RateLimitedError",
    "RequestError",
    "RequestTooLargeError",
    "ServiceUnavailableError",
    "ShuttingDownError",
    "TaskNotAllowedError",
    "UnknownTaskError",
    "UnsupportedMediaTypeError",
    "UpstreamRejectedError",
    "ZestError",
    "clipped",
    "error_body",
    "shown",
]

# How much of a client's value an error message quotes.
SHOWN_CHARS = 64


def error_body(
    message: str, *, type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """An OpenAI error body: {"error": {"message", "type", "param", "code"}}."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """`value` as an error message quotes it: its repr, or for a long value the repr of its
    first `limit` characters followed by how long it was (`'aaa…'…(1048576 characters)`)."""
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}…({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}…({len(text)} characters)"


def clipped(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` as shown in an error (a path, a key path): whole, or its first `limit`
    characters followed by how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}…({len(text)} characters)"


class ZestError(Exception):
    """Root of every error zest raises on purpose."""


class ConfigError(ZestError):
    """routes.yaml is invalid; `problems` holds one line per problem, each naming file and key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class CommandError(ZestError):
    """A command-line command cannot go on; the message says what to do."""


class PullError(CommandError):
    """The model could not be pulled; the message says what to do."""


class EvalFileError(CommandError):
    """The eval file is unusable; `problems` has one line per problem, each naming its line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class ConversionError(CommandError):
    """A step of the model conversion failed; the message says which and what to do."""


class RequestError(ZestError):
    """An error answered to a client, with its HTTP status and OpenAI error fields."""

    status_code = 400
    error_type = "invalid_request_error"
    # The metrics `outcome` label when the instance has no code (else the code is the label).
    outcome = "request_error"
    # Whether an attempt failing with it may move the request on to the route's next attempt
    # (policies decide when it does), and whether the client may send it again later: both
    # are the class's answer, never inferred from which class it derives from.
    advances = False
    retryable = False

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        # Response headers an error answer carries too (Retry-After, WWW-Authenticate).
        self.headers: dict[str, str] = {}
        # The attempts a request tried before it gave up with this error (x-zest-fallbacks).
        self.tried: list[str] = []
        # What an answer would have said beside the error (the routing decision that chose
        # the route): the body's `zest` object, as a successful answer carries one.
        self.zest: dict[str, Any] | None = None

    @property
    def outcome_label(self) -> str:
        return self.code or self.outcome

    def to_body(self) -> dict[str, Any]:
        body = error_body(self.message, type=self.error_type, param=self.param, code=self.code)
        if self.zest is not None:
            body["zest"] = self.zest
        return body


class BadRequestError(RequestError):
    status_code = 400
    outcome = "bad_request"


class ContextLengthExceededError(BadRequestError):
    def __init__(self, message: str, *, param: str | None = "messages") -> None:
        super().__init__(message, param=param, code="context_length_exceeded")


class AuthenticationError(RequestError):
    """No API key, or one the server does not know (OpenAI answers its 401s the same way)."""

    status_code = 401
    outcome = "authentication"

    def __init__(self, message: str) -> None:
        super().__init__(message, code="invalid_api_key")
        self.headers["www-authenticate"] = "Bearer"


class PermissionDeniedError(RequestError):
    """A known key that may not do this (an API key on an admin route), or a request a web
    page could have sent unasked (code host_not_allowed or origin_not_allowed)."""

    status_code = 403
    error_type = "permission_error"
    outcome = "permission_denied"

    def __init__(self, message: str, *, code: str = "admin_key_required") -> None:
        super().__init__(message, code=code)


class TaskNotAllowedError(PermissionDeniedError):
    """A named client calls a task its entry in routes.yaml does not list (clients.NAME.tasks)."""

    outcome = "task_not_allowed"

    def __init__(self, message: str) -> None:
        super().__init__(message, code="task_not_allowed")
        self.param = "model"


class UnknownTaskError(RequestError):
    status_code = 404
    outcome = "unknown_task"

    def __init__(self, message: str) -> None:
        super().__init__(message, param="model", code="model_not_found")


class RequestTooLargeError(RequestError):
    """A body larger than the server takes, refused as its length is known (where zest reads
    the body itself: /mcp; Litestar's own 413 for the bodies it reads counts as http_413)."""

    status_code = 413
    outcome = "request_too_large"


class UnsupportedMediaTypeError(RequestError):
    """A body whose Content-Type is not JSON."""

    status_code = 415
    outcome = "unsupported_media_type"

    def __init__(self, message: str) -> None:
        super().__init__(message, param="content-type", code="unsupported_media_type")


class ModelBusyError(RequestError):
    """An unload asked of a model that is serving requests."""

    status_code = 409
    outcome = "model_busy"


class ClientDisconnectedError(RequestError):
    status_code = 499  # nobody reads it: the client is gone; it names the outcome in the log
    outcome = "client_disconnected"


class ServiceUnavailableError(RequestError):
    status_code = 503
    error_type = "service_unavailable"
    outcome = "service_unavailable"
    advances = True
    retryable = True


class DeviceUnavailableError(ServiceUnavailableError):
    """No allowed device can serve a route; `removed` says which candidates were dropped, why."""

    def __init__(self, message: str, removed: tuple[str, ...]) -> None:
        super().__init__(message, code="device_unavailable")
        self.removed = removed


class ModelFileMissingError(ServiceUnavailableError):
    """The model's file is not on this machine."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="model_not_available")


class ModelDigestMismatchError(ServiceUnavailableError):
    """The model's file is here but its SHA-256 is not the one routes.yaml pins."""

    def __init__(self, message: str, *, expected: str, actual: str) -> None:
        super().__init__(message, code="model_digest_mismatch")
        self.expected, self.actual = expected, actual


class EngineError(RequestError):
    """An engine failed while generating: the next attempt may serve it; the same request
    sent again may fail the same way."""

    status_code = 500
    error_type = "engine_error"
    outcome = "engine_error"
    advances = True


class UpstreamRejectedError(RequestError):
    """The upstream refused the request for a reason the client cannot fix (auth, not found)."""

    status_code = 502
    error_type = "upstream_error"
    outcome = "upstream_rejected"

    def __init__(self, message: str) -> None:
        super().__init__(message, code="upstream_rejected")


class GatewayTimeoutError(RequestError):
    status_code = 504
    error_type = "timeout"
    outcome = "timeout"

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message, code=code)


class OverloadedError(RequestError):
    """Too many requests wait for a model (or an upstream keeps refusing): retry later.

    It advances a fallback chain like any unavailability; answered, it is a 429.
    """

    status_code = 429
    error_type = "rate_limit_error"
    outcome = "overloaded"
    advances = True
    retryable = True

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message, code="overloaded")
        self.retry_after = retry_after
        if retry_after is not None:
            self.headers["retry-after"] = str(retry_after)


class RateLimitedError(RequestError):
    """A named client is over one of its limits (docs/teams.md): nothing was reserved for the
    request. `limit` is OpenAI's error type: requests or tokens."""

    status_code = 429
    outcome = "rate_limited"
    retryable = True  # later: Retry-After says when

    def __init__(self, message: str, *, limit: str, headers: dict[str, str]) -> None:
        super().__init__(message, code="rate_limit_exceeded")
        self.error_type = limit  # OpenAI's 429s say which limit: "requests" or "tokens"
        self.headers.update(headers)


class LimitsUnavailableError(ServiceUnavailableError):
    """The store of the clients' limits cannot be reached, and the operator chose to refuse
    limited clients meanwhile (ZEST_LIMITS_ON_STORE_ERROR=deny)."""

    outcome = "limits_unavailable"
    advances = False  # no attempt of the plan would answer otherwise

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message, code="limits_unavailable")
        self.headers["retry-after"] = str(retry_after)


class PrivacyError(ServiceUnavailableError):
    outcome = "privacy_forbidden"
    advances = False  # the next attempt gets the same answer: privacy is the route's

    def __init__(self, message: str) -> None:
        super().__init__(message, code="privacy_forbidden")


class ShuttingDownError(ServiceUnavailableError):
    """The server is stopping: what it refuses or ends now, another replica can serve."""

    outcome = "shutting_down"

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message, code="shutting_down")
        self.headers["retry-after"] = str(retry_after)
