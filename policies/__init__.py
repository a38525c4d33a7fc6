"""Policies over requests and plans: pure functions, no I/O."""

from policies._budget import Budget, plan_budget, prompt_limit
from policies._fallback import FailureKind, classify_failure, may_advance
from policies._trim import (
    APPROXIMATION,
    Counter,
    Fitted,
    PromptLimit,
    Trimmed,
    approximate_tokens,
    fit_prompt,
    trim_marker,
)

__all__ = [
    "APPROXIMATION",
    "Budget",
    "Counter",
    "FailureKind",
    "Fitted",
    "PromptLimit",
    "Trimmed",
    "approximate_tokens",
    "classify_failure",
    "fit_prompt",
    "may_advance",
    "plan_budget",
    "prompt_limit",
    "trim_marker",
]
