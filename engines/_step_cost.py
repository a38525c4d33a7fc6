"""The cost model of the batch's steps: where the machine's speed enters the scheduler, as the
token budgets a step may carry (engines/_step_plan.py, StepBudget).

`MeasuredCost` fits the steps the scheduler ran to a line, milliseconds = fixed + per_token x
tokens (a least-squares fit over recent steps, older ones weighing less), and answers:

- `guarded`: the tokens a step may hold while a request of higher priority may arrive behind
  it: as many as fit in GUARDED_MS (that request's first token waits for one such step);
- `beside`: lower work's tokens beside urgent work: as many as cost BESIDE_MS at the fitted
  cost per token (at least one row), so an urgent decode step stays close to its cost alone.
  It was the fit's fixed part once, but that part grows with the lower prompts' context
  (their chunks attend over long KV): beside three ~1,600-token summaries it let 5 to 13
  lower tokens into each autocomplete step, 60-120 ms steps against ~15 ms alone, and the
  autocomplete's last token came 9x later than alone (zest bench --phases mixed); at one
  token, 35-45 ms steps;
- `full`: n_batch.

On the 2-core CPUs here a step costs about 10 ms plus 3 ms a token beside long prompts: a
guarded step holds about 36 tokens, lower work beside urgent work one token.
Before any step is measured, DEFAULT_GUARDED and DEFAULT_BESIDE. `FixedCost` answers one
budget whatever runs: what tests use to pin a batch without a clock.
"""

from __future__ import annotations

from typing import Protocol

from zest.engines._step_plan import StepBudget

__all__ = [
    "BESIDE_MS",
    "DEFAULT_BESIDE",
    "DEFAULT_GUARDED",
    "GUARDED_MS",
    "MIN_GUARDED",
    "CostModel",
    "FixedCost",
    "MeasuredCost",
]

# How long a step may take while a request of higher priority may arrive behind it.
GUARDED_MS = 120.0
# What lower work may add to a step of urgent work.
BESIDE_MS = 5.0
# A guarded step's tokens at least, however slow the machine (a prompt still moves).
MIN_GUARDED = 16
# Before a step is measured.
DEFAULT_GUARDED = 64
DEFAULT_BESIDE = 4
# How much each new step counts in the fit (older ones fade: the machine's load changes).
_WEIGHT = 0.05


class CostModel(Protocol):
    def budget(self) -> StepBudget:
        """The budgets of the next step."""
        ...

    def record(self, tokens: int, ms: float) -> None:
        """A step of `tokens` took `ms`."""
        ...


class FixedCost:
    """The same budget for every step."""

    def __init__(self, budget: StepBudget) -> None:
        self._budget = budget

    def budget(self) -> StepBudget:
        return self._budget

    def record(self, tokens: int, ms: float) -> None:
        del tokens, ms


class MeasuredCost:
    def __init__(self, full: int, *, guarded_ms: float = GUARDED_MS) -> None:
        self._full, self._guarded_ms = full, guarded_ms
        # Exponentially weighted sums of 1, x, y, x*x, x*y (x: tokens, y: ms).
        self._sums = [0.0] * 5

    def record(self, tokens: int, ms: float) -> None:
        if tokens <= 0 or ms <= 0:
            return
        for index, value in enumerate((1.0, tokens, ms, tokens * tokens, tokens * ms)):
            self._sums[index] += _WEIGHT * (value - self._sums[index])

    def line(self) -> tuple[float, float] | None:
        """(fixed ms, ms per token) of the steps measured; None before any."""
        n, x, y, xx, xy = self._sums
        if n <= 0 or x <= 0:
            return None
        mean_x, mean_y = x / n, y / n
        spread = xx / n - mean_x * mean_x
        if spread <= (0.1 * mean_x) ** 2:  # steps of one size: no slope to read, all per token
            return 0.0, mean_y / mean_x
        slope = max((xy / n - mean_x * mean_y) / spread, 1e-6)
        return max(mean_y - slope * mean_x, 0.0), slope

    def budget(self) -> StepBudget:
        found = self.line()
        if found is None:
            guarded, beside = DEFAULT_GUARDED, DEFAULT_BESIDE
        else:
            fixed, per_token = found
            guarded = int((self._guarded_ms - fixed) / per_token)
            beside = int(BESIDE_MS / per_token)
        guarded = min(max(guarded, MIN_GUARDED), self._full)
        return StepBudget(self._full, guarded, min(max(beside, 1), guarded))
