"""The KV cells an engine's context holds, as its scheduling thread last counted them.

Every path of a request must give back what it took (DESIGN.md §9): a sequence that ended,
failed or was cancelled holds no cell, except the prompt a batch keeps in its idle slot's
stream for the next request to reuse (engines/_prefix_cache.py), a cache bounded by its slots.
The count is llama.cpp's own (each sequence's positions in its memory), taken between steps on
the thread that owns the context, and published as one immutable record the event loop reads
(GET /v1/loaded, and the e2e suite's invariant after every test).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["KvCells", "count_cells"]


class CountsCells(Protocol):
    """What the count reads of a context (engines/_llama_native.py's NativeContext): named
    here, not imported, as the engine's base imports this module and the context the base."""

    def cells(self, seq: int) -> int: ...


@dataclass(frozen=True)
class KvCells:
    running: int = 0  # held by the sequences generating now
    kept: int = 0  # prompts kept in idle slots for reuse (the prefix cache)
    stray: int = 0  # held by a free slot beyond the prompt it keeps: a leak

    def as_dict(self) -> dict[str, Any]:
        return {"running": self.running, "kept": self.kept, "stray": self.stray}

    def __add__(self, other: KvCells) -> KvCells:
        return KvCells(
            self.running + other.running, self.kept + other.kept, self.stray + other.stray
        )


def count_cells(
    ctx: CountsCells, running: Iterable[int], free: Iterable[int], kept: Mapping[int, int]
) -> KvCells:
    """The cells of `ctx`'s sequences: `running` ones, and `free` ones of which each keeps
    at most `kept[seq]` cells (its kept prompt)."""
    busy = sum(ctx.cells(seq) for seq in running)
    held = {seq: ctx.cells(seq) for seq in free}
    kept_cells = sum(min(cells, kept.get(seq, 0)) for seq, cells in held.items())
    stray = sum(max(cells - kept.get(seq, 0), 0) for seq, cells in held.items())
    return KvCells(busy, kept_cells, stray)
