"""What runs beside the client streams: the upstream's faults in turn, hot reloads of the
routes file (a file edit, SIGHUP and the admin route in turn), and the server's RSS."""

from __future__ import annotations

import asyncio
import itertools
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from .outcomes import FAULT_CYCLE, Fault
from .proxy import FaultProxy
from .servers import read_rss_kb
from .tally import Reload

__all__ = ["TRIGGERS", "Reloader", "cycle_faults", "sample_rss"]

TRIGGERS = ("file", "sighup", "admin")
_IN_FORCE_S = 20.0  # a reload must show in GET /v1/routes within this long


async def cycle_faults(
    proxy: FaultProxy,
    phase_s: float,
    history: list[tuple[float, Fault]],
    clock: float,
    stop: asyncio.Event,
) -> None:
    """Each fault of FAULT_CYCLE for `phase_s`, in turn, until `stop`; then healthy again.
    `history` gets (seconds since the soak began, fault) at each switch."""
    try:
        for fault in itertools.cycle(FAULT_CYCLE):
            await proxy.set_fault(fault)
            history.append((time.monotonic() - clock, fault))
            if await _stopped_within(stop, phase_s):
                break
    finally:
        if proxy.fault is not Fault.NONE:
            await proxy.set_fault(Fault.NONE)
            history.append((time.monotonic() - clock, Fault.NONE))


async def sample_rss(
    pid: int, samples: list[tuple[float, int]], clock: float, stop: asyncio.Event
) -> None:
    """VmRSS of `pid` every second, as (seconds since the soak began, kB)."""
    while True:
        kb = read_rss_kb(pid)
        if kb is not None:
            samples.append((time.monotonic() - clock, kb))
        if await _stopped_within(stop, 1.0):
            return


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):
            await stop.wait()
    except TimeoutError:
        return False
    return True


class Reloader:
    """Rewrites the routes file with the next revision every `every_s` and has zest reload it,
    by each trigger in turn; a reload counts as done once GET /v1/routes shows the revision."""

    def __init__(
        self,
        *,
        routes: Path,
        text: Callable[[int], str],
        process: subprocess.Popen[bytes],
        v1: str,
        clock: float,
    ) -> None:
        self.routes, self.text, self.process, self.v1 = routes, text, process, v1
        self.clock = clock
        self.revision = 0
        self.done: list[Reload] = []

    async def run(self, every_s: float, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(timeout=30) as http:
            for trigger in itertools.cycle(TRIGGERS):
                if await _stopped_within(stop, every_s):
                    return
                self.done.append(await self.once(http, trigger))

    async def once(self, http: httpx.AsyncClient, trigger: str) -> Reload:
        self.revision += 1
        started = time.monotonic()
        self.routes.write_text(self.text(self.revision))  # in place, as an editor may
        try:
            detail = await self._trigger(http, trigger)
            ok = not detail and await self._in_force(http)
        except httpx.HTTPError as exc:
            detail, ok = f"{type(exc).__name__}: {exc}", False
        if not ok and not detail:
            detail = f"revision {self.revision} not in GET /v1/routes within {_IN_FORCE_S:g}s"
        return Reload(
            at=started - self.clock,
            trigger=trigger,
            revision=self.revision,
            ok=ok,
            took_s=time.monotonic() - started,
            detail=detail,
        )

    async def _trigger(self, http: httpx.AsyncClient, trigger: str) -> str:
        """Have zest reload (a file edit needs nothing more); what went wrong, if anything."""
        if trigger == "sighup":
            self.process.send_signal(signal.SIGHUP)
        elif trigger == "admin":
            answer = await http.post(f"{self.v1}/admin/reload")
            if answer.status_code != 200:
                return f"admin reload answered {answer.status_code}: {answer.text[:300]}"
        return ""

    async def _in_force(self, http: httpx.AsyncClient) -> bool:
        wanted = f"soak revision {self.revision}"
        deadline = time.monotonic() + _IN_FORCE_S
        while time.monotonic() < deadline:
            status: dict[str, Any] = (await http.get(f"{self.v1}/routes")).json()
            chat = status.get("config", {}).get("routes", {}).get("chat", {})
            if chat.get("description") == wanted:
                return True
            await asyncio.sleep(0.2)
        return False
