"""The routing decision: a route's rules evaluated over one request, purely.

`decide` is the one code path the server, `zest explain` and `zest route test` all run, so a
team's CI replays exactly what production does. Everything it reads comes in a `RouteInput`
(the routing text, metadata, flags, a lazy token counter, queue depths); model-backed
conditions (similar_to, classify) are resolved by the caller: when the evaluation reaches one
whose result is not in `results`, `decide` answers `Pending(condition)`; the caller resolves it
(an embedding, a classifier request), adds it to `results` and calls again. So a model runs
only when the evaluation reaches its condition, and never from here. The prompt's token count
is asked for the same way (`Pending()`), when a rule reaches a token condition before the
caller has counted.

A table of rules is compiled once (the first decision over it) into closures: each leaf's
values worked out ahead (keywords case-folded, patterns compiled, metadata values in a set)
and its two trace entries made, so a decision runs no interpretation, only the tests. Every
regex of a table, and every keyword (as a literal), is also compiled into one RE2 alternation,
searched once per request: when it finds nothing, as for most requests, no single pattern or
keyword needs a search.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from zest.router._rules import (
    Classify,
    Condition,
    MetadataMatch,
    QueuedOver,
    Rule,
    SimilarTo,
    compile_regex,
    literal,
)

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

    text: str  # the routing text (docs/routing.md: which part of the request)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    has_tools: bool = False
    has_images: bool = False
    # The prompt's tokens as the route's model counts them; called only if a rule asks, at
    # most once per decision. None: not counted yet (the decision is Pending until it is).
    prompt_tokens: Callable[[], int | None] = lambda: 0
    # Requests waiting (not running) for a route's model; called only if a rule asks.
    waiting: Callable[[str], int] = lambda route: 0

    @functools.cached_property
    def folded_utf8(self) -> bytes:
        """The text's UTF-8 with A-Z lowered (a lone surrogate kept as its three bytes)."""
        return self.text.encode("utf-8", "surrogatepass").lower()

    @functools.cached_property
    def folded(self) -> str:
        return self.folded_utf8.decode("utf-8", "surrogatepass")

    @functools.cached_property
    def utf8_bytes(self) -> int:
        return len(self.text.encode("utf-8", "surrogatepass"))

    @functools.cached_property
    def utf8(self) -> bytes:
        """The text RE2 searches: UTF-8 once per request, not once per regex; a lone surrogate
        (JSON allows one escaped) becomes `?`."""
        return self.text.encode("utf-8", "replace")


@dataclass(frozen=True)
class ModelResult:
    """A model-backed condition's result, as the serving layer found it."""

    score: float | None = None  # similar_to: the best cosine; classify: the label's probability
    label: str | None = None  # classify: the label picked
    error: str | None = None  # a time-out or a failure (then on_error decides)
    cached: bool = False


@dataclass(frozen=True)
class Pending:
    """The evaluation reached what it cannot know alone: a model-backed condition whose result
    is not known yet, or (condition None) the prompt's token count."""

    condition: ModelCondition | None = None


class TraceEntry(NamedTuple):
    """One evaluated leaf: zest's text of it (`min_chars: 10`) and its kind (`min_chars`, as
    Lemonade's traces name a condition). A named tuple: a deterministic leaf's two possible
    entries are made once, when its table is compiled."""

    condition: str
    kind: str
    result: bool
    score: float | None = None
    label: str | None = None
    cached: bool | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "condition": self.condition,
            "kind": self.kind,
            "result": self.result,
        }
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
    own route serves it. Pending when a model-backed result or the token count is needed."""
    program = _program(rules)
    walk = _Walk(given, results or {}, program)
    try:
        for rule, test in program.steps:
            if test(walk):
                return Decision(rule.to, rule.id, rule.outputs, tuple(walk.trace))
    except _Needs as needed:
        return Pending(needed.condition)
    return Decision(task, None, {}, tuple(walk.trace))


class _Needs(Exception):
    def __init__(self, condition: ModelCondition | None) -> None:
        self.condition = condition


class _Walk:
    """One decision's state: its input, the trace so far, what it worked out once."""

    __slots__ = (
        "_keyword_found",
        "_program",
        "_regex_found",
        "_tokens",
        "add",
        "given",
        "results",
        "trace",
    )

    def __init__(
        self,
        given: RouteInput,
        results: Mapping[ModelCondition, ModelResult],
        program: _Program,
    ) -> None:
        self.given, self.results, self._program = given, results, program
        self.trace: list[TraceEntry] = []
        self.add = self.trace.append
        self._regex_found: bool | None = None
        self._keyword_found: bool | None = None
        self._tokens: int | None = None

    def some_regex_matches(self) -> bool:
        """Whether any pattern of the table matches (one search for all, the first time)."""
        if self._regex_found is None:
            alternation = self._program.any_regex
            self._regex_found = alternation is None or bool(alternation.search(self.given.utf8))
        return self._regex_found

    def some_keyword_occurs(self) -> bool:
        """Whether any keyword of the table is in the folded text (one search for all)."""
        if self._keyword_found is None:
            alternation = self._program.any_keyword
            found = alternation is None or alternation.search(self.given.folded_utf8)
            self._keyword_found = bool(found)
        return self._keyword_found

    def tokens(self) -> int:
        if self._tokens is None:
            self._tokens = self.given.prompt_tokens()
            if self._tokens is None:
                raise _Needs(None)
        return self._tokens


