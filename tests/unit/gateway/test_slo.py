"""The SLO windows: nearest-rank p95 and median over a sliding window on a fake clock, breaches
counted and reported once per change, and a window that ages back into meeting its targets."""

from __future__ import annotations

import pytest

from zest.gateway.http._slo import MAX_SAMPLES, Change, SloTracker, nearest_rank
from zest.router import Slo

BOTH = Slo(ttft_p95_s=1.0, min_tokens_per_s=10.0, window=60)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def changes() -> list[Change]:
    return []


@pytest.fixture
def tracker(clock: Clock, changes: list[Change]) -> SloTracker:
    return SloTracker(report=changes.append, clock=clock)


@pytest.mark.parametrize(
    ("values", "fraction", "expected"),
    [([0.3], 0.95, 0.3),
     (list(range(1, 21)), 0.95, 19),  # rank ceil(0.95 * 20) = 19
     (list(range(1, 101)), 0.95, 95),
     (list(range(100, 0, -1)), 0.95, 95),  # order does not matter
     ([5, 1], 0.5, 1)],
)  # fmt: skip
def test_the_nearest_rank_is_a_measured_value(
    values: list[float], fraction: float, expected: float
) -> None:
    assert nearest_rank(values, fraction) == expected


def test_a_window_within_both_targets_is_ok(tracker: SloTracker, changes: list[Change]) -> None:
    for ttft, rate in [(0.2, 50.0), (0.4, 40.0), (0.3, None)]:
        state = tracker.observe("chat", BOTH, ttft, rate)
    assert state.ok
    assert (state.requests, state.ttft_p95_s, state.tokens_per_s) == (3, 0.4, 45.0)
    assert [(j.objective, j.value, j.ok) for j in state.judgements] == [
        ("ttft_p95", 0.4, True),
        ("tokens_per_s", 45.0, True),
    ]
    assert changes == []
    assert tracker.breaches("chat") == {"ttft_p95": 0, "tokens_per_s": 0}


def test_one_slow_request_in_twenty_is_within_the_p95(tracker: SloTracker) -> None:
    for _ in range(19):
        tracker.observe("chat", BOTH, 0.1, 50.0)
    state = tracker.observe("chat", BOTH, 9.0, 50.0)
    assert state.ttft_p95_s == 0.1  # the 19th of 20 by rank
    assert state.ok
    state = tracker.observe("chat", BOTH, 9.0, 50.0)  # two in 21: past the 95th percentile
    assert state.ttft_p95_s == 9.0
    assert not state.ok


def test_a_breach_is_counted_and_reported_once_however_many_requests_miss(
    tracker: SloTracker, changes: list[Change]
) -> None:
    for _ in range(5):
        tracker.observe("chat", BOTH, 3.0, 50.0)
    assert tracker.breaches("chat") == {"ttft_p95": 1, "tokens_per_s": 0}
    assert len(changes) == 1
    assert changes[0].breached
    assert changes[0].describe() == (
        "SLO breached: route chat: ttft_p95 3 s (target <= 1 s) over the last 1m (1 requests)"
    )


def test_the_decode_objective_judges_the_windows_median(
    tracker: SloTracker, changes: list[Change]
) -> None:
    tracker.observe("chat", BOTH, 0.1, 4.0)  # one slow request: the median is 4
    tracker.observe("chat", BOTH, 0.1, 30.0)  # the median of 4 and 30 is 17: met again
    state = tracker.observe("chat", BOTH, 0.1, 5.0)  # the median of 4, 5, 30 is 5: missed
    assert state.tokens_per_s == 5.0
    assert [c.describe() for c in changes] == [
        "SLO breached: route chat: tokens_per_s 4 tokens/s (target >= 10 tokens/s) over the "
        "last 1m (1 requests)",
        "SLO met again: route chat: tokens_per_s 17 tokens/s (target >= 10 tokens/s) over the "
        "last 1m (2 requests)",
        "SLO breached: route chat: tokens_per_s 5 tokens/s (target >= 10 tokens/s) over the "
        "last 1m (3 requests)",
    ]
    assert tracker.breaches("chat")["tokens_per_s"] == 2


