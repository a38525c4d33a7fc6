"""The routing decision's semantics, one test per line of docs/routing.md's table (Lemonade's, so a
policy moved from there behaves the same), the combinators, and model-backed conditions
resolved lazily by the caller."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from zest.router import (
    Classify,
    Condition,
    Decision,
    ModelResult,
    Pending,
    RouteInput,
    Rule,
    SimilarTo,
    ascii_fold,
    decide,
)


def rule(when: dict[str, Any], to: str = "other", id: str = "r", **extra: Any) -> Rule:
    return Rule.model_validate({"id": id, "when": when, "to": to, **extra})


def holds(when: dict[str, Any], given: RouteInput | str) -> bool:
    given = RouteInput(given) if isinstance(given, str) else given
    decision = decide("task", [rule(when)], given)
    assert isinstance(decision, Decision)
    return decision.matched_rule == "r"


# --- keywords: substrings, ASCII letters case-folded only ----------------------------------


def test_keywords_any_is_a_substring_match_folding_ascii_case() -> None:
    assert holds({"keywords_any": ["STACK trace", "zzz"]}, "here is my Stack Trace:")
    assert holds({"keywords_any": ["def "]}, "x = 1\ndef f(): pass")
    assert not holds({"keywords_any": ["def "]}, "undefined")


def test_keywords_fold_ascii_only() -> None:
    assert not holds({"keywords_any": ["é"]}, "CAFÉ")
    assert holds({"keywords_any": ["É"]}, "CAFÉ")


@pytest.mark.parametrize(
    "text", ["CAFÉ Déjà VU", "İSTANBUL ẞ Ω K", "A\ud800B\udfffC", "ÀÉÎÕÜ", "", "MiXeD 123 _-"]
)
def test_ascii_fold_lowers_a_to_z_and_nothing_else(text: str) -> None:
    lowered_ascii = "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)
    assert ascii_fold(text) == lowered_ascii


def test_keywords_all_needs_every_keyword() -> None:
    assert holds({"keywords_all": ["error", "python"]}, "Python raised an ERROR")
    assert not holds({"keywords_all": ["error", "python"]}, "Python is fine")


# --- regex: RE2, searched anywhere, case-sensitive --------------------------------------------


def test_regex_is_searched_anywhere_and_case_sensitive() -> None:
    assert holds({"regex": r"\bTODO\b"}, "fix: TODO later")
    assert not holds({"regex": r"\bTODO\b"}, "fix: todo later")


def test_a_pattern_re2_cannot_run_is_refused_naming_the_construct() -> None:
    with pytest.raises(ValidationError, match=r"regex '\(a\)\\1' is not one RE2 runs"):
        rule({"regex": r"(a)\1"})
    with pytest.raises(ValidationError, match="invalid perl operator"):
        rule({"regex": r"(?=a)b"})


def test_a_catastrophic_pattern_runs_in_linear_time() -> None:
    assert not holds({"regex": r"^(a+)+$"}, "a" * 50_000 + "b")


def test_regex_takes_a_lone_surrogate() -> None:
    assert holds({"regex": "b$"}, "a\udc00b")
    assert holds({"regex": r"a\?b"}, "a\udc00b")  # searched as `?`


def test_regex_matches_characters_not_bytes() -> None:
    """The text is searched as UTF-8 bytes by a UTF-8 pattern: `.` is one character (two
    bytes for `ñ`), and a class's range holds characters, not bytes."""
    assert holds({"regex": "é.x"}, "aéñx")
    assert not holds({"regex": "é..x"}, "aéñx")
    assert holds({"regex": "^[à-ÿ]{3}$"}, "éñü")


def matched(rules: tuple[Rule, ...], text: str) -> str | None:
    decision = decide("task", rules, RouteInput(text))
    assert isinstance(decision, Decision)
    return decision.matched_rule


