"""The HTTP server: the Litestar app, its endpoints, auth, errors and metrics."""

from zest.gateway.http._access_log import AccessLog
from zest.gateway.http._app import create_app
from zest.gateway.http._auth import (
    PUBLIC_PATHS,
    AccessPolicy,
    exposure_warning,
)
from zest.gateway.http._origin import HostRule
from zest.gateway.http._tracing import Tracing

__all__ = [
    "PUBLIC_PATHS",
    "AccessLog",
    "AccessPolicy",
    "HostRule",
    "Tracing",
    "create_app",
    "exposure_warning",
]