Test = Callable[[_Walk], bool]


@dataclass(frozen=True)
class _Program:
    steps: tuple[tuple[Rule, Test], ...]
    # Every pattern, and every (folded) keyword, of the table in one RE2 alternation each:
    # what most requests meet none of, searched once instead of once per rule (None: none).
    any_regex: Any = None
    any_keyword: Any = None


@dataclass
class _Searched:
    """What the table's leaves search for, gathered while it compiles."""

    patterns: list[str] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)


_PROGRAMS: dict[int, tuple[Sequence[Rule], _Program]] = {}
_PROGRAMS_KEPT = 64  # tables (a reload makes a new one; the old ones age out)
_PROGRAMS_LOCK = threading.Lock()


def _program(rules: Sequence[Rule]) -> _Program:
    """The table compiled, once per table: a routes file's rules are a tuple, never changed
    (a list may be: compiled each time)."""
    if not isinstance(rules, tuple):
        return _compile_table(rules)
    found = _PROGRAMS.get(id(rules))
    if found is not None and found[0] is rules:
        return found[1]
    program = _compile_table(rules)
    with _PROGRAMS_LOCK:
        while len(_PROGRAMS) >= _PROGRAMS_KEPT:
            del _PROGRAMS[next(iter(_PROGRAMS))]
        _PROGRAMS[id(rules)] = (rules, program)  # held: its id is not reused while here
    return program


def _compile_table(rules: Sequence[Rule]) -> _Program:
    searched = _Searched()
    steps = tuple((rule, _compile(rule.when, searched)) for rule in rules)
    keywords = [literal(keyword) for keyword in searched.keywords]
    return _Program(steps, _alternation(searched.patterns), _alternation(keywords))


def _alternation(patterns: list[str]) -> Any:
    """All `patterns` as one RE2 alternation: it matches where any of them does (each in its
    own group, so its flags stay its own). None when there are none, or RE2 refuses the whole
    (too large): then each leaf searches on its own."""
    if not patterns:
        return None
    joined = "|".join(f"(?:{pattern})" for pattern in dict.fromkeys(patterns))
    try:
        return compile_regex(joined.encode("utf-8"))
    except ValueError:
        return None


def _compile(condition: Condition, searched: _Searched) -> Test:
    """The condition as one test: its kinds in evaluation order, all of which must hold."""
    tests = tuple(
        _compile_part(kind, value, text, searched) for kind, value, text in condition.parts()
    )
    if len(tests) == 1:
        return tests[0]

    # Plain loops, not all()/any() over a generator: a third faster for every rule of every
    # request (bench --phases routing).
    def every(walk: _Walk) -> bool:
        for test in tests:  # noqa: SIM110
            if not test(walk):
                return False
        return True

    return every


def _compile_part(kind: str, value: Any, text: str, searched: _Searched) -> Test:
    if kind == "any":
        return _any(tuple(_compile(child, searched) for child in value))
    if kind == "all":
        return _all(tuple(_compile(child, searched) for child in value))
    if kind == "not_":
        inner = _compile(value, searched)
        return lambda walk: not inner(walk)
    if kind in ("similar_to", "classify"):
        return _model_backed(value, kind, text)
    entries = (TraceEntry(text, kind, False), TraceEntry(text, kind, True))
    if kind == "regex":
        return _regex(value, entries, searched)
    if kind in ("keywords_any", "keywords_all"):
        return _keywords(value, entries, searched, every=kind == "keywords_all")
    return _LEAVES[kind](value, entries)


def _any(children: tuple[Test, ...]) -> Test:
    def any_holds(walk: _Walk) -> bool:
        for child in children:  # noqa: SIM110 (as `every`)
            if child(walk):
                return True
        return False

    return any_holds


def _all(children: tuple[Test, ...]) -> Test:
    def all_hold(walk: _Walk) -> bool:
        for child in children:  # noqa: SIM110 (as `every`)
            if not child(walk):
                return False
        return True

    return all_hold


Entries = tuple[TraceEntry, TraceEntry]  # a leaf's trace entry when false, when true