def test_a_table_s_patterns_are_searched_together_each_with_its_own_flags() -> None:
    """A table's patterns are first searched as one alternation: a pattern's flags, anchors
    and alternatives stay its own in it."""
    table = (
        rule({"regex": "(?i)alpha"}, id="folded"),
        rule({"regex": "BETA|GAMMA"}, id="either"),
        rule({"regex": "^def "}, id="anchored"),
    )
    assert matched(table, "ALPHA") == "folded"
    assert matched(table, "beta") is None  # (?i) ends with its own pattern
    assert matched(table, "a GAMMA ray") == "either"
    assert matched(table, "def f(): pass") == "anchored"
    assert matched(table, "x = 1\ndef f(): pass") is None  # ^ is the text's start


def test_a_pattern_quoting_with_q_is_searched_on_its_own() -> None:
    r"""`\Q` quotes to its pattern's end, or its `\E`: in an alternation it would quote past its
    own group (`(?:\Qa)|(?:\Qc\Eb)` matches only `a)|(?:\Qcb`)."""
    table = (rule({"regex": r"\Qa"}, id="quoted"), rule({"regex": r"\Qc\Eb"}, id="ended"))
    assert matched(table, "a") == "quoted"
    assert matched(table, "cb") == "ended"
    assert matched(table, "b") is None


def test_a_table_s_keywords_are_looked_for_together_as_literals() -> None:
    """A table's keywords are first looked for in one search: a keyword's regex characters
    are literal there, and one RE2 cannot take (a lone surrogate) is looked for on its own."""
    table = (
        rule({"keywords_any": ["zzz"]}, id="z"),
        rule({"keywords_all": ["A.B", "(x|"]}, id="both"),
        rule({"keywords_any": ["\ud800"]}, id="surrogate"),
    )
    assert matched(table, "a.b then (X|") == "both"
    assert matched(table, "aXb then (x|") is None  # `.` is no wildcard
    assert matched(table, "a.b alone") is None
    assert matched(table, "lone \ud800 here") == "surrogate"
    assert matched(table, "ZZZ") == "z"


def test_a_table_is_compiled_once_and_evaluated_alike_every_time() -> None:
    table = (rule({"keywords_any": ["def "], "max_chars": 40}, id="code"),)
    first, again = (decide("task", table, RouteInput("def f(): pass")) for _ in range(2))
    assert first == again
    assert isinstance(first, Decision)
    assert [entry.as_dict() for entry in first.trace] == [
        {"condition": 'keywords_any: ["def "]', "kind": "keywords_any", "result": True},
        {"condition": "max_chars: 40", "kind": "max_chars", "result": True},
    ]


# --- lengths: UTF-8 bytes, inclusive; prompt tokens as the model counts them -------------------


def test_chars_are_utf8_bytes_inclusive() -> None:
    assert holds({"min_chars": 4}, "éé")  # 2 characters, 4 bytes
    assert not holds({"min_chars": 5}, "éé")
    assert holds({"max_chars": 4}, "éé")
    assert not holds({"max_chars": 3}, "éé")


def test_prompt_tokens_are_counted_lazily_and_once() -> None:
    calls = []

    def count() -> int:
        calls.append(1)
        return 3000

    given = RouteInput("x", prompt_tokens=count)
    rules = [rule({"min_prompt_tokens": 3001}, id="a"), rule({"max_prompt_tokens": 3000}, id="b")]
    decision = decide("task", rules, given)
    assert isinstance(decision, Decision)
    assert decision.matched_rule == "b"
    assert calls == [1]
    untouched: list[int] = []
    decide("task", [rule({"keywords_any": ["y"]})], RouteInput("x", prompt_tokens=untouched.pop))


# --- tools and images ------------------------------------------------------------------------


def test_has_tools_true_and_false() -> None:
    assert holds({"has_tools": True}, RouteInput("x", has_tools=True))
    assert holds({"has_tools": False}, RouteInput("x", has_tools=False))
    assert not holds({"has_tools": False}, RouteInput("x", has_tools=True))


def test_has_images() -> None:
    assert holds({"has_images": True}, RouteInput("x", has_images=True))
    assert not holds({"has_images": True}, RouteInput("x"))


