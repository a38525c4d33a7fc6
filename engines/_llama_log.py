"""llama.cpp's own log, into Python's logging (logger `zest.llama_cpp`).

llama-cpp-python prints llama.cpp's lines to stderr through a level table that no longer
matches ggml's (it reads warnings as errors), so its lines bypass zest's log format and levels.
Here warnings and errors keep their level and the rest (load details) is debug.

Among those load details is ggml's own accounting of the buffers a model and its contexts
allocate ("Vulkan0 model buffer size = 98.13 MiB"): `buffers_logged` collects the lines of
the loads its thread makes (llama.cpp logs on the thread that loads), the proof of where a
model's layers and KV cache went.
"""

from __future__ import annotations

import ctypes
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from zest.engines._base import BufferUse

__all__ = ["buffers_logged", "parse_buffer_line", "route_llama_log"]

log = logging.getLogger("zest.llama_cpp")

# ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (continues the last line).
_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.DEBUG, 3: logging.WARNING}
_LEVELS[4] = logging.ERROR
_CONTINUES = 5
# Warnings that say nothing true of zest, and why they are debug here.
_FALSE_ALARMS = (
    # With parallel sequences sharing one KV cache (kv_unified), llama.cpp compares the whole
    # cache with the trained context; zest's budgets hold each sequence within context_length,
    # and no context_length past the trained one is accepted.
    "possible training context overflow",
)
_BUFFER = re.compile(r"^\w+: +(\S+) +(model|KV|RS|compute|output) buffer size = +([\d.]+) MiB")
_collecting = threading.local()
_last = [logging.DEBUG]
_kept: list[Any] = []  # the callback, kept alive: llama.cpp holds a pointer to it


def route_llama_log(llama_cpp: Any) -> None:
    """Install the callback (once per process, before the first model loads)."""

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def forward(level: int, text: bytes, _: ctypes.c_void_p) -> None:
        line = text.decode("utf-8", "replace").rstrip("\n")
        found = _last[0] if level == _CONTINUES else _LEVELS.get(level, logging.DEBUG)
        _last[0] = found
        found_buffers = getattr(_collecting, "buffers", None)
        if found_buffers is not None and (use := parse_buffer_line(line)) is not None:
            found_buffers.append(use)
        if any(alarm in line for alarm in _FALSE_ALARMS):
            found = logging.DEBUG
        if line and log.isEnabledFor(found):
            log.log(found, "%s", line)

    _kept.append(forward)
    llama_cpp.llama_log_set(forward, ctypes.c_void_p(0))


def parse_buffer_line(line: str) -> BufferUse | None:
    """A buffer of ggml's accounting from one llama.cpp log line (None: another line)."""
    match = _BUFFER.match(line.strip())
    return BufferUse(match[1], match[2], float(match[3])) if match else None


@contextmanager
def buffers_logged() -> Iterator[list[BufferUse]]:
    """The buffers llama.cpp reports while this thread loads a model or makes a context."""
    found: list[BufferUse] = []
    _collecting.buffers = found
    try:
        yield found
    finally:
        _collecting.buffers = None
