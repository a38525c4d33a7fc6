"""One thread for every multi-threaded llama.cpp computation in the process.

llama.cpp's CPU kernels run on OpenMP, and each thread that calls into them gets a team of
worker threads of its own. Between kernels those workers spin; but once libgomp manages more
threads than there are cores (a second model's scheduler thread, an embedding call on another
thread, each with its team), it all but stops spinning, and every model's decode slows down
for good: measured on 2 cores, 80 tok/s alone, 31 tok/s for both models once a second one had
decoded on its own thread (docs/benchmarks.md). So the computations of contexts with more
than one thread all run here, one at a time, on the one team: two models on the same cores
take turns step by step instead of both losing their spin. A one-thread context (the hybrid
pipeline's emulated stages) makes no team and computes on its caller's thread.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["compute_bound", "compute_executor", "on_compute_thread"]

P = ParamSpec("P")
T = TypeVar("T")

_thread_ids: set[int] = set()


def _mark() -> None:
    _thread_ids.add(threading.get_ident())


# Its thread starts on the first submit: a process that runs no model starts none.
_EXECUTOR = ThreadPoolExecutor(
    max_workers=1, thread_name_prefix="zest-llama-compute", initializer=_mark
)


def compute_executor() -> ThreadPoolExecutor:
    """The process's one llama.cpp compute thread."""
    return _EXECUTOR


def on_compute_thread(
    work: Callable[..., T], *args: object, while_waiting: Callable[[], None] | None = None
) -> T:
    """Run `work(*args)` on the compute thread and wait for it (inline if already there).
    `while_waiting` runs on the caller's thread once `work` is under way (before it, inline):
    what the caller has to do anyway overlaps the computation instead of delaying it."""
    if threading.get_ident() in _thread_ids:
        if while_waiting is not None:
            while_waiting()
        return work(*args)
    running = compute_executor().submit(work, *args)
    if while_waiting is not None:
        while_waiting()
    return running.result()


def compute_bound(work: Callable[P, T]) -> Callable[P, T]:
    """`work`, run on the compute thread whoever calls it (for llama-cpp-python used directly)."""

    @functools.wraps(work)
    def on_it(*args: P.args, **kwargs: P.kwargs) -> T:
        return on_compute_thread(functools.partial(work, *args, **kwargs))

    return on_it
