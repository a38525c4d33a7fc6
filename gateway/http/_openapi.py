"""GET /v1/openapi.json: the API as an OpenAPI 3.1 document, built from the app's own routes.

Litestar does not see the request bodies (handlers read them with parse_body, for zest's own
error messages), so the document is built here: paths, methods, path and query parameters from
the routes; each body's JSON Schema from the pydantic model its handler declares with
`takes(...)` (the very model that validates it); the OpenAI error shape for every error.
"""

from __future__ import annotations

from typing import Any

from litestar import Litestar, Request, get
from litestar.handlers import HTTPRouteHandler
from litestar.routes import HTTPRoute
from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import models_json_schema

from zest.gateway.http._auth import PUBLIC_PATHS
from zest.gateway.serving import IGNORED_FIELDS, EmbeddingRequest, ResponsesRequest, SamplingFields

__all__ = ["STREAMS", "openapi_document", "openapi_json"]

# A handler's opt when it may answer with a stream (what the document says of it).
STREAMS = {"zest_streams": True}

PREFIX = "/v1"  # the document's paths are relative to each server: /v1 and /api/v1
_REF = "#/components/schemas/{model}"
# Handler parameters Litestar fills itself: never query parameters.
_RESERVED = frozenset({"request", "state", "scope", "headers", "cookies", "query", "data", "body"})
_ERROR = {"$ref": "#/components/schemas/Error"}
_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "OpenAI's error shape: the message says what to send instead.",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
# One server-sent event of a streamed answer ("stream": true): JSON chunks in `data`, ending
# with data: [DONE] (the Responses API: response.completed), or an error event.
_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
}
_ERRORS = {
    "400": "a bad request: invalid JSON, a wrong type, an unknown field (the message names it)",
    "401": "no API key, or an unknown one (when the server has keys)",
    "404": "no such task, model or endpoint",
    "500": "an internal error (the server log has the details)",
}
_BODY_ERRORS = {
    "413": "the body is larger than ZEST_MAX_BODY_BYTES",
    "415": "the body is not sent as Content-Type: application/json",
}
_GENERATION_ERRORS = {
    "429": "the model's queue is full: retry after Retry-After seconds",
    "502": "the upstream refused the request",
    "503": "no device or model can serve the route now",
    "504": "the route's first-token or total timeout ran out",
}


@get("/openapi.json", sync_to_thread=False)
def openapi_json(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """This API as an OpenAPI 3.1 document (the same for /v1 and /api/v1)."""
    return openapi_document(request.app)


def openapi_document(app: Litestar) -> dict[str, Any]:
    """The document for `app`'s routes under /v1 (their /api/v1 twins are the second server)."""
    handlers = [
        (route, handler)
        for route in app.routes
        if isinstance(route, HTTPRoute) and route.path.startswith(f"{PREFIX}/")
        for handler in route.route_handlers
        if handler.include_in_schema is not False and handler.http_methods != {"OPTIONS"}
    ]
    schemas = _body_schemas({model for _, handler in handlers if (model := _body(handler))})
    paths: dict[str, dict[str, Any]] = {}
    for route, handler in handlers:
        path = route.path_format.removeprefix(PREFIX)
        for method in sorted(handler.http_methods):
            paths.setdefault(path, {})[method.lower()] = _operation(route, handler, method)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "zest",
            "version": "1",
            "description": "A routing gateway for local LLMs: OpenAI-compatible and task "
            "endpoints (see the README's HTTP API section).",
        },
        "servers": [{"url": PREFIX}, {"url": "/api/v1"}],
        "paths": paths,
        "components": {
            "schemas": {"Error": _ERROR_SCHEMA, **schemas},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
            },
        },
        # Keys are needed only when the server has some (ZEST_API_KEYS): {} says so.
        "security": [{"bearer": []}, {"apiKey": []}, {}],
    }


def _body(handler: HTTPRouteHandler) -> type[BaseModel] | None:
    data = handler.parsed_data_field
    return data.annotation if data is not None else None


def _body_schemas(models: set[type[BaseModel]]) -> dict[str, Any]:
    """The JSON Schema of each body model and of the models they use, by name."""
    ordered = sorted(models, key=lambda model: model.__name__)
    top, defs = models_json_schema([(model, "validation") for model in ordered], ref_template=_REF)
    schemas: dict[str, Any] = dict(defs.get("$defs", {}))
    for model in ordered:
        if issubclass(model, SamplingFields | EmbeddingRequest | ResponsesRequest):
            schema = schemas[model.__name__]
            for name, why in IGNORED_FIELDS.items():  # accepted, changing nothing
                schema["properties"][name] = {"description": f"accepted and ignored: {why}"}
    del top
    return schemas


def _operation(route: HTTPRoute, handler: HTTPRouteHandler, method: str) -> dict[str, Any]:
    doc = (handler.fn.__doc__ or "").strip()
    operation: dict[str, Any] = {
        "operationId": f"{method.lower()}_{handler.fn.__name__}",
        "summary": doc.split("\n\n")[0].replace("\n", " ") if doc else handler.fn.__name__,
        "responses": _responses(route, handler, method),
    }
    if parameters := _parameters(route, handler):
        operation["parameters"] = parameters
    if (model := _body(handler)) is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": _REF.format(model=model.__name__)}}
            },
        }
    if route.path in PUBLIC_PATHS:
        operation["security"] = []  # the probes never need a key
    return operation


def _parameters(route: HTTPRoute, handler: HTTPRouteHandler) -> list[dict[str, Any]]:
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in route.path_parameters
    ]
    skip = _RESERVED | set(route.path_parameters) | set(handler.resolve_dependencies())
    for name, field in handler.parsed_fn_signature.parameters.items():
        if name in skip:
            continue
        schema = TypeAdapter(field.annotation).json_schema()
        if field.has_default:
            schema["default"] = field.default
        parameters.append(
            {"name": name, "in": "query", "required": not field.has_default, "schema": schema}
        )
    return parameters


def _responses(route: HTTPRoute, handler: HTTPRouteHandler, method: str) -> dict[str, Any]:
    if method == "HEAD":  # a probe's status, no body
        return {"200": {"description": "the answer GET would give, without its body"}}
    ok: dict[str, Any] = {"application/json": {"schema": {"type": "object"}}}
    if handler.media_type.startswith("text/plain"):
        ok = {handler.media_type: {"schema": {"type": "string"}}}
    if handler.opt.get("zest_streams"):
        ok["text/event-stream"] = {"schema": _EVENT}
    responses: dict[str, Any] = {"200": {"description": "the answer", "content": ok}}
    errors = dict(_ERRORS)
    if _body(handler) is not None:
        errors |= _BODY_ERRORS
    if handler.opt.get("zest_streams"):
        errors |= _GENERATION_ERRORS
    if handler.opt.get("admin"):
        errors["403"] = "an admin route: it needs the admin key (ZEST_ADMIN_KEY)"
    for status, why in sorted(errors.items()):
        responses[status] = {
            "description": why,
            "content": {"application/json": {"schema": _ERROR}},
        }
    if route.path.endswith("/ready"):
        responses["503"] = {
            "description": "not ready yet (loading) or the warm start failed",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    if route.path.endswith("/admin/reload"):
        responses["422"] = {
            "description": "the routes file was rejected (the errors listed)",
            "content": {"application/json": {"schema": _ERROR}},
        }
    responses["default"] = {
        "description": "another error, in OpenAI's shape",
        "content": {"application/json": {"schema": _ERROR}},
    }
    return responses
