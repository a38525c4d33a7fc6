"""Token budgets: how many tokens a request may generate, given its prompt, route and model."""

from __future__ import annotations

from dataclasses import dataclass

from zest.errors import BadRequestError, ContextLengthExceededError
from zest.policies._trim import PromptLimit

__all__ = ["Budget", "plan_budget", "prompt_limit"]


@dataclass(frozen=True)
class Budget:
    """The completion budget granted to one request."""

    prompt_tokens: int
    max_tokens: int
    # Set when the request asked for more than the route allows; the response reports it.
    clamped_from: int | None = None


def plan_budget(
    *,
    prompt_tokens: int,
    requested: int | None,
    route_cap: int,
    context_length: int | None,
    model: str,
) -> Budget:
    """Grant a completion budget, or raise with the numbers a client needs to fix the request.

    `context_length` None: the context is unknown here (a remote model that does not declare
    one); the upstream enforces it.
    """
    if context_length is None:
        wanted = min(requested or route_cap, route_cap)
        clamped = requested is not None and requested > route_cap
        return Budget(prompt_tokens, wanted, clamped_from=requested if clamped else None)
    room = context_length - prompt_tokens
    if requested is not None and requested > context_length and room >= 1:
        raise BadRequestError(
            f"max_tokens is {requested} but model {model!r} has a context of {context_length} "
            f"tokens: ask for at most {room}",
            param="max_tokens",
        )
    if room < 1:  # the prompt alone fills the context: no max_tokens would help
        raise ContextLengthExceededError(
            f"this model's maximum context length is {context_length} tokens, but the prompt is "
            f"{prompt_tokens} tokens ({model!r}): shorten the messages or the prompt"
        )
    if requested is None:
        return Budget(prompt_tokens, min(route_cap, room))
    clamped = requested > route_cap
    wanted = route_cap if clamped else requested
    if wanted > room:
        raise ContextLengthExceededError(
            f"this model's maximum context length is {context_length} tokens, but you requested "
            f"{prompt_tokens + wanted} tokens ({prompt_tokens} in the prompt, {wanted} for the "
            f"completion; model {model!r}): reduce the prompt or max_tokens to at most {room}"
        )
    return Budget(prompt_tokens, wanted, clamped_from=requested if clamped else None)


def prompt_limit(
    *,
    task: str,
    max_prompt_tokens: int | None,
    context_length: int | None,
    reserve: int,
    trimming: bool,
) -> PromptLimit | None:
    """The prompt limit of one attempt: the route's max_prompt_tokens and, when trimming, the
    model's context less `reserve` tokens for the completion (trimming makes room for it)."""
    limits = []
    if max_prompt_tokens is not None:
        limits.append(PromptLimit(max_prompt_tokens, f"routes.{task}.context.max_prompt_tokens"))
    if trimming and context_length is not None and context_length > reserve:
        limits.append(
            PromptLimit(
                context_length - reserve,
                f"a context of {context_length} tokens less {reserve} for the completion",
            )
        )
    return min(limits, key=lambda limit: limit.tokens, default=None)
