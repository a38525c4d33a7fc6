"""JSON Schemas inside zest's documented limits, for property tests (hypothesis strategies),
and the longest answer each allows, so a test can size max_tokens to let every answer finish.

Every keyword the generator uses is one docs/structured-outputs.md lists as enforced, in the
forms the router accepts: strings with lengths, formats or patterns; integers and numbers with
ranges and multiples; booleans, nulls, enums (some sharing a long prefix), consts; nullable
types as a type list or anyOf; arrays with item counts; objects with required and optional
properties (names with spaces and quotes among them), additionalProperties false,
minProperties; oneOf of distinct types; allOf of object parts; $ref into $defs.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

__all__ = ["longest", "root_objects"]

# (pattern, longest match): bounded, so every answer ends.
PATTERNS = {
    "^[a-z]{1,8}$": 8,
    "^[A-Z][a-z]{0,6}$": 7,
    "^[0-9]{3}-[0-9]{4}$": 8,
    "^(red|green|blue)$": 5,
    "^a.{0,5}z$": 7,
    "^[a-f0-9]{4,6}$": 6,
}
FORMATS = {"date": 10, "time": 25, "date-time": 36, "uuid": 36}
NAMES = ["name", "age", "city", "tags", "id", "score", "when", "kind", "with space", 'quo"te']
WORDS = ["red", "green", "blue", "alpha", "beta", "yes", "no", "maybe"]
PREFIX = "customer-account-category-"  # 25 characters shared by an enum's values

Schema = dict[str, Any]


def _strings() -> st.SearchStrategy[Schema]:
    def sized(most: int, least: int) -> Schema:
        schema: Schema = {"type": "string", "maxLength": most}
        if least:
            schema["minLength"] = min(least, most)
        return schema

    return st.one_of(
        st.builds(sized, st.integers(1, 10), st.integers(0, 3)),
        st.sampled_from(sorted(PATTERNS)).map(lambda p: {"type": "string", "pattern": p}),
        st.sampled_from(sorted(FORMATS)).map(lambda f: {"type": "string", "format": f}),
    )


def _integers() -> st.SearchStrategy[Schema]:
    def ranged(low: int | None, span: int | None, open_low: bool, open_high: bool) -> Schema:
        schema: Schema = {"type": "integer"}
        if low is not None:
            schema["exclusiveMinimum" if open_low else "minimum"] = low
        if span is not None:
            high = (low if low is not None else 0) + span + (2 if open_low or open_high else 0)
            schema["exclusiveMaximum" if open_high else "maximum"] = high
        return schema

    def stepped(step: int, low: int, count: int) -> Schema:
        return {
            "type": "integer",
            "multipleOf": step,
            "minimum": low,
            "maximum": low + step * count,
        }

    return st.one_of(
        st.builds(
            ranged,
            st.none() | st.integers(-60, 60),
            st.none() | st.integers(0, 1200),
            st.booleans(),
            st.booleans(),
        ),
        st.builds(stepped, st.integers(2, 12), st.integers(-50, 50), st.integers(1, 40)),
    )


def _numbers() -> st.SearchStrategy[Schema]:
    def ranged(low: int | None, span: int | None, open_low: bool, open_high: bool) -> Schema:
        schema: Schema = {"type": "number"}
        if low is not None:
            schema["exclusiveMinimum" if open_low else "minimum"] = low
        if span is not None:
            high = (low if low is not None else 0) + span + 1
            schema["exclusiveMaximum" if open_high else "maximum"] = high
        return schema

    return st.builds(
        ranged,
        st.none() | st.integers(-10, 10),
        st.none() | st.integers(0, 100),
        st.booleans(),
        st.booleans(),
    )


def _enums() -> st.SearchStrategy[Schema]:
    plain = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6, unique=True)
    mixed = st.lists(
        st.sampled_from(["a", "b", 1, 2, 30, None, True]), min_size=1, max_size=5, unique=True
    )
    prefixed = st.integers(2, 40).map(lambda n: [f"{PREFIX}{i}" for i in range(n)])
    return st.one_of(
        plain.map(lambda v: {"type": "string", "enum": v}),
        mixed.map(lambda v: {"enum": v}),
        prefixed.map(lambda v: {"enum": v}),
        st.sampled_from(["fixed", 7, None, False]).map(lambda v: {"const": v}),
    )


def leaves() -> st.SearchStrategy[Schema]:
    scalar = st.one_of(
        _strings(),
        _integers(),
        _numbers(),
        _enums(),
        st.just({"type": "boolean"}),
        st.just({"type": "null"}),
    )
    nullable = st.one_of(
        _strings().map(lambda s: {**s, "type": ["string", "null"]}),
        _integers().map(lambda s: {"anyOf": [s, {"type": "null"}], "description": "or null"}),
    )
    one_of = st.tuples(_strings(), _integers()).map(lambda p: {"oneOf": list(p)})
    return st.one_of(scalar, nullable, one_of)


def _array(items: st.SearchStrategy[Schema]) -> st.SearchStrategy[Schema]:
    def made(item: Schema, most: int, least: int) -> Schema:
        return {"type": "array", "items": item, "maxItems": most, "minItems": min(least, most)}

    return st.builds(made, items, st.integers(0, 3), st.integers(0, 2))


def _object(values: st.SearchStrategy[Schema]) -> st.SearchStrategy[Schema]:
    @st.composite
    def made(draw: st.DrawFn) -> Schema:
        names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
        properties = {name: draw(values) for name in names}
        required = draw(st.lists(st.sampled_from(names), unique=True))
        schema: Schema = {"type": "object", "properties": properties, "required": required}
        if draw(st.booleans()):
            schema["additionalProperties"] = False
        if required and draw(st.booleans()):
            schema["minProperties"] = len(required)
        return schema

    return made()


def _all_of(values: st.SearchStrategy[Schema]) -> st.SearchStrategy[Schema]:
    def made(first: Schema, second: Schema) -> Schema:
        return {
            "allOf": [
                {"type": "object", "properties": {"left": first}},
                {"properties": {"right": second}, "required": ["right"]},
            ]
        }

    return st.builds(made, values, values)


def values() -> st.SearchStrategy[Schema]:
    """Property values: leaves, arrays of leaves, objects of leaves (two levels at most)."""
    inner = st.one_of(leaves(), _array(leaves()), _object(leaves()))
    return st.one_of(leaves(), leaves(), _array(inner), _object(leaves()), _all_of(leaves()))


@st.composite
def root_objects(draw: st.DrawFn) -> Schema:
    """An object schema, as a tool's parameters and most response formats are; sometimes its
    properties go through $ref into $defs."""
    schema = draw(_object(values()))
    if draw(st.booleans()):
        name = next(iter(schema["properties"]))
        schema["$defs"] = {"shared": schema["properties"][name]}
        schema["properties"][name] = {"$ref": "#/$defs/shared", "description": "by reference"}
    return schema


def longest(schema: Schema, defs: Schema | None = None) -> int:
    """Characters of the longest answer the grammar allows for `schema` (each string
    character counted as a six-character escape; a token is at least one character)."""
    defs = schema.get("$defs", defs) or {}
    if "$ref" in schema:
        return longest(defs[schema["$ref"].rsplit("/", 1)[1]], defs)
    for combiner in ("anyOf", "oneOf"):
        if combiner in schema:
            return max(longest(s, defs) for s in schema[combiner])
    if "allOf" in schema:
        parts = [longest({**p, "type": "object"}, defs) for p in schema["allOf"]]
        return sum(parts)
    if "const" in schema or "enum" in schema:
        options = [schema["const"]] if "const" in schema else schema["enum"]
        return max(len(json.dumps(v)) for v in options) + 1
    kind = schema.get("type")
    if isinstance(kind, list):
        return max(longest({**schema, "type": k}, defs) for k in kind)
    return _longest_typed(schema, kind, defs)


def _longest_typed(schema: Schema, kind: Any, defs: Schema) -> int:
    if kind == "string":
        if "pattern" in schema:
            return PATTERNS[schema["pattern"]] * 6 + 3
        if "format" in schema:
            return FORMATS[schema["format"]] + 3
        return 6 * schema.get("maxLength", 100) + 3
    if kind in ("integer", "number"):
        bounds = [abs(int(schema[k])) for k in schema if k.endswith("imum")]
        if kind == "number" and not bounds and "multipleOf" not in schema:
            return 53  # the converter's number: 16 digits, 16 decimals, an exponent
        whole = len(str(max(bounds))) + 1 if len(bounds) == 2 else 17
        return whole + (7 if kind == "number" else 0) + 1
    if kind == "boolean":
        return 6
    if kind == "null":
        return 5
    if kind == "array":
        return 3 + schema.get("maxItems", 10) * (longest(schema["items"], defs) + 2)
    properties = schema.get("properties", {})
    return 3 + sum(len(json.dumps(n)) + 4 + longest(s, defs) for n, s in properties.items())
