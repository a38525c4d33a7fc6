"""Hot reload of routes.yaml: on a file change (watchfiles), on SIGHUP, or on
POST /api/v1/admin/reload.

Make-before-break: the new file is read and checked off the event loop as strictly as a start
checks it (the schema, then its model files: engines' preflight), and the models it needs or
changes are loaded (Runtime.stage) before it is put in force (one assignment, Runtime.swap)
and the engines it replaces are retired. A file refused at any of these steps changes nothing:
its errors are logged and kept for GET /api/v1/routes, and the previous table and its engines
keep serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import watchfiles

from zest.errors import ConfigError
from zest.gateway.serving._preflight import preflight
from zest.gateway.serving._runtime import Runtime
from zest.router import LoadedRoutes, load_routes

__all__ = ["ReloadOutcome", "Reloader", "changes_routes_file", "watched_folders"]

log = logging.getLogger("zest.gateway")
# watchfiles logs each change it sees at INFO; zest logs the reloads that matter instead.
logging.getLogger("watchfiles").setLevel(logging.WARNING)
Trigger = Literal["start", "file", "sighup", "admin"]
WATCH_RETRY_S = 1.0  # a failed watcher starts again after this


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
    watching: bool = False  # the watcher runs (False once it stopped, even if asked for)
    # Told of each table put in force (the MCP server's tools follow the tasks).
    observers: list[Callable[[LoadedRoutes], Awaitable[None]]] = field(default_factory=list)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    @property
    def path(self) -> Path:
        """The routes file as named (a link is read again, wherever it points now)."""
        return self.runtime.routes.source

    async def reload(self, trigger: Trigger) -> ReloadOutcome:
        """Check, load and put in force the routes file; keep the old table on any error."""
        async with self._lock:  # two triggers at once: one reload after the other
            try:
                routes = await asyncio.to_thread(self._read_checked)
            except ConfigError as exc:
                return self._reject(trigger, exc.problems)
            except Exception as exc:  # never let a reload take down what serves
                log.exception("reload (%s): reading %s failed", trigger, self.path)
                return self._reject(trigger, [f"{self.path}: cannot be read: {exc}"])
            staged = await self.runtime.stage(routes)
            if staged.problems:
                return self._reject(
                    trigger, [f"{routes.path}: cannot load {p}" for p in staged.problems]
                )
            self.runtime.swap(routes, staged)
            self.reloads += 1
            self.loaded = ReloadOutcome(True, trigger, time.time())
            self.last_error = None  # what GET /routes shows is about the table in force
            log.info(
                "reload (%s): %s: routes %s",
                trigger,
                routes.path,
                ", ".join(routes.config.routes),
            )
            await self._tell(routes)
            return self.loaded

    async def _tell(self, routes: LoadedRoutes) -> None:
        for observer in self.observers:
            try:
                await observer(routes)
            except Exception:  # an observer's failure never undoes a reload
                log.exception("reload: telling %r of the new routes failed", observer)

    def _read_checked(self) -> LoadedRoutes:
        """The file, validated and checked against its model files (blocking: a thread)."""
        routes = load_routes(self.path)
        checked = preflight(routes, self.runtime.devices)
        if checked.problems:
            raise ConfigError(checked.problems)
        for warning in checked.warnings:
            log.warning("reload: %s", warning)
        return routes

    def _reject(self, trigger: Trigger, problems: list[str]) -> ReloadOutcome:
        outcome = ReloadOutcome(False, trigger, time.time(), tuple(problems))
        self.last_error = outcome
        log.error(
            "reload (%s) rejected, the previous routes keep serving:\n  %s",
            trigger,
            "\n  ".join(problems),
        )
        return outcome

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
            "watching": self.watching,
            "reloads": self.reloads,
            "loaded": self.loaded.as_dict(),
            "last_error": self.last_error.as_dict() if self.last_error else None,
        }

    def _on_sighup(self) -> None:
        task = asyncio.ensure_future(self.reload("sighup"))
        self._tasks.append(task)
        task.add_done_callback(self._tasks.remove)

    async def _watch_file(self) -> None:
        """Watch the folder, not the file: editors save by writing a new file and renaming it,
        and a Kubernetes ConfigMap volume swaps a link (see `changes_routes_file`). A failing
        watcher is logged and started again: watching never stops for good (SIGHUP and the
        admin route reload meanwhile)."""
        path = self.path
        self.watching = True
        failure = ""
        try:
            while True:
                try:
                    await self._watch_changes(path)
                    failure = ""
                except Exception as exc:
                    if str(exc) != failure:  # once per new error, not once per retry
                        log.warning(
                            "watching %s failed (%s): watching again every %gs; SIGHUP and the "
                            "admin route reload meanwhile",
                            path,
                            exc,
                            WATCH_RETRY_S,
                        )
                    failure = str(exc)
                    await asyncio.sleep(WATCH_RETRY_S)
        finally:
            self.watching = False

    async def _watch_changes(self, path: Path) -> None:
        """Reload on each change, until the folders to watch change (a link re-pointed)."""
        folders = watched_folders(path)
        async for _ in watchfiles.awatch(
            *folders,
            debounce=200,
            step=50,
            recursive=False,
            # Only the routes file counts: a log file beside it changes all the time.
            watch_filter=lambda _, changed: changes_routes_file(path, Path(changed)),
        ):
            await self.reload("file")  # a bad save is rejected, never fatal here
            if watched_folders(path) != folders:
                return


def _target(named: Path) -> Path | None:
    """Where `named` leads; None when no file can be reached (a link loop)."""
    try:
        return named.resolve()
    except (OSError, RuntimeError):  # RuntimeError: Python's "Symlink loop from ..."
        return None


def watched_folders(named: Path) -> list[Path]:
    """The folder of the routes file as named, and that of its target when a link leads
    elsewhere (/etc/zest/routes.yaml -> /srv/config/routes.yaml: edits happen in the latter).
    A target beside the link (a ConfigMap's timestamped folder) is not watched: it is removed
    at the next update, and the swap of the link shows in the first folder."""
    target, folder = _target(named), named.parent.resolve()
    if target is None or folder in (target.parent, target.parent.parent):
        return [named.parent]
    return [named.parent, target.parent]


def changes_routes_file(named: Path, changed: Path) -> bool:
    """Whether a change to `changed`, an entry of the folder of the routes file `named`, may
    change what `named` reads: the file itself (an edit, an editor's rename), or a link on the
    way to it. A ConfigMap volume holds `routes.yaml -> ..data/routes.yaml` and
    `..data -> ..2024_01_01_00_00_00.1`; an update writes a new timestamped folder, then
    renames a new `..data` link over the old one: that link now leads to the new target's
    folder. The entries of the new folder, written before the swap, lead elsewhere, and so do
    the old folder's removal and any other file beside the routes file."""
    if changed == named:
        return True
    target = _target(named)  # None: a link loop, reported by the reload of `named` itself
    if target is None:
        return False
    if _target(changed) == target:
        return True
    linked_folder = target.parent != named.parent.resolve()  # reached through a folder link
    return linked_folder and changed.is_symlink() and _target(changed) == target.parent
