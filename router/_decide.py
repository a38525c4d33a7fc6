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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from zest.router._rules import Classify, Condition, MetadataMatch, Rule, SimilarTo, compile_regex

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


def ascii_fold(text: str) -> str:
    """Lower case for ASCII letters only (`É` stays `É`): keywords match as Lemonade's do.
    bytes.lower() changes A-Z only, and no byte of a UTF-8 multi-byte sequence is ASCII:
    four times as fast as str.translate (a lone surrogate passes through unchanged)."""
    return text.encode("utf-8", "surrogatepass").lower().decode("utf-8", "surrogatepass")


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
    def utf8(self) -> bytes:
        """The text RE2 searches: UTF-8 once per request, not once per regex; a lone surrogate
        (JSON allows one escaped) becomes `?`."""
        return self.text.encode("utf-8", "replace")

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


class TraceEntry(NamedTuple):
    """One evaluated leaf. A named tuple: a decision makes one per leaf it evaluates, for every
    request (a frozen dataclass costs five times as much to make)."""

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


# TraceEntry(text, held) without the Python-level __new__ of a named tuple: a third of the time,
# for the entry every evaluated leaf of every request makes.
_leaf_entry = functools.partial(tuple.__new__, TraceEntry)


@dataclass
class _Walk:
    given: RouteInput
    results: Mapping[ModelCondition, ModelResult]
    trace: list[TraceEntry] = field(default_factory=list)

    def holds(self, condition: Condition) -> bool:
        """Every kind set in the mapping holds (an implicit all, stopping at the first that
        does not). A plain loop, few calls: it runs for every rule of every request."""
        for kind, value, text in condition.parts():
            leaf = _LEAVES.get(kind)
            if leaf is None:
                held = self._combined(kind, value, text)
            else:
                held = leaf(self.given, value)
                self.trace.append(_leaf_entry((text, held, None, None, None, None)))
            if not held:
                return False
        return True

    def _combined(self, kind: str, value: Any, text: str) -> bool:
        """A combinator over children, or a model-backed condition."""
        if kind == "any":
            return any(self.holds(child) for child in value)
        if kind == "all":
            return all(self.holds(child) for child in value)
        if kind == "not_":
            return not self.holds(value)
        return self._model_backed(value, text)

    def _model_backed(self, condition: ModelCondition, text: str) -> bool:
        found = self.results.get(condition)
        if found is None:
            raise _NeedsModel(condition)
        result = _model_result(condition, found)
        self.trace.append(
            TraceEntry(
                text,
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
    """The pattern as UTF-8 bytes, searched over the text's UTF-8 bytes: RE2 matches UTF-8
    either way, and bytes spare its wrapper an encoding and offset mapping per search."""
    return compile_regex(pattern.encode("utf-8"))


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


@functools.lru_cache(maxsize=4096)
def _folded(words: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(ascii_fold(word) for word in words)


_LEAVES: dict[str, Callable[[RouteInput, Any], bool]] = {
    "keywords_any": lambda g, words: any(map(g.folded.__contains__, _folded(words))),
    "keywords_all": lambda g, words: all(map(g.folded.__contains__, _folded(words))),
    "regex": lambda g, pattern: _compiled(pattern).search(g.utf8) is not None,
    "min_chars": lambda g, least: g.utf8_bytes >= least,
    "max_chars": lambda g, most: g.utf8_bytes <= most,
    "min_prompt_tokens": lambda g, least: g.tokens >= least,
    "max_prompt_tokens": lambda g, most: g.tokens <= most,
    "has_tools": lambda g, wanted: g.has_tools == wanted,
    "has_images": lambda g, wanted: g.has_images == wanted,
    "metadata": _metadata,
    "queued_over": lambda g, q: g.waiting(q.route) > q.requests,
}
