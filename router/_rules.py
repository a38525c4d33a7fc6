"""routes.yaml rules: route a request by what it holds.

A route's `rules:` are tried top to bottom, first match wins; a request that matches none is
served by the route itself. A rule is `{id, when, to, outputs?}`: `when` is one condition (a
mapping whose keys are condition kinds; several keys are an implicit `all`), `to` another route
of the same kind, `outputs` any mapping copied into the decision. Conditions (docs/routing.md has
the semantics table):

    keywords_any / keywords_all   substrings, ASCII letters case-folded only
    regex                         RE2 (linear time), searched anywhere, case-sensitive
    min_chars / max_chars         UTF-8 bytes, inclusive
    min_prompt_tokens / max_prompt_tokens   the prompt's tokens as the route's model counts them
    has_tools / has_images        true: present; false: absent
    metadata                      {key, equals | any | exists} over the request's `metadata`
    queued_over                   {route, requests}: that route's model has more waiting
    similar_to                    {via: EMBED_ROUTE, label, min_score}: cosine to the phrases
    classify                      {via: ROUTE, labels, prompt, label, min_score?}: a model picks
                                  (both: timeout_s, on_error, max_input_chars of the text read)
    any / all / not               combinators

Validated at load: the evaluation (router/_decide.py) never meets a malformed rule.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

__all__ = [
    "Classify",
    "Condition",
    "MetadataMatch",
    "QueuedOver",
    "Rule",
    "SimilarTo",
    "compile_regex",
    "label_answer",
    "label_tokens",
    "leaf_text",
    "literal",
    "regex_text",
]

_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# What a model-backed condition reads of the routing text by default (characters, its start).
MAX_INPUT_CHARS = 2048
# A classify label names a class: its answer is constrained to the labels (one grammar), and
# a label's every byte may cost the classifier a token.
MAX_LABEL_CHARS = 64


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def compile_regex(pattern: str | bytes) -> Any:
    """The pattern compiled by RE2 (linear time: no input makes it backtrack); ValueError
    naming what RE2 refuses, with the hint that fits: a backreference or a lookaround is out
    by design, anything else is the pattern's to correct. A bytes pattern is UTF-8 too (RE2's
    default), for searching UTF-8 bytes."""
    import re2

    options = re2.Options()
    options.log_errors = False
    # A rule asks only whether the pattern matches: with no groups to capture, RE2 answers
    # from its DFA alone, where finding a match's groups runs its NFA, whose cost is the
    # match's length times the pattern's size (`(\w+\s?){100}` matching 1 MB: 19 s, or 60 ms).
    options.never_capture = True
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        text = pattern.decode("utf-8", "replace") if isinstance(pattern, bytes) else pattern
        raise ValueError(
            f"regex {regex_text(text)} is not one RE2 runs ({reason}): {_regex_fix(text)}"
        ) from None


# What RE2 leaves out by design (it would need backtracking): backreferences (\1, \k<n>,
# \g{1}, (?P=n)) and lookarounds ((?=, (?!, (?<=, (?<!), found outside a character class
# and not escaped.
_BACKTRACKING = re.compile(
    r"""(?P<found>\\[1-9kg]|\(\?(?:P=|=|!|<=|<!))|\\.|\[(?:\\.|[^\]])*\]""", re.DOTALL
)


def _regex_fix(pattern: str) -> str:
    """The hint for a pattern RE2 refuses: the linear-time one only when it asks for what
    linear time rules out."""
    if any(found["found"] for found in _BACKTRACKING.finditer(pattern)):
        return (
            "zest matches in linear time, so backreferences and lookarounds are out; rewrite "
            "it without them"
        )
    return "correct the pattern (zest's regexes are RE2's syntax, docs/routing.md)"


def regex_text(pattern: str) -> str:
    """A pattern as a routes file writes it: in single quotes, where a backslash is itself
    (YAML doubles only a quote); JSON's escapes for one holding a control character."""
    if pattern.isprintable():
        return "'" + pattern.replace("'", "''") + "'"
    return json.dumps(pattern, ensure_ascii=False)


def literal(text: str) -> str:
    """`text` as an RE2 pattern matching it as it is (RE2's QuoteMeta)."""
    import re2

    escaped: str = re2.escape(text)
    return escaped


def leaf_text(kind: str, value: Any) -> str:
    """One condition kind and its value, as the decision's trace names it: a model-backed one
    without its defaults (timeout_s, on_error), the others without their unset fields."""
    if kind == "regex":
        return f"regex: {regex_text(value)}"
    if isinstance(value, _ModelBacked):
        value = value.model_dump(exclude_defaults=True)
    elif isinstance(value, BaseModel):
        value = value.model_dump(exclude_none=True)
    return f"{kind}: {json.dumps(value, ensure_ascii=False, default=str)}"


class MetadataMatch(_Strict):
    """One key of the request's OpenAI `metadata`; a value that is empty or only whitespace
    counts as absent."""

    key: str = Field(min_length=1, max_length=64)
    equals: str | None = None  # exact, case-sensitive
    any: tuple[str, ...] | None = None  # the value, or one of its comma-separated tokens
    exists: StrictBool | None = None

    @model_validator(mode="after")
    def _one_test(self) -> MetadataMatch:
        given = [name for name in ("equals", "any", "exists") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                f"metadata {self.key!r} needs exactly one of equals, any, exists "
                f"(got {', '.join(given) or 'none'})"
            )
        return self


class QueuedOver(_Strict):
    """True while `route`'s model has more than `requests` waiting (not running)."""

    route: str
    requests: int = Field(ge=0, le=100_000)


