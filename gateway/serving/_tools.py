"""Tool calling on any local model: the tools described in a system message, the answer
constrained to JSON that either calls tools or responds (one JSON Schema, enforced by the
engines' grammar), then read back into OpenAI's `tool_calls`.

The constrained form is what makes `required` and named calls always parse and validate against
each tool's parameters, whatever the model's size (llama.cpp's server calls it the generic
format). History in OpenAI's shape (assistant `tool_calls`, `tool` results) is written back into
the same form, so the model sees its earlier calls as it made them.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from zest.errors import BadRequestError, shown
from zest.router import (
    BoundedJsonSchema,
    JsonSchemaFormat,
    ResponseFormat,
    check_json_schemas,
    relocated,
)

__all__ = [
    "FunctionCall",
    "NamedToolChoice",
    "Tool",
    "ToolAnswer",
    "ToolCall",
    "ToolUse",
    "tool_use_for",
]

# Calls one answer may make: small models repeat a call when the array is unbounded.
MAX_CALLS = 4
# How a constrained answer begins, and what separates its calls: read back when it was cut.
_CALLS_HEAD = re.compile(r'\s*\{\s*"tool_calls"\s*:\s*\[\s*')
_RESPONSE_HEAD = re.compile(r'\s*\{\s*"response"\s*:\s*')
_NEXT_CALL = re.compile(r"\s*,\s*")
# The longest tail a cut JSON string can end in that is no text yet: a partial \uXXXX escape.
_PARTIAL_ESCAPE = 6


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Function(_Body):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: BoundedJsonSchema = Field(default_factory=lambda: {"type": "object"})
    strict: StrictBool | None = None


class Tool(_Body):
    type: Literal["function"]
    function: Function


class FunctionName(_Body):
    name: str


class NamedToolChoice(_Body):
    type: Literal["function"]
    function: FunctionName


class FunctionCall(_Body):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(_Body):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


@dataclass(frozen=True)
class ToolAnswer:
    """What a constrained answer said: tool calls, or content. An answer cut short (`cut`:
    max_tokens, a stop sequence) holds what it completed: its whole calls, or the text of its
    response so far; its finish_reason stays the engine's."""

    content: str | None
    calls: tuple[dict[str, Any], ...] = ()
    cut: bool = False

    @property
    def finish_reason(self) -> str | None:
        return "tool_calls" if self.calls and not self.cut else None


