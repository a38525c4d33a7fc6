"""Giving freed memory back to the system after a model is unloaded.

glibc keeps what other threads freed in their own malloc arenas, so an engine unloaded by a
reload (its KV cache, its scheduler's buffers) leaves the process's RSS where it was, and
every reload that replaces an engine ratchets it up (seen in bench/soak.py: +15% over a few
minutes of reloads). malloc_trim(0) returns those free pages at once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any

__all__ = ["release_freed_memory"]


@functools.cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


def release_freed_memory() -> None:
    """Return free heap pages to the system (glibc only; elsewhere nothing to do)."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is not None:
        trim(0)
