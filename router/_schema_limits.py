"""Bounds on the JSON Schemas a request constrains its answer to, checked before any grammar
exists.

A schema becomes a grammar (llama.cpp's converter expands `minItems: n` into n copies and
`maxLength: n` into n nested groups; onnxruntime-genai compiles its own), and the grammar is
parsed by native code that recurses once per nesting level. A tiny schema can therefore ask for
a huge or deeply nested grammar; past a few thousand levels the parser overflows its stack and
the process dies. Every count that grammars grow with is bounded here, and a schema no output
can satisfy (`minItems` over `maxItems`, a `required` key never declared) is refused, instead
of answering 200 with output that breaks it. Pure: no engine, no grammar.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import AfterValidator

from zest.errors import shown
from zest.router._schema_keywords import check_keywords, numeric_bounds

__all__ = [
    "SCHEMA_LIMITS",
    "BoundedJsonSchema",
    "SchemaLimits",
    "check_json_schema",
    "check_json_schemas",
]

_LIMITS = "(zest's limits: docs/structured-outputs.md)"
# Keywords whose values are subschemas, each a mapping or a list of them.
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_NAMED = ("properties", "$defs", "definitions", "patternProperties")


@dataclass(frozen=True)
class SchemaLimits:
    """What one request's schema may ask for (docs/structured-outputs.md lists them)."""

    depth: int = 16  # subschemas nested in one another
    subschemas: int = 2_000  # in the whole schema
    repetitions: int = 256  # minItems / maxItems, and a pattern's {m,n}
    length: int = 512  # minLength / maxLength (llama.cpp parses at most ~1,000 nested groups)
    enum_values: int = 1_000  # enum and const values in the whole schema
    enum_bytes: int = 32_768  # their JSON text, in all
    pattern_chars: int = 1_000
    pattern_expansion: int = 4_096  # a pattern's atoms once its quantifiers are expanded
    grammar_bytes: int = 262_144  # the grammar made of the schema (checked once it exists)


SCHEMA_LIMITS = SchemaLimits()


def check_json_schema(schema: Any, limits: SchemaLimits = SCHEMA_LIMITS) -> None:
    """Raise ValueError naming the keyword, where it is, and the limit or contradiction."""
    if not isinstance(schema, Mapping):
        raise ValueError(f"a JSON Schema is an object, got {shown(schema)}")
    _Walk(limits, schema).node(schema, ())


def check_json_schemas(
    schemas: Sequence[tuple[str, Any]], limits: SchemaLimits = SCHEMA_LIMITS
) -> None:
    """Several schemas one request constrains one answer to (a request's tools' parameters,
    its own answer format), each named by where it was sent: each nests as its sender wrote
    it (the levels zest wraps around them are zest's, not the sender's), and the counts that
    grammars grow with (subschemas, enum values) are counted over them all, as the one
    grammar made of them grows."""
    walk = _Walk(limits)
    for where, schema in schemas:
        if not isinstance(schema, Mapping):
            raise ValueError(f"{where}: a JSON Schema is an object, got {shown(schema)}")
        # Each part's local references name places in that part, as its sender wrote it.
        walk.root = schema
        walk.node(schema, (where,))


def _bounded(schema: dict[str, Any]) -> dict[str, Any]:
    check_json_schema(schema)
    return schema


# A JSON Schema field of a request or of routes.yaml: refused at validation beyond the bounds.
BoundedJsonSchema = Annotated[dict[str, Any], AfterValidator(_bounded)]


