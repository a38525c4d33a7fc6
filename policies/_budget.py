"""Token budgets: how many tokens a request may generate, given its prompt, route and model."""

from __future__ import annotations

from dataclasses import dataclass

from router import BadRequestError, ContextLengthExceededError

__all__ = ["Budget", "plan_budget"]


@dataclass(frozen=True)
class Budget:
    """The completion budget granted to one request."""

    prompt_tokens: int
    max_tokens: int
    # Set when the request asked for more than the route allows; the response reports it.
    clamped_from: int | None = None


def plan_budget(
    *, prompt_tokens: int, requested: int | None, route_cap: int, context_length: int, model: str
) -> Budget:
    """Grant a completion budget, or raise with the numbers a client needs to fix the request."""
    if requested is not None and requested > context_length:
        raise BadRequestError(
            f"max_tokens is {requested} but model {model!r} has a context of {context_length} "
            f"tokens: ask for at most {context_length - prompt_tokens}",
            param="max_tokens",
        )
    room = context_length - prompt_tokens
    if room < 1:
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
