"""The batch's steps, planned by one pure function and pinned by counting steps: admission by
priority and arrival, preemption, the leading work's rows, lower work beside it, guarded steps
while a higher route may arrive, and the aging rules."""

from __future__ import annotations

import pytest

from zest.engines._step_plan import (
    AGING_STEPS,
    MIN_CHUNK,
    SHIELD_STEPS,
    WAIT_AGING_STEPS,
    Running,
    StepBudget,
    StepPlan,
    StepState,
    Waiting,
    plan_step,
)

BUDGET = StepBudget(full=512, guarded=64, beside=4)


def plan(
    running: list[Running],
    waiting: list[Waiting] = (),
    free: int = 0,
    step: int = 0,  # type: ignore[assignment]
) -> StepPlan:
    return plan_step(StepState(tuple(running), tuple(waiting), free, step), BUDGET)


def test_equal_priorities_fill_the_whole_budget_decode_rows_first_then_prompts_by_arrival() -> None:
    running = [
        Running(1, 0, arrival=1, remaining=400),
        Running(2, 0, arrival=2),
        Running(3, 0, arrival=3, remaining=400),
    ]
    assert plan(running).rows == ((2, 1), (1, 400), (3, 111))


def test_a_lone_lower_prompt_takes_guarded_steps_while_a_higher_route_shares_its_model() -> None:
    """Route priorities known at load: a summary alone never takes a whole n_batch when an
    autocomplete route (peak 50) may arrive behind its step."""
    alone = [Running(1, 0, arrival=1, remaining=1600)]
    assert plan(alone).rows == ((1, 512),)
    expecting = [Running(1, 0, arrival=1, remaining=1600, peak=50)]
    assert plan(expecting).rows == ((1, BUDGET.guarded),)


def test_the_leading_work_takes_the_step_and_lower_work_gets_what_beside_allows() -> None:
    running = [
        Running(1, 0, arrival=1, remaining=1600, peak=50),
        Running(2, 0, arrival=2, peak=50),
        Running(3, 50, arrival=3, remaining=40, peak=50),
    ]
    # The autocomplete's whole prompt, then lower work up to `beside` tokens: the summary's
    # decode row first, then 3 tokens of the other's prompt.
    assert plan(running).rows == ((2, 1), (3, 40), (1, 3))


def test_lower_decode_rows_sit_out_past_beside_until_the_aging_rule_serves_them() -> None:
    budget = StepBudget(full=512, guarded=64, beside=1)
    urgent = Running(9, 50, arrival=9)
    lower = [Running(k, 0, arrival=k, last_served=0) for k in (1, 2)]
    state = StepState((*lower, urgent), (), 0, step=1)
    assert plan_step(state, budget).rows == ((1, 1), (9, 1))  # the oldest one rides along
    later = StepState((*lower, urgent), (), 0, step=AGING_STEPS)
    assert plan_step(later, budget).rows == ((1, 1), (2, 1), (9, 1))  # sat out AGING_STEPS


def test_an_aged_prompt_gets_at_least_min_chunk_tokens() -> None:
    budget = StepBudget(full=512, guarded=64, beside=0)
    running = [Running(1, 0, arrival=1, remaining=900, last_served=0), Running(2, 50, arrival=2)]
    assert plan_step(StepState(tuple(running), (), 0, 1), budget).rows == ((2, 1),)
    aged = StepState(tuple(running), (), 0, AGING_STEPS)
    assert plan_step(aged, budget).rows == ((2, 1), (1, MIN_CHUNK))


def test_drafts_come_after_every_decoding_sequence_has_its_row() -> None:
    running = [Running(1, 0, arrival=1, rows=600), Running(2, 0, arrival=2, rows=3)]
    assert plan(running).rows == ((1, 511), (2, 1))


def test_waiting_requests_take_free_slots_by_priority_then_arrival() -> None:
    waiting = [
        Waiting(1, 0, arrival=1, remaining=10),
        Waiting(2, 50, arrival=2, remaining=10),
        Waiting(3, 50, arrival=3, remaining=10),
    ]
    assert plan([], waiting, free=2).admitted == (2, 3)


