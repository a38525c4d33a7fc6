"""Reading a request body into a typed request, with OpenAI-style errors that say what to fix."""

from __future__ import annotations

import json
import logging
from typing import Any, TypeVar

from litestar import Request
from pydantic import BaseModel, ValidationError

from zest.errors import BadRequestError, UnsupportedMediaTypeError, clipped, shown
from zest.gateway.http._body_errors import validation_error
from zest.gateway.serving import (
    IGNORED_FIELDS,
    EmbeddingRequest,
    ResponsesRequest,
    SamplingFields,
)

__all__ = ["BODY", "IGNORED", "REQUESTED_TASK", "STREAMS", "parse_body", "read_json", "takes"]

log = logging.getLogger("zest.gateway")

# request.state key: the task (or model) a body names, read by whoever reports the request.
REQUESTED_TASK = "zest_requested_task"
# request.state key: the OpenAI fields the body sent that change nothing here (x-zest-ignored).
IGNORED = "zest_ignored_fields"
# Handler opt keys: the model its body is read into, and whether it may answer with a stream
# (what the OpenAPI document says of it).
BODY = "zest_body"
STREAMS = "zest_streams"

Body = TypeVar("Body", bound=BaseModel)

# Digits an integer of a body may have: more than any field takes (a seed is at most 20), and
# far below the point where reading one costs (Python refuses 4300 with its own advice).
MAX_DIGITS = 64
# What the client should send for a value of the wrong type (the pydantic error type).


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


def takes(schema: type[BaseModel], *, streams: bool = False) -> dict[str, Any]:
    """A handler's opt declaring its body (`parse_body(request, schema)` reads it)."""
    return {BODY: schema, STREAMS: streams}


async def parse_body(request: Request[Any, Any, Any], schema: type[Body]) -> Body:
    """The body as `schema`; a BadRequestError (400) saying what to fix when it is not one,
    UnsupportedMediaTypeError (415) when it is not sent as JSON."""
    _check_media_type(request.headers.get("content-type"))
    data = read_json(await request.body())
    if not isinstance(data, dict):
        raise BadRequestError("the request body must be a JSON object")
    try:
        return _validated(request, schema, data)
    except RecursionError:  # deep enough to parse, too deep to walk or validate
        raise _too_deep() from None


def _check_media_type(content_type: str | None) -> None:
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


def _validated(request: Request[Any, Any, Any], schema: type[Body], data: dict[str, Any]) -> Body:
    if (where := _lone_surrogate(data)) is not None:
        raise BadRequestError(
            f"{clipped(where or 'the body')}: holds a lone UTF-16 surrogate (such as \\ud800), "
            "which is not text: send valid Unicode",
            param=clipped(where) if where else None,
        )
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
