"""on_compute_thread's while_waiting: the caller's own work overlaps the computation."""

from __future__ import annotations

import threading

from zest.engines._compute import on_compute_thread


def test_while_waiting_runs_while_the_work_is_under_way() -> None:
    hooked = threading.Event()
    # The work returns whether the hook ran before it finished: only a hook run while the
    # work waits can set it (a hook run after the work would leave it False after 5 s).
    overlapped = on_compute_thread(lambda: hooked.wait(timeout=5), while_waiting=hooked.set)
    assert overlapped


def test_on_the_compute_thread_itself_the_hook_runs_first() -> None:
    order: list[str] = []

    def outer() -> None:  # already on the compute thread: the inner call runs inline
        on_compute_thread(lambda: order.append("work"), while_waiting=lambda: order.append("hook"))

    on_compute_thread(outer)
    assert order == ["hook", "work"]


def test_without_a_hook_the_result_comes_back() -> None:
    assert on_compute_thread(lambda a, b: a + b, 2, 3) == 5
