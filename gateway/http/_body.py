"""Reading a request body into a typed request, with OpenAI-style errors that say what to fix."""

from __future__ import annotations

import difflib
import json
import logging
from typing import Any, TypeVar

from litestar import Request
from pydantic import BaseModel, ValidationError

from zest.errors import BadRequestError
from zest.gateway.serving import (
    IGNORED_FIELDS,
    EmbeddingRequest,
    ResponsesRequest,
    SamplingFields,
)

__all__ = ["IGNORED", "REQUESTED_TASK", "parse_body"]

log = logging.getLogger("zest.gateway")

# request.state key: the task (or model) a body names, read by whoever reports the request.
REQUESTED_TASK = "zest_requested_task"
# request.state key: the OpenAI fields the body sent that change nothing here (x-zest-ignored).
IGNORED = "zest_ignored_fields"

Body = TypeVar("Body", bound=BaseModel)


async def parse_body(request: Request[Any, Any, Any], schema: type[Body]) -> Body:
    raw = await request.body()
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequestError(
            f"the request body is not valid JSON: {exc}: send a JSON object"
        ) from None
    except RecursionError:  # a body nested thousands deep: no request needs that
        raise _too_deep() from None
    if not isinstance(data, dict):
        raise BadRequestError("the request body must be a JSON object")
    try:
        return _validated(request, schema, data)
    except RecursionError:  # deep enough to parse, too deep to walk or validate
        raise _too_deep() from None


def _too_deep() -> BadRequestError:
    return BadRequestError(
        "the request body nests too deeply: send a JSON object nested at most a few hundred levels"
    )


def _validated(request: Request[Any, Any, Any], schema: type[Body], data: dict[str, Any]) -> Body:
    if (where := _lone_surrogate(data)) is not None:
        raise BadRequestError(
            f"{where or 'the body'}: holds a lone UTF-16 surrogate (such as \\ud800), which is "
            "not text: send valid Unicode",
            param=where or None,
        )
    if isinstance(data.get("model"), str):  # what the body asks for, even if it is invalid
        request.state[REQUESTED_TASK] = data["model"]
    if issubclass(schema, SamplingFields | EmbeddingRequest | ResponsesRequest):
        request.state[IGNORED] = _drop_ignored(data)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc, schema) from None


def _lone_surrogate(value: Any, path: str = "") -> str | None:
    """The key path of the first string JSON escapes made into invalid Unicode, if any."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        found = _lone_surrogate(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def _drop_ignored(data: dict[str, Any]) -> list[str]:
    """Take out the fields that change nothing for a local model; return their names."""
    ignored = [name for name in IGNORED_FIELDS if name in data]
    for name in ignored:
        del data[name]
    if ignored:
        log.debug("ignored fields that change nothing here: %s", ", ".join(ignored))
    return ignored


def _validation_error(exc: ValidationError, schema: type[BaseModel]) -> BadRequestError:
    errors = exc.errors()
    # A misspelt key also makes its required key "missing": name the misspelling first.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    param = ".".join(str(p) for p in err["loc"]) or None
    if err["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(err["loc"][-1]), list(schema.model_fields), n=1)
        hint = f"did you mean {close[0]!r}?" if close else "remove it (the README lists them)"
        message = f"unknown parameter: {hint}"
    elif err["type"] == "missing":
        message = "missing required parameter"
    else:
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] != "value_error":
            message += f", got {err['input']!r}"
    return BadRequestError(f"{param}: {message}" if param else message, param=param)
