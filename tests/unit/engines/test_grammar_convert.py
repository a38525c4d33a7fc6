"""zest's additions to llama.cpp's JSON Schema converter (engines/_grammar_convert.py): integer
and number ranges, multiples and enum tries checked value by value, by reading the GBNF they
write as a regular expression (they use only literals, classes, groups, alternation and
repetition counts), and whole grammars parsed by llama.cpp itself."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import pytest

from zest.engines._grammar_convert import (
    _number_range,
    _same_width,
    integer_range,
    schema_to_grammar,
    trie_rule,
)


def regex_of(gbnf: str) -> re.Pattern[str]:
    """The regular expression of a GBNF expression without rule references."""
    out, i = [], 0
    while i < len(gbnf):
        char = gbnf[i]
        if char == '"':
            i, text = _literal(gbnf, i + 1)
            out.append(f"(?:{re.escape(text)})")
        elif char == "[":
            end = i + 1
            while gbnf[end] != "]":
                end += 2 if gbnf[end] == "\\" else 1
            out.append(gbnf[i : end + 1])
            i = end + 1
        elif char == "(":
            out.append("(?:")
            i += 1
        elif char in ")|?*+":
            out.append(char)
            i += 1
        elif char == "{":
            end = gbnf.index("}", i)
            out.append(gbnf[i : end + 1])
            i = end + 1
        elif char == " ":
            i += 1
        else:
            raise ValueError(f"not in the subset: {gbnf[i:]!r}")
    return re.compile("".join(out))


def _literal(gbnf: str, i: int) -> tuple[int, str]:
    text = []
    escapes = {"n": "\n", "r": "\r", "t": "\t"}
    while gbnf[i] != '"':
        if gbnf[i] == "\\":
            if gbnf[i + 1] == "x":
                text.append(chr(int(gbnf[i + 2 : i + 4], 16)))
                i += 4
                continue
            text.append(escapes.get(gbnf[i + 1], gbnf[i + 1]))
            i += 2
            continue
        text.append(gbnf[i])
        i += 1
    return i + 1, "".join(text)


RANGES = [
    (2, 10), (0, 0), (-5, 5), (-15, 237), (10, 99), (1, 1000), (-1000, -1), (-230, -17),
    (0, None), (5, None), (123, None), (None, 0), (None, -7), (None, 42), (None, None),
    (19, 2001), (100, 100), (7, 8), (999, 1001),
]  # fmt: skip


@pytest.mark.parametrize(("first", "last"), RANGES)
def test_an_integer_range_holds_exactly_its_integers(first: int | None, last: int | None) -> None:
    pattern = regex_of(integer_range(first, last))
    for value in range(-2500, 2500):
        inside = (first is None or value >= first) and (last is None or value <= last)
        assert bool(pattern.fullmatch(str(value))) == inside, value
    for written in ("01", "-0", "007", "+1", "1.0", "1e3", ""):
        assert not pattern.fullmatch(written), written


def test_unbounded_integers_stop_at_sixteen_digits() -> None:
    pattern = regex_of(integer_range(0, None))
    assert pattern.fullmatch("9" * 16)
    assert not pattern.fullmatch("9" * 17)


@pytest.mark.parametrize(("low", "high"), [("1000", "4999"), ("0", "9"), ("120", "989")])
def test_same_width_ranges_cover_their_numbers(low: str, high: str) -> None:
    pattern = regex_of(_same_width(low, high))
    for value in range(0, 10 ** len(low)):
        written = str(value).zfill(len(low))
        assert bool(pattern.fullmatch(written)) == (low <= written <= high), written


NUMBER_RANGES = [
    (0, False, 1, False),
    (0, True, 1, True),
    (0, True, None, False),
    (None, False, 0, True),
    (-3, False, 7, True),
    (-10, True, -2, False),
    (5, False, 5, False),
    (-1, True, 0, True),
    (None, False, None, False),
    (2, False, None, False),
    (None, False, -4, False),
]


def decimals() -> list[str]:
    """Written numbers around the bounds above: integers, fractions, zeros, minus zero."""
    written = []
    for whole in range(-12, 13):
        for fraction in ("", ".0", ".5", ".000001", ".999999", ".25"):
            sign = "-" if whole < 0 else ""
            written.append(f"{sign}{abs(whole)}{fraction}")
            if whole == 0:
                written.append(f"-0{fraction}")
    return written


@pytest.mark.parametrize(("low", "low_open", "high", "high_open"), NUMBER_RANGES)
def test_a_number_range_holds_only_numbers_inside_it(
    low: int | None, low_open: bool, high: int | None, high_open: bool
) -> None:
    pattern = regex_of(_number_range(low, low_open, high, high_open))

    def inside(value: Decimal) -> bool:
        above = low is None or (value > low if low_open else value >= low)
        below = high is None or (value < high if high_open else value <= high)
        return above and below

    accepted = [w for w in decimals() if pattern.fullmatch(w)]
    assert accepted, "the range admits something"
    for written in accepted:
        assert inside(Decimal(written)), written
        assert not (written.startswith("-") and Decimal(written) == 0), written
    for written in decimals():  # every integer inside, and a fraction past an open bound
        value = Decimal(written)
        if inside(value) and written.lstrip("-").isdigit() and written != "-0":
            assert pattern.fullmatch(written), written
    if low is not None and low_open:
        assert pattern.fullmatch(f"{low}.5" if low >= 0 else f"-{abs(low) - 1}.5")
    for written in ("1e3", "+1", "01", ".5", "1."):
        assert not pattern.fullmatch(written), written


def test_a_trie_holds_its_values_and_nothing_else() -> None:
    values = [json.dumps(v) for v in ["red", "redder", "re", "blue", 1, 10, 100, None, 'a"b\\c']]
    pattern = regex_of(trie_rule(values, space=False))
    for value in values:
        assert pattern.fullmatch(value), value
    for other in ['"r"', '"reddest"', "1000", '"blu"', "nul", '"a"b\\c"']:
        assert not pattern.fullmatch(other), other


def test_an_enum_sharing_a_prefix_writes_it_once() -> None:
    prefix = "x" * 25
    rule = trie_rule(json.dumps(f"{prefix}{i}") for i in range(1000))
    assert rule.count(prefix) == 1
    assert len(rule) < 10_000  # as 1,000 alternatives: 31,000 bytes


def grammar_of(schema: dict[str, Any]) -> str:
    import llama_cpp

    grammar = schema_to_grammar(json.dumps(schema))
    sampler = llama_cpp.llama_sampler_init_grammar(None, grammar.encode(), b"root")
    assert sampler, grammar
    llama_cpp.llama_sampler_free(sampler)
    return grammar


def test_enum_values_with_quotes_and_backslashes_are_escaped_for_gbnf() -> None:
    grammar = grammar_of({"enum": ['say "hi"', "C:\\path", "tab\there"]})
    root = next(line for line in grammar.splitlines() if line.startswith("root ::="))
    assert regex_of(root.removeprefix("root ::= ").removesuffix(" space")).fullmatch(
        json.dumps('say "hi"')
    )


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 2, "maximum": 10},
        {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        {"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 100},
        {"type": ["string", "null"], "maxLength": 3},
        {"type": "array", "minItems": 2, "maxItems": 3},
        {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}}]},
        {"type": "string", "format": "date-time"},
        {"type": "string", "pattern": "^a.c$"},
        {"type": "object", "properties": {'we"ird': {"const": "x\\y"}}, "required": ['we"ird']},
    ],
    ids=[
        "integer-range",
        "number-range",
        "multiples",
        "type-list",
        "items",
        "all-of",
        "date",
        "dot",
        "escaped-names",
    ],
)
def test_llama_cpp_parses_every_rewritten_schema(schema: dict[str, Any]) -> None:
    assert "root ::=" in grammar_of(schema)


def test_a_type_list_keeps_the_keywords_beside_it() -> None:
    grammar = grammar_of({"type": ["string", "null"], "maxLength": 3})
    assert '"\\"" (char (char (char)?)?)? "\\"" space' in grammar


def test_min_items_without_items_is_kept() -> None:
    grammar = grammar_of({"type": "array", "minItems": 2})
    assert 'root ::= "[" space item "," space item ("," space item)* "]" space' in grammar
    assert "item ::= value" in grammar


def test_a_date_keeps_each_months_days() -> None:
    grammar = grammar_of({"type": "string", "format": "date"})
    date = next(line for line in grammar.splitlines() if line.startswith("date ::="))
    pattern = regex_of(date.removeprefix("date ::= "))
    for good in ("2024-01-31", "1999-02-28", "2030-04-30", "1000-12-01"):
        assert pattern.fullmatch(good), good
    for bad in ("2024-02-30", "2024-04-31", "0000-01-01", "2024-13-01", "2024-00-10"):
        assert not pattern.fullmatch(bad), bad


def test_a_patterns_dot_never_writes_what_breaks_a_json_string() -> None:
    grammar = grammar_of({"type": "string", "pattern": "^a.c$"})
    dot = next(line for line in grammar.splitlines() if line.startswith("dot ::="))
    pattern = regex_of(dot.removeprefix("dot ::= "))
    assert pattern.fullmatch("b")
    for bad in ('"', "\\", "\n", "\x00", "\x7f"):
        assert not pattern.fullmatch(bad), repr(bad)