# --- metadata ------------------------------------------------------------------------------


def meta(**values: Any) -> RouteInput:
    return RouteInput("x", metadata=values)


def test_metadata_equals_is_exact_and_case_sensitive() -> None:
    when = {"metadata": {"key": "consent", "equals": "denied"}}
    assert holds(when, meta(consent="denied"))
    assert not holds(when, meta(consent="Denied"))
    assert not holds(when, meta(consent="denied "))


def test_metadata_any_matches_the_value_or_one_of_its_comma_tokens() -> None:
    when = {"metadata": {"key": "team", "any": ["ml", "infra"]}}
    assert holds(when, meta(team="ml"))
    assert holds(when, meta(team="web, infra"))
    assert not holds(when, meta(team="web,mobile"))


def test_metadata_exists() -> None:
    assert holds({"metadata": {"key": "k", "exists": True}}, meta(k="v"))
    assert holds({"metadata": {"key": "k", "exists": False}}, meta())
    assert not holds({"metadata": {"key": "k", "exists": False}}, meta(k="v"))


def test_an_empty_or_blank_metadata_value_counts_as_absent() -> None:
    assert holds({"metadata": {"key": "k", "exists": False}}, meta(k="  "))
    assert not holds({"metadata": {"key": "k", "equals": ""}}, meta(k=""))


def test_a_metadata_match_takes_exactly_one_test() -> None:
    with pytest.raises(ValidationError, match="needs exactly one of equals, any, exists"):
        rule({"metadata": {"key": "k", "equals": "a", "exists": True}})


# --- combinators -------------------------------------------------------------------------------


def test_several_keys_are_an_implicit_all() -> None:
    when = {"keywords_any": ["code"], "max_chars": 10}
    assert holds(when, "code")
    assert not holds(when, "code" * 10)


def test_any_all_not() -> None:
    assert holds({"any": [{"keywords_any": ["a"]}, {"keywords_any": ["b"]}]}, "b")
    assert not holds({"all": [{"keywords_any": ["a"]}, {"keywords_any": ["b"]}]}, "b")
    assert holds({"not": {"keywords_any": ["a"]}}, "b")


def test_any_and_all_stop_at_the_first_child_that_decides() -> None:
    given = RouteInput("abc")
    decision = decide(
        "task",
        [rule({"any": [{"keywords_any": ["a"]}, {"keywords_any": ["z"]}]})],
        given,
    )
    assert isinstance(decision, Decision)
    assert [e.condition for e in decision.trace] == ['keywords_any: ["a"]']
    decision = decide(
        "task",
        [rule({"all": [{"keywords_any": ["z"]}, {"keywords_any": ["a"]}]})],
        given,
    )
    assert isinstance(decision, Decision)
    assert [e.condition for e in decision.trace] == ['keywords_any: ["z"]']


def test_an_empty_condition_is_refused() -> None:
    with pytest.raises(ValidationError, match="an empty condition"):
        rule({})


# --- the decision ----------------------------------------------------------------------------


def test_the_first_matching_rule_wins_and_copies_its_outputs() -> None:
    rules = [
        rule({"keywords_any": ["x"]}, to="one", id="first", outputs={"reason": "x"}),
        rule({"keywords_any": ["x"]}, to="two", id="second"),
    ]
    decision = decide("task", rules, RouteInput("x"))
    assert isinstance(decision, Decision)
    assert decision.as_dict() == {
        "route_to": "one",
        "matched_rule": "first",
        "default_used": False,
        "outputs": {"reason": "x"},
    }
    assert decision.rule_label == "first"


def test_no_matching_rule_is_served_by_the_route_itself() -> None:
    decision = decide("task", [rule({"keywords_any": ["x"]})], RouteInput("y"))
    assert isinstance(decision, Decision)
    assert decision.as_dict(with_trace=True) == {
        "route_to": "task",
        "matched_rule": None,
        "default_used": True,
        "outputs": {},
        "trace": [{"condition": 'keywords_any: ["x"]', "kind": "keywords_any", "result": False}],
    }
    assert decision.rule_label == "default"


