"""One attempt's prompt and answer, judged one way: what serving runs before it hands a prompt
to an engine, and what `zest explain` prints for each attempt of a plan.

Pure: the prompt comes as its messages and a `Measure` (the attempt's own model's tokenizer
in serving and in `explain --request`; one token per character for a prompt known only by its
size), the limits as `AttemptTerms`. The result is the prompt as it will be sent (trimmed or
not) and the completion's budget, or the error the request is answered with (400
context_length_exceeded, a max_tokens the context cannot hold, an empty prompt).

Each attempt's prompt limit is its own model's: the route's `context.max_prompt_tokens` bounds
the route's own model; a fallback to another model is judged against that model's window, so
`on_overflow: fallback` reaches the bigger model it exists for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from zest.errors import BadRequestError, ContextLengthExceededError
from zest.policies._budget import Budget, plan_budget, prompt_limit
from zest.policies._trim import Fitted, PromptLimit, Strategy, fit_prompt
from zest.router import RouteConfig

__all__ = [
    "AttemptFit",
    "AttemptTerms",
    "Measure",
    "UniformMeasure",
    "attempt_terms",
    "describe_fit",
    "fit_attempt",
    "uniform_prompt",
]

Message = Mapping[str, str]


class Measure(Protocol):
    """How one attempt's model counts a prompt's messages (after its chat template)."""

    @property
    def exact(self) -> bool:
        """Counted by the model's own tokenizer (False: approximately, or a model of a size)."""

    @property
    def token_bytes(self) -> int | None:
        """The longest token's bytes (None: not known): the floor's reason."""

    def count(self, messages: Sequence[Message]) -> int: ...

    def floor(self, messages: Sequence[Message]) -> int | None:
        """At least this many tokens, known from the text's length alone, when that is beyond
        the model's context (None: the text is short enough to be counted)."""


@dataclass(frozen=True)
class UniformMeasure:
    """A prompt known only by its size (`zest explain --prompt-tokens N`): one token per
    character, so `uniform_prompt(N)` is N tokens and every trim is measured in tokens."""

    exact: bool = False
    token_bytes: int | None = None

    def count(self, messages: Sequence[Message]) -> int:
        return sum(len(message["content"]) for message in messages)

    def floor(self, messages: Sequence[Message]) -> int | None:
        return None


def uniform_prompt(tokens: int) -> tuple[Message, ...]:
    """A prompt of `tokens` tokens under UniformMeasure: one user message, as a client sends
    one input (a conversation's turns are judged from its request: explain --request)."""
    return ({"role": "user", "content": "x" * tokens},)


@dataclass(frozen=True)
class AttemptTerms:
    """What one attempt's prompt and answer are held to."""

    task: str
    model: str
    context_length: int | None  # None: not known here (a remote model that declares none)
    max_prompt_tokens: int | None  # the route's, for its own model only
    route_cap: int  # the route's max_tokens
    requested: int | None  # the request's max_tokens
    trim: Strategy | None  # how an over-long prompt is trimmed (None: it is refused)


def attempt_terms(
    task: str,
    route: RouteConfig,
    model: str,
    context_length: int | None,
    *,
    requested: int | None,
    trims_to_fit: bool = False,
    context_cap: int | None = None,
) -> AttemptTerms:
    """The terms of an attempt on `model` for `route`: the route's max_prompt_tokens binds its
    own model (on any device); another model's attempt is judged by that model's context.
    `trims_to_fit`: the request asks for trimming whatever the route's on_overflow says;
    `context_cap`: a smaller context the request asks for (Ollama's num_ctx), never a larger."""
    trimming = route.context.on_overflow == "trim" or trims_to_fit
    if context_cap is not None and (context_length is None or context_cap < context_length):
        context_length = context_cap
    return AttemptTerms(
        task=task,
        model=model,
        context_length=context_length,
        max_prompt_tokens=route.context.max_prompt_tokens if model == route.model else None,
        route_cap=route.max_tokens,
        requested=requested,
        trim=route.trim_mode if trimming else None,
    )


