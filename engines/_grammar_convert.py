"""JSON Schema to GBNF: llama-cpp-python's converter (llama.cpp's json_schema_to_grammar.py),
with what zest adds to it.

- Enums and consts as tries: values that share a prefix share its grammar, so a draw walks a
  prefix once instead of once per value (an enum of 1,000 values sharing 25 characters cost
  1,000 grammar stacks per step as alternatives, about a dozen as a trie).
- Integer and number ranges (minimum, maximum and their exclusive forms) and whole-number
  multipleOf, which the converter skips: ranges as digit-by-digit alternatives, multiples as a
  trie of the values between the bounds.
- Rewrites that keep a keyword the converter would skip: a type list beside other keywords
  becomes anyOf of one schema per type; an array's minItems/maxItems without items gets
  items of any value; allOf of one part is that part; an empty schema (or `items: {}`) is any
  JSON value (the converter wrote an object, or failed).
- Literals escaped for GBNF (the converter leaves backslashes raw, so a JSON escape such as
  `\\"` in a value or a property name became a raw quote); the `date` format keeps each
  month's days (February to 28) and years from 1000; a pattern's `.` never writes a quote, a
  backslash or a control character, which would break the JSON string around it.

What the router refuses (router/_schema_keywords.py) never reaches this module. Run inside the
grammar checker's child process (engines/_grammar_child.py loads it by path): the standard
library and llama_cpp only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from llama_cpp import llama_grammar

__all__ = ["ZestSchemaConverter", "integer_range", "schema_to_grammar", "trie_rule"]

_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
     "$comment", "$id", "$schema"}
)  # fmt: skip
_ANY = {"description": "any JSON value"}  # {} or true, in a form the converter visits
_NUMERIC = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_DATE = (
    '[1-9] [0-9] [0-9] [0-9] "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | '
    '"3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02" "-" ( "0" '
    '[1-9] | "1" [0-9] | "2" [0-8] ) )'
)
_JSON_DOT = '[^"\\\\\\x7F\\x00-\\x1F]'
_DIGITS_MAX = 16  # an unbounded integer part, as the converter's integral-part
_FRACTION_MAX = 6  # digits after the point, fewer near a large bound (see _fraction_digits)


def schema_to_grammar(schema_text: str) -> str:
    """The GBNF grammar of the JSON Schema `schema_text`."""
    converter: Any = ZestSchemaConverter(
        prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False
    )
    schema = converter.resolve_refs(json.loads(schema_text), "stdin")
    converter.visit(schema, "")
    return str(converter.format_grammar())


# The converter is untyped: its subclass calls it as Any.
_Converter: Any = llama_grammar.SchemaConverter


class ZestSchemaConverter(_Converter):  # type: ignore[misc]
    def visit(self, schema: Any, name: str) -> str:
        if not isinstance(schema, Mapping):
            return str(super().visit(schema, name))
        schema = _rewritten(schema)
        rule_name = name + "-" if name in llama_grammar.RESERVED_NAMES else name or "root"
        if all(k in _ANNOTATIONS for k in schema):  # any JSON value (the converter: an object)
            value = self._add_primitive("value", llama_grammar.PRIMITIVE_RULES["value"])
            return str(self._add_rule(rule_name, value))
        combined = any(k in schema for k in ("$ref", "anyOf", "oneOf"))
        if not combined and ("const" in schema or "enum" in schema):
            values = [schema["const"]] if "const" in schema else list(schema["enum"])
            return str(self._add_rule(rule_name, trie_rule(json.dumps(v) for v in values)))
        numeric = schema.get("type") in ("integer", "number")
        if not combined and numeric and any(k in schema for k in _NUMERIC):
            return str(self._add_rule(rule_name, _numeric_rule(schema)))
        return str(super().visit(schema, name))

    def _format_literal(self, literal: str) -> str:
        return _literal(literal)

    def _add_primitive(self, name: str, rule: Any) -> str:
        if name == "date":
            rule = llama_grammar.BuiltinRule(_DATE, [])
        return str(super()._add_primitive(name, rule))

    def _add_rule(self, name: str, rule: str) -> str:
        if name == "dot":
            rule = _JSON_DOT
        return str(super()._add_rule(name, rule))


# --- rewrites ---------------------------------------------------------------------------------


def _rewritten(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """`schema` in a form whose every keyword the converter keeps (itself when it is)."""
    parts = schema.get("allOf")
    if isinstance(parts, list) and len(parts) == 1 and isinstance(parts[0], Mapping):
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        return _rewritten({**rest, **parts[0]})
    types = schema.get("type")
    if isinstance(types, list) and "const" not in schema and "enum" not in schema:
        beside = {k: v for k, v in schema.items() if k != "type" and k not in _ANNOTATIONS}
        if beside:
            return {"anyOf": [{**beside, "type": t} for t in types]}
    if schema.get("type") == "array" and "prefixItems" not in schema:
        items = schema.get("items", True if _counted(schema) else None)
        if items is True or items == {}:  # any items (the converter reads {} as no items)
            return {**schema, "items": _ANY}
    return schema


def _counted(schema: Mapping[str, Any]) -> bool:
    return "minItems" in schema or "maxItems" in schema


# --- tries ------------------------------------------------------------------------------------


class _Node:
    __slots__ = ("children", "end")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.end = False


def trie_rule(texts: Iterable[str], *, space: bool = True) -> str:
    """An alternation of the literal `texts` as a trie: `"ab" ( "c" | "d" )` for abc, abd."""
    root = _Node()
    for text in texts:
        node = root
        for char in text:
            node = node.children.setdefault(char, _Node())
        node.end = True
    body = _branches(root)
    return f"{body} space" if space else body


def _branches(node: _Node) -> str:
    parts = []
    for first, after in node.children.items():
        literal, child = first, after
        while not child.end and len(child.children) == 1:
            (char, child) = next(iter(child.children.items()))
            literal += char
        rest = _branches(child)
        parts.append(f"{_literal(literal)} {rest}".rstrip())
    if not parts:
        return ""
    alternatives = " | ".join(parts)
    if node.end:
        return f"( {alternatives} )?"
    return f"( {alternatives} )" if len(parts) > 1 else alternatives


def _literal(text: str) -> str:
    """`text` as a GBNF string literal: backslash, quote and control characters escaped."""
    out = []
    for char in text:
        if char in '\\"':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


# --- numbers ----------------------------------------------------------------------------------


def _bounds(schema: Mapping[str, Any]) -> tuple[float | None, bool, float | None, bool]:
    """(low, low exclusive, high, high exclusive): the tighter of each pair."""
    low, low_open = schema.get("minimum"), False
    ex = schema.get("exclusiveMinimum")
    if ex is not None and (low is None or ex >= low):
        low, low_open = ex, True
    high, high_open = schema.get("maximum"), False
    ex = schema.get("exclusiveMaximum")
    if ex is not None and (high is None or ex <= high):
        high, high_open = ex, True
    return low, low_open, high, high_open


def _whole_bounds(schema: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """The integer range a schema's bounds leave, both ends inclusive."""
    low, low_open, high, high_open = _bounds(schema)
    first = None if low is None else (math.floor(low) + 1 if low_open else math.ceil(low))
    last = None if high is None else (math.ceil(high) - 1 if high_open else math.floor(high))
    return first, last


