"""A route's rules as text: each condition on one line, its leaves written as the decision's
trace names them (`keywords_any: ["def "]`), so the web page's Routes tab, explain and a trace
read alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zest.router._rules import Condition, Rule, leaf_text

__all__ = ["condition_text", "leaf_text", "rules_summary"]


def condition_text(condition: Condition) -> str:
    """The condition on one line: the kinds of one mapping joined by `and` (an implicit all),
    `any(a; b)`, `all(a; b)`, `not(a)`; each leaf as the trace names it."""
    return " and ".join(_part_text(kind, value, text) for kind, value, text in condition.parts())


def _part_text(kind: str, value: Any, text: str) -> str:
    if kind in ("any", "all"):
        return f"{kind}({'; '.join(condition_text(child) for child in value)})"
    if kind == "not_":
        return f"not({condition_text(value)})"
    return text


def rules_summary(rules: Sequence[Rule]) -> list[dict[str, Any]]:
    """Each rule in order: its id, its condition as text, its target and outputs."""
    return [
        {"id": rule.id, "when": condition_text(rule.when), "to": rule.to, "outputs": rule.outputs}
        for rule in rules
    ]