def test_a_request_that_waited_long_enough_goes_first_whatever_its_priority() -> None:
    waiting = [
        Waiting(1, 0, arrival=1, remaining=10, since=0),
        Waiting(2, 50, arrival=2, remaining=10, since=WAIT_AGING_STEPS - 1),
    ]
    assert plan([], waiting, free=1, step=WAIT_AGING_STEPS - 1).admitted == (2,)
    aged = plan([], waiting, free=1, step=WAIT_AGING_STEPS)
    assert (aged.admitted, aged.shielded) == ((1,), (1,))  # and it is never preempted


def test_a_higher_request_preempts_the_lowest_latest_running_sequence() -> None:
    running = [
        Running(1, 0, arrival=1),
        Running(2, 0, arrival=2),
        Running(3, 10, arrival=3),
    ]
    found = plan(running, [Waiting(4, 50, arrival=4, remaining=40)])
    assert (found.preempted, found.admitted) == ((2,), (4,))
    assert (4, 40) in found.rows
    assert 2 not in dict(found.rows)


def test_nothing_is_preempted_for_an_equal_priority_or_a_free_slot() -> None:
    running = [Running(1, 50, arrival=1)]
    assert plan(running, [Waiting(2, 50, arrival=2, remaining=40)]).preempted == ()
    assert plan(running, [Waiting(2, 90, arrival=2, remaining=40)], free=1).preempted == ()


def test_a_preempted_sequence_resumes_shielded_for_shield_steps_then_may_be_preempted() -> None:
    resumed = plan([], [Waiting(1, 0, arrival=1, remaining=0, preempted=True)], free=1)
    assert (resumed.admitted, resumed.shielded, resumed.rows) == ((1,), (1,), ((1, 1),))
    top = [Waiting(2, 50, arrival=2, remaining=40)]
    shielded = [Running(1, 0, arrival=1, shielded=True, started=0)]
    assert plan(shielded, top, step=SHIELD_STEPS - 1).preempted == ()
    assert plan(shielded, top, step=SHIELD_STEPS).preempted == (1,)
    # Among equals, a sequence never shielded goes before one preempted before.
    both = [Running(1, 0, arrival=1, shielded=True), Running(3, 0, arrival=0)]
    assert plan(both, top, step=SHIELD_STEPS).preempted == (3,)


def test_a_requests_choices_wait_for_free_slots_for_every_member_and_nothing_jumps_them() -> None:
    pair = [Waiting(k, 0, arrival=k, remaining=10, group=7, group_size=2) for k in (1, 2)]
    later = Waiting(3, 0, arrival=3, remaining=10)
    assert plan([], [*pair, later], free=1).admitted == ()
    assert plan([], [*pair, later], free=2).admitted == (1, 2)
    # A group is no reason to preempt: its members wait for free slots.
    high_pair = [Waiting(k, 50, arrival=k, remaining=10, group=7, group_size=2) for k in (1, 2)]
    assert plan([Running(9, 0, arrival=0)], high_pair, free=1).preempted == ()


def test_abandoned_requests_are_dropped_and_free_their_slots() -> None:
    running = [Running(1, 0, arrival=1, abandoned=True), Running(2, 0, arrival=2)]
    waiting = [Waiting(3, 90, arrival=3, remaining=5, abandoned=True)]
    found = plan(running, [*waiting, Waiting(4, 0, arrival=4, remaining=5)])
    assert (found.dropped, found.preempted, found.admitted) == ((1, 3), (), (4,))


@pytest.mark.parametrize(
    ("full", "guarded", "beside"), [(0, 0, 0), (64, 0, 0), (64, 65, 0), (64, 8, -1)]
)
def test_a_budget_that_could_leave_a_step_empty_is_refused(
    full: int, guarded: int, beside: int
) -> None:
    with pytest.raises(ValueError, match="a step budget needs"):
        StepBudget(full, guarded, beside)


def test_every_aged_sequence_gets_a_row_before_any_gets_a_whole_chunk() -> None:
    budget = StepBudget(full=4, guarded=4, beside=0)
    running = tuple(Running(k, 0, arrival=k, remaining=100) for k in range(1, 5))
    aged = StepState(running, (), 0, step=AGING_STEPS)
    assert plan_step(aged, budget).rows == ((1, 1), (2, 1), (3, 1), (4, 1))