def test_requests_without_a_decode_rate_leave_that_objective_unjudged(
    tracker: SloTracker,
) -> None:
    state = tracker.observe("chat", BOTH, 0.1, None)  # a one-token answer
    assert state.tokens_per_s is None
    assert [(j.objective, j.value, j.ok) for j in state.judgements][1] == (
        "tokens_per_s",
        None,
        True,
    )


def test_old_requests_leave_the_window_and_the_route_is_met_again(
    tracker: SloTracker, clock: Clock, changes: list[Change]
) -> None:
    tracker.observe("chat", BOTH, 5.0, 50.0)
    clock.now += 30
    tracker.observe("chat", BOTH, 0.1, 50.0)
    clock.now += 31  # the slow one is 61 s old: out of the 60 s window
    (state,) = tracker.judge_all({"chat": BOTH})
    assert (state.requests, state.ttft_p95_s, state.ok) == (1, 0.1, True)
    clock.now += 60  # and now the window is empty: met, with nothing to judge
    (state,) = tracker.judge_all({"chat": BOTH})
    assert (state.requests, state.ttft_p95_s, state.ok) == (0, None, True)
    assert [c.breached for c in changes] == [True, False]  # breached, then met again once


def test_ageing_can_breach_too_and_is_reported_when_judged(
    tracker: SloTracker, clock: Clock, changes: list[Change]
) -> None:
    slo = Slo(min_tokens_per_s=10.0, window=60)
    tracker.observe("chat", slo, 0.1, 50.0)
    clock.now += 30
    tracker.observe("chat", slo, 0.1, 2.0)  # median 26: met
    clock.now += 31  # the fast one ages out: the median is 2
    (state,) = tracker.judge_all({"chat": slo})
    assert not state.ok
    assert [c.describe() for c in changes] == [
        "SLO breached: route chat: tokens_per_s 2 tokens/s (target >= 10 tokens/s) over the "
        "last 1m (1 requests)"
    ]


def test_routes_are_judged_apart(tracker: SloTracker) -> None:
    tracker.observe("chat", BOTH, 5.0, 50.0)
    tracker.observe("summarization", BOTH, 0.1, 50.0)
    states = {s.route: s.ok for s in tracker.judge_all({"chat": BOTH, "summarization": BOTH})}
    assert states == {"chat": False, "summarization": True}


def test_a_reload_s_new_objectives_apply_at_once_and_dropped_ones_are_forgotten(
    tracker: SloTracker, changes: list[Change]
) -> None:
    tracker.observe("chat", BOTH, 5.0, 50.0)
    (state,) = tracker.judge_all({"chat": Slo(ttft_p95_s=10.0, window=60)})
    assert state.ok  # 5 s is within the new target
    assert tracker.judge_all({}) == []  # the route lost its slo
    assert tracker.breaches("chat") == {}
    (state,) = tracker.judge_all({"chat": BOTH})  # back, with a fresh window
    assert (state.requests, state.ok) == (0, True)


def test_a_window_keeps_the_most_recent_requests_only(tracker: SloTracker) -> None:
    for _ in range(MAX_SAMPLES):
        tracker.observe("chat", BOTH, 5.0, 50.0)
    for _ in range(MAX_SAMPLES):
        state = tracker.observe("chat", BOTH, 0.1, 50.0)
    assert (state.requests, state.ttft_p95_s, state.ok) == (MAX_SAMPLES, 0.1, True)


def test_the_stats_entry_of_a_route(tracker: SloTracker) -> None:
    for _ in range(3):
        state = tracker.observe("chat", BOTH, 2.0, 12.5)
    assert state.as_stats(tracker.breaches("chat")) == {
        "ok": False,
        "window_s": 60.0,
        "requests": 3,
        "ttft_p95_s": 2.0,
        "tokens_per_s": 12.5,
        "objectives": {
            "ttft_p95": {"target": 1.0, "value": 2.0, "ok": False, "breaches": 1},
            "tokens_per_s": {"target": 10.0, "value": 12.5, "ok": True, "breaches": 0},
        },
    }


def test_a_report_may_read_the_tracker(clock: Clock) -> None:
    seen: list[dict[str, int]] = []
    tracker = SloTracker(report=lambda change: seen.append(tracker.breaches("chat")), clock=clock)
    tracker.observe("chat", BOTH, 5.0, 50.0)  # reported outside the lock: no deadlock
    assert seen == [{"ttft_p95": 1, "tokens_per_s": 0}]