class _ModelBacked(_Strict):
    via: str  # the route of this file that serves the condition
    timeout_s: float = Field(default=2.0, gt=0, le=120)
    # The model reads the routing text's first this many characters: its time grows with its
    # input, and a time-out ends only the wait, not a computation that has begun.
    max_input_chars: int = Field(default=MAX_INPUT_CHARS, ge=1, le=1_000_000)
    # What a time-out or an error means: the condition does not match, or (classify) the
    # label is taken as `default_label`.
    on_error: Literal["no_match", "default_label"] = "no_match"


class SimilarTo(_ModelBacked):
    """Max cosine similarity of the routing text to a label's phrases (declared once under
    the route's, or the file's, `phrases:`), at least `min_score`."""

    label: str
    min_score: float = Field(ge=-1.0, le=1.0)

    @model_validator(mode="after")
    def _no_default_label(self) -> SimilarTo:
        if self.on_error == "default_label":
            raise ValueError("on_error default_label is for classify: use no_match")
        return self


class Classify(_ModelBacked):
    """A model picks exactly one of `labels` for the routing text (its answer constrained to
    them); true when it picks `label` (with at least `min_score` probability, if set)."""

    labels: tuple[str, ...] = Field(min_length=2, max_length=64)
    prompt: str = Field(min_length=1)
    label: str
    min_score: float | None = Field(default=None, ge=0.0, le=1.0)
    default_label: str | None = None

    @model_validator(mode="after")
    def _labels_known(self) -> Classify:
        if len(set(self.labels)) != len(self.labels):
            raise ValueError("labels repeat a label: list each once")
        if any(not label.strip() for label in self.labels):
            raise ValueError("a label is empty: name each label")
        for number, label in enumerate(self.labels):
            if len(label) > MAX_LABEL_CHARS:
                raise ValueError(
                    f"labels.{number} is {len(label)} characters, over zest's limit of "
                    f"{MAX_LABEL_CHARS}: a label names a class; shorten it (the prompt can "
                    "say what each class means)"
                )
        for name, value in (("label", self.label), ("default_label", self.default_label)):
            if value is not None and value not in self.labels:
                raise ValueError(f"{name} {value!r} is not among labels {list(self.labels)}")
        if self.on_error == "default_label" and self.default_label is None:
            raise ValueError("on_error default_label needs default_label: name the label")
        return self

    def answer_tokens(self) -> int:
        """The most tokens the classifier may write for a label: the answer is the label as
        a JSON string, and every token the grammar lets through writes at least one of its
        UTF-8 bytes (what its max_tokens is sized to, and what the route's must allow)."""
        return max(label_tokens(label) for label in self.labels)


def label_answer(label: str) -> str:
    """A label as the classifier writes it: a JSON string."""
    return json.dumps(label, ensure_ascii=False)


def label_tokens(label: str) -> int:
    """The most tokens the classifier's answer `label` may take (its bytes)."""
    return len(label_answer(label).encode("utf-8"))


class Condition(_Strict):
    """One condition; several keys in one mapping must all hold."""

    keywords_any: tuple[str, ...] | None = Field(default=None, min_length=1)
    keywords_all: tuple[str, ...] | None = Field(default=None, min_length=1)
    regex: str | None = None
    min_chars: int | None = Field(default=None, ge=0)
    max_chars: int | None = Field(default=None, ge=0)
    min_prompt_tokens: int | None = Field(default=None, ge=0)
    max_prompt_tokens: int | None = Field(default=None, ge=0)
    has_tools: StrictBool | None = None
    has_images: StrictBool | None = None
    metadata: MetadataMatch | None = None
    queued_over: QueuedOver | None = None
    any: tuple[Condition, ...] | None = Field(default=None, min_length=1)
    all: tuple[Condition, ...] | None = Field(default=None, min_length=1)
    not_: Condition | None = Field(default=None, alias="not")
    # Model-backed: last, so they run only when everything cheaper beside them holds.
    similar_to: SimilarTo | None = None
    classify: Classify | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("keywords_any", "keywords_all")
    @classmethod
    def _no_empty_keyword(cls, keywords: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if keywords is not None and any(not k for k in keywords):
            raise ValueError("an empty keyword matches everything: remove it")
        return keywords

    @field_validator("regex")
    @classmethod
    def _re2_compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            compile_regex(pattern)
        return pattern

    @model_validator(mode="after")
    def _some_condition(self) -> Condition:
        if not self.model_fields_set:
            raise ValueError(
                "an empty condition: give a condition kind (keywords_any, regex, metadata, "
                "similar_to, any, ...)"
            )
        return self

    def kinds(self) -> tuple[str, ...]:
        """The condition kinds set here, in evaluation order (the field order above: cheap
        ones first, so a model-backed one runs only when the rest hold)."""
        return self._kinds

    def parts(self) -> tuple[tuple[str, Any, str], ...]:
        """Each kind set here, in evaluation order, with its value and its text as the trace
        names it (a combinator's text is its kind)."""
        return self._parts

    # Worked out once per condition, not per request: a table's rules are evaluated for every
    # request (pydantic compares and dumps fields only, so these caches are invisible to it).
    @functools.cached_property
    def _kinds(self) -> tuple[str, ...]:
        return tuple(name for name in type(self).model_fields if getattr(self, name) is not None)

    @functools.cached_property
    def _parts(self) -> tuple[tuple[str, Any, str], ...]:
        combinators = ("any", "all", "not_")
        return tuple(
            (kind, value, kind if kind in combinators else leaf_text(kind, value))
            for kind in self._kinds
            for value in (getattr(self, kind),)
        )


class Rule(_Strict):
    id: str = Field(pattern=_ID)
    when: Condition
    to: str
    outputs: dict[str, Any] = Field(default_factory=dict)
