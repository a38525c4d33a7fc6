"""Which JSON Schema keywords a constrained answer keeps, and which zest refuses.

llama.cpp's grammar converter turns some keywords into grammar and skips the rest; a skipped
keyword used to answer 200 with output that broke it. Each keyword is now either enforced (by
the converter, or by zest's additions to it in engines/_grammar_convert.py: integer and number
ranges, multipleOf, enums as tries), kept trivially by the shape of what the grammar writes
(minProperties when enough properties are required), an annotation that constrains nothing,
or refused here with a 400 that names it, where it is, and what to do instead.
docs/structured-outputs.md has the table; tests/unit/router/test_schema_keywords.py pins it.
Pure: no engine, no grammar.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from zest.errors import shown

__all__ = [
    "ANNOTATIONS",
    "ENFORCED",
    "FORMATS",
    "MAX_MULTIPLES",
    "REFUSED",
    "check_keywords",
    "numeric_bounds",
]

# Keywords that constrain nothing an answer holds: accepted as they are.
ANNOTATIONS = frozenset(
    {
        "title", "description", "default", "examples", "deprecated", "readOnly",
        "writeOnly", "$schema", "$id", "$comment", "$defs", "definitions",
        "contentEncoding", "contentMediaType", "contentSchema", "discriminator",
    }
)  # fmt: skip
# Keywords the grammar enforces (some only in the forms check_keywords lets through).
ENFORCED = frozenset(
    {
        "type", "enum", "const", "properties", "required", "additionalProperties",
        "items", "prefixItems", "additionalItems", "minItems", "maxItems", "minLength",
        "maxLength", "pattern", "format", "anyOf", "oneOf", "allOf", "$ref", "minimum",
        "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minProperties",
        "maxProperties", "uniqueItems", "unevaluatedProperties", "unevaluatedItems",
    }
)  # fmt: skip
_BRANCHES = "list the cases under anyOf instead"
# Keywords refused wherever they appear: keyword -> what to do instead.
REFUSED: dict[str, str] = {
    "not": "remove it, and list what is allowed (enum, anyOf) instead",
    "if": f"remove if/then/else, and {_BRANCHES}",
    "then": f"remove if/then/else, and {_BRANCHES}",
    "else": f"remove if/then/else, and {_BRANCHES}",
    "dependentRequired": f"list the properties under required, or {_BRANCHES}",
    "dependentSchemas": f"remove it, and {_BRANCHES}",
    "dependencies": f"list the properties under required, or {_BRANCHES}",
    "contains": "remove it, and describe every item under items",
    "minContains": "remove it, and describe every item under items",
    "maxContains": "remove it, and describe every item under items",
    "patternProperties": "declare each property under properties",
    "propertyNames": "declare each property under properties, with additionalProperties: false",
    "$anchor": "refer to the subschema as #/$defs/NAME with $ref",
    "$dynamicRef": "refer to the subschema as #/$defs/NAME with $ref",
    "$dynamicAnchor": "refer to the subschema as #/$defs/NAME with $ref",
    "$recursiveRef": "refer to the subschema as #/$defs/NAME with $ref",
    "$recursiveAnchor": "refer to the subschema as #/$defs/NAME with $ref",
}
# The string formats the grammar writes (as llama.cpp's converter does, February kept to 28
# days); any other format would be a plain string, so it is refused.
FORMATS = ("date", "time", "date-time", "uuid")
# multipleOf other than 1 is enforced by listing the multiples between the bounds.
MAX_MULTIPLES = 1_000
_DOCS = "(docs/structured-outputs.md lists every keyword)"
_COMBINERS = ("$ref", "anyOf", "oneOf", "allOf")
_LENGTH_FIX = {
    "pattern": "leave {keyword} out, and bound the length inside the pattern with {{m,n}}",
    "format": "leave {keyword} out: the format fixes the length",
}
_KNOWN = ANNOTATIONS | ENFORCED | set(REFUSED)
_NUMERIC = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def check_keywords(
    schema: Mapping[str, Any], path: tuple[str, ...], root: Mapping[str, Any]
) -> None:
    """Raise ValueError naming the first keyword of `schema` (at `path` in `root`) that the
    grammar would not keep, with what to do instead."""
    for keyword, fix in REFUSED.items():
        if keyword in schema:
            _refuse(path, keyword, "the grammar cannot keep it", fix)
    _check_beside_combiners(schema, path, root)
    _check_evaluated(schema, path)
    _check_numbers(schema, path)
    _check_strings(schema, path)
    _check_arrays(schema, path)
    _check_objects(schema, path)
    _check_values(schema, path)


def _refuse(path: tuple[str, ...], keyword: str, why: str, fix: str) -> None:
    where = ".".join((*path, keyword))
    raise ValueError(
        f"{where}: zest cannot constrain an answer to {keyword} ({why}): {fix} {_DOCS}"
    )


def _constraints(schema: Mapping[str, Any]) -> list[str]:
    """The keywords of `schema` that constrain an answer (known ones: JSON Schema ignores the
    others, and so does the grammar)."""
    return [k for k in schema if k in _KNOWN and k not in ANNOTATIONS]


# --- $ref, anyOf, oneOf, allOf -----------------------------------------------------------------


def _check_beside_combiners(
    schema: Mapping[str, Any], path: tuple[str, ...], root: Mapping[str, Any]
) -> None:
    """The grammar follows a $ref, anyOf/oneOf or allOf alone: a constraint beside one would be
    skipped."""
    combiners = [k for k in _COMBINERS if k in schema]
    if not combiners:
        return
    first = combiners[0]
    for keyword in _constraints(schema):
        if keyword == first or (keyword == "type" and _type_agrees(schema, first, root)):
            continue
        _refuse(
            path,
            keyword,
            f"the grammar follows {first} and would skip a keyword beside it",
            f"move {keyword} into {'the referenced schema' if first == '$ref' else 'each branch'}",
        )
    if first == "oneOf":
        _check_one_of(schema["oneOf"], path, root)
    elif first == "allOf":
        _check_all_of(schema["allOf"], path, root)


def _type_agrees(schema: Mapping[str, Any], combiner: str, root: Mapping[str, Any]) -> bool:
    """A `type` beside anyOf/oneOf/allOf that every branch already has adds nothing."""
    declared = _types(schema)
    branches = schema.get(combiner)
    if combiner == "$ref" or not isinstance(branches, list) or declared is None:
        return False
    types = [_types(_resolved(b, root)) for b in branches]
    if combiner == "allOf":
        return any(t is not None and t <= declared for t in types)
    return all(t is not None and t <= declared for t in types)


def _check_one_of(branches: Any, path: tuple[str, ...], root: Mapping[str, Any]) -> None:
    """oneOf holds when exactly one branch matches: the grammar writes one branch, so the
    branches must not overlap (distinct types, or objects told apart by a required constant)."""
    if not isinstance(branches, list):
        return
    resolved = [_resolved(b, root) for b in branches]
    for i, first in enumerate(resolved):
        for j in range(i + 1, len(resolved)):
            if not _disjoint(first, resolved[j], root):
                _refuse(
                    path,
                    "oneOf",
                    f"branches {i} and {j} may both match an answer",
                    "use anyOf, or tell the branches apart by a required property with a "
                    "different const in each",
                )


def _disjoint(first: Mapping[str, Any], second: Mapping[str, Any], root: Mapping[str, Any]) -> bool:
    one, two = _types(first), _types(second)
    if one is not None and two is not None:
        widen = {"integer": {"integer", "number"}, "number": {"integer", "number"}}
        one = set().union(*(widen.get(t, {t}) for t in one))
        if not one & two:
            return True
    return _told_apart(first, second, root)


def _told_apart(
    first: Mapping[str, Any], second: Mapping[str, Any], root: Mapping[str, Any]
) -> bool:
    """Objects that each require a property whose allowed values do not meet."""
    common = set(_strings(first.get("required"))) & set(_strings(second.get("required")))
    for name in common:
        one = _property_values(first, name, root)
        two = _property_values(second, name, root)
        if one is not None and two is not None and not one & two:
            return True
    return False


def _property_values(
    schema: Mapping[str, Any], name: str, root: Mapping[str, Any]
) -> set[str] | None:
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not isinstance(properties.get(name), Mapping):
        return None
    prop = _resolved(properties[name], root)
    if "const" in prop:
        return {_canonical(prop["const"])}
    if isinstance(prop.get("enum"), list):
        return {_canonical(v) for v in prop["enum"]}
    return None


def _check_all_of(parts: Any, path: tuple[str, ...], root: Mapping[str, Any]) -> None:
    """allOf of one part is that part; of several, the grammar merges object parts' properties
    (each required) and keeps nothing else of them."""
    if not isinstance(parts, list) or len(parts) <= 1:
        return
    allowed = ANNOTATIONS | {"type", "properties", "required"}
    for i, part in enumerate(parts):
        resolved = _resolved(part, root)
        extra = [k for k in _constraints(resolved) if k not in allowed]
        if extra or _types(resolved) not in (None, {"object"}):
            what = extra[0] if extra else "type"
            _refuse(
                path,
                "allOf",
                f"part {i} has {what}; the grammar merges only object parts' properties",
                "merge the parts into one object schema",
            )


# --- each kind of value ------------------------------------------------------------------------


def _check_evaluated(schema: Mapping[str, Any], path: tuple[str, ...]) -> None:
    """unevaluated*: true constrains nothing; false or a schema would need the evaluation
    the grammar does not do."""
    for keyword, instead in (
        ("unevaluatedProperties", "additionalProperties"),
        ("unevaluatedItems", "items"),
    ):
        if keyword in schema and schema[keyword] is not True:
            _refuse(
                path, keyword, "the grammar does not track what was evaluated", f"use {instead}"
            )


def numeric_bounds(schema: Mapping[str, Any]) -> tuple[float | None, bool, float | None, bool]:
    """(low, low exclusive, high, high exclusive): the tighter of each pair of bounds."""

    def number(keyword: str) -> float | None:
        value = schema.get(keyword)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return value

    low, low_open = number("minimum"), False
    if (ex := number("exclusiveMinimum")) is not None and (low is None or ex >= low):
        low, low_open = ex, True
    high, high_open = number("maximum"), False
    if (ex := number("exclusiveMaximum")) is not None and (high is None or ex <= high):
        high, high_open = ex, True
    return low, low_open, high, high_open


def _check_numbers(schema: Mapping[str, Any], path: tuple[str, ...]) -> None:
    for keyword in _NUMERIC:
        value = schema.get(keyword)
        if keyword in schema and (isinstance(value, bool) or not isinstance(value, int | float)):
            _refuse(
                path, keyword, f"it is {shown(value)}, not a number", f"give {keyword} a number"
            )
        if isinstance(value, float) and not math.isfinite(value):
            _refuse(path, keyword, f"it is {value}", f"give {keyword} a finite number")
    types = _types(schema) or set()
    if not types & {"integer", "number"} or not any(k in schema for k in _NUMERIC):
        return
    if "number" in types and "integer" not in types:
        for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            value = schema.get(keyword)
            if value is not None and value != math.floor(value):
                _refuse(
                    path,
                    keyword,
                    f"the grammar bounds numbers at whole numbers, and {value:g} is not one",
                    "give a whole-number bound, or scale the value (e.g. a percentage as an "
                    "integer)",
                )
    if types == {"integer"} or schema.get("multipleOf") is not None:
        low, low_open, high, high_open = numeric_bounds(schema)
        if _multiples(low, low_open, high, high_open, 1) == 0:
            _refuse(
                path,
                "minimum",
                f"no whole number lies between {low:g} and {high:g}",
                "widen the bounds, or use type number",
            )
    _check_multiple_of(schema, path)


def _check_multiple_of(schema: Mapping[str, Any], path: tuple[str, ...]) -> None:
    step = schema.get("multipleOf")
    if step is None:
        return
    if step <= 0 or step != math.floor(step):
        _refuse(
            path,
            "multipleOf",
            f"the grammar keeps whole-number steps, and {step:g} is not one",
            "give a whole-number multipleOf, or scale the value",
        )
    if step == 1:
        return
    low, low_open, high, high_open = numeric_bounds(schema)
    count = _multiples(low, low_open, high, high_open, int(step))
    if count is None or count > MAX_MULTIPLES:
        _refuse(
            path,
            "multipleOf",
            f"the grammar lists the multiples between minimum and maximum, at most {MAX_MULTIPLES}",
            "give minimum and maximum that hold fewer multiples, or leave multipleOf out",
        )


def _multiples(
    low: float | None, low_open: bool, high: float | None, high_open: bool, step: int
) -> int | None:
    if low is None or high is None:
        return None
    first = math.floor(low / step) + 1 if low_open else math.ceil(low / step)
    last = math.ceil(high / step) - 1 if high_open else math.floor(high / step)
    return max(last - first + 1, 0)


def _check_strings(schema: Mapping[str, Any], path: tuple[str, ...]) -> None:
    if "format" in schema and "string" in (_types(schema) or {"string"}):
        fmt = schema["format"]
        if fmt not in FORMATS:
            _refuse(
                path,
                "format",
                f"the grammar writes the formats {', '.join(FORMATS)}, not {shown(fmt)}",
                "remove format, or describe the string with a pattern",
            )
    for shaped in ("pattern", "format"):
        if shaped not in schema:
            continue
        for keyword in ("minLength", "maxLength"):
            if keyword in schema:
                _refuse(
                    path,
                    keyword,
                    f"the grammar writes the {shaped} and would skip {keyword} beside it",
                    _LENGTH_FIX[shaped].format(keyword=keyword),
                )


def _check_arrays(schema: Mapping[str, Any], path: tuple[str, ...]) -> None:
    prefix = schema.get("prefixItems")
    if isinstance(prefix, list):
        if "items" in schema and schema["items"] is not False:
            _refuse(
                path,
                "items",
                "beside prefixItems the grammar writes the tuple alone",
                "leave items out (or set it to false)",
            )
        size = len(prefix)
        least, most = schema.get("minItems", 0), schema.get("maxItems", size)
        if not least <= size <= most:
            _refuse(
                path,
                "minItems" if least > size else "maxItems",
                f"the grammar writes exactly the {size} items of prefixItems",
                "make minItems and maxItems hold the tuple's length",
            )
    if schema.get("uniqueItems") is True:
        most = len(prefix) if isinstance(prefix, list) else schema.get("maxItems")
        if most is None or most > 1:
            _refuse(
                path,
                "uniqueItems",
                "the grammar cannot keep items apart",
                "remove uniqueItems and drop repeats from the answer, or set maxItems: 1",
            )


def _check_objects(schema: Mapping[str, Any], path: tuple[str, ...]) -> None:
    """minProperties and maxProperties hold when the object's shape already keeps them: as
    many properties required, or no more properties declared and no others allowed."""
    if "minProperties" not in schema and "maxProperties" not in schema:
        return
    properties = schema.get("properties")
    declared = len(properties) if isinstance(properties, Mapping) else 0
    required = len(set(_strings(schema.get("required"))))
    closed = _writes_only_declared(schema)
    least = schema.get("minProperties")
    if isinstance(least, int) and least > required:
        _refuse(
            path,
            "minProperties",
            f"the grammar keeps it only through required, which lists {required}",
            f"list at least {least} properties under required",
        )
    most = schema.get("maxProperties")
    if isinstance(most, int) and not (closed and declared <= most):
        _refuse(
            path,
            "maxProperties",
            f"the grammar keeps it only for an object with at most {most} declared "
            "properties and no others",
            "declare the properties under properties with additionalProperties: false",
        )


def _writes_only_declared(schema: Mapping[str, Any]) -> bool:
    """Whether the grammar writes no property but the declared ones (llama.cpp's converter:
    an object with properties and no additionalProperties, or additionalProperties false)."""
    extra = schema.get("additionalProperties")
    return extra is False or (extra is None and isinstance(schema.get("properties"), Mapping))


def _check_values(schema: Mapping[str, Any], path: tuple[str, ...]) -> None:
    """An enum or const is written as it is, so each value must keep the keywords beside it
    (its type, its length, its range...): a value that breaks them can never be an answer."""
    values = list(schema["enum"]) if isinstance(schema.get("enum"), list) else []
    keyword = "enum"
    if "const" in schema:
        values, keyword = [schema["const"]], "const"
    beside = {k: v for k, v in schema.items() if k in ENFORCED and k not in ("enum", "const")}
    if not values or not beside or any(k in beside for k in _COMBINERS):
        return
    validator = _validator()(beside)
    for value in values:
        error = next(iter(validator.iter_errors(value)), None)
        if error is not None:
            broken = str(error.validator)
            _refuse(
                path,
                keyword,
                f"its value {shown(value)} breaks {broken} {shown(error.validator_value)} "
                "beside it, so no answer can be both",
                f"remove the value, or fix {broken}",
            )


@cache
def _validator() -> Any:
    """jsonschema's Draft 2020-12 validator with RE2 for `pattern`: a client's pattern and
    values never run on a backtracking regex engine."""
    import re2
    from jsonschema import Draft202012Validator, validators

    def pattern(validator: Any, value: str, instance: Any, schema: Any) -> Iterator[Any]:
        from jsonschema.exceptions import ValidationError

        if not isinstance(instance, str):
            return
        try:
            found = re2.search(value, instance)
        except re2.error:
            return  # a pattern RE2 cannot read: the grammar's check refuses it
        if found is None:
            yield ValidationError(f"{instance!r} does not match {value!r}")

    extend: Any = validators.extend  # untyped in the stubs
    return extend(Draft202012Validator, {"pattern": pattern})


# --- helpers -----------------------------------------------------------------------------------


def _types(schema: Mapping[str, Any]) -> set[str] | None:
    """The types a schema allows when it says (its type, or its enum's/const's values')."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if isinstance(values, list) and values:
        return {_type_of(v) for v in values}
    return None


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value == math.floor(value) else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _resolved(schema: Any, root: Mapping[str, Any]) -> Mapping[str, Any]:
    """A subschema with its local $ref followed (a few hops at most); {} when unresolvable."""
    for _ in range(8):
        if not isinstance(schema, Mapping):
            return {}
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            return schema
        target: Any = root
        for part in ref[1:].split("/")[1:]:
            key = part.replace("~1", "/").replace("~0", "~")
            target = target.get(key) if isinstance(target, Mapping) else None
        schema = target
    return {}


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _canonical(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True)
