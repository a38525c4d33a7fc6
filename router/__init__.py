"""routes.yaml: schema, loading with precise errors, and resolving a request into a Plan.

Pure apart from reading the file: no engines, no network.
"""

from zest.router._load import LoadedRoutes, load_routes, parse_routes
from zest.router._placement import (
    DEVICE_ORDER,
    REMOTE_DEVICE,
    Device,
    Placement,
    describe_devices,
    parse_device,
)
from zest.router._plan import STRICT_REASON, Attempt, ModelTraits, Plan, find_route, plan_route
from zest.router._schema import (
    DEVICES,
    ENGINE_MODELS,
    ENGINES,
    REMOTE_ENGINE,
    ContextPolicy,
    FallbackEntry,
    Lifecycle,
    LlamaCppModel,
    LlamaCppOptions,
    ModelConfig,
    OnnxGenaiModel,
    OnnxGenaiOptions,
    RemoteModel,
    RemoteTimeouts,
    RouteConfig,
    RoutesFile,
    RouteTimeouts,
    Sampling,
    kind_of,
)

__all__ = [
    "DEVICES",
    "DEVICE_ORDER",
    "ENGINES",
    "ENGINE_MODELS",
    "REMOTE_DEVICE",
    "REMOTE_ENGINE",
    "STRICT_REASON",
    "Attempt",
    "ContextPolicy",
    "Device",
    "FallbackEntry",
    "Lifecycle",
    "LlamaCppModel",
    "LlamaCppOptions",
    "LoadedRoutes",
    "ModelConfig",
    "ModelTraits",
    "OnnxGenaiModel",
    "OnnxGenaiOptions",
    "Placement",
    "Plan",
    "RemoteModel",
    "RemoteTimeouts",
    "RouteConfig",
    "RouteTimeouts",
    "RoutesFile",
    "Sampling",
    "describe_devices",
    "find_route",
    "kind_of",
    "load_routes",
    "parse_device",
    "parse_routes",
    "plan_route",
]
