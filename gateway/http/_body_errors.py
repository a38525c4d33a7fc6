"""A body's validation errors in the client's words: the key path as the client wrote it, and
what to send instead.

pydantic names union members in its paths (`messages.0.content.list[TextPart].1`) and reports
one error per member it tried (`stop.str`, `stop.list[str]`); here the path keeps only the
client's keys and indices, and the members' errors become one "send a string or a list".
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from zest.errors import BadRequestError, clipped, shown

__all__ = ["validation_error"]

# What to send, by the kind of value a member expected.
_EXPECTED = {
    "bool_type": "true or false",
    "int_type": "a whole number",
    "float_type": "a number",
    "string_type": "a string",
    "list_type": "a list (a JSON array)",
    "tuple_type": "a list (a JSON array)",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}
_TYPE_NAMES = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


def _client_path(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """The key path without the union members pydantic inserts (`list[TextPart]`, `str`,
    `ToolChoiceFunction`, `literal['auto', ...]`): keys are snake_case, members are not. The
    last part is the client's own key whatever its spelling (an unknown `Model`)."""
    *inner, last = loc or ("",)

    def member(part: int | str) -> bool:
        text = str(part)
        return isinstance(part, str) and (
            "[" in text or "(" in text or text[:1].isupper() or text in _TYPE_NAMES
        )

    kept = tuple(part for part in inner if not member(part))
    tag = isinstance(last, str) and ("[" in last or last in _TYPE_NAMES)  # `stop.str`
    return kept if tag else (*kept, last)


def validation_error(exc: ValidationError, schema: type[BaseModel]) -> BadRequestError:
    errors = exc.errors()
    # A misspelt key also makes its required key "missing": name the misspelling first.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    path = _client_path(err["loc"])
    message = _part_of_another_kind(err, path, schema)
    if message is not None:
        path = path[:-1]  # the part, not the key that gave it away
    else:
        message = _message(err, schema, _siblings(errors, path))
    param = clipped(".".join(str(p) for p in path)) or None
    return BadRequestError(f"{param}: {message}" if param else message, param=param)


def _siblings(errors: list[ErrorDetails], path: tuple[int | str, ...]) -> list[ErrorDetails]:
    """The errors at the same client path: one per union member pydantic tried."""
    return [e for e in errors if _client_path(e["loc"]) == path]


def _message(err: ErrorDetails, schema: type[BaseModel], siblings: list[ErrorDetails]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(str(err["loc"][-1]), list(schema.model_fields), n=1)
        remove = f"remove it ({getattr(schema, 'DOCS', 'docs/http-api.md')} lists them)"
        return f"unknown parameter: {f'did you mean {close[0]!r}?' if close else remove}"
    if kind == "missing":
        return "missing required parameter"
    expected = list(dict.fromkeys(_EXPECTED[e["type"]] for e in siblings if e["type"] in _EXPECTED))
    if len(expected) > 1:  # a union: every member's kind
        return f"send {' or '.join(expected)}, got {shown(err['input'])}"
    kind, text = _wrong_value(kind, err["msg"], err["input"])
    if kind == "value_error":
        return text
    text += f", got {shown(err['input'])}"
    return f"{text}: send {_EXPECTED[kind]}" if kind in _EXPECTED else text


# What content parts a body takes, said when a part has a key of none of them (a body model's
# PARTS, for another dialect's blocks).
_PARTS = (
    'send text parts ({"type": "text", "text": "..."}), or image_url parts for a route whose '
    "model reads images"
)


def _part_of_another_kind(
    err: ErrorDetails, path: tuple[int | str, ...], schema: type[BaseModel]
) -> str | None:
    """A content part with a key of another kind of part: say so, not its keys."""
    if err["type"] != "extra_forbidden" or len(path) < 3 or path[-3] != "content":
        return None
    parts = getattr(schema, "PARTS", _PARTS)
    return f"a part with {shown(path[-1])} is not one zest takes: {parts}"


def _wrong_value(kind: str, message: str, value: Any) -> tuple[str, str]:
    """The error's kind and message, telling a typo ("hot") from a quoted number ("0.5")."""
    if kind == "float_type" and isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return (
                "float_parsing",
                "Input should be a valid number, unable to parse string as a number",
            )
        return kind, "Input should be a number, not a string"
    return kind, message.removeprefix("Value error, ")
