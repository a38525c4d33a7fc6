"""Every JSON Schema keyword is enforced by the grammar or refused with a 400 that names it:
the refusals, each pinned, and the forms of each enforced keyword the grammar keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zest.router import check_json_schema
from zest.router._schema_keywords import ANNOTATIONS, ENFORCED, FORMATS, REFUSED

DOCS = "(docs/structured-outputs.md lists every keyword)"
REPO = Path(__file__).resolve().parents[3]


def refusal(schema: Any) -> str:
    with pytest.raises(ValueError, match=r".") as caught:
        check_json_schema(schema)
    return str(caught.value)


ACCEPTED = {
    "integer-range": {"type": "integer", "minimum": 2, "maximum": 10},
    "integer-fractional-bounds": {"type": "integer", "minimum": 1.5, "exclusiveMaximum": 9.5},
    "number-range": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "number-open": {"type": "number", "minimum": -5},
    "multiple-of-one": {"type": "number", "multipleOf": 1},
    "multiples": {"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 100},
    "bounds-beside-string": {"type": "string", "minimum": 3},  # apply to numbers only
    "min-properties-required": {
        "type": "object",
        "properties": {"a": {}, "b": {}},
        "required": ["a", "b"],
        "minProperties": 2,
    },
    "max-properties-closed": {
        "type": "object",
        "properties": {"a": {}, "b": {}},
        "additionalProperties": False,
        "maxProperties": 2,
    },
    "unique-single": {"type": "array", "items": {}, "maxItems": 1, "uniqueItems": True},
    "unique-false": {"type": "array", "items": {}, "uniqueItems": False},
    "format-date": {"type": "string", "format": "date"},
    "enum-typed": {"type": "string", "enum": ["a", "bb"], "maxLength": 2},
    "enum-nullable": {"type": ["string", "null"], "enum": ["a", None]},
    "const-typed": {"type": "integer", "const": 3, "minimum": 0},
    "optional": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "X"},
    "type-beside-any-of": {"type": "string", "anyOf": [{"type": "string"}, {"const": "x"}]},
    "one-of-types": {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
    "one-of-discriminated": {
        "oneOf": [{"$ref": "#/$defs/cat"}, {"$ref": "#/$defs/dog"}],
        "discriminator": {"propertyName": "kind"},
        "$defs": {
            "cat": {
                "type": "object",
                "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
                "required": ["kind"],
            },
            "dog": {
                "type": "object",
                "properties": {"kind": {"const": "dog"}},
                "required": ["kind"],
            },
        },
    },
    "all-of-one": {"allOf": [{"$ref": "#/$defs/a"}], "description": "x", "$defs": {"a": {}}},
    "all-of-objects": {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}},
            {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
        ]
    },
    "ref-with-annotations": {
        "$ref": "#/$defs/a",
        "description": "x",
        "default": 1,
        "$defs": {"a": {"type": "integer"}},
    },
    "prefix-items": {"type": "array", "prefixItems": [{}, {}], "minItems": 2, "items": False},
    "unevaluated-true": {"type": "object", "unevaluatedProperties": True},
    "unknown-keyword": {"type": "string", "x-vendor": 1, "nullable": True},
}


@pytest.mark.parametrize("schema", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_forms_the_grammar_keeps_are_accepted(schema: dict[str, Any]) -> None:
    check_json_schema(schema)


@pytest.mark.parametrize("keyword", sorted(REFUSED))
def test_a_refused_keyword_is_named_with_what_to_do(keyword: str) -> None:
    message = refusal({"type": "object", "properties": {"a": {"type": "string", keyword: {}}}})
    assert message == (
        f"properties.a.{keyword}: zest cannot constrain an answer to {keyword} (the grammar "
        f"cannot keep it): {REFUSED[keyword]} {DOCS}"
    )


REFUSALS = {
    "fractional-number-bound": (
        {"type": "number", "minimum": 0.5},
        "minimum: zest cannot constrain an answer to minimum (the grammar bounds numbers at "
        "whole numbers, and 0.5 is not one): give a whole-number bound, or scale the value "
        f"(e.g. a percentage as an integer) {DOCS}",
    ),
    "no-integer-between": (
        {"type": "integer", "minimum": 1.2, "maximum": 1.8},
        "minimum: zest cannot constrain an answer to minimum (no whole number lies between 1.2 "
        f"and 1.8): widen the bounds, or use type number {DOCS}",
    ),
    "boolean-exclusive": (
        {"type": "number", "minimum": 0, "exclusiveMinimum": True},
        "exclusiveMinimum: zest cannot constrain an answer to exclusiveMinimum (it is True, not "
        f"a number): give exclusiveMinimum a number {DOCS}",
    ),
    "fractional-multiple": (
        {"type": "number", "multipleOf": 0.01},
        "multipleOf: zest cannot constrain an answer to multipleOf (the grammar keeps "
        "whole-number steps, and 0.01 is not one): give a whole-number multipleOf, or scale "
        f"the value {DOCS}",
    ),
    "unbounded-multiple": (
        {"type": "integer", "multipleOf": 3},
        "multipleOf: zest cannot constrain an answer to multipleOf (the grammar lists the "
        "multiples between minimum and maximum, at most 1000): give minimum and maximum that "
        f"hold fewer multiples, or leave multipleOf out {DOCS}",
    ),
    "min-properties": (
        {"type": "object", "properties": {"a": {}}, "minProperties": 1},
        "minProperties: zest cannot constrain an answer to minProperties (the grammar keeps it "
        f"only through required, which lists 0): list at least 1 properties under required "
        f"{DOCS}",
    ),
    "max-properties-open": (
        {"type": "object", "maxProperties": 3},
        "maxProperties: zest cannot constrain an answer to maxProperties (the grammar keeps it "
        "only for an object with at most 3 declared properties and no others): declare the "
        f"properties under properties with additionalProperties: false {DOCS}",
    ),
    "unique-items": (
        {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
        "uniqueItems: zest cannot constrain an answer to uniqueItems (the grammar cannot keep "
        "items apart): remove uniqueItems and drop repeats from the answer, or set maxItems: 1 "
        f"{DOCS}",
    ),
    "format-email": (
        {"type": "string", "format": "email"},
        "format: zest cannot constrain an answer to format (the grammar writes the formats "
        f"{', '.join(FORMATS)}, not 'email'): remove format, or describe the string with a "
        f"pattern {DOCS}",
    ),
    "pattern-and-length": (
        {"type": "string", "pattern": "^a+$", "maxLength": 5},
        "maxLength: zest cannot constrain an answer to maxLength (the grammar writes the "
        "pattern and would skip maxLength beside it): leave maxLength out, and bound the "
        f"length inside the pattern with {{m,n}} {DOCS}",
    ),
    "const-beside-max-length": (
        {"type": "string", "const": "abcdef", "maxLength": 3},
        "const: zest cannot constrain an answer to const (its value 'abcdef' breaks maxLength "
        f"3 beside it, so no answer can be both): remove the value, or fix maxLength {DOCS}",
    ),
    "enum-contradicting-type": (
        {"type": "integer", "enum": [1, "two"]},
        "enum: zest cannot constrain an answer to enum (its value 'two' breaks type 'integer' "
        f"beside it, so no answer can be both): remove the value, or fix type {DOCS}",
    ),
    "enum-out-of-range": (
        {"type": "integer", "enum": [1, 50], "maximum": 10},
        "enum: zest cannot constrain an answer to enum (its value 50 breaks maximum 10 beside "
        f"it, so no answer can be both): remove the value, or fix maximum {DOCS}",
    ),
    "keyword-beside-ref": (
        {"$ref": "#/$defs/a", "maxLength": 3, "$defs": {"a": {"type": "string"}}},
        "maxLength: zest cannot constrain an answer to maxLength (the grammar follows $ref and "
        f"would skip a keyword beside it): move maxLength into the referenced schema {DOCS}",
    ),
    "keyword-beside-any-of": (
        {"anyOf": [{"type": "string"}, {"type": "null"}], "maxLength": 3},
        "maxLength: zest cannot constrain an answer to maxLength (the grammar follows anyOf and "
        f"would skip a keyword beside it): move maxLength into each branch {DOCS}",
    ),
    "type-disagreeing-with-any-of": (
        {"type": "string", "anyOf": [{"type": "string"}, {"type": "integer"}]},
        "type: zest cannot constrain an answer to type (the grammar follows anyOf and would "
        f"skip a keyword beside it): move type into each branch {DOCS}",
    ),
    "one-of-overlapping": (
        {"oneOf": [{"type": "integer"}, {"type": "number"}]},
        "oneOf: zest cannot constrain an answer to oneOf (branches 0 and 1 may both match an "
        "answer): use anyOf, or tell the branches apart by a required property with a "
        f"different const in each {DOCS}",
    ),
    "all-of-non-object": (
        {"allOf": [{"type": "string"}, {"maxLength": 3}]},
        "allOf: zest cannot constrain an answer to allOf (part 0 has type; the grammar merges "
        f"only object parts' properties): merge the parts into one object schema {DOCS}",
    ),
    "items-beside-prefix-items": (
        {"type": "array", "prefixItems": [{}], "items": {"type": "string"}},
        "items: zest cannot constrain an answer to items (beside prefixItems the grammar "
        f"writes the tuple alone): leave items out (or set it to false) {DOCS}",
    ),
    "prefix-items-count": (
        {"type": "array", "prefixItems": [{}], "minItems": 2},
        "minItems: zest cannot constrain an answer to minItems (the grammar writes exactly the "
        f"1 items of prefixItems): make minItems and maxItems hold the tuple's length {DOCS}",
    ),
    "unevaluated-false": (
        {"type": "object", "unevaluatedProperties": False},
        "unevaluatedProperties: zest cannot constrain an answer to unevaluatedProperties (the "
        f"grammar does not track what was evaluated): use additionalProperties {DOCS}",
    ),
}


@pytest.mark.parametrize(("schema", "message"), REFUSALS.values(), ids=REFUSALS.keys())
def test_a_form_the_grammar_would_skip_is_refused(schema: dict[str, Any], message: str) -> None:
    assert refusal(schema) == message


def test_a_refusal_deep_inside_names_its_key_path() -> None:
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string", "format": "uri"}}},
    }
    assert refusal(schema).startswith("properties.tags.items.format: zest cannot constrain")


def test_an_enum_pattern_is_checked_in_linear_time() -> None:
    """The values beside a pattern are checked with RE2: a pattern that backtracks for ever
    on Python's re answers at once."""
    value = "a" * 40 + "!"
    message = refusal({"type": "string", "pattern": "^(a+)+$", "enum": [value]})
    assert message.startswith("enum: zest cannot constrain an answer to enum (its value 'aaaa")


def test_the_docs_table_lists_every_keyword() -> None:
    docs = (REPO / "docs" / "structured-outputs.md").read_text(encoding="utf-8")
    table = [line for line in docs.splitlines() if line.startswith("| `")]
    listed = {cell.strip("` ") for line in table for cell in line.split("|")[1].split(",")}
    assert ENFORCED | set(REFUSED) | ANNOTATIONS <= listed
