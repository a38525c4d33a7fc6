"""Hot reload of routes.yaml: on a file change (watchfiles), on SIGHUP, or on
POST /api/v1/admin/reload.

The new file is read and validated off the event loop; only a valid table is put in force (one
assignment, see Runtime.swap). An invalid one changes nothing: its errors are logged and kept
for GET /api/v1/routes, and the previous table keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import watchfiles

from zest.errors import ConfigError
from zest.gateway.serving._runtime import Runtime
from zest.router import load_routes

__all__ = ["ReloadOutcome", "Reloader"]

log = logging.getLogger("zest.gateway")
# watchfiles logs each change it sees at INFO; zest logs the reloads that matter instead.
logging.getLogger("watchfiles").setLevel(logging.WARNING)
Trigger = Literal["start", "file", "sighup", "admin"]


@dataclass(frozen=True)
class ReloadOutcome:
    ok: bool
    trigger: Trigger
    at: float  # wall clock
    problems: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "trigger": self.trigger, "at": self.at, "errors": self.problems}


@dataclass
class Reloader:
    runtime: Runtime
    watch: bool = True
    loaded: ReloadOutcome = field(
        default_factory=lambda: ReloadOutcome(ok=True, trigger="start", at=time.time())
    )
    last_error: ReloadOutcome | None = None
    reloads: int = 0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.runtime.routes.path

    async def reload(self, trigger: Trigger) -> ReloadOutcome:
        """Read, validate and put in force the routes file; keep the old table on any error."""
        async with self._lock:  # two triggers at once: one reload after the other
            try:
                routes = await asyncio.to_thread(load_routes, self.path)
            except ConfigError as exc:
                outcome = ReloadOutcome(False, trigger, time.time(), tuple(exc.problems))
                self.last_error = outcome
                log.error(
                    "reload (%s) rejected, the previous routes keep serving:\n  %s",
                    trigger,
                    "\n  ".join(exc.problems),
                )
                return outcome
            self.runtime.swap(routes)
            self.reloads += 1
            self.loaded = ReloadOutcome(True, trigger, time.time())
            log.info(
                "reload (%s): %s: routes %s",
                trigger,
                routes.path,
                ", ".join(routes.config.routes),
            )
            return self.loaded

    def start(self) -> None:
        """Watch the file (when enabled) and reload on SIGHUP."""
        if self.watch:
            self._tasks.append(asyncio.ensure_future(self._watch_file()))
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            # Not available off the main thread or on Windows: the other triggers remain.
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGHUP, self._on_sighup)

    async def stop(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def status(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "watching": self.watch,
            "reloads": self.reloads,
            "loaded": self.loaded.as_dict(),
            "last_error": self.last_error.as_dict() if self.last_error else None,
        }

    def _on_sighup(self) -> None:
        task = asyncio.ensure_future(self.reload("sighup"))
        self._tasks.append(task)
        task.add_done_callback(self._tasks.remove)

    async def _watch_file(self) -> None:
        """Watch the folder, not the file: editors save by writing a new file and renaming it."""
        path = self.path
        try:
            async for changes in watchfiles.awatch(
                path.parent,
                debounce=200,
                step=50,
                recursive=False,
                # Only the routes file counts: a log file beside it changes all the time.
                watch_filter=lambda _, changed: Path(changed).resolve() == path,
            ):
                if any(Path(changed).resolve() == path for _, changed in changes):
                    await self.reload("file")
        except Exception:  # watching is a convenience: SIGHUP and the admin route still work
            log.exception("watching %s stopped; reload with SIGHUP or the admin route", path)
