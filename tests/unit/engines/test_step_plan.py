"""Which prompts' prefill enters a step: by route priority, lower prompts yielding a small chunk
while a higher-priority request prefills or decodes, never paused (no starvation)."""

from __future__ import annotations

from zest.engines._step_plan import (
    MIN_YIELD,
    YIELD_CHUNK,
    Prefilling,
    QueuePause,
    RecentPriority,
    StepCost,
    prefill_chunks,
    yield_tokens,
)


def test_equal_priorities_fill_the_budget_in_arrival_order() -> None:
    waiting = [Prefilling(1, 0, 400), Prefilling(2, 0, 400)]
    assert prefill_chunks(waiting, budget=512) == [(1, 400), (2, 112)]


def test_a_higher_priority_prompt_goes_first_and_the_lower_one_yields() -> None:
    waiting = [Prefilling(1, 0, 1600), Prefilling(2, 50, 40)]
    assert prefill_chunks(waiting, budget=512) == [(2, 40), (1, YIELD_CHUNK)]


def test_a_lower_prompt_yields_while_a_higher_request_decodes() -> None:
    waiting = [Prefilling(1, 0, 1600)]
    assert prefill_chunks(waiting, budget=510, others=[50, 0]) == [(1, YIELD_CHUNK)]
    assert prefill_chunks(waiting, budget=510, others=[0, 0]) == [(1, 510)]


def test_a_yielding_prompt_is_never_paused_under_a_steady_interactive_load() -> None:
    """However many interactive prompts come, the batch prompt gets its chunk every step
    while budget remains after them: its prefill ends in a bounded number of steps."""
    remaining, steps = 1600, 0
    while remaining > 0:
        interactive = [Prefilling(100 + steps, 50, 40)]  # a new one every step
        chunks = dict(prefill_chunks([Prefilling(1, 0, remaining), *interactive], budget=512))
        remaining -= chunks[1]
        steps += 1
    assert steps == -(-1600 // YIELD_CHUNK)


def test_yielding_prompts_share_one_chunk_oldest_first() -> None:
    """Three summaries beside an autocomplete add one small chunk to the step, not three."""
    waiting = [Prefilling(1, 0, 1600), Prefilling(2, 0, 1600), Prefilling(3, 0, 30)]
    assert prefill_chunks(waiting, budget=500, others=[50]) == [(1, YIELD_CHUNK)]
    short_first = [Prefilling(3, 0, 30), Prefilling(1, 0, 1600)]
    assert prefill_chunks(short_first, budget=500, others=[50]) == [
        (3, 30),
        (1, YIELD_CHUNK - 30),
    ]


def test_every_yielding_prompt_finishes_in_turn_under_a_steady_interactive_load() -> None:
    remaining = {1: 1600, 2: 1600}
    steps = 0
    while any(remaining.values()):
        waiting = [Prefilling(k, 0, left) for k, left in remaining.items() if left]
        for key, tokens in prefill_chunks(waiting, budget=512, others=[50]):
            remaining[key] -= tokens
        steps += 1
    assert steps == -(-3200 // YIELD_CHUNK)


def test_the_budget_bounds_every_chunk() -> None:
    waiting = [Prefilling(1, 50, 900), Prefilling(2, 0, 900)]
    assert prefill_chunks(waiting, budget=512) == [(1, 512)]


def test_the_yielding_share_keeps_a_step_within_its_target() -> None:
    assert yield_tokens(None, rows=5) == YIELD_CHUNK  # nothing measured yet
    assert yield_tokens(1.0, rows=5, target_ms=150) == YIELD_CHUNK  # a fast machine: capped
    assert yield_tokens(2.0, rows=5, target_ms=150) == YIELD_CHUNK  # 75 rows fit: capped
    assert yield_tokens(3.0, rows=5, target_ms=150) == 45
    assert yield_tokens(10.0, rows=5, target_ms=150) == 10
    assert yield_tokens(10.0, rows=40, target_ms=150) == MIN_YIELD  # never paused


def test_the_step_cost_follows_the_steps_measured() -> None:
    cost = StepCost(weight=0.5)
    assert cost.ms_per_row is None
    cost.record(rows=100, ms=500.0)
    assert cost.ms_per_row == 5.0
    cost.record(rows=10, ms=150.0)  # 15 ms a row: halfway there
    assert cost.ms_per_row == 10.0
    cost.record(rows=0, ms=3.0)  # an empty step says nothing
    assert cost.ms_per_row == 10.0


def test_a_priority_stays_expected_for_its_hold_after_its_last_request() -> None:
    now = [0.0]
    recent = RecentPriority(hold_s=2.0, clock=lambda: now[0])
    assert recent.note([]) is None
    assert recent.note([0, 50]) == 50  # an autocomplete beside a summary
    now[0] = 1.5
    assert recent.note([0]) == 50  # the autocomplete ended: the next may come any moment
    now[0] = 3.0
    assert recent.note([0]) == 0  # nothing above for longer than the hold
    # The summary then leads: it takes the step's whole budget again.
    assert prefill_chunks([Prefilling(1, 0, 1600)], budget=512, others=[0]) == [(1, 512)]
    assert prefill_chunks([Prefilling(1, 0, 1600)], budget=512, others=[50]) == [(1, YIELD_CHUNK)]


def test_yielding_prompts_pause_while_a_higher_request_waits_for_a_slot() -> None:
    """A queued higher-priority request pauses the yielding chunk (the step shrinks to its
    decode rows and frees slots sooner), but the aging rule still serves it once a second."""
    now = [0.0]
    pause = QueuePause(aging_s=1.0, clock=lambda: now[0])
    assert pause.share(16, queued_above=False) == 16
    now[0] = 0.3
    assert pause.share(16, queued_above=True) == 0
    now[0] = 0.9
    assert pause.share(16, queued_above=True) == 0
    now[0] = 1.0  # a second since its last chunk: served however long the queue stays
    assert pause.share(16, queued_above=True) == 16
    now[0] = 1.5
    assert pause.share(16, queued_above=True) == 0
    assert pause.share(16, queued_above=False) == 16  # the queue drained: at once
