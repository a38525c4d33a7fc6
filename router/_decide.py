"""The routing decision: a route's rules evaluated over one request, purely.

`decide` is the one code path the server, `zest explain` and `zest route test` all run, so a
team's CI replays exactly what production does. Everything it reads comes in a `RouteInput`
(the routing text, metadata, flags, a lazy token counter, queue depths); model-backed
conditions (similar_to, classify) are resolved by the caller: when the evaluation reaches one
whose result is not in `results`, `decide` answers `Pending(condition)`; the caller resolves it
(an embedding, a classifier request), adds it to `results` and calls again. So a model runs
only when the evaluation reaches its condition, and never from here.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from zest.router._rules import Classify, Condition, MetadataMatch, Rule, SimilarTo, compile_regex
from zest.router._rules_text import leaf_text

__all__ = [
    "Decision",
    "ModelResult",
    "Pending",
    "RouteInput",
    "TraceEntry",
    "ascii_fold",
    "decide",
]

ModelCondition = SimilarTo | Classify
_FOLD = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def ascii_fold(text: str) -> str:
    """Lower case for ASCII letters only (`É` stays `É`): keywords match as Lemonade's do."""
    return text.translate(_FOLD)


@dataclass(frozen=True)
class RouteInput:
    """What the rules may look at in one request."""

    text: str  # the routing text (README, Routing by content: which part of the request)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    has_tools: bool = False
    has_images: bool = False
    # The prompt's tokens as the route's model counts them; called only if a rule asks.
    prompt_tokens: Callable[[], int] = lambda: 0
    # Requests waiting (not running) for a route's model; called only if a rule asks.
    waiting: Callable[[str], int] = lambda route: 0

    @functools.cached_property
    def folded(self) -> str:
        return ascii_fold(self.text)

    @functools.cached_property
    def utf8_bytes(self) -> int:
        return len(self.text.encode("utf-8", "surrogatepass"))

    @functools.cached_property
    def utf8_text(self) -> str:
        """The text RE2 can take: a lone surrogate (JSON allows one escaped) becomes `?`."""
        return self.text.encode("utf-8", "replace").decode("utf-8")

    @functools.cached_property
    def tokens(self) -> int:
        return self.prompt_tokens()


@dataclass(frozen=True)
class ModelResult:
    """A model-backed condition's result, as the serving layer found it."""

    score: float | None = None  # similar_to: the best cosine; classify: the label's probability
    label: str | None = None  # classify: the label picked
    error: str | None = None  # a time-out or a failure (then on_error decides)
    cached: bool = False


@dataclass(frozen=True)
class Pending:
    """The evaluation reached a model-backed condition whose result is not known yet."""

    condition: ModelCondition


@dataclass(frozen=True)
class TraceEntry:
    condition: str
    result: bool
    score: float | None = None
    label: str | None = None
    cached: bool | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"condition": self.condition, "result": self.result}
        for name in ("score", "label", "cached", "error"):
            if (value := getattr(self, name)) is not None:
                entry[name] = round(value, 4) if isinstance(value, float) else value
        return entry