def test_queued_over_reads_the_waiting_requests_of_a_route() -> None:
    when = {"queued_over": {"route": "chat", "requests": 2}}
    assert holds(when, RouteInput("x", waiting=lambda route: 3 if route == "chat" else 0))
    assert not holds(when, RouteInput("x", waiting=lambda route: 2))


# --- model-backed conditions: resolved by the caller, only when reached ----------------------

SIMILAR = {"similar_to": {"via": "embed", "label": "code", "min_score": 0.6}}
CLASSIFY = {
    "classify": {
        "via": "classifier",
        "labels": ["code", "other"],
        "prompt": "Is this about code?",
        "label": "code",
        "on_error": "default_label",
        "default_label": "other",
    }
}


def test_a_model_backed_condition_is_pending_until_its_result_is_given() -> None:
    rules = [rule(SIMILAR)]
    pending = decide("task", rules, RouteInput("def f(): pass"))
    assert isinstance(pending, Pending)
    assert isinstance(pending.condition, SimilarTo)
    results = {pending.condition: ModelResult(score=0.71, cached=True)}
    decision = decide("task", rules, RouteInput("def f(): pass"), results)
    assert isinstance(decision, Decision)
    assert decision.matched_rule == "r"
    assert decision.trace[0].as_dict() == {
        "condition": 'similar_to: {"via": "embed", "label": "code", "min_score": 0.6}',
        "kind": "similar_to",
        "result": True,
        "score": 0.71,
        "cached": True,
    }


def test_a_model_backed_condition_is_not_reached_when_a_cheaper_one_fails() -> None:
    rules = [rule({"keywords_any": ["def"], **SIMILAR})]
    decision = decide("task", rules, RouteInput("hello"))
    assert isinstance(decision, Decision)
    assert decision.default_used


def test_a_similarity_below_the_threshold_or_failed_does_not_match() -> None:
    condition = SimilarTo.model_validate(SIMILAR["similar_to"])
    for found in (ModelResult(score=0.59), ModelResult(error="timed out after 2 s")):
        decision = decide("task", [rule(SIMILAR)], RouteInput("x"), {condition: found})
        assert isinstance(decision, Decision)
        assert decision.default_used


def test_classify_matches_its_label_and_an_error_takes_the_default_label() -> None:
    condition = Classify.model_validate(CLASSIFY["classify"])
    picked = decide("t", [rule(CLASSIFY)], RouteInput("x"), {condition: ModelResult(label="code")})
    assert isinstance(picked, Decision)
    assert picked.matched_rule == "r"
    failed = decide("t", [rule(CLASSIFY)], RouteInput("x"), {condition: ModelResult(error="e")})
    assert isinstance(failed, Decision)
    assert failed.default_used
    assert failed.trace[0].label == "other"


def test_classify_labels_are_checked_at_load() -> None:
    with pytest.raises(ValidationError, match="label 'cod' is not among labels"):
        rule({"classify": {**CLASSIFY["classify"], "label": "cod"}})


# --- a table is worked out once per condition, invisibly -------------------------------------


def test_a_condition_s_cached_parts_leave_its_equality_hash_and_dump_alone() -> None:
    when = {"keywords_any": ["def "], "not": {"has_tools": True}, "max_chars": 9}
    evaluated, fresh = rule(when).when, rule(when).when
    assert holds(when, "def f()")  # another rule object: `evaluated` is still fresh here
    decide("task", [Rule(id="r", when=evaluated, to="x")], RouteInput("def"))
    assert [kind for kind, _, _ in evaluated.parts()] == ["keywords_any", "max_chars", "not_"]
    assert evaluated == fresh
    assert hash(evaluated) == hash(fresh)
    assert evaluated.model_dump() == fresh.model_dump()
    assert evaluated.model_dump_json() == fresh.model_dump_json()
    assert isinstance(Condition.model_validate(evaluated.model_dump(by_alias=True)), Condition)
