"""Policies over requests and plans: pure functions, no I/O."""

from zest.policies._budget import Budget, describe_budget, plan_budget, prompt_limit
from zest.policies._fallback import FailureKind, classify_failure, may_advance
from zest.policies._trim import (
    Fitted,
    PromptLimit,
    Trimmed,
    approximate_tokens,
    fit_prompt,
    trim_marker,
)

__all__ = [
    "Budget",
    "FailureKind",
    "Fitted",
    "PromptLimit",
    "Trimmed",
    "approximate_tokens",
    "classify_failure",
    "describe_budget",
    "fit_prompt",
    "may_advance",
    "plan_budget",
    "prompt_limit",
    "trim_marker",
]
