"""Reading a request body into a typed request, with OpenAI-style errors that say what to fix.

A handler declares its body once, as Litestar does: a pydantic `data: ChatRequest` parameter.
JsonBodyPlugin gives every such parameter the JsonBody reader (a Litestar DTO), so the body is
read here, strictly (UTF-8, JSON as JSON defines it, unknown fields refused with a did-you-mean),
and Litestar's OpenAPI document shows the model that validates it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Generator
from typing import Any, NoReturn, TypeVar

from litestar.connection import ASGIConnection
from litestar.dto import AbstractDTO, DTOFieldDefinition
from litestar.openapi.spec import Reference, Schema
from litestar.plugins import SerializationPlugin
from litestar.typing import FieldDefinition
from pydantic import BaseModel, ValidationError

from zest.errors import BadRequestError, UnsupportedMediaTypeError, clipped, shown
from zest.gateway.http._body_errors import validation_error
from zest.gateway.serving import (
    IGNORED_FIELDS,
    EmbeddingRequest,
    ResponsesRequest,
    SamplingFields,
)

__all__ = [
    "IGNORED",
    "REQUESTED_TASK",
    "JsonBody",
    "JsonBodyPlugin",
    "check_media_type",
    "read_body",
    "read_empty_body",
    "read_json",
    "refuse_lone_surrogates",
]

log = logging.getLogger("zest.gateway")

# request.state key: the task (or model) a body names, read by whoever reports the request.
REQUESTED_TASK = "zest_requested_task"
# request.state key: the OpenAI fields the body sent that change nothing here (x-zest-ignored).
IGNORED = "zest_ignored_fields"

Body = TypeVar("Body", bound=BaseModel)

# Digits an integer of a body may have: more than any field takes (a seed is at most 20), and
# far below the point where reading one costs (Python refuses 4300 with its own advice).
MAX_DIGITS = 64


class _NotJson(ValueError):
    """A body the JSON module reads but JSON does not allow (NaN), or a number too long."""


def _constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON number: send a finite number")


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_DIGITS:
        raise _NotJson(
            f"an integer of {len(digits.lstrip('-'))} digits: send at most {MAX_DIGITS} digits"
        )
    return int(digits)


def read_json(raw: bytes) -> Any:
    """The body as JSON, strictly: UTF-8 (JSON's encoding between systems: Python would guess
    UTF-16 or 32 from the bytes), no NaN or Infinity, and integers of at most MAX_DIGITS
    digits. Raises BadRequestError saying what to send."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequestError(
            f"the request body is not valid JSON: it is not UTF-8 ({exc}): send a JSON object "
            "in UTF-8"
        ) from None
    try:
        return json.loads(text, parse_constant=_constant, parse_int=_integer)
    except _NotJson as exc:
        raise BadRequestError(f"the request body is not valid JSON: {exc}") from None
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise BadRequestError(
            f"the request body is not valid JSON: {exc}: send a JSON object"
        ) from None
    except RecursionError:  # a body nested thousands deep: no request needs that
        raise _too_deep() from None


class JsonBody(AbstractDTO[Body]):
    """Litestar's reader of a handler's pydantic `data`: `read_body` with the request."""

    def decode_bytes(self, value: bytes) -> Body:
        return read_body(self.asgi_connection, value, self.model_type)

    def decode_builtins(self, value: dict[str, Any]) -> Body:
        raise TypeError("a body is read from its bytes, never from a form")

    def data_to_encodable_type(self, data: Body | Collection[Body]) -> Any:
        raise TypeError("JsonBody reads request bodies; answers are encoded by Litestar")

    @classmethod
    def create_for_field_definition(
        cls, field_definition: FieldDefinition, handler_id: str, backend_cls: Any = None
    ) -> None:
        """Nothing to build: the pydantic model itself reads the body (no transfer model)."""

    @classmethod
    def create_openapi_schema(
        cls, field_definition: FieldDefinition, handler_id: str, schema_creator: Any
    ) -> Reference | Schema:
        schema: Reference | Schema = schema_creator.for_field_definition(
            FieldDefinition.from_annotation(cls.model_type)
        )
        return schema

    @classmethod
    def generate_field_definitions(
        cls, model_type: type[Any]
    ) -> Generator[DTOFieldDefinition, None, None]:
        yield from ()

    @classmethod
    def detect_nested_field(cls, field_definition: FieldDefinition) -> bool:
        return False