@dataclass(frozen=True)
class Decision:
    route_to: str
    matched_rule: str | None
    outputs: Mapping[str, Any] = field(default_factory=dict)
    trace: tuple[TraceEntry, ...] = ()

    @property
    def default_used(self) -> bool:
        return self.matched_rule is None

    @property
    def rule_label(self) -> str:
        """The header's and the metrics' name for it: the rule's id, or `default`."""
        return self.matched_rule or "default"

    def as_dict(self, *, with_trace: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {
            "route_to": self.route_to,
            "matched_rule": self.matched_rule,
            "default_used": self.default_used,
            "outputs": dict(self.outputs),
        }
        if with_trace:
            body["trace"] = [entry.as_dict() for entry in self.trace]
        return body


def decide(
    task: str,
    rules: Sequence[Rule],
    given: RouteInput,
    results: Mapping[ModelCondition, ModelResult] | None = None,
) -> Decision | Pending:
    """The first rule whose condition holds sends the request to its route; none: the task's
    own route serves it. Pending when a model-backed result is needed first."""
    walk = _Walk(given, results or {})
    for rule in rules:
        try:
            matched = walk.holds(rule.when)
        except _NeedsModel as needed:
            return Pending(needed.condition)
        if matched:
            return Decision(rule.to, rule.id, rule.outputs, tuple(walk.trace))
    return Decision(task, None, {}, tuple(walk.trace))


class _NeedsModel(Exception):
    def __init__(self, condition: ModelCondition) -> None:
        self.condition = condition


@dataclass
class _Walk:
    given: RouteInput
    results: Mapping[ModelCondition, ModelResult]
    trace: list[TraceEntry] = field(default_factory=list)

    def holds(self, condition: Condition) -> bool:
        """Every kind set in the mapping holds (an implicit all, stopping at the first that
        does not)."""
        return all(self._kind(condition, kind) for kind in condition.kinds())

    def _kind(self, condition: Condition, kind: str) -> bool:
        value = getattr(condition, kind)
        if kind == "any":
            return any(self.holds(child) for child in value)
        if kind == "all":
            return all(self.holds(child) for child in value)
        if kind == "not_":
            return not self.holds(value)
        if kind in ("similar_to", "classify"):
            return self._model_backed(kind, value)
        result = _LEAVES[kind](self.given, value)
        self.trace.append(TraceEntry(leaf_text(kind, value), result))
        return result

    def _model_backed(self, kind: str, condition: ModelCondition) -> bool:
        found = self.results.get(condition)
        if found is None:
            raise _NeedsModel(condition)
        result = _model_result(condition, found)
        self.trace.append(
            TraceEntry(
                leaf_text(kind, condition),
                result,
                score=found.score,
                label=_picked(condition, found),
                cached=found.cached,
                error=found.error,
            )
        )
        return result


def _picked(condition: ModelCondition, found: ModelResult) -> str | None:
    if isinstance(condition, Classify) and found.error is not None:
        return condition.default_label if condition.on_error == "default_label" else None
    return found.label


def _model_result(condition: ModelCondition, found: ModelResult) -> bool:
    if isinstance(condition, SimilarTo):
        if found.error is not None or found.score is None:
            return False
        return found.score >= condition.min_score
    label = _picked(condition, found)
    if label != condition.label:
        return False
    if found.error is not None or condition.min_score is None:
        return True
    return found.score is not None and found.score >= condition.min_score


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    return compile_regex(pattern)


def _metadata(given: RouteInput, match: MetadataMatch) -> bool:
    value = given.metadata.get(match.key)
    present = isinstance(value, str) and bool(value.strip())
    if match.exists is not None:
        return present == match.exists
    if not present:
        return False
    assert isinstance(value, str)
    if match.equals is not None:
        return value == match.equals
    listed = set(match.any or ())
    return value in listed or any(token.strip() in listed for token in value.split(","))


_LEAVES: dict[str, Callable[[RouteInput, Any], bool]] = {
    "keywords_any": lambda g, words: any(ascii_fold(w) in g.folded for w in words),
    "keywords_all": lambda g, words: all(ascii_fold(w) in g.folded for w in words),
    "regex": lambda g, pattern: _compiled(pattern).search(g.utf8_text) is not None,
    "min_chars": lambda g, least: g.utf8_bytes >= least,
    "max_chars": lambda g, most: g.utf8_bytes <= most,
    "min_prompt_tokens": lambda g, least: g.tokens >= least,
    "max_prompt_tokens": lambda g, most: g.tokens <= most,
    "has_tools": lambda g, wanted: g.has_tools == wanted,
    "has_images": lambda g, wanted: g.has_images == wanted,
    "metadata": _metadata,
    "queued_over": lambda g, q: g.waiting(q.route) > q.requests,
}