def _numeric_rule(schema: Mapping[str, Any]) -> str:
    step = schema.get("multipleOf")
    integer = schema["type"] == "integer" or step is not None
    if step is not None and step != 1:
        first, last = _whole_bounds(schema)
        assert first is not None, "multipleOf needs both bounds (the router refuses it)"
        assert last is not None, "multipleOf needs both bounds (the router refuses it)"
        start = -(-first // int(step)) * int(step)
        return trie_rule(str(v) for v in range(start, last + 1, int(step)))
    if integer:
        return f"{integer_range(*_whole_bounds(schema))} space"
    return f"{_number_range(*_bounds(schema))} space"


def integer_range(first: int | None, last: int | None) -> str:
    """GBNF for the integers from `first` to `last` (None: unbounded), as JSON writes them."""
    parts = []
    if last is None or last >= 0:
        parts.append(_uint_range(max(first, 0) if first is not None else 0, last))
    if first is None or first < 0:
        low = 1 if last is None or last >= 0 else -last
        high = None if first is None else -first
        parts.append(f'"-" {_group(_uint_range(low, high))}')
    return _group(" | ".join(parts))


def _number_range(low: float | None, low_open: bool, high: float | None, high_open: bool) -> str:
    """GBNF for the decimals between whole-number bounds: an optional minus, digits, an
    optional fraction, no exponent (the router refuses fractional bounds)."""
    digits = _fraction_digits(low, high)
    parts = []
    if high is None or high > 0 or (high == 0 and not high_open):
        start = (0, False) if low is None or low < 0 else (int(low), low_open)
        parts.append(_magnitudes(*start, None if high is None else int(high), high_open, digits))
    if low is None or low < 0:
        start = (0, True) if high is None or high >= 0 else (-int(high), high_open)
        end = None if low is None else -int(low)
        parts.append(f'"-" {_group(_magnitudes(*start, end, low_open, digits))}')
    return _group(" | ".join(parts))


def _fraction_digits(low: float | None, high: float | None) -> int:
    """Digits after the point: few enough that a value near a bound never rounds onto it as
    a double (about 15 significant digits in all)."""
    widest = max((len(str(abs(int(b)))) for b in (low, high) if b is not None), default=1)
    return max(0, min(_FRACTION_MAX, 15 - widest))


def _magnitudes(low: int, low_open: bool, high: int | None, high_open: bool, digits: int) -> str:
    """Non-negative decimals m with low <(=) m <(=) high, written `I` or `I.F`."""
    fraction = f'( "." [0-9]{{1,{digits}}} )?' if digits else ""
    nonzero = f'"." "0"{{0,{digits - 1}}} [1-9] [0-9]{{0,{digits - 1}}}' if digits else ""
    parts = []
    first, last = low + (1 if low_open else 0), None if high is None else high - 1
    if last is None or first <= last:
        parts.append(f"{_group(_uint_range(first, last))} {fraction}".rstrip())
    if high is not None and not high_open and high >= low and not (high == low and low_open):
        parts.append(f'"{high}"')
    if low_open and nonzero and (high is None or low < high):
        parts.append(f'"{low}" {nonzero}')
    assert parts, "an empty range (the router refuses it)"
    return " | ".join(parts)


def _uint_range(first: int, last: int | None) -> str:
    """GBNF for the non-negative integers from `first` to `last` without leading zeros."""
    if last is None:
        width = len(str(first))
        longer = f"[1-9] [0-9]{{{width},{max(width, _DIGITS_MAX - 1)}}}"
        return f"{_group(_uint_range(first, 10**width - 1))} | {longer}"
    parts = []
    for width in range(len(str(first)), len(str(last)) + 1):
        low = max(first, 10 ** (width - 1) if width > 1 else 0)
        high = min(last, 10**width - 1)
        if low <= high:
            parts.append(_same_width(str(low), str(high)))
    return " | ".join(parts)


def _same_width(low: str, high: str) -> str:
    """GBNF for the numbers from `low` to `high`, strings of one width."""
    if low == high:
        return f'"{low}"'
    if len(low) == 1:
        return f"[{low}-{high}]"
    if low[0] == high[0]:
        return f'"{low[0]}" {_group(_same_width(low[1:], high[1:]))}'
    rest = len(low) - 1
    parts = []
    first, last = int(low[0]), int(high[0])
    if low[1:] != "0" * rest:
        parts.append(f'"{low[0]}" {_group(_same_width(low[1:], "9" * rest))}')
        first += 1
    if high[1:] != "9" * rest:
        tail = f'"{high[0]}" {_group(_same_width("0" * rest, high[1:]))}'
        last -= 1
    else:
        tail = ""
    if first <= last:
        digit = f'"{first}"' if first == last else f"[{first}-{last}]"
        parts.append(f"{digit} [0-9]{{{rest}}}")
    if tail:
        parts.append(tail)
    return " | ".join(parts)


def _group(expression: str) -> str:
    return f"( {expression} )" if " | " in expression else expression
