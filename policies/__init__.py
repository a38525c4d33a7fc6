"""Policies over requests and plans: pure functions, no I/O."""

from zest.policies._budget import Budget, plan_budget, prompt_limit
from zest.policies._fallback import FailureKind, classify_failure, failure_line, may_advance
from zest.policies._fit import (
    AttemptFit,
    AttemptTerms,
    Measure,
    UniformMeasure,
    attempt_terms,
    describe_fit,
    fit_attempt,
    uniform_prompt,
)
from zest.policies._trim import (
    Fitted,
    PromptLimit,
    Trimmed,
    approximate_tokens,
    fit_prompt,
    trim_marker,
)

__all__ = [
    "AttemptFit",
    "AttemptTerms",
    "Budget",
    "FailureKind",
    "Fitted",
    "Measure",
    "PromptLimit",
    "Trimmed",
    "UniformMeasure",
    "approximate_tokens",
    "attempt_terms",
    "classify_failure",
    "describe_fit",
    "failure_line",
    "fit_attempt",
    "fit_prompt",
    "may_advance",
    "plan_budget",
    "prompt_limit",
    "trim_marker",
    "uniform_prompt",
]
