"""The bounds a request's JSON Schema must keep before any grammar is made of it, and the
contradictions no answer could satisfy: each refusal names the keyword, where it is, and the
limit or the contradiction."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from zest.router import SCHEMA_LIMITS, BoundedJsonSchema, check_json_schema

LIMITS = "(zest's limits: docs/structured-outputs.md)"


def refusal(schema: Any) -> str:
    with pytest.raises(ValueError, match=r".") as caught:
        check_json_schema(schema)
    return str(caught.value)


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "maxLength": 512, "minLength": 1},
        {"type": "array", "items": {"type": "integer"}, "minItems": 256, "maxItems": 256},
        {"type": "string", "pattern": "^a{0,256}$"},
        {"type": "string", "enum": [f"v{i}" for i in range(1000)]},
        {"type": "integer", "minimum": 1, "maximum": 1},
        {"type": "object", "properties": {"a": {}}, "required": ["a"]},
        nested(SCHEMA_LIMITS.depth),
        {},
    ],
    ids=["length", "items", "pattern", "enum", "range", "required", "depth", "empty"],
)
def test_a_schema_at_the_limits_is_accepted(schema: dict[str, Any]) -> None:
    check_json_schema(schema)


def test_a_long_string_is_refused_naming_the_keyword_and_the_limit() -> None:
    assert refusal({"type": "string", "maxLength": 100000}) == (
        "maxLength: maxLength 100000 is over zest's limit of 512: lower it, or leave it out "
        f"for no upper bound {LIMITS}"
    )


def test_where_the_keyword_is_is_named_by_its_key_path() -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "array", "minItems": 10**7}}}
    assert refusal(schema) == (
        f"properties.tags.minItems: minItems 10000000 is over zest's limit of 256: lower it "
        f"{LIMITS}"
    )


def test_a_count_that_is_not_a_whole_number_is_refused() -> None:
    assert refusal({"type": "array", "minItems": 1e7}) == (
        "minItems: minItems must be a whole number >= 0, got 10000000.0"
    )


def test_a_pattern_repetition_is_bounded() -> None:
    assert refusal({"type": "string", "pattern": "^a{0,100000}$"}) == (
        f"pattern: {{0,100000}} repeats 100000 times, over zest's limit of 256: lower it {LIMITS}"
    )


def test_nested_pattern_repetitions_multiply() -> None:
    assert refusal({"type": "string", "pattern": "^((ab){200}){200}$"}) == (
        "pattern: the pattern's repetitions expand to 80000 atoms, over zest's limit of 4096: "
        f"lower its {{m,n}} counts {LIMITS}"
    )


def test_a_long_pattern_is_refused() -> None:
    assert refusal({"type": "string", "pattern": "^" + "a" * 2000 + "$"}) == (
        f"pattern: the pattern is 2002 characters, over zest's limit of 1000: shorten it {LIMITS}"
    )


def test_a_huge_enum_is_refused() -> None:
    schema = {"type": "string", "enum": [str(i) for i in range(100_000)]}
    assert refusal(schema) == (
        "enum: the schema lists more than zest's limit of 1000 enum/const values: send fewer, "
        f"or a pattern {LIMITS}"
    )


def test_enum_values_count_across_the_whole_schema() -> None:
    values = [str(i) for i in range(600)]
    schema = {"anyOf": [{"enum": values}, {"enum": values}]}
    assert refusal(schema).startswith("anyOf.1.enum: the schema lists more than")


def test_long_enum_values_are_bounded_by_their_bytes() -> None:
    schema = {"enum": ["x" * 1000 for _ in range(40)]}
    assert refusal(schema) == (
        "enum: the schema's enum/const values are over zest's limit of 32768 bytes in all: "
        f"send fewer or shorter values {LIMITS}"
    )


def test_deep_nesting_is_refused() -> None:
    message = refusal(nested(SCHEMA_LIMITS.depth + 1))
    assert message.endswith(
        f": the schema nests deeper than zest's limit of 16 levels: flatten it {LIMITS}"
    )
    assert message.startswith("items." * 16 + "items:")


def test_too_many_subschemas_are_refused() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(2000)}}
    assert refusal(schema) == (
        "properties.p1999: the schema has more than zest's limit of 2000 subschemas: split the "
        f"task or simplify it {LIMITS}"
    )


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "array", "minItems": 5, "maxItems": 2},
            "the schema: minItems 5 is more than maxItems 2: no array can satisfy both; lower "
            "minItems or raise maxItems",
        ),
        (
            {"type": "string", "minLength": 9, "maxLength": 3},
            "the schema: minLength 9 is more than maxLength 3: no string can satisfy both; "
            "lower minLength or raise maxLength",
        ),
        (
            {"type": "integer", "minimum": 10, "maximum": 1},
            "the schema: minimum 10 and maximum 1 leave no number between them: lower minimum "
            "or raise maximum",
        ),
        (
            {"type": "number", "exclusiveMinimum": 1, "maximum": 1},
            "the schema: exclusiveMinimum 1 and maximum 1 leave no number between them: lower "
            "exclusiveMinimum or raise maximum",
        ),
        (
            {"type": "object", "properties": {"a": {}}, "required": ["ghost"]},
            "required: required names 'ghost', which properties does not declare: no answer "
            "zest constrains can hold it; declare it under properties or remove it from "
            "required",
        ),
        (
            {"type": "object", "required": ["ghost"]},
            "required: required names 'ghost', which properties does not declare: no answer "
            "zest constrains can hold it; declare it under properties or remove it from "
            "required",
        ),
        ({"enum": []}, "enum: enum is empty: no value can match it"),
    ],
    ids=["items", "length", "range", "exclusive", "required", "required-bare", "empty-enum"],
)
def test_a_schema_no_answer_can_satisfy_is_refused(schema: dict[str, Any], message: str) -> None:
    assert refusal(schema) == message


def test_a_contradiction_deep_inside_names_its_path() -> None:
    schema = {
        "type": "object",
        "properties": {"size": {"type": "integer", "minimum": 10, "maximum": 1}},
        "required": ["size"],
    }
    assert refusal(schema).startswith("properties.size: minimum 10 and maximum 1")


def test_the_pydantic_field_refuses_with_the_same_message() -> None:
    with pytest.raises(ValidationError, match="maxLength 100000 is over zest's limit of 512"):
        TypeAdapter(BoundedJsonSchema).validate_python({"type": "string", "maxLength": 100000})