@dataclass(frozen=True)
class ToolUse:
    """The tools a request may call and how: the system text, the constraint, the reading."""

    tools: tuple[Tool, ...]
    choice: Literal["auto", "required"] | str  # a str other than those: the one named tool
    # The client's own response_format for a direct answer (None: free text).
    answer_schema: dict[str, Any] | None = None
    # parallel_tool_calls: more than one call per answer.
    parallel: bool = True
    # The Responses API's max_tool_calls: at most this many calls per answer.
    max_calls: int | None = None
    # Where the request sent each tool's parameters ({index}: the tool's) and its own answer
    # format: what a refusal names (chat and the Responses API spell them differently).
    parameters_at: str = "tools.{index}.function.parameters"
    answer_at: str = "response_format.json_schema.schema"

    def check(self) -> None:
        """The one schema the answer is constrained to, bounded as the client wrote its parts:
        each part's depth is its own (the envelope's levels are zest's), the counts grammars
        grow with are counted over all of them. A 400 naming the part, before anything runs."""
        parts = [
            (self.parameters_at.format(index=index), tool.function.parameters)
            for index, tool in enumerate(self.tools)
            if tool in self.callable()
        ]
        if self.choice == "auto" and self.answer_schema is not None:
            parts.append((self.answer_at, self.answer_schema))
        try:
            check_json_schemas(parts)
        except ValueError as exc:
            raise BadRequestError(
                f"{exc} (the tools' parameters and the answer's format are counted together: "
                "they make one grammar)",
                param="tools",
            ) from None

    def system_text(self) -> str:
        listed = [
            {
                "name": t.function.name,
                "description": t.function.description or "",
                "parameters": t.function.parameters,
            }
            for t in self.callable()
        ]
        how = {
            "auto": 'or, to answer directly, {"response": ...}',
            "required": "(you must call at least one tool)",
        }.get(self.choice, f"(you must call {self.choice})")
        return (
            "You can call these tools:\n"
            f"{json.dumps(listed, ensure_ascii=False)}\n"
            'Answer in JSON: {"tool_calls": [{"name": ..., "arguments": {...}}]} to call tools '
            f"{how}. A tool's result comes back in a later message."
        )

    def callable(self) -> tuple[Tool, ...]:
        if self.choice in ("auto", "required"):
            return self.tools
        return tuple(t for t in self.tools if t.function.name == self.choice)

    def response_format(self) -> ResponseFormat:
        """The answer's JSON Schema, for the engines' grammar. Each tool's parameters keep
        their local `$ref`s, rewritten to where the envelope puts them."""
        tools = self.callable()
        items_at = ("/anyOf/0" if self.choice == "auto" else "") + "/properties/tool_calls/items"
        call_items = [
            {
                "type": "object",
                "properties": {
                    "name": {"const": t.function.name},
                    "arguments": relocated(
                        t.function.parameters,
                        f"{items_at}{f'/anyOf/{i}' if len(tools) > 1 else ''}/properties/arguments",
                    ),
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for i, t in enumerate(tools)
        ]
        calls = {
            "type": "object",
            "properties": {
                "tool_calls": {
                    "type": "array",
                    "items": {"anyOf": call_items} if len(call_items) > 1 else call_items[0],
                    "minItems": 1,
                    "maxItems": self.call_limit(),
                }
            },
            "required": ["tool_calls"],
            "additionalProperties": False,
        }
        schema = calls
        if self.choice == "auto":
            answer = {
                "type": "object",
                "properties": {
                    "response": relocated(
                        self.answer_schema or {"type": "string"}, "/anyOf/1/properties/response"
                    )
                },
                "required": ["response"],
                "additionalProperties": False,
            }
            schema = {"anyOf": [calls, answer]}
        # Not validated again: its parts were, as the client wrote them (`check`); the
        # envelope's own levels would count against the client's depth.
        wrapped = JsonSchemaFormat.model_construct(name="tool_use", json_schema=schema)
        return ResponseFormat.model_construct(type="json_schema", json_schema=wrapped)

    def call_limit(self) -> int:
        limit = MAX_CALLS if self.parallel else 1
        return limit if self.max_calls is None else min(limit, self.max_calls)

    def read(self, text: str) -> ToolAnswer:
        """The answer's calls (OpenAI's shape, new ids) or content. The constrained JSON is
        zest's own envelope: cut short, it is never returned as text (see _cut)."""
        try:
            said = json.loads(text)
        except json.JSONDecodeError:
            return _cut(text)
        if isinstance(said, dict) and isinstance(said.get("tool_calls"), list):
            return ToolAnswer(None, _calls(said["tool_calls"]))
        if isinstance(said, dict) and "response" in said:
            response = said["response"]
            return ToolAnswer(response if isinstance(response, str) else json.dumps(response))
        return ToolAnswer(text)


def _calls(said: list[Any]) -> tuple[dict[str, Any], ...]:
    # The same call twice in one answer asks nothing more (small models repeat).
    unique = {json.dumps(c, sort_keys=True): c for c in said if isinstance(c, dict)}
    return tuple(_call(c) for c in unique.values())


def _cut(text: str) -> ToolAnswer:
    """An answer cut short: the calls it completed, or its response so far (a string's text,
    or the client's format's JSON so far), else nothing."""
    if (head := _CALLS_HEAD.match(text)) is not None:
        return ToolAnswer(None, _calls(_complete_calls(text, head.end())), cut=True)
    if (head := _RESPONSE_HEAD.match(text)) is not None:
        return ToolAnswer(_partial_response(text[head.end() :]), cut=True)
    return ToolAnswer(None, cut=True)


def _complete_calls(text: str, at: int) -> list[Any]:
    decoder, calls = json.JSONDecoder(), list[Any]()
    while True:
        try:
            call, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            return calls  # the call being written when the answer was cut
        calls.append(call)
        separator = _NEXT_CALL.match(text, at)
        if separator is None:
            return calls
        at = separator.end()


def _partial_response(rest: str) -> str | None:
    if not rest.startswith('"'):  # a response in the client's own format: its JSON so far
        return rest.strip() or None
    try:
        whole, _ = json.JSONDecoder().raw_decode(rest)
        return str(whole)  # the string ended; the envelope's closing brace did not come
    except json.JSONDecodeError:
        pass
    for end in range(len(rest), max(len(rest) - _PARTIAL_ESCAPE, 0), -1):
        try:
            text = str(json.loads(rest[:end] + '"'))
        except json.JSONDecodeError:
            continue
        # The first half of a surrogate pair is no text on its own.
        return text[:-1] if text and "\ud800" <= text[-1] <= "\udbff" else text
    return None


def _call(said: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "call_" + secrets.token_hex(12),
        "type": "function",
        "function": {
            "name": str(said.get("name", "")),
            "arguments": json.dumps(said.get("arguments", {}), ensure_ascii=False),
        },
    }


def tool_use_for(
    tools: Sequence[Tool] | None,
    choice: ToolChoice | None,
    answer_schema: dict[str, Any] | None,
    parallel: bool | None = None,
    max_calls: int | None = None,
    *,
    parameters_at: str = "tools.{index}.function.parameters",
    answer_at: str = "response_format.json_schema.schema",
) -> ToolUse | None:
    """The request's tool use (None: no tools, tool_choice none, or no call allowed), its
    schema checked (`parameters_at`, `answer_at`: where the request sent its parts)."""
    use = _tool_use(tools, choice, answer_schema, parallel, max_calls)
    if use is None:
        return None
    use = replace(use, parameters_at=parameters_at, answer_at=answer_at)
    use.check()
    return use


def _tool_use(
    tools: Sequence[Tool] | None,
    choice: ToolChoice | None,
    answer_schema: dict[str, Any] | None,
    parallel: bool | None,
    max_calls: int | None,
) -> ToolUse | None:
    if max_calls == 0 and tools:
        if choice not in (None, "none", "auto"):
            raise BadRequestError(
                "max_tool_calls is 0, so no tool may be called, but tool_choice asks for a "
                "call: raise max_tool_calls or leave tool_choice out",
                param="max_tool_calls",
            )
        return None
    if not tools:
        if choice not in (None, "none", "auto"):
            raise BadRequestError(
                "tool_choice asks for a tool call but the request sends no tools: send tools",
                param="tool_choice",
            )
        return None
    if choice == "none":
        return None
    if isinstance(choice, NamedToolChoice):
        name = choice.function.name
        if name not in {t.function.name for t in tools}:
            raise BadRequestError(
                f"tool_choice names {shown(name)}, which is not among the tools sent: "
                f"use one of {', '.join(t.function.name for t in tools)}",
                param="tool_choice",
            )
        return ToolUse(tuple(tools), name, answer_schema, parallel is not False, max_calls)
    return ToolUse(tuple(tools), choice or "auto", answer_schema, parallel is not False, max_calls)