@dataclass
class _Walk:
    limits: SchemaLimits
    # The schema whose local `$ref`s the keywords' checks resolve against.
    root: Mapping[str, Any] = field(default_factory=dict)
    subschemas: int = 0
    enum_values: int = 0
    enum_bytes: int = 0

    def node(self, schema: Mapping[str, Any], path: tuple[str, ...], depth: int = 0) -> None:
        if depth > self.limits.depth:
            raise ValueError(
                f"{_where(path)}: the schema nests deeper than zest's limit of "
                f"{self.limits.depth} levels: flatten it {_LIMITS}"
            )
        self.subschemas += 1
        if self.subschemas > self.limits.subschemas:
            raise ValueError(
                f"{_where(path)}: the schema has more than zest's limit of "
                f"{self.limits.subschemas} subschemas: split the task or simplify it {_LIMITS}"
            )
        self._counts(schema, path)
        self._values(schema, path)
        _check_satisfiable(schema, path)
        if isinstance(pattern := schema.get("pattern"), str):
            _check_pattern(pattern, (*path, "pattern"), self.limits)
        check_keywords(schema, path, self.root)
        for child, where in _children(schema, path):
            self.node(child, where, depth + 1)

    def _counts(self, schema: Mapping[str, Any], path: tuple[str, ...]) -> None:
        limits = self.limits
        for keyword, most, fix in (
            ("minItems", limits.repetitions, "lower it"),
            ("maxItems", limits.repetitions, "lower it, or leave it out for no upper bound"),
            ("minLength", limits.length, "lower it"),
            ("maxLength", limits.length, "lower it, or leave it out for no upper bound"),
        ):
            value = _count(schema, keyword, path)
            if value is not None and value > most:
                raise ValueError(
                    f"{_where((*path, keyword))}: {keyword} {value} is over zest's limit of "
                    f"{most}: {fix} {_LIMITS}"
                )

    def _values(self, schema: Mapping[str, Any], path: tuple[str, ...]) -> None:
        values = list(schema["enum"]) if isinstance(schema.get("enum"), list) else []
        if "const" in schema:
            values.append(schema["const"])
        self.enum_values += len(values)
        self.enum_bytes += sum(len(json.dumps(v)) for v in values)
        if self.enum_values > self.limits.enum_values:
            raise ValueError(
                f"{_where((*path, 'enum'))}: the schema lists more than zest's limit of "
                f"{self.limits.enum_values} enum/const values: send fewer, or a pattern "
                f"{_LIMITS}"
            )
        if self.enum_bytes > self.limits.enum_bytes:
            raise ValueError(
                f"{_where((*path, 'enum'))}: the schema's enum/const values are over zest's "
                f"limit of {self.limits.enum_bytes} bytes in all: send fewer or shorter "
                f"values {_LIMITS}"
            )


def _children(
    schema: Mapping[str, Any], path: tuple[str, ...]
) -> Iterator[tuple[Mapping[str, Any], tuple[str, ...]]]:
    for keyword in _ONE:
        if isinstance(child := schema.get(keyword), Mapping):
            yield child, (*path, keyword)
    for keyword in _MANY:
        if isinstance(children := schema.get(keyword), list):
            for i, child in enumerate(children):
                if isinstance(child, Mapping):
                    yield child, (*path, keyword, str(i))
    for keyword in _NAMED:
        if isinstance(named := schema.get(keyword), Mapping):
            for name, child in named.items():
                if isinstance(child, Mapping):
                    yield child, (*path, keyword, str(name))


def _count(schema: Mapping[str, Any], keyword: str, path: tuple[str, ...]) -> int | None:
    """A count keyword's value: absent, or a whole number >= 0 (1e7 is a float in JSON)."""
    if keyword not in schema:
        return None
    value = schema[keyword]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"{_where((*path, keyword))}: {keyword} must be a whole number >= 0, got {shown(value)}"
        )
    return value


def _check_satisfiable(schema: Mapping[str, Any], path: tuple[str, ...]) -> None:
    """Contradictions no output can satisfy: the answer would break the schema."""
    for low, high, what in (
        ("minItems", "maxItems", "array"),
        ("minLength", "maxLength", "string"),
        ("minProperties", "maxProperties", "object"),
    ):
        least, most = _count(schema, low, path), _count(schema, high, path)
        if least is not None and most is not None and least > most:
            raise ValueError(
                f"{_where(path)}: {low} {least} is more than {high} {most}: no {what} can "
                f"satisfy both; lower {low} or raise {high}"
            )
    _check_range(schema, path)
    _check_required(schema, path)
    if isinstance(schema.get("enum"), list) and not schema["enum"]:
        raise ValueError(f"{_where((*path, 'enum'))}: enum is empty: no value can match it")


