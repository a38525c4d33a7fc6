"""Policies over requests and plans: pure functions, no I/O."""

from policies._budget import Budget, plan_budget

__all__ = ["Budget", "plan_budget"]
