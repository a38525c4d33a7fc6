"""The admission queue every local runner shares: priority then arrival, the bound, Retry-After.
Pure: no model, no threads."""

from __future__ import annotations

from typing import Any

import pytest

from zest.engines._admission import AdmissionQueue, ChoiceGroup
from zest.errors import BadRequestError, OverloadedError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_slots_plus_max_queue_requests_are_accepted_and_the_next_is_refused() -> None:
    queue: AdmissionQueue[str] = AdmissionQueue(slots=2, max_queue=4)
    for n in range(6):  # none has been taken yet: free slots count as places too
        queue.offer(f"r{n}")
    with pytest.raises(OverloadedError) as refused:
        queue.offer("r6")
    assert refused.value.status_code == 429
    assert queue.waiting == 6  # the refused one holds nothing
    assert refused.value.message == (
        "the model is at capacity (0 running, 6 waiting): retry in 1 s (Retry-After), or "
        "raise options.max_queue (now 4) in routes.yaml"
    )


def test_take_hands_out_at_most_slots_items_and_finish_frees_one() -> None:
    queue: AdmissionQueue[str] = AdmissionQueue(slots=2, max_queue=1)
    for name in ("a", "b", "c"):
        queue.offer(name)
    assert [queue.take(), queue.take(), queue.take()] == ["a", "b", None]
    with pytest.raises(OverloadedError):
        queue.offer("d")
    queue.finish()
    assert queue.take() == "c"
    queue.offer("d")  # a place freed: accepted again
    assert (queue.running, queue.waiting) == (2, 1)


def test_priority_first_then_arrival() -> None:
    queue: AdmissionQueue[str] = AdmissionQueue(slots=1, max_queue=10)
    for name, priority in [("low1", 0), ("high1", 5), ("low2", 0), ("high2", 5), ("mid", 1)]:
        queue.offer(name, priority)
    taken = []
    while (item := queue.take()) is not None:
        taken.append(item)
        queue.finish()
    assert taken == ["high1", "high2", "mid", "low1", "low2"]


def test_an_abandoned_waiting_item_gives_its_place_back_and_is_told() -> None:
    gone: set[str] = set()
    dropped: list[str] = []
    queue: AdmissionQueue[str] = AdmissionQueue(
        slots=1, max_queue=1, abandoned=gone.__contains__, drop=dropped.append
    )
    queue.offer("running")
    assert queue.take() == "running"
    queue.offer("waiting")
    gone.add("waiting")  # its client disconnected while it waited
    queue.offer("next")  # the full queue first drops what nobody waits for
    assert dropped == ["waiting"]
    queue.finish()
    assert queue.take() == "next"


def test_take_skips_abandoned_items() -> None:
    dropped: list[str] = []
    queue: AdmissionQueue[str] = AdmissionQueue(
        slots=1, max_queue=5, abandoned=lambda item: item.startswith("x"), drop=dropped.append
    )
    for name in ("x1", "x2", "ok"):
        queue.offer(name)
    assert queue.take() == "ok"
    assert dropped == ["x1", "x2"]


def test_retry_after_is_one_second_until_a_service_rate_is_seen() -> None:
    queue: AdmissionQueue[str] = AdmissionQueue(slots=1, max_queue=0)
    queue.offer("a")
    with pytest.raises(OverloadedError) as refused:
        queue.offer("b")
    assert refused.value.headers == {"retry-after": "1"}


def test_retry_after_follows_the_observed_service_rate() -> None:
    clock = Clock()
    queue: AdmissionQueue[int] = AdmissionQueue(slots=1, max_queue=0, clock=clock)
    for n in range(4):  # one request finished every 10 s
        queue.offer(n)
        assert queue.take() == n
        clock.now += 10
        queue.finish()
    queue.offer(99)
    queue.take()
    with pytest.raises(OverloadedError) as refused:
        queue.offer(100)
    # 4 finished over the 30 s since the first: a place frees in about 7.5 s.
    assert refused.value.headers == {"retry-after": "8"}


def test_failed_requests_do_not_count_towards_the_service_rate() -> None:
    clock = Clock()
    queue: AdmissionQueue[int] = AdmissionQueue(slots=1, max_queue=0, clock=clock)
    for n in range(5):
        queue.offer(n)
        queue.take()
        clock.now += 0.001
        queue.finish(served=False)
    assert queue.retry_after() == 1  # no served request: the default, not 1 ms per request


def test_old_completions_leave_the_rate_window() -> None:
    clock = Clock()
    queue: AdmissionQueue[int] = AdmissionQueue(slots=1, max_queue=0, clock=clock)
    for n in range(3):
        queue.offer(n)
        queue.take()
        clock.now += 1
        queue.finish()
    clock.now += 3600
    assert queue.retry_after() == 1


