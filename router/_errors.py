"""The one exception tree of zest.

    ZestError
    ├── ConfigError                 routes.yaml is invalid (file, key path, fix for each problem)
    └── RequestError                carries an HTTP status and an OpenAI error type/code
        ├── BadRequestError         400 invalid_request_error
        │   └── ContextLengthExceededError   400 code=context_length_exceeded
        ├── AuthenticationError     401 code=invalid_api_key (WWW-Authenticate: Bearer)
        ├── PermissionDeniedError   403 permission_error: an admin route without the admin key
        ├── UnknownTaskError        404 code=model_not_found
        ├── UpstreamRejectedError   502 code=upstream_rejected (the upstream refused: auth, 404)
        ├── GatewayTimeoutError     504 code=first_token_timeout | total_timeout
        └── ServiceUnavailableError 503 (model not loaded, engine not installed)
            ├── DeviceUnavailableError  no allowed device can serve the route
            ├── OverloadedError     429 code=overloaded: a model's queue is full (Retry-After),
            │                       or the upstream kept answering 429/503
            ├── PrivacyError        code=privacy_forbidden: a remote engine refused the request
            └── EngineError         an engine failed while generating (foreign errors chained)

Engines translate foreign exceptions at their boundary (`raise EngineError(...) from exc`).
Which of these move a request on to its next attempt is policies._fallback's business.
"""

from __future__ import annotations

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "ConfigError",
    "ContextLengthExceededError",
    "DeviceUnavailableError",
    "EngineError",
    "GatewayTimeoutError",
    "OverloadedError",
    "PermissionDeniedError",
    "PrivacyError",
    "RequestError",
    "ServiceUnavailableError",
    "UnknownTaskError",
    "UpstreamRejectedError",
    "ZestError",
]


class ZestError(Exception):
    """Root of every error zest raises on purpose."""


class ConfigError(ZestError):
    """routes.yaml is invalid; `problems` holds one line per problem, each naming file and key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class RequestError(ZestError):
    """An error answered to a client, with its HTTP status and OpenAI error fields."""

    status_code = 400
    error_type = "invalid_request_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        # Response headers an error answer carries too (e.g. the fallbacks tried before it).
        self.headers: dict[str, str] = {}

    def to_body(self) -> dict[str, dict[str, str | None]]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class BadRequestError(RequestError):
    status_code = 400


class ContextLengthExceededError(BadRequestError):
    def __init__(self, message: str, *, param: str | None = "messages") -> None:
        super().__init__(message, param=param, code="context_length_exceeded")


class AuthenticationError(RequestError):
    """No API key, or one the server does not know (OpenAI answers its 401s the same way)."""

    status_code = 401

    def __init__(self, message: str) -> None:
        super().__init__(message, code="invalid_api_key")
        self.headers["www-authenticate"] = "Bearer"


class PermissionDeniedError(RequestError):
    """A known key that may not do this (an API key on an admin route)."""

    status_code = 403
    error_type = "permission_error"

    def __init__(self, message: str) -> None:
        super().__init__(message, code="admin_key_required")


class UnknownTaskError(RequestError):
    status_code = 404

    def __init__(self, message: str) -> None:
        super().__init__(message, param="model", code="model_not_found")


class ServiceUnavailableError(RequestError):
    status_code = 503
    error_type = "service_unavailable"


class DeviceUnavailableError(ServiceUnavailableError):
    """No allowed device can serve a route; `removed` says which candidates were dropped, why."""

    def __init__(self, message: str, removed: tuple[str, ...]) -> None:
        super().__init__(message, code="device_unavailable")
        self.removed = removed


class EngineError(ServiceUnavailableError):
    status_code = 500
    error_type = "engine_error"


class UpstreamRejectedError(RequestError):
    """The upstream refused the request for a reason the client cannot fix (auth, not found)."""

    status_code = 502
    error_type = "upstream_error"

    def __init__(self, message: str) -> None:
        super().__init__(message, code="upstream_rejected")


class GatewayTimeoutError(RequestError):
    status_code = 504
    error_type = "timeout"

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message, code=code)


class OverloadedError(ServiceUnavailableError):
    """Too many requests wait for a model (or an upstream keeps refusing): retry later.

    It advances a fallback chain like any unavailability; answered, it is a 429.
    """

    status_code = 429
    error_type = "rate_limit_error"

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message, code="overloaded")
        self.retry_after = retry_after
        if retry_after is not None:
            self.headers["retry-after"] = str(retry_after)


class PrivacyError(ServiceUnavailableError):
    def __init__(self, message: str) -> None:
        super().__init__(message, code="privacy_forbidden")