@dataclass(frozen=True)
class AttemptFit:
    """The prompt as the attempt sends it, its completion budget, and the limit it was held
    to (None: only the model's context, or nothing known)."""

    fitted: Fitted
    budget: Budget
    limit: PromptLimit | None


def fit_attempt(
    messages: Sequence[Message], *, measure: Measure, terms: AttemptTerms
) -> AttemptFit:
    """Measure the prompt, trim it or refuse it, and grant the completion's budget; raises
    ContextLengthExceededError (the prompt does not fit this attempt) or BadRequestError."""
    context, cap = terms.context_length, terms.route_cap
    limit = prompt_limit(
        task=terms.task,
        max_prompt_tokens=terms.max_prompt_tokens,
        context_length=context,
        reserve=min(terms.requested or cap, cap),
        trimming=terms.trim is not None,
    )
    if terms.trim is None and (limit is not None or context is not None):
        most, why = (limit.tokens, limit.why) if limit else (context or 0, "its context")
        _refuse_by_length(messages, measure, terms.model, most, why)
    fitted = fit_prompt(
        messages, count=measure.count, limit=limit, trim=terms.trim, model=terms.model
    )
    if fitted.trimmed is not None and measure.floor(messages) is not None:
        fitted = replace(fitted, trimmed=replace(fitted.trimmed, at_least=True))
    budget = plan_budget(
        prompt_tokens=fitted.prompt_tokens,
        requested=terms.requested,
        route_cap=cap,
        context_length=context,
        model=terms.model,
    )
    if measure.exact and fitted.prompt_tokens == 0:  # a model needs at least one token
        raise BadRequestError("the prompt is empty: send some text", param="prompt")
    return AttemptFit(fitted, budget, limit)


def _refuse_by_length(
    messages: Sequence[Message], measure: Measure, model: str, most: int, why: str
) -> None:
    """A prompt too long for the model by its length alone is refused before it is tokenized
    (an 8 MB prompt costs seconds of CPU to count, for an answer known in advance)."""
    floor = measure.floor(messages)
    if floor is None or measure.token_bytes is None or floor <= most:
        return
    characters = sum(len(m["content"]) for m in messages)
    raise ContextLengthExceededError(
        f"the prompt is at least {floor} tokens ({characters} characters; no token of model "
        f"{model!r} spans more than {measure.token_bytes} bytes), over the limit of "
        f"{most} ({why}): shorten the messages or the prompt"
    )


def describe_fit(
    fit: AttemptFit,
    terms: AttemptTerms,
    *,
    exact: bool = True,
    unknown: str = "the upstream's undeclared context has the last word",
) -> str:
    """What the attempt does to the prompt, as explain prints it: it fits (and how much answer
    it leaves), or it is trimmed (by how much; `exact` False: counted approximately).
    `unknown`: what a context not known here means for this attempt."""
    trimmed, budget, limit = fit.fitted.trimmed, fit.budget, fit.limit
    if trimmed is not None and limit is not None:
        cut = f"{'' if exact else 'about '}{trimmed.trimmed_tokens} cut"
        if trimmed.strategy == "turns":
            cut += f" ({trimmed.messages_dropped} message(s) dropped)"
        return (
            f"trimmed ({trimmed.strategy}): {trimmed.tokens_before} tokens, over the limit of "
            f"{limit.tokens} ({limit.why}): {cut}"
        )
    answer = f"up to {budget.max_tokens} tokens of answer"
    context = terms.context_length
    if context is None:
        return f"fits ({answer}; {unknown})"
    wanted = min(terms.requested or terms.route_cap, terms.route_cap)
    if budget.max_tokens < wanted:
        room = budget.max_tokens
        return f"fits, but the context of {context} leaves only {room} tokens of answer"
    return f"fits ({answer})"
