"""The cost model: the steps measured fitted to a line, and the token budgets it gives."""

from __future__ import annotations

import pytest

from zest.engines._step_cost import (
    DEFAULT_BESIDE,
    DEFAULT_GUARDED,
    MIN_GUARDED,
    FixedCost,
    MeasuredCost,
)
from zest.engines._step_plan import StepBudget


def test_before_any_step_the_defaults() -> None:
    assert MeasuredCost(512).line() is None
    assert MeasuredCost(512).budget() == StepBudget(512, DEFAULT_GUARDED, DEFAULT_BESIDE)


def test_steps_on_a_line_give_its_fixed_cost_and_cost_per_token() -> None:
    """10 ms + 3 ms a token: a guarded step (120 ms) holds 36 tokens, lower work beside urgent
    work 1 (what BESIDE_MS, 5 ms, buys at 3 ms a token), whatever the fixed part."""
    cost = MeasuredCost(512)
    for tokens in (1, 4, 40, 512, 4, 64, 1, 200):
        cost.record(tokens, 10.0 + 3.0 * tokens)
    fixed, per_token = cost.line() or (0.0, 0.0)
    assert (fixed, per_token) == (pytest.approx(10.0), pytest.approx(3.0))
    assert cost.budget() == StepBudget(512, 36, 1)


def test_steps_of_one_size_are_read_as_cost_per_token_alone() -> None:
    cost = MeasuredCost(512)
    for _ in range(5):
        cost.record(4, 20.0)
    assert cost.line() == (0.0, pytest.approx(5.0))
    assert cost.budget() == StepBudget(512, 24, 1)  # beside never below one row


def test_a_slow_machine_keeps_a_floor_and_a_fast_one_the_ceiling() -> None:
    slow = MeasuredCost(512)
    for tokens in (1, 100):
        slow.record(tokens, 100.0 + 20.0 * tokens)
    assert slow.budget().guarded == MIN_GUARDED
    fast = MeasuredCost(512)
    for tokens in (1, 100):
        fast.record(tokens, 0.01 + 0.001 * tokens)
    assert fast.budget() == StepBudget(512, 512, 512)


def test_an_empty_or_unmeasured_step_says_nothing() -> None:
    cost = MeasuredCost(512)
    cost.record(0, 5.0)
    cost.record(10, 0.0)
    assert cost.line() is None


def test_a_fixed_cost_answers_one_budget_whatever_runs() -> None:
    budget = StepBudget(512, 8, 0)
    cost = FixedCost(budget)
    cost.record(512, 9000.0)
    assert cost.budget() is budget
