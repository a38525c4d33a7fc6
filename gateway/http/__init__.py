"""The HTTP server: the Litestar app, its endpoints, auth, errors and metrics."""

from zest.gateway.http._access_log import AccessLog, RedactCredentials, redact_query
from zest.gateway.http._app import (
    create_app,
)
from zest.gateway.http._auth import (
    PUBLIC_PATHS,
    AccessPolicy,
    AuthGuard,
    credential_of,
    exposure_warning,
    is_loopback,
    parse_keys,
    read_key_file,
)
from zest.gateway.http._body import (
    parse_body,
)
from zest.gateway.http._metrics import (
    CONTENT_TYPE,
    Metrics,
    RequestRecord,
    loaded_engines,
    outcome_of,
)
from zest.gateway.http._metrics_routes import (
    last_stats,
    prometheus_metrics,
    provide_record,
    record_failure,
)
from zest.gateway.http._ops import (
    OPS_HANDLERS,
    describe_loaded,
)
from zest.gateway.http._origin import HostRule
from zest.gateway.http._responses import (
    collect_body,
    sse_events,
)
from zest.gateway.http._security import (
    EXPOSED_HEADERS,
    HttpSecurity,
    body_too_large_message,
    cors_config,
)

__all__ = [
    "CONTENT_TYPE",
    "EXPOSED_HEADERS",
    "OPS_HANDLERS",
    "PUBLIC_PATHS",
    "AccessLog",
    "AccessPolicy",
    "AuthGuard",
    "HostRule",
    "HttpSecurity",
    "Metrics",
    "RedactCredentials",
    "RequestRecord",
    "body_too_large_message",
    "collect_body",
    "cors_config",
    "create_app",
    "credential_of",
    "describe_loaded",
    "exposure_warning",
    "is_loopback",
    "last_stats",
    "loaded_engines",
    "outcome_of",
    "parse_body",
    "parse_keys",
    "prometheus_metrics",
    "provide_record",
    "read_key_file",
    "record_failure",
    "redact_query",
    "sse_events",
]