class JsonBodyPlugin(SerializationPlugin):
    """Every handler parameter `data: SomeModel` (a pydantic model) is read by JsonBody."""

    def supports_type(self, field_definition: FieldDefinition) -> bool:
        return field_definition.name == "data" and field_definition.is_subclass_of(BaseModel)

    def create_dto_for_type(self, field_definition: FieldDefinition) -> type[AbstractDTO[Any]]:
        return JsonBody[field_definition.annotation]  # type: ignore[name-defined]


def read_body(
    connection: ASGIConnection[Any, Any, Any, Any], raw: bytes, schema: type[Body]
) -> Body:
    """The body as `schema`; a BadRequestError (400) saying what to fix when it is not one,
    UnsupportedMediaTypeError (415) when it is not sent as JSON."""
    check_media_type(connection.headers.get("content-type"))
    data = read_json(raw)
    if not isinstance(data, dict):
        raise BadRequestError("the request body must be a JSON object")
    try:
        return _validated(connection, schema, data)
    except RecursionError:  # deep enough to parse, too deep to walk or validate
        raise _too_deep() from None


def read_empty_body(connection: ASGIConnection[Any, Any, Any, Any]) -> NoReturn:
    """Raise what reading an empty body says (Litestar calls no reader when none was sent):
    a 415 when it is not declared JSON, else "not valid JSON"."""
    check_media_type(connection.headers.get("content-type"))
    read_json(b"")
    raise AssertionError("an empty body is never JSON")


def check_media_type(content_type: str | None) -> None:
    """A body must say it is JSON: a browser page may send text/plain (or no type) to any
    origin without asking first (no CORS preflight), but never application/json."""
    media = (content_type or "").partition(";")[0].strip().lower()
    if media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    ):
        return
    got = shown(content_type) if content_type is not None else "none"
    raise UnsupportedMediaTypeError(
        f"the request body must be JSON: send 'Content-Type: application/json' (got {got})"
    )


def _too_deep() -> BadRequestError:
    return BadRequestError(
        "the request body nests too deeply: send a JSON object nested at most a few hundred levels"
    )


def _validated(
    request: ASGIConnection[Any, Any, Any, Any], schema: type[Body], data: dict[str, Any]
) -> Body:
    refuse_lone_surrogates(data)
    if isinstance(data.get("model"), str):  # what the body asks for, even if it is invalid
        request.state[REQUESTED_TASK] = data["model"]
    if issubclass(schema, SamplingFields | EmbeddingRequest | ResponsesRequest):
        request.state[IGNORED] = _drop_ignored(data, kept=set(schema.model_fields))
    try:
        body = schema.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, schema) from None
    if isinstance(body, ResponsesRequest):  # fields it declares whose value changes nothing
        request.state[IGNORED] = [*request.state[IGNORED], *body.ignored()]
    return body


def refuse_lone_surrogates(data: Any) -> None:
    """A BadRequestError naming the first string (or key) JSON escapes made into invalid
    Unicode, if any (a body nested too deeply to walk: that one)."""
    try:
        where = _lone_surrogate(data)
    except RecursionError:
        raise _too_deep() from None
    if where is not None:
        raise BadRequestError(
            f"{clipped(where or 'the body')}: holds a lone UTF-16 surrogate (such as \\ud800), "
            "which is not text: send valid Unicode",
            param=clipped(where) if where else None,
        )


def _lone_surrogate(value: Any, path: str = "") -> str | None:
    """The key path of the first string (or key) JSON escapes made into invalid Unicode."""
    if isinstance(value, str):
        return None if _is_text(value) else path
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        if isinstance(key, str) and not _is_text(key):  # the key itself: name where it is
            return f"{path}.<key>" if path else "<key>"
        found = _lone_surrogate(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _drop_ignored(data: dict[str, Any], kept: set[str]) -> list[str]:
    """Take out the fields that change nothing for a local model; return their names. One the
    body model declares (`metadata`, which routing rules read) stays: the request path takes
    it off the list if a rule read it."""
    ignored = [name for name in IGNORED_FIELDS if name in data]
    for name in ignored:
        if name not in kept:
            del data[name]
    if ignored:
        log.debug("ignored fields that change nothing here: %s", ", ".join(ignored))
    return ignored
