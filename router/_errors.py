"""The one exception tree of zest.

    ZestError
    ├── ConfigError                 routes.yaml is invalid (file, key path, fix for each problem)
    └── RequestError                carries an HTTP status and an OpenAI error type/code
        ├── BadRequestError         400 invalid_request_error
        │   └── ContextLengthExceededError   400 code=context_length_exceeded
        ├── UnknownTaskError        404 code=model_not_found
        ├── OverloadedError         429 code=overloaded, with Retry-After
        └── ServiceUnavailableError 503 (model not loaded, engine not installed)
            ├── DeviceUnavailableError  no allowed device can serve the route
            └── EngineError         an engine failed while generating (foreign errors chained)

Engines translate foreign exceptions at their boundary (`raise EngineError(...) from exc`).
"""

from __future__ import annotations

__all__ = [
    "BadRequestError",
    "ConfigError",
    "ContextLengthExceededError",
    "DeviceUnavailableError",
    "EngineError",
    "OverloadedError",
    "RequestError",
    "ServiceUnavailableError",
    "UnknownTaskError",
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

    def headers(self) -> dict[str, str]:
        return {}

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


class UnknownTaskError(RequestError):
    status_code = 404

    def __init__(self, message: str) -> None:
        super().__init__(message, param="model", code="model_not_found")


class OverloadedError(RequestError):
    """Too many requests are waiting for a model; the client should retry after a while."""

    status_code = 429
    error_type = "rate_limit_error"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, code="overloaded")
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after)}


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
