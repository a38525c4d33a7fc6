"""A route's rules as text: each condition on one line, its leaves written as the decision's
trace names them (`keywords_any: ["def "]`), so the web page's Routes tab, explain and a trace
read alike."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from zest.router._rules import Classify, Condition, Rule, SimilarTo

__all__ = ["condition_text", "leaf_text", "rules_summary"]

_COMBINATORS = {"any": "any", "all": "all"}


def leaf_text(kind: str, value: Any) -> str:
    """One condition kind and its value: a model-backed one without its defaults (timeout_s,
    on_error), the others without their unset fields."""
    if isinstance(value, SimilarTo | Classify):
        value = value.model_dump(exclude_defaults=True)
    elif isinstance(value, BaseModel):
        value = value.model_dump(exclude_none=True)
    return f"{kind}: {json.dumps(value, ensure_ascii=False, default=str)}"


def condition_text(condition: Condition) -> str:
    """The condition on one line: the kinds of one mapping joined by `and` (an implicit all),
    `any(a; b)`, `all(a; b)`, `not(a)`."""
    return " and ".join(_kind_text(condition, kind) for kind in condition.kinds())


def _kind_text(condition: Condition, kind: str) -> str:
    value = getattr(condition, kind)
    if kind in _COMBINATORS:
        return f"{kind}({'; '.join(condition_text(child) for child in value)})"
    if kind == "not_":
        return f"not({condition_text(value)})"
    return leaf_text(kind, value)


def rules_summary(rules: Sequence[Rule]) -> list[dict[str, Any]]:
    """Each rule in order: its id, its condition as text, its target and outputs."""
    return [
        {"id": rule.id, "when": condition_text(rule.when), "to": rule.to, "outputs": rule.outputs}
        for rule in rules
    ]