def _keywords(words: tuple[str, ...], entries: Entries, searched: _Searched, every: bool) -> Test:
    """Substrings of the folded text, unless no keyword of the table occurs in it at all (no
    keyword is empty: then none of these does). A keyword RE2 cannot take as UTF-8 (a lone
    surrogate) is looked for on its own."""
    folded = tuple(dict.fromkeys(ascii_fold(word) for word in words))
    filtered = all(_is_utf8(word) for word in folded)
    if filtered:
        searched.keywords += folded
    combine = all if every else any

    def keywords(walk: _Walk) -> bool:
        held = (not filtered or walk.some_keyword_occurs()) and combine(
            map(walk.given.folded.__contains__, folded)
        )
        walk.add(entries[held])
        return held

    return keywords


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _regex(pattern: str, entries: Entries, searched: _Searched) -> Test:
    """Searched over the text's UTF-8 bytes (RE2 matches UTF-8 either way, and bytes spare its
    wrapper an encoding and offset mapping per search), unless the table's alternation found
    nothing. A pattern quoting with \\Q may quote past its own group: searched on its own."""
    compiled = compile_regex(pattern.encode("utf-8"))
    filtered = "\\Q" not in pattern
    if filtered:
        searched.patterns.append(pattern)

    def regex(walk: _Walk) -> bool:
        held = (not filtered or walk.some_regex_matches()) and bool(
            compiled.search(walk.given.utf8)
        )
        walk.add(entries[held])
        return held

    return regex


def _chars(least: bool) -> Callable[[int, Entries], Test]:
    """The text's UTF-8 bytes at least (min_chars) or at most (max_chars) a bound, inclusive."""

    def leaf(bound: int, entries: Entries) -> Test:
        def at_least(walk: _Walk) -> bool:
            held = walk.given.utf8_bytes >= bound
            walk.add(entries[held])
            return held

        def at_most(walk: _Walk) -> bool:
            held = walk.given.utf8_bytes <= bound
            walk.add(entries[held])
            return held

        return at_least if least else at_most

    return leaf


def _tokens(least: bool) -> Callable[[int, Entries], Test]:
    """The prompt's tokens at least (min_prompt_tokens) or at most (max_) a bound, inclusive."""

    def leaf(bound: int, entries: Entries) -> Test:
        def tokens(walk: _Walk) -> bool:
            count = walk.tokens()
            held = count >= bound if least else count <= bound
            walk.add(entries[held])
            return held

        return tokens

    return leaf


def _flag(read: Callable[[RouteInput], bool]) -> Callable[[bool, Entries], Test]:
    def leaf(wanted: bool, entries: Entries) -> Test:
        def flag(walk: _Walk) -> bool:
            held = read(walk.given) == wanted
            walk.add(entries[held])
            return held

        return flag

    return leaf


def _metadata(match: MetadataMatch, entries: Entries) -> Test:
    """One key of the metadata; a value that is empty or only whitespace counts as absent.
    One closure per test, the presence check inlined: it runs for every rule of a table."""
    key = match.key
    if match.exists is not None:
        wanted = match.exists

        def exists(walk: _Walk) -> bool:
            value = walk.given.metadata.get(key)
            held = (isinstance(value, str) and value != "" and not value.isspace()) == wanted
            walk.add(entries[held])
            return held

        return exists
    if match.equals is not None:
        equals, usable = match.equals, match.equals != "" and not match.equals.isspace()

        def equal(walk: _Walk) -> bool:
            held = usable and walk.given.metadata.get(key) == equals  # "" never matches
            walk.add(entries[held])
            return held

        return equal
    listed = frozenset(match.any or ())

    def any_listed(walk: _Walk) -> bool:
        value = walk.given.metadata.get(key)
        held = (
            isinstance(value, str)
            and value != ""
            and not value.isspace()
            and (value in listed or not listed.isdisjoint(map(str.strip, value.split(","))))
        )
        walk.add(entries[held])
        return held

    return any_listed


def _queued_over(value: QueuedOver, entries: Entries) -> Test:
    route, most = value.route, value.requests

    def queued(walk: _Walk) -> bool:
        held = walk.given.waiting(route) > most
        walk.add(entries[held])
        return held

    return queued


_LEAVES: dict[str, Callable[[Any, Entries], Test]] = {
    "min_chars": _chars(least=True),
    "max_chars": _chars(least=False),
    "min_prompt_tokens": _tokens(least=True),
    "max_prompt_tokens": _tokens(least=False),
    "has_tools": _flag(lambda given: given.has_tools),
    "has_images": _flag(lambda given: given.has_images),
    "metadata": _metadata,
    "queued_over": _queued_over,
}


def _model_backed(condition: ModelCondition, kind: str, text: str) -> Test:
    def model_backed(walk: _Walk) -> bool:
        found = walk.results.get(condition)
        if found is None:
            raise _Needs(condition)
        result = _model_result(condition, found)
        walk.add(
            TraceEntry(
                text,
                kind,
                result,
                score=found.score,
                label=_picked(condition, found),
                cached=found.cached,
                error=found.error,
            )
        )
        return result

    return model_backed


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
