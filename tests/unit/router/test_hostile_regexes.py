"""Hostile regexes in routes.yaml: the classic catastrophic-backtracking patterns compile in
RE2 and decide over a megabyte of their worst input at once; the constructs RE2 cannot run in
linear time are refused when the file loads, each naming itself; patterns RE2 would run on
its slow engine (the NFA, whose cost is the input's length times the pattern's size) are run
on its DFA, because a rule needs no capture."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pydantic import ValidationError

from zest.router import Decision, RouteInput, Rule, decide

MEGABYTE = 1_000_000

# (pattern, the input that makes a backtracking engine take exponential time, whether it
# matches)
CATASTROPHIC = [
    (r"(a+)+$", "a" * MEGABYTE + "!", False),
    (r"(a|a)*b", "a" * MEGABYTE, False),
    (r"(a|aa)+$", "a" * MEGABYTE + "!", False),
    (r"(a*)*b", "a" * MEGABYTE, False),
    (r"(x+x+)+y", "x" * MEGABYTE, False),
    (r"^(\w+\s?)*$", "word " * (MEGABYTE // 5) + "!", False),
    (r"^([a-zA-Z]+)*$", "aB" * (MEGABYTE // 2) + "1", False),
    (r"(.*a){20}", "a" * MEGABYTE, True),
    (r"^(([a-z])+.)+[A-Z]([a-z])+$", "a" * MEGABYTE, False),
    (
        r"^([a-zA-Z0-9])(([\-.]|[_]+)?([a-zA-Z0-9]+))*(@){1}[a-z0-9]+[.]{1}"
        r"(([a-z]{2,3})|([a-z]{2,3}[.]{1}[a-z]{2,3}))$",
        "a" * MEGABYTE + "@",
        False,
    ),
]


def rule(pattern: str) -> Rule:
    return Rule.model_validate({"id": "r", "when": {"regex": pattern}, "to": "other"})


def matched(pattern: str, text: str) -> bool:
    decision = decide("task", [rule(pattern)], RouteInput(text))
    assert isinstance(decision, Decision)
    return decision.matched_rule == "r"


@pytest.mark.parametrize(
    ("pattern", "text", "matches"), CATASTROPHIC, ids=[p for p, _, _ in CATASTROPHIC]
)
def test_a_catastrophic_pattern_decides_a_megabyte_of_its_worst_input(
    pattern: str, text: str, matches: bool
) -> None:
    started = time.perf_counter()
    result = matched(pattern, text)
    # A backtracking engine would take longer than the universe's age on these; RE2 takes
    # milliseconds. The bound only keeps a regression from hanging the suite.
    assert time.perf_counter() - started < 10
    assert result is matches


def test_a_large_pattern_that_matches_is_decided_on_the_dfa() -> None:
    """`(\\w+\\s?){100}` is 800 NFA instructions. Where it matches, finding its groups would
    run RE2's NFA over the match (about 19 s a megabyte on these CPUs); a rule needs only
    whether it matches, which RE2's DFA answers in milliseconds."""
    started = time.perf_counter()
    assert matched(r"(\w+\s?){100}", "a" * MEGABYTE + "!")
    assert matched(r"(.*a){20}", "a" * MEGABYTE)
    assert not matched(r"(\w+\s?){300}!", "a" * MEGABYTE)
    assert time.perf_counter() - started < 10


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        (r"(a)\1", r"invalid escape sequence: \1"),
        (r"(?P<n>a)(?P=n)", "invalid perl operator: (?P"),
        (r"\k<n>", r"invalid escape sequence: \k"),
        (r"(?=a)b", "invalid perl operator: (?="),
        (r"(?!a)b", "invalid perl operator: (?!"),
        (r"(?<=a)b", "invalid perl operator: (?<="),
        (r"(?<!a)b", "invalid perl operator: (?<!"),
        (r"(?>a+)b", "invalid perl operator: (?>"),
        (r"a++b", "bad repetition operator: ++"),
        (r"(?(1)a|b)", "invalid perl operator: (?("),
        (r"\G", r"invalid escape sequence: \G"),
        (r"a{1001}", "invalid repetition size: {1001}"),
        (r"(a{1000}){1000}", "invalid repetition size: {1000}"),
        (r"\pL{1000}", "pattern too large - compile failed"),
        (r"[", "missing ]: ["),
    ],
)
def test_what_re2_cannot_run_in_linear_time_is_refused_naming_it(
    pattern: str, construct: str
) -> None:
    """Printed as a routes file writes it (single quotes: a backslash is itself); the hint
    about linear time only for a pattern that asks for a backreference or a lookaround."""
    with pytest.raises(ValidationError) as refused:
        rule(pattern)
    [error] = refused.value.errors()
    assert error["loc"] == ("when", "regex")
    backtracks = pattern in BACKTRACKING
    fix = (
        "zest matches in linear time, so backreferences and lookarounds are out; rewrite it "
        "without them"
        if backtracks
        else "correct the pattern (zest's regexes are RE2's syntax, docs/routing.md)"
    )
    assert error["msg"] == (
        f"Value error, regex '{pattern}' is not one RE2 runs ({construct}): {fix}"
    )


BACKTRACKING = {r"(a)\1", r"(?P<n>a)(?P=n)", r"\k<n>", r"(?=a)b", r"(?!a)b", r"(?<=a)b", r"(?<!a)b"}


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (
            r"^\s*(def|class",
            r"regex '^\s*(def|class' is not one RE2 runs (missing ): ^\s*(def|class): correct "
            "the pattern (zest's regexes are RE2's syntax, docs/routing.md)",
        ),
        (
            r"[\1]\\1 (",
            r"regex '[\1]\\1 (' is not one RE2 runs (invalid escape sequence: \1): correct the "
            "pattern (zest's regexes are RE2's syntax, docs/routing.md)",
        ),
        (
            "it's (",
            "regex 'it''s (' is not one RE2 runs (missing ): it's (): correct the pattern "
            "(zest's regexes are RE2's syntax, docs/routing.md)",
        ),
        (
            "a\tb\\1",
            'regex "a\\tb\\\\1" is not one RE2 runs (invalid escape sequence: \\1): zest '
            "matches in linear time, so backreferences and lookarounds are out; rewrite it "
            "without them",
        ),
    ],
    # A control character: YAML's double quotes, JSON's escapes (as the file would write it).
    ids=["a typo", "an escaped or bracketed digit", "a quote", "a control character"],
)
def test_a_plain_typo_gets_no_hint_about_backreferences(pattern: str, message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        rule(pattern)
    assert refused.value.errors()[0]["msg"] == f"Value error, {message}"


@pytest.mark.parametrize(
    "text",
    ["\x00\x01\x1b[31m\x7f", "a\ud800b", "\udfff" * 1000, "\u2028\u2029\ufeff", "é" * 100_000],
)
def test_hostile_text_is_searched_without_error(text: str) -> None:
    """Control characters, lone surrogates (JSON may escape one) and long non-ASCII text."""
    patterns: list[Any] = [r"^.*$", r"[\x00-\x1f]", r"\p{L}+", r"(?s).+", r"\x{FFFD}"]
    for pattern in patterns:
        matched(pattern, text)  # decided: no exception, whatever the answer
