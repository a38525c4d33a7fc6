"""routes.yaml: schema, loading with precise errors, and resolving a request into a Plan.

Pure apart from reading the file: no engines, no network.
"""

from zest.router._capabilities import Capabilities, Needs
from zest.router._clients import (
    ALL_TASKS,
    RESERVED_CLIENT_NAMES,
    ClientConfig,
    ClientKeys,
    ClientLimits,
    key_digest,
    resolve_client_keys,
)
from zest.router._decide import (
    Decision,
    ModelResult,
    Pending,
    RouteInput,
    ascii_fold,
    decide,
)
from zest.router._floor import route_for_client
from zest.router._load import LoadedRoutes, check_routes, load_routes, parse_routes
from zest.router._placement import (
    REMOTE_DEVICE,
    Device,
    Placement,
    parse_device,
)
from zest.router._plan import (
    STRICT_REASON,
    Attempt,
    ModelTraits,
    Plan,
    find_route,
    peak_priority,
    plan_route,
)
from zest.router._rules import (
    Classify,
    Condition,
    Rule,
    SimilarTo,
)
from zest.router._rules_check import (
    condition_routes,
    phrases_of,
    rule_warnings,
    tightened,
    walk_conditions,
)
from zest.router._rules_text import condition_text, rules_summary
from zest.router._schema import (
    ENGINE_MODELS,
    JsonSchemaFormat,
    LlamaCppModel,
    LlamaCppOptions,
    ModelConfig,
    OnnxGenaiModel,
    OnnxGenaiOptions,
    RemoteModel,
    ResponseCache,
    ResponseFormat,
    RouteConfig,
    RoutesFile,
    RouteTimeouts,
    Slo,
    Speculation,
    format_duration,
    kind_of,
    parse_seconds,
)
from zest.router._schema_limits import (
    SCHEMA_LIMITS,
    BoundedJsonSchema,
    check_json_schema,
    check_json_schemas,
)
from zest.router._schema_refs import relocated

__all__ = [
    "ALL_TASKS",
    "ENGINE_MODELS",
    "REMOTE_DEVICE",
    "RESERVED_CLIENT_NAMES",
    "SCHEMA_LIMITS",
    "STRICT_REASON",
    "Attempt",
    "BoundedJsonSchema",
    "Capabilities",
    "Classify",
    "ClientConfig",
    "ClientKeys",
    "ClientLimits",
    "Condition",
    "Decision",
    "Device",
    "JsonSchemaFormat",
    "LlamaCppModel",
    "LlamaCppOptions",
    "LoadedRoutes",
    "ModelConfig",
    "ModelResult",
    "ModelTraits",
    "Needs",
    "OnnxGenaiModel",
    "OnnxGenaiOptions",
    "Pending",
    "Placement",
    "Plan",
    "RemoteModel",
    "ResponseCache",
    "ResponseFormat",
    "RouteConfig",
    "RouteInput",
    "RouteTimeouts",
    "RoutesFile",
    "Rule",
    "SimilarTo",
    "Slo",
    "Speculation",
    "ascii_fold",
    "check_json_schema",
    "check_json_schemas",
    "check_routes",
    "condition_routes",
    "condition_text",
    "decide",
    "find_route",
    "format_duration",
    "key_digest",
    "kind_of",
    "load_routes",
    "parse_device",
    "parse_routes",
    "parse_seconds",
    "peak_priority",
    "phrases_of",
    "plan_route",
    "relocated",
    "resolve_client_keys",
    "route_for_client",
    "rule_warnings",
    "rules_summary",
    "tightened",
    "walk_conditions",
]
