"""response_format as routes.yaml and request bodies spell it (OpenAI's shape)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from zest.router import ResponseFormat, parse_routes

SCHEMA = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}


def test_a_json_schema_format_keeps_openais_spelling() -> None:
    sent = {"type": "json_schema", "json_schema": {"name": "inv", "schema": SCHEMA, "strict": True}}
    fmt = ResponseFormat.model_validate(sent)
    assert fmt.constraint() == SCHEMA
    assert fmt.as_openai() == sent


def test_json_object_constrains_to_any_object_and_text_to_nothing() -> None:
    assert ResponseFormat(type="json_object").constraint() == {"type": "object"}
    assert ResponseFormat(type="text").constraint() is None


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"type": "json_schema"}, "type json_schema needs json_schema: {name, schema}"),
        ({"type": "json_object", "json_schema": {"name": "a", "schema": {}}}, "remove it"),
        ({"type": "json_schema", "json_schema": {"name": "bad name!", "schema": {}}}, "pattern"),
        ({"type": "xml"}, "'text', 'json_object' or 'json_schema'"),
    ],
)
def test_a_malformed_format_is_refused_saying_why(body: dict[str, object], needle: str) -> None:
    with pytest.raises(ValidationError) as refused:
        ResponseFormat.model_validate(body)
    assert needle in str(refused.value)


def test_a_route_carries_its_own_format() -> None:
    routes = parse_routes(
        """\
version: 1
models:
  m: {engine: llamacpp, source: m.gguf}
routes:
  extract_invoice:
    kind: chat
    model: m
    response_format:
      type: json_schema
      json_schema:
        name: invoice
        schema: {type: object, properties: {total: {type: number}}, required: [total]}
""",
        "routes.yaml",
    )
    fmt = routes.routes["extract_invoice"].response_format
    assert fmt is not None
    assert fmt.constraint() == SCHEMA
