"""What every server holds once a test is over: nothing (DESIGN.md §9, "every path releases
what it took"). Read from GET /v1/loaded: no generation in flight, every model idle (no lease,
nothing running or queued in its runner), no KV cell held but the prompts a batch keeps for
reuse, and no engine a reload retired left loaded.

A request ends on the server a little after its client saw the end (a client that left is
noticed at the next token, a retired engine is unloaded by the next sweep, each second): the
check waits for the server to settle, within a bound no healthy server comes near, and names
what is still held when it does not.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

__all__ = ["held", "wait_released"]

SETTLE_S = 300.0  # a hang guard, not a speed bound: a leak never settles, a slow stop does


def held(loaded: dict[str, Any]) -> list[str]:
    """What a GET /v1/loaded body says is still held (empty: nothing)."""
    problems = []
    if loaded.get("in_flight"):
        problems.append(f"{loaded['in_flight']} generation(s) in flight")
    for model in loaded["data"]:
        name = f"{model['model']} on {model['device']}"
        for key in ("requests_in_flight", "queued"):
            if model[key]:
                problems.append(f"{name}: {key} {model[key]}")
        if model["busy"]:
            problems.append(f"{name}: busy")
        if model["retired"]:
            problems.append(f"{name}: retired by a reload, still loaded")
        cells = model.get("kv_cells") or {}
        for key in ("running", "stray"):
            if cells.get(key):
                problems.append(f"{name}: {cells[key]} KV cells {key}")
    return problems


def wait_released(base_url: str, headers: dict[str, str], settle_s: float = SETTLE_S) -> None:
    """Until the server holds nothing; an AssertionError naming what it still holds after
    `settle_s`. A server that is draining (503 to all but its probes) is not judged."""
    deadline = time.monotonic() + settle_s
    while True:
        answer = httpx.get(f"{base_url}/v1/loaded", headers=headers, timeout=30)
        if answer.status_code == 503:
            return
        assert answer.status_code == 200, answer.text
        problems = held(answer.json())
        if not problems:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the server still holds, {settle_s:g}s after the test: {'; '.join(problems)}"
            )
        time.sleep(0.05)
