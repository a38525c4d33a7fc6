"""routes.yaml: schema, loading with precise errors, and resolving a request into a Plan.

Pure apart from reading the file: no engines, no network.
"""

from router._errors import (
    BadRequestError,
    ConfigError,
    ContextLengthExceededError,
    DeviceUnavailableError,
    EngineError,
    OverloadedError,
    RequestError,
    ServiceUnavailableError,
    UnknownTaskError,
    ZestError,
)
from router._load import LoadedRoutes, load_routes, parse_routes
from router._placement import DEVICE_ORDER, Device, Placement, describe_devices, parse_device
from router._plan import Attempt, Plan, find_route, plan_route
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
    "DEVICE_ORDER",
    "Attempt",
    "BadRequestError",
    "ConfigError",
    "ContextLengthExceededError",
    "Device",
    "DeviceUnavailableError",
    "EngineError",
    "LlamaCppModel",
    "LlamaCppOptions",
    "LoadedRoutes",
    "ModelConfig",
    "OnnxGenaiModel",
    "OnnxGenaiOptions",
    "OverloadedError",
    "Placement",
    "Plan",
    "RequestError",
    "RouteConfig",
    "RoutesFile",
    "Sampling",
    "ServiceUnavailableError",
    "UnknownTaskError",
    "ZestError",
    "describe_devices",
    "find_route",
    "load_routes",
    "parse_device",
    "parse_routes",
    "plan_route",
]
