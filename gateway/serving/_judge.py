"""What a plan does with one request's prompt, without running an engine: the two functions
the serving walk runs on each attempt (gateway/serving/_generation.py), run here in turn.

Each attempt's prompt and budget come from `policies.fit_attempt`, with that attempt's model's
tokenizer and context, as serving fits them once the model is loaded; a failure moves the
request on or is answered by `give_up_or_record`, the walk's own rule. So the attempt that
serves (or the error answered), the fallbacks listed, the tokens trimmed and the completion
budget are the server's, on the one assumption explain makes: every engine loads and answers.
`zest explain`, GET/POST /v1/routes/{task}/explain and POST /v1/explain print this.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zest.engines import Prompt
from zest.errors import EngineError, RequestError, ServiceUnavailableError
from zest.gateway.serving._attempts import give_up_or_record
from zest.gateway.serving._runtime import Runtime
from zest.gateway.serving._tokens import Tokens
from zest.policies import (
    AttemptFit,
    AttemptTerms,
    Measure,
    UniformMeasure,
    attempt_terms,
    describe_fit,
    fit_attempt,
    uniform_prompt,
)
from zest.router import Attempt, LoadedRoutes, Plan, RouteConfig

__all__ = ["AttemptVerdict", "Outcome", "PromptToJudge", "judge_plan", "prompt_to_judge"]

Message = Mapping[str, str]


@dataclass(frozen=True)
class PromptToJudge:
    """A request's prompt as each attempt would measure it: its messages, a Measure by model
    id (that model's tokenizer; missing: one token per character), and what the request asks
    of the budget."""

    messages: tuple[Message, ...]
    measures: Mapping[str, Measure]
    requested: int | None = None  # the request's max_tokens
    trims_to_fit: bool = False  # the Responses API's truncation: auto
    context_cap: int | None = None  # a smaller context asked for (Ollama's num_ctx)
    sized: bool = False  # known only by its size: one message of that many tokens

    @classmethod
    def of_size(cls, tokens: int) -> PromptToJudge:
        """A prompt known only by its size (explain --prompt-tokens N): one user message of
        N tokens, whatever model counts it."""
        return cls(uniform_prompt(tokens), {}, sized=True)

    def measure(self, model: str) -> Measure:
        return self.measures.get(model) or UniformMeasure()


async def prompt_to_judge(
    runtime: Runtime,
    routes: LoadedRoutes,
    route: RouteConfig,
    prompt: Prompt,
    *,
    requested: int | None = None,
    trims_to_fit: bool = False,
    context_cap: int | None = None,
) -> PromptToJudge:
    """`prompt` measured by each model of the route's chain as its attempt would: its own
    tokenizer (read without weights), or approximately (a remote model, or one whose
    tokenizer cannot load: its attempt fails to load anyway)."""
    measures: dict[str, Measure] = {}
    for model in dict.fromkeys([route.model, *(entry.model for entry in route.fallback)]):
        try:
            tokenizer = await runtime.tokenizer(routes, model)
        except (ServiceUnavailableError, EngineError):
            tokenizer = None
        measures[model] = Tokens(prompt, tokenizer)
    return PromptToJudge(prompt.messages, measures, requested, trims_to_fit, context_cap)


@dataclass(frozen=True)
class AttemptVerdict:
    """What one attempt does with the prompt: its fit, or the error it fails with and the
    failure's kind when that moves the request on (None: it is answered)."""

    attempt: Attempt
    terms: AttemptTerms
    exact: bool
    fit: AttemptFit | None = None
    error: RequestError | None = None
    moves_on: str | None = None

    def text(self) -> str:
        """The `budget` line of explain."""
        if self.fit is not None and self.attempt.remote:
            return describe_fit(self.fit, self.terms, exact=self.exact)
        if self.fit is not None:  # a local model's context is unknown when its file is
            unread = "its model's file could not be read: the attempt will not load"
            return describe_fit(self.fit, self.terms, exact=self.exact, unknown=unread)
        assert self.error is not None
        if self.moves_on is not None:
            return f"moves on to the next attempt ({self.moves_on}): {self.error.message}"
        code = self.error.code or self.error.error_type
        return f"rejected ({self.error.status_code} {code}): {self.error.message}"

    def as_dict(self) -> dict[str, Any]:
        if self.fit is None:
            assert self.error is not None
            outcome = "moves_on" if self.moves_on is not None else "rejected"
            return {"outcome": outcome, "error": self.error.to_body()["error"]}
        fitted, budget = self.fit.fitted, self.fit.budget
        return {
            "outcome": "trimmed" if fitted.trimmed is not None else "fits",
            "prompt_tokens": fitted.prompt_tokens,
            "max_tokens": budget.max_tokens,
            "trimmed": trimmed_dict(self.fit),
            "approximate": not self.exact,
        }


def trimmed_dict(fit: AttemptFit) -> dict[str, Any] | None:
    """What trimming did, as the answer's `zest.trimmed` says it."""
    trimmed = fit.fitted.trimmed
    if trimmed is None:
        return None
    return {
        "tokens": trimmed.trimmed_tokens,
        "strategy": trimmed.strategy,
        "messages_dropped": trimmed.messages_dropped,
        "prompt_tokens_before": trimmed.tokens_before,
        "at_least": trimmed.at_least,
    }


@dataclass(frozen=True)
class Outcome:
    """What the request is answered, every engine loading and answering: the attempt that
    serves (1-based), or the error; the fallbacks listed as x-zest-fallbacks lists them."""

    task: str
    fallbacks: tuple[str, ...]
    served: AttemptVerdict | None = None
    number: int | None = None
    error: RequestError | None = None

    @property
    def status(self) -> int:
        return 200 if self.error is None else self.error.status_code

    def as_dict(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"status": self.status, "task": self.task}
        if self.served is not None and self.served.fit is not None:
            attempt, fit = self.served.attempt, self.served.fit
            answer |= {
                "attempt": self.number,
                "model": attempt.model,
                "device": attempt.device,
                "engine": attempt.engine,
                "prompt_tokens": fit.fitted.prompt_tokens,
                "max_tokens": fit.budget.max_tokens,
                "trimmed": trimmed_dict(fit),
            }
        if self.error is not None:
            answer["error"] = self.error.to_body()["error"]
        return answer | {"fallbacks": list(self.fallbacks)}


def judge_plan(
    plan: Plan, prompt: PromptToJudge, contexts: Mapping[str, int | None]
) -> tuple[list[AttemptVerdict], Outcome]:
    """Each attempt's verdict on the prompt, and the request's outcome: the walk's, attempt
    after attempt, until one fits or a failure is answered (`contexts`: each model's context
    as its engine reports it, by model id)."""
    verdicts = [
        _verdict(plan, attempt, prompt, contexts, last=number == len(plan.attempts) - 1)
        for number, attempt in enumerate(plan.attempts)
    ]
    fallbacks: list[str] = []
    for number, (attempt, verdict) in enumerate(zip(plan.attempts, verdicts, strict=True)):
        fallbacks += attempt.skipped
        if verdict.fit is not None:
            return verdicts, Outcome(plan.task, tuple(fallbacks), verdict, number + 1)
        assert verdict.error is not None
        error = _copy(verdict.error)
        try:
            give_up_or_record(
                error, attempt, plan.route, fallbacks, last=number == len(plan.attempts) - 1
            )
        except RequestError as answered:
            return verdicts, Outcome(plan.task, tuple(answered.tried), error=answered)
    raise AssertionError("a plan always has at least one attempt")


def _verdict(
    plan: Plan,
    attempt: Attempt,
    prompt: PromptToJudge,
    contexts: Mapping[str, int | None],
    *,
    last: bool,
) -> AttemptVerdict:
    measure = prompt.measure(attempt.model)
    terms = attempt_terms(
        plan.task,
        plan.route,
        attempt.model,
        contexts.get(attempt.model),
        requested=prompt.requested,
        trims_to_fit=prompt.trims_to_fit,
        context_cap=prompt.context_cap,
    )
    try:
        fit = fit_attempt(prompt.messages, measure=measure, terms=terms)
    except RequestError as error:
        try:
            kind = give_up_or_record(_copy(error), attempt, plan.route, [], last=last)
        except RequestError:
            kind = None
        return AttemptVerdict(attempt, terms, measure.exact, error=error, moves_on=kind)
    return AttemptVerdict(attempt, terms, measure.exact, fit=fit)


def _copy(error: RequestError) -> RequestError:
    """The same error, apart (give_up_or_record writes the attempts tried on it)."""
    copied = type(error).__new__(type(error))
    copied.__dict__.update(error.__dict__)
    copied.args = error.args
    copied.tried = list(error.tried)
    copied.headers = dict(error.headers)
    return copied
