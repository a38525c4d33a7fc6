"""Which devices this machine offers to routes."""

from __future__ import annotations

__all__ = ["detect_devices"]


def detect_devices() -> frozenset[str]:
    """The devices routes may be placed on. The CPU is always there.

    GPU and NPU discovery (and emulated devices) arrive with the device inventory; until then
    a route pinned to them fails with an error naming what was found, never a silent CPU run.
    """
    return frozenset({"cpu"})