def test_drain_returns_the_waiting_in_admission_order() -> None:
    queue: AdmissionQueue[str] = AdmissionQueue(slots=1, max_queue=5)
    for name, priority in [("b", 0), ("a", 3), ("c", 0)]:
        queue.offer(name, priority)
    assert queue.drain() == ["a", "b", "c"]
    assert queue.waiting == 0


def test_a_queue_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="slots >= 1"):
        AdmissionQueue(slots=0, max_queue=1)


# -- a request's n choices: admitted together ---------------------------------------------------


def grouped(groups: dict[str, ChoiceGroup], **queue: Any) -> AdmissionQueue[str]:
    """A queue whose items named in `groups` are choices of one request."""
    return AdmissionQueue(group=groups.get, **queue)


def take_all(queue: AdmissionQueue[str]) -> list[str]:
    taken = []
    while (item := queue.take()) is not None:
        taken.append(item)
    return taken


def test_a_request_s_choices_wait_for_a_slot_each_and_nothing_behind_them_jumps() -> None:
    request = ChoiceGroup(3)
    queue = grouped({"c0": request, "c1": request, "c2": request}, slots=4, max_queue=8)
    queue.offer("busy1")
    queue.offer("busy2")
    assert take_all(queue) == ["busy1", "busy2"]
    for name in ("c0", "c1", "c2", "later"):
        queue.offer(name)
    assert take_all(queue) == []  # 2 free slots for 3 choices: none starts, nor what follows
    queue.finish()
    assert take_all(queue) == ["c0", "c1", "c2"]  # all three, in the same admission
    queue.finish()
    assert take_all(queue) == ["later"]


def test_a_taken_choice_s_siblings_come_next_before_earlier_arrivals() -> None:
    request = ChoiceGroup(2)
    queue = grouped({"c0": request, "c1": request}, slots=4, max_queue=8)
    queue.offer("c0")
    queue.offer("other", 0)
    queue.offer("c1")
    assert take_all(queue) == ["c0", "c1", "other"]


def test_choices_arriving_one_by_one_start_as_they_come_while_slots_hold_them_all() -> None:
    """Choices are submitted one after another: the first starts at once when the free slots
    hold every choice; a choice that never comes (gone to another model) blocks nothing."""
    request = ChoiceGroup(3)
    queue = grouped({"c0": request, "c1": request, "c2": request}, slots=3, max_queue=8)
    queue.offer("c0")
    assert take_all(queue) == ["c0"]
    queue.offer("c1")
    assert take_all(queue) == ["c1"]
    queue.offer("next")  # c2's slot is not held for it
    assert take_all(queue) == ["next"]


def test_an_abandoned_choice_leaves_its_place_among_the_siblings() -> None:
    request, gone = ChoiceGroup(3), {"c1"}
    dropped: list[str] = []
    queue: AdmissionQueue[str] = AdmissionQueue(
        slots=4,
        max_queue=8,
        group={"c0": request, "c1": request, "c2": request}.get,
        abandoned=gone.__contains__,
        drop=dropped.append,
    )
    for name in ("c0", "c1", "c2"):
        queue.offer(name)
    assert take_all(queue) == ["c0", "c2"]
    assert dropped == ["c1"]
    assert queue.waiting == 0


def test_more_choices_than_slots_are_refused_as_they_could_never_decode_together() -> None:
    request = ChoiceGroup(8)
    queue = grouped({"c0": request}, slots=4, max_queue=8)
    with pytest.raises(BadRequestError) as refused:
        queue.offer("c0")
    assert refused.value.message == (
        "n: 8 choices decode together, and this model decodes at most 4 sequences at once "
        "(options.parallel in routes.yaml): ask for n: 4 or fewer"
    )
    assert refused.value.param == "n"
    assert queue.waiting == 0


def test_a_batch_larger_than_the_slots_is_refused_naming_its_prompts() -> None:
    """A completions batch is one group (issue 33): its answers start together or not at all."""
    batch = ChoiceGroup(6, prompts=3)
    queue = grouped({"c0": batch}, slots=4, max_queue=8)
    with pytest.raises(BadRequestError) as refused:
        queue.offer("c0")
    assert refused.value.message == (
        "prompt: 3 prompts with n=2 ask for 6 answers, which decode together, and this model "
        "decodes at most 4 sequences at once (options.parallel in routes.yaml): send at most 4 "
        "answers (prompts times n) per request"
    )
    assert refused.value.param == "prompt"
    assert queue.waiting == 0


def test_a_one_sequence_runner_takes_more_choices_one_after_another() -> None:
    """An onnx-genai model decodes one sequence at a time: its choices never decode together,
    and take its slot in turn."""
    request = ChoiceGroup(2)
    queue = grouped({"c0": request, "c1": request}, slots=1, max_queue=8, slots_set_by=None)
    queue.offer("c0")
    queue.offer("c1")
    assert take_all(queue) == ["c0"]
    queue.finish()
    assert take_all(queue) == ["c1"]
