"""A route's rules as text (the web page's Routes tab, GET /v1/routes): each leaf as the trace
names it, the combinators around them."""

from __future__ import annotations

from typing import Any

from zest.router import Decision, RouteInput, Rule, condition_text, decide, rules_summary


def rule(when: dict[str, Any], **extra: Any) -> Rule:
    return Rule.model_validate({"id": "r", "when": when, "to": "other", **extra})


def test_a_leaf_reads_as_its_kind_and_value_without_unset_fields() -> None:
    assert (
        condition_text(rule({"keywords_any": ["def ", "é"]}).when) == 'keywords_any: ["def ", "é"]'
    )
    assert (
        condition_text(rule({"metadata": {"key": "consent", "equals": "denied"}}).when)
        == 'metadata: {"key": "consent", "equals": "denied"}'
    )


def test_a_model_backed_leaf_leaves_out_its_defaults() -> None:
    when = rule({"similar_to": {"via": "embed", "label": "code", "min_score": 0.6}}).when
    assert condition_text(when) == 'similar_to: {"via": "embed", "label": "code", "min_score": 0.6}'


def test_combinators_nest_and_several_keys_are_an_implicit_all() -> None:
    when = rule(
        {
            "min_chars": 10,
            "any": [{"keywords_any": ["def "]}, {"not": {"has_tools": True}}],
            "all": [{"regex": "x+"}, {"max_chars": 99}],
        }
    ).when
    assert condition_text(when) == (
        'min_chars: 10 and any(keywords_any: ["def "]; not(has_tools: true)) and '
        "all(regex: 'x+'; max_chars: 99)"
    )


def test_each_leaf_reads_as_the_trace_names_it() -> None:
    when = {"keywords_any": ["def "], "max_chars": 99}
    decision = decide("task", [rule(when)], RouteInput("def f(): pass"))
    assert isinstance(decision, Decision)
    traced = " and ".join(entry.condition for entry in decision.trace)
    assert traced == condition_text(rule(when).when)


def test_the_summary_lists_each_rule_once_in_order() -> None:
    rules = [
        rule({"keywords_any": ["def "]}, outputs={"reason": "code"}),
        Rule.model_validate({"id": "long", "when": {"min_prompt_tokens": 3000}, "to": "big"}),
    ]
    assert rules_summary(rules) == [
        {"id": "r", "when": 'keywords_any: ["def "]', "to": "other", "outputs": {"reason": "code"}},
        {"id": "long", "when": "min_prompt_tokens: 3000", "to": "big", "outputs": {}},
    ]
