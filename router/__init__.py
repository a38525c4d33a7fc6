"""routes.yaml: schema, loading with precise errors, and resolving a request into a Plan.

Pure apart from reading the file: no engines, no network.
"""

from router._errors import (
    BadRequestError,
    ConfigError,
    ContextLengthExceededError,
    EngineError,
    RequestError,
    ServiceUnavailableError,
    UnknownTaskError,
    ZestError,
)
from router._load import LoadedRoutes, load_routes, parse_routes
from router._plan import Attempt, Plan, resolve
from router._schema import (
    DEVICES,
    LlamaCppModel,
    LlamaCppOptions,
    ModelConfig,
    OnnxGenaiModel,
    OnnxGenaiOptions,
    RouteConfig,
    RoutesFile,
    Sampling,
)

__all__ = [
    "DEVICES",
    "Attempt",
    "BadRequestError",
    "ConfigError",
    "ContextLengthExceededError",
    "EngineError",
    "LlamaCppModel",
    "LlamaCppOptions",
    "LoadedRoutes",
    "ModelConfig",
    "OnnxGenaiModel",
    "OnnxGenaiOptions",
    "Plan",
    "RequestError",
    "RouteConfig",
    "RoutesFile",
    "Sampling",
    "ServiceUnavailableError",
    "UnknownTaskError",
    "ZestError",
    "load_routes",
    "parse_routes",
    "resolve",
]