def _check_range(schema: Mapping[str, Any], path: tuple[str, ...]) -> None:
    low, low_open, high, high_open = numeric_bounds(schema)
    if low is None or high is None:
        return
    if low > high or (low == high and (low_open or high_open)):
        lower = "exclusiveMinimum" if low_open else "minimum"
        upper = "exclusiveMaximum" if high_open else "maximum"
        raise ValueError(
            f"{_where(path)}: {lower} {low:g} and {upper} {high:g} leave no number between "
            f"them: lower {lower} or raise {upper}"
        )


def _check_required(schema: Mapping[str, Any], path: tuple[str, ...]) -> None:
    required = schema.get("required")
    if not isinstance(required, list):
        return
    declared = schema.get("properties")
    names = declared.keys() if isinstance(declared, Mapping) else ()
    missing = [name for name in required if name not in names]
    if missing:
        raise ValueError(
            f"{_where((*path, 'required'))}: required names {shown(missing[0])}, which "
            "properties does not declare: no answer zest constrains can hold it; declare it "
            "under properties or remove it from required"
        )


def _check_pattern(pattern: str, path: tuple[str, ...], limits: SchemaLimits) -> None:
    if len(pattern) > limits.pattern_chars:
        raise ValueError(
            f"{_where(path)}: the pattern is {len(pattern)} characters, over zest's limit of "
            f"{limits.pattern_chars}: shorten it {_LIMITS}"
        )
    expansion = _PatternSize(pattern, limits, path).total()
    if expansion > limits.pattern_expansion:
        raise ValueError(
            f"{_where(path)}: the pattern's repetitions expand to {expansion} atoms, over "
            f"zest's limit of {limits.pattern_expansion}: lower its {{m,n}} counts "
            f"{_LIMITS}"
        )


@dataclass
class _PatternSize:
    """The atoms a pattern expands to once each `{m,n}` copies its operand n times (what the
    converter does); `*`, `+` and `?` stay loops and cost nothing extra."""

    pattern: str
    limits: SchemaLimits
    path: tuple[str, ...]
    i: int = 0

    def total(self) -> int:
        size = self._sequence()
        while self.i < len(self.pattern):  # an unbalanced `)`: the converter refuses it
            self.i += 1
            size += self._sequence()
        return size

    def _sequence(self) -> int:
        size, last = 0, 0
        while self.i < len(self.pattern) and self.pattern[self.i] != ")":
            char = self.pattern[self.i]
            if char == "{":
                size += last * (self._quantifier() - 1)
            elif char == "|":
                self.i += 1
                last = 0
            else:
                last = self._atom()
                size += last
        return size

    def _atom(self) -> int:
        char, self.i = self.pattern[self.i], self.i + 1
        if char == "\\":
            self.i += 1
        elif char == "[":
            while self.i < len(self.pattern) and self.pattern[self.i] != "]":
                self.i += 2 if self.pattern[self.i] == "\\" else 1
            self.i += 1
        elif char == "(":
            size = self._sequence()
            self.i += 1  # the `)`
            return max(size, 1)
        elif char in "*+?^$":
            return 0
        return 1

    def _quantifier(self) -> int:
        end = self.pattern.find("}", self.i)
        body = self.pattern[self.i + 1 : end] if end > 0 else ""
        self.i = end + 1 if end > 0 else len(self.pattern)
        counts = [int(part) for part in body.split(",") if part.strip().isdigit()]
        most = max(counts, default=1)
        if most > self.limits.repetitions:
            raise ValueError(
                f"{_where(self.path)}: {{{body}}} repeats {most} times, over zest's limit of "
                f"{self.limits.repetitions}: lower it {_LIMITS}"
            )
        return max(most, 1)


def _where(path: tuple[str, ...]) -> str:
    """The key path inside the schema, as the client wrote it."""
    return ".".join(path) if path else "the schema"
