"""Rules against the rest of routes.yaml: every route a rule names exists and fits, every
similar_to label has phrases. Problems refuse the file (file, key path, fix); warnings are what
`zest check` says of a file that loads (a target's own rules, a target that would send data out).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterator, Sequence

from zest.router._rules import Classify, Condition, Rule, SimilarTo, label_answer, label_tokens
from zest.router._schema import REMOTE_ENGINE, RouteConfig, RoutesFile

__all__ = [
    "condition_routes",
    "file_phrase_problems",
    "phrases_of",
    "rule_name_problems",
    "rule_problems",
    "rule_warnings",
    "tightened",
    "walk_conditions",
]


def tightened(target: RouteConfig, caller: RouteConfig, caller_task: str = "") -> RouteConfig:
    """`target` with the stricter of the two privacies: privacy only tightens along a rule (or
    a condition's route), so a local_only request moved to a route with a remote fallback
    runs without that fallback. The copy names the caller (`caller_task`), which its plan
    gives as the reason a remote attempt is left out."""
    if caller.privacy == "local_only" and target.privacy != "local_only":
        kept = target.model_copy(update={"privacy": "local_only"})
        kept._privacy_kept_from = caller_task
        return kept
    return target


def walk_conditions(condition: Condition, at: str) -> Iterator[tuple[Condition, str]]:
    """Every condition of a tree, with its key path."""
    yield condition, at
    for kind in ("any", "all"):
        for number, child in enumerate(getattr(condition, kind) or ()):
            yield from walk_conditions(child, f"{at}.{kind}.{number}")
    if condition.not_ is not None:
        yield from walk_conditions(condition.not_, f"{at}.not")


def condition_routes(config: RoutesFile) -> dict[str, list[tuple[str, str]]]:
    """The routes that model-backed conditions run (a similar_to's or a classify's `via`),
    each with the rules that name it, as (task, rule id), in the file's order."""
    found: dict[str, list[tuple[str, str]]] = {}
    for task, route in config.routes.items():
        for rule in route.rules:
            for condition, _ in walk_conditions(rule.when, ""):
                for backed in (condition.similar_to, condition.classify):
                    users = found.setdefault(backed.via, []) if backed is not None else None
                    if users is not None and (task, rule.id) not in users:
                        users.append((task, rule.id))
    return found


def phrases_of(config: RoutesFile, route: RouteConfig) -> dict[str, tuple[str, ...]]:
    """The similar_to labels a route's rules may name: the file's, the route's over them."""
    return {**config.phrases, **route.phrases}


def rule_problems(config: RoutesFile, task: str, route: RouteConfig) -> list[str]:
    where = f"routes.{task}"
    problems = _phrase_problems(f"{where}.phrases", route.phrases)
    if route.rules and route.kind == "embedding":
        return [*problems, f"{where}.rules: an embedding route routes nothing: remove rules"]
    seen: set[str] = set()
    for number, rule in enumerate(route.rules):
        at = f"{where}.rules.{number}"
        if rule.id in seen:
            problems.append(f"{at}.id: {rule.id!r} is used by an earlier rule: ids are unique")
        seen.add(rule.id)
        problems += _target_problems(config, task, route, rule, at)
        for condition, path in walk_conditions(rule.when, f"{at}.when"):
            problems += _condition_problems(config, route, condition, path)
    return problems


def rule_name_problems(
    task: str, rules: Sequence[Rule], numbers: Sequence[int], routes: Collection[str]
) -> list[str]:
    """The routes `rules` (the file's rules `numbers` of `task`) name that are not among
    `routes`: what of them is checked when their route has schema errors."""
    problems = []
    for number, rule in zip(numbers, rules, strict=True):
        at = f"routes.{task}.rules.{number}"
        if rule.to not in routes:
            problems.append(f"{at}.to: unknown route {rule.to!r}{_did_you_mean(rule.to, routes)}")
        for condition, path in walk_conditions(rule.when, f"{at}.when"):
            for key, name in _routes_named(condition):
                if name not in routes:
                    problems.append(
                        f"{path}.{key}: unknown route {name!r}{_did_you_mean(name, routes)}"
                    )
    return problems


def _routes_named(condition: Condition) -> list[tuple[str, str]]:
    """(key, route) for each route one condition names itself."""
    named = []
    if condition.queued_over is not None:
        named.append(("queued_over.route", condition.queued_over.route))
    for kind in ("similar_to", "classify"):
        if (via := getattr(condition, kind)) is not None:
            named.append((f"{kind}.via", via.via))
    return named


def rule_warnings(config: RoutesFile) -> list[str]:
    warnings = []
    for task, route in config.routes.items():
        for number, rule in enumerate(route.rules):
            target = config.routes.get(rule.to)
            at = f"routes.{task}.rules.{number}.to"
            if target is None:
                continue
            if target.rules:
                warnings.append(
                    f"{at}: route {rule.to!r} has rules of its own, which a request routed "
                    f"here by {task!r} does not follow (one hop)"
                )
            if route.privacy == "local_only" and target.privacy == "allow_remote":
                warnings.append(
                    f"{at}: route {rule.to!r} allows remote attempts, but {task!r} is "
                    "local_only: requests it sends there keep local_only, so those attempts "
                    "are skipped for them"
                )
            if rule.when.has_images:
                warnings += _image_warnings(config, task, route, rule.to, at)
    return warnings


def _image_warnings(
    config: RoutesFile, task: str, caller: RouteConfig, to: str, at: str
) -> list[str]:
    """A rule that sends images where no remote model (the only kind that reads them) may
    serve them, with the status the server answers: 400 when the target has none (every
    attempt lacks the capability), 503 when it has one that privacy leaves out (an attempt
    that could serve, left out: no attempt remains)."""
    target = config.routes[to]
    models = [target.model, *(entry.model for entry in target.fallback)]
    if not any(config.models[model].engine == REMOTE_ENGINE for model in models):
        return [
            f"{at}: route {to!r} has no remote model, and zest's own engines read no images: "
            "every request this rule sends there (has_images) is refused (400)"
        ]
    if "local_only" in (target.privacy, caller.privacy):
        return [
            f"{at}: the remote model of route {to!r} is left out for the requests {task!r} "
            "sends (local_only), and zest's own engines read no images: every request this "
            "rule sends there (has_images) is answered 503 (no attempt left to serve it)"
        ]
    return []


def _target_problems(
    config: RoutesFile, task: str, route: RouteConfig, rule: Rule, at: str
) -> list[str]:
    target = config.routes.get(rule.to)
    if target is None:
        return [f"{at}.to: unknown route {rule.to!r}{_did_you_mean(rule.to, config.routes)}"]
    if rule.to == task:
        return [f"{at}.to: a rule of {task!r} sends requests to {task!r} itself: remove it"]
    if target.kind != route.kind:
        return [
            f"{at}.to: route {rule.to!r} is a {target.kind} route and {task!r} a {route.kind} "
            "one: a rule sends requests to a route of the same kind"
        ]
    return []


def _condition_problems(
    config: RoutesFile, route: RouteConfig, condition: Condition, at: str
) -> list[str]:
    problems = []
    if condition.queued_over is not None and condition.queued_over.route not in config.routes:
        name = condition.queued_over.route
        problems.append(
            f"{at}.queued_over.route: unknown route {name!r}{_did_you_mean(name, config.routes)}"
        )
    if condition.similar_to is not None:
        problems += _similar_problems(config, route, condition.similar_to, f"{at}.similar_to")
    if condition.classify is not None:
        problems += _classify_problems(config, condition.classify, f"{at}.classify")
    return problems


def _similar_problems(
    config: RoutesFile, route: RouteConfig, similar: SimilarTo, at: str
) -> list[str]:
    problems = _via_problems(config, similar.via, at, ("embedding",))
    labels = phrases_of(config, route)
    if similar.label not in labels:
        known = ", ".join(sorted(labels)) or "none"
        problems.append(
            f"{at}.label: no phrases for label {similar.label!r} (labels with phrases: "
            f"{known}): declare them under phrases: {{{similar.label}: [...]}}"
        )
    return problems


def _classify_problems(config: RoutesFile, classify: Classify, at: str) -> list[str]:
    problems = _via_problems(config, classify.via, at, ("chat", "completion"))
    if problems:
        return problems
    via = config.routes[classify.via]
    for number, label in enumerate(classify.labels):
        where, need = f"{at}.labels.{number}", label_tokens(label)
        if need > via.max_tokens:
            problems.append(
                f"{where}: label {label!r} may take the classifier up to {need} tokens (its "
                f"answer is the label as JSON, {label_answer(label)}, a token a byte at worst), "
                f"over the max_tokens of route {classify.via!r} ({via.max_tokens}): a label "
                f"cut short is an error (on_error decides); raise "
                f"routes.{classify.via}.max_tokens to {need}, or shorten the label"
            )
        for stop in via.sampling.stop:
            if stop in label_answer(label):
                problems.append(
                    f"{where}: label {label!r} holds {stop!r}, a stop sequence of route "
                    f"{classify.via!r}: its answer would end inside the label; rename the "
                    f"label, or remove the stop from routes.{classify.via}.sampling.stop"
                )
    return problems


def _via_problems(config: RoutesFile, via: str, at: str, kinds: tuple[str, ...]) -> list[str]:
    target = config.routes.get(via)
    if target is None:
        return [f"{at}.via: unknown route {via!r}{_did_you_mean(via, config.routes)}"]
    if target.kind not in kinds:
        return [
            f"{at}.via: route {via!r} is a {target.kind} route: this condition needs a "
            f"{' or '.join(kinds)} route"
        ]
    if target.rules:
        return [f"{at}.via: route {via!r} has rules: a condition's route must not route on"]
    return []


def file_phrase_problems(config: RoutesFile) -> list[str]:
    return _phrase_problems("phrases", config.phrases)


def _phrase_problems(where: str, table: dict[str, tuple[str, ...]]) -> list[str]:
    return [
        f"{where}.{label}: give the label at least one non-empty phrase"
        for label, phrases in table.items()
        if not phrases or any(not p.strip() for p in phrases)
    ]


def _did_you_mean(name: str, known: Collection[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    if close:
        return f": did you mean {close[0]!r}?"
    return f" (known: {', '.join(sorted(known))})"
