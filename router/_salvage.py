"""What of a route with schema errors can still be checked: its references.

`zest check` lists every problem of a file in one pass. A route with a schema error is left out
of the table, but the names it refers to (its model, its fallback models, its rules' targets and
their conditions' routes) are checked all the same, from what of it validates once the keys,
rules and fallback entries its errors are in are taken out: a typo in one key does not hide an
unknown model in the next. Only names are checked there (everything else depends on what the
errors left out); each problem is worded as the full check words it, at the key path the file
has (a rule keeps its number when one before it is taken out).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from zest.router._rules_check import rule_name_problems
from zest.router._schema import RouteConfig

__all__ = ["Salvaged", "name_problems", "salvage_route", "unknown_model"]

_LISTS = ("rules", "fallback")  # an error in one entry takes out that entry only


@dataclass(frozen=True)
class Salvaged:
    """A route without what its errors are in, and the file's number of each rule and fallback
    entry it kept."""

    route: RouteConfig
    rule_numbers: Sequence[int]
    fallback_numbers: Sequence[int]

    @classmethod
    def whole(cls, route: RouteConfig) -> Salvaged:
        return cls(route, range(len(route.rules)), range(len(route.fallback)))


def salvage_route(raw: Any, errors: Collection[tuple[int | str, ...]]) -> Salvaged | None:
    """The route `raw` (its YAML) without the keys, rules and fallback entries its schema
    `errors` (locations under the route) are in; None when what is left does not validate (a
    required key is wrong or missing, or the route is no mapping)."""
    if not isinstance(raw, dict):
        return None
    pruned, taken_out = dict(raw), {key: set[int]() for key in _LISTS}
    for loc in errors:
        if not loc:
            return None
        key = str(loc[0])
        if key in taken_out and len(loc) >= 2 and isinstance(loc[1], int):
            taken_out[key].add(loc[1])
        else:
            pruned.pop(key, None)
    numbers: dict[str, Sequence[int]] = {}
    for key, out in taken_out.items():
        entries = pruned.get(key)
        if isinstance(entries, list):
            numbers[key] = [n for n in range(len(entries)) if n not in out]
            pruned[key] = [entries[n] for n in numbers[key]]
    try:
        route = RouteConfig.model_validate(pruned)
    except ValidationError:
        return None
    whole = Salvaged.whole(route)
    return Salvaged(
        route,
        numbers.get("rules", whole.rule_numbers),
        numbers.get("fallback", whole.fallback_numbers),
    )


def unknown_model(at: str, name: str, models: Collection[str]) -> str:
    return f"{at}: unknown model {name!r} (known: {', '.join(sorted(models))})"


def name_problems(
    task: str, salvaged: Salvaged, models: Collection[str], routes: Collection[str]
) -> list[str]:
    """The models and routes `salvaged` names that the file does not declare."""
    where, route = f"routes.{task}", salvaged.route
    problems = []
    if route.model not in models:
        problems.append(unknown_model(f"{where}.model", route.model, models))
    for number, entry in zip(salvaged.fallback_numbers, route.fallback, strict=True):
        if entry.model not in models:
            problems.append(unknown_model(f"{where}.fallback.{number}.model", entry.model, models))
    return problems + rule_name_problems(task, route.rules, salvaged.rule_numbers, routes)
