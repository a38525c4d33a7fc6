"""The loaded engines and their lifecycle.

- Load on first use, once: concurrent requests for an unloaded engine wait for the same load,
  and a caller that gives up (a client gone) does not cancel it for the others.
- A cap on loaded local engines (`lifecycle.max_loaded_models`): before a load, the least
  recently used engine that is idle and not pinned is unloaded. A busy engine is never unloaded
  under a request: when all are busy or pinned, the load goes over the cap (with a warning) and
  the sweep brings the count back down once one is idle.
- `keep_alive` per model: the sweep unloads an idle engine unused for that long.
- Reload: an engine is keyed by its model's definition, so a reload that changes a model loads
  it anew; the old engine finishes the requests it has and is unloaded when idle (retired).
- Every load first checks the model's files against its pin (`verify`, engines._digests): a
  file that is not the pinned one fails the load like a broken file, before the engine reads it.
- A load that fails is a 503 (`model_load_failed` when the engine could not read the model),
  never a 500: the request may fall back, or be sent to another replica.

cachetools' LRUCache evicts its oldest entry unconditionally; here the oldest may be busy or
pinned, so the order is an OrderedDict walked from the least recently used end.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from zest.engines._base import Delta, Engine, EngineInfo, GenerationJob, engine_kind
from zest.engines._digests import ModelDigest
from zest.engines._memory import release_freed_memory
from zest.engines._runner import Runner
from zest.errors import EngineError, RequestError, ServiceUnavailableError
from zest.router import ModelConfig, Placement

__all__ = [
    "EngineKey",
    "EnginePool",
    "EngineSpec",
    "Lease",
    "LoadedEngine",
    "ModelPolicy",
    "describe",
    "kept_for",
]

log = logging.getLogger("zest.engines")
EngineKey = tuple[str, str, str]  # (model id, definition fingerprint, placement key)
EngineFactory = Callable[["EngineSpec"], Engine]
# A model's digest checked against its pin before it loads (blocking; None: nothing to check).
Verifier = Callable[["EngineSpec"], ModelDigest | None]


@dataclass(frozen=True)
class EngineSpec:
    """One model entry of the routes file on one placement."""

    model_id: str
    config: ModelConfig
    base_dir: Path
    placement: Placement

    @property
    def fingerprint(self) -> str:
        """What the loaded engine depends on; keep_alive and pinned are policies, not part of
        it (changing them in a reload applies to the engine already loaded)."""
        definition = self.config.model_dump_json(exclude={"keep_alive", "pinned"})
        digest = hashlib.sha256(f"{definition}|{self.base_dir}".encode()).hexdigest()
        return digest[:12]

    @property
    def key(self) -> EngineKey:
        return (self.model_id, self.fingerprint, self.placement.key)

    @property
    def counts_toward_cap(self) -> bool:
        return self.config.local  # a remote model holds no local memory


@dataclass(frozen=True)
class ModelPolicy:
    """A model's lifecycle settings in the routes file now in force (None: the model is gone)."""

    keep_alive: float | None = None
    pinned: bool = False


@dataclass
class LoadedEngine:
    spec: EngineSpec
    engine: Engine
    info: EngineInfo
    loaded_at: float  # wall clock, for listings
    last_used: float  # monotonic
    load_s: float = 0.0  # how long the load took (the cold start's model part)
    leases: int = 0
    retired: bool = False  # its model changed or left the routes file: unload when idle
    digest: ModelDigest | None = None  # its files' SHA-256 (None: a remote model)
    # The keep-alive the last request that asked for one gave this engine (Ollama's
    # keep_alive: seconds idle before it is unloaded, math.inf: never); None: the model's.
    requested_keep_alive: float | None = None
    # Admission around the engine: every generation goes through it (engines/_runner.py).
    runner: Runner = field(init=False)

    def __post_init__(self) -> None:
        admission = engine_kind(self.spec.config.engine).admission(self.spec.config)
        self.runner = Runner(self.engine, admission)

    @property
    def busy(self) -> bool:
        return self.leases > 0 or self.runner.pending > 0


class Lease:
    """A request's hold on a loaded engine: while held, the engine is not unloaded."""

    def __init__(self, pool: EnginePool, entry: LoadedEngine) -> None:
        self._pool, self._entry, self._held = pool, entry, True

    @property
    def engine(self) -> Engine:
        return self._entry.engine

    @property
    def info(self) -> EngineInfo:
        return self._entry.info

    def release(self) -> None:
        if self._held:
            self._held = False
            self._entry.leases -= 1
            self._entry.last_used = self._pool.clock()

    async def stream(self, job: GenerationJob) -> AsyncGenerator[Delta, None]:
        """The engine's stream; the lease is released when it ends, fails, is closed, or is
        refused at admission (a 429 holds nothing)."""
        try:
            inner = self._entry.runner.stream(job)
            try:
                async for delta in inner:
                    yield delta
            finally:
                await inner.aclose()
        finally:
            self.release()

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


@dataclass
class EnginePool:
    factory: EngineFactory
    # The current routes file's settings for a model (swapped on reload).
    policy: Callable[[str], ModelPolicy | None] = lambda _: ModelPolicy()
    # The model's definition in the routes file in force (None: gone); None: never retire.
    current: Callable[[str], EngineSpec | None] | None = None
    max_loaded: int | None = None
    # A load that takes longer is given up (its thread cannot be stopped: it is left to end).
    load_timeout_s: float = 600.0
    verify: Verifier = lambda _: None
    clock: Callable[[], float] = time.monotonic
    # Why the last load of an engine failed, until one succeeds (readiness reads it).
    load_failures: dict[EngineKey, str] = field(default_factory=dict)
    _entries: OrderedDict[EngineKey, LoadedEngine] = field(default_factory=OrderedDict)
    _loading: dict[EngineKey, asyncio.Task[LoadedEngine]] = field(default_factory=dict)
    # Loads in flight that took their room under the cap (two first requests for different
    # models must not both find the room free).
    _reserved: set[EngineKey] = field(default_factory=set)
    _closing: set[asyncio.Future[None]] = field(default_factory=set)

    async def acquire(self, spec: EngineSpec) -> Lease:
        """A lease on the engine for `spec`, loading it first if needed (once)."""
        entry = self._entries.get(spec.key)
        if entry is None:  # a retired entry still serves the requests of the old table
            entry = await self._load_once(spec)
        entry.leases += 1
        entry.last_used = self.clock()
        self._entries.move_to_end(spec.key)
        return Lease(self, entry)

    def loaded(self) -> list[LoadedEngine]:
        """Loaded engines, least recently used first."""
        return list(self._entries.values())

    def loading(self) -> list[EngineKey]:
        return list(self._loading)

    def find(self, model_id: str, placement_key: str | None = None) -> list[LoadedEngine]:
        return [
            entry
            for (model, _, key), entry in self._entries.items()
            if model == model_id and placement_key in (None, key)
        ]

    async def unload(self, entry: LoadedEngine, reason: str) -> None:
        if self._entries.get(entry.spec.key) is entry:
            del self._entries[entry.spec.key]
        log.info("model %s on %s unloaded: %s", entry.info.model, entry.info.device, reason)
        await entry.engine.close()
        await asyncio.to_thread(release_freed_memory)

    def retire_changed(self) -> list[LoadedEngine]:
        """After a reload: retire engines whose model is gone or defined anew, and bring back
        those defined as before again. Returns the engines this reload retired: one retired
        by an earlier reload, still draining its requests, is not retired again."""
        retired = []
        for entry in self._entries.values():
            stale = self._stale(entry.spec)
            if stale and not entry.retired:
                retired.append(entry)
            entry.retired = stale
        return retired

    def _stale(self, spec: EngineSpec) -> bool:
        if self.current is None:
            return False
        now = self.current(spec.model_id)
        return now is None or now.fingerprint != spec.fingerprint

    async def sweep(self) -> None:
        """Unload what should go now: retired and keep-alive-expired idle engines, then idle
        ones beyond the cap (least recently used first)."""
        now = self.clock()
        for entry in list(self._entries.values()):
            reason = self._expiry(entry, now)
            if reason and not entry.busy:
                await self.unload(entry, reason)
        while self._over_cap(0) and (victim := self._eviction_candidate()) is not None:
            await self.unload(victim, "least recently used beyond max_loaded_models")

    async def run_sweeps(self, interval_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.sweep()
            except Exception:  # a failing close must not end the sweeps
                log.exception("unloading an idle model failed")

    async def close(self) -> None:
        for task in self._loading.values():
            task.cancel()
        for entry in list(self._entries.values()):
            await self.unload(entry, "server stopping")

    def _expiry(self, entry: LoadedEngine, now: float) -> str | None:
        if entry.retired:
            return "its definition changed or left the routes file (reload)"
        policy = self.policy(entry.spec.model_id)
        if policy is None or policy.pinned:
            return None
        keep_alive = kept_for(entry, policy)
        if keep_alive is None:
            return None
        if now - entry.last_used >= keep_alive:
            asked = "" if entry.requested_keep_alive is None else " asked by a request"
            return f"idle for keep_alive ({keep_alive:g}s{asked})"
        return None

    async def _load_once(self, spec: EngineSpec) -> LoadedEngine:
        task = self._loading.get(spec.key)
        if task is None:
            task = asyncio.ensure_future(self._load(spec))
            self._loading[spec.key] = task
            task.add_done_callback(lambda _: self._loading.pop(spec.key, None))
        # shield: a caller that goes away does not cancel the load others wait for.
        return await asyncio.shield(task)

    async def _load(self, spec: EngineSpec) -> LoadedEngine:
        if spec.counts_toward_cap:
            await self._make_room(spec)
            self._reserved.add(spec.key)  # counted by the cap from now on, loaded or not
        started = time.perf_counter()
        try:
            engine = self.factory(spec)
            info, digest = await self._load_in_thread(engine, spec)
        except Exception as exc:
            error = _load_error(spec, exc)
            self.load_failures[spec.key] = error.message
            if error is exc:
                raise
            raise error from exc
        finally:
            self._reserved.discard(spec.key)
        self.load_failures.pop(spec.key, None)
        entry = LoadedEngine(
            spec, engine, info, loaded_at=time.time(), last_used=self.clock(), digest=digest
        )
        entry.load_s = time.perf_counter() - started
        # Loaded for a request of an older table (or while a reload came in): it serves that
        # request and goes when idle, like the engines the reload retired.
        entry.retired = self._stale(spec)
        self._entries[spec.key] = entry
        log.info(
            "model %s loaded: engine=%s device=%s backend=%s context=%d memory=%s source=%s%s",
            info.model,
            info.engine,
            info.device,
            info.backend,
            info.context_length,
            _megabytes(info.memory_bytes),
            info.source,
            _digest_note(digest),
        )
        return entry

    async def _load_in_thread(
        self, engine: Engine, spec: EngineSpec
    ) -> tuple[EngineInfo, ModelDigest | None]:
        """The pin checked, then `engine.load()`, on a daemon thread of its own, within
        `load_timeout_s`. A blocked read never holds up the process's exit, and a load given
        up on is closed if it ever ends."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[tuple[EngineInfo, ModelDigest | None]] = loop.create_future()

        def settle(
            result: tuple[EngineInfo, ModelDigest | None] | None, error: BaseException | None
        ) -> None:
            if done.cancelled():  # given up on: free what it loaded
                if result is not None:
                    closing = asyncio.ensure_future(engine.close())
                    self._closing.add(closing)
                    closing.add_done_callback(self._closing.discard)
            elif error is not None:
                done.set_exception(error)
            else:
                done.set_result(result)  # type: ignore[arg-type]

        def work() -> None:
            try:
                digest = self.verify(spec)  # before the engine reads a file that is not it
                result, error = (engine.load(), digest), None
            except BaseException as exc:  # handed to the waiting coroutine
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, result, error)

        name = f"zest-load-{spec.model_id}"
        threading.Thread(target=work, name=name, daemon=True).start()
        try:
            async with asyncio.timeout(self.load_timeout_s):
                return await done
        except TimeoutError:
            raise ServiceUnavailableError(
                f"model {spec.model_id!r} did not load within {self.load_timeout_s:g} s "
                "(lifecycle.load_timeout_s): check that its source is a local file that reads "
                "at disk speed, or raise the limit",
                code="load_timeout",
            ) from None

    async def _make_room(self, spec: EngineSpec) -> None:
        while self._over_cap(1):
            victim = self._eviction_candidate()
            others = [task for key, task in self._loading.items() if key in self._reserved]
            if victim is None and others:  # a load in flight holds the room: see it end first
                await asyncio.wait(others)
                continue
            if victim is None:
                log.warning(
                    "loading %s on %s goes over max_loaded_models=%s: every loaded model is "
                    "busy or pinned (the next idle one is unloaded later)",
                    spec.model_id,
                    spec.placement.label,
                    self.max_loaded,
                )
                return
            await self.unload(victim, f"least recently used, to make room for {spec.model_id}")

    def _over_cap(self, adding: int) -> bool:
        if self.max_loaded is None:
            return False
        counted = sum(1 for entry in self._entries.values() if entry.spec.counts_toward_cap)
        loading = len(self._reserved - self._entries.keys())
        return counted + loading + adding > self.max_loaded

    def _eviction_candidate(self) -> LoadedEngine | None:
        for entry in self._entries.values():  # least recently used first
            policy = self.policy(entry.spec.model_id)
            pinned = policy is not None and policy.pinned and not entry.retired
            if entry.spec.counts_toward_cap and not pinned and not entry.busy:
                return entry
        return None


def _load_error(spec: EngineSpec, exc: Exception) -> RequestError:
    """What a failed load answers: a 503 the client can retry elsewhere. An engine's failure
    (a broken file, a context it refuses) or a foreign error becomes `model_load_failed`,
    naming the model and what to do; a 503 that already says why (a missing file or library,
    a timeout) stays as it is."""
    if isinstance(exc, RequestError) and not isinstance(exc, EngineError):
        return exc
    if isinstance(exc, RequestError):
        why = exc.message
    else:
        log.error("loading model %s failed", spec.model_id, exc_info=exc)
        why = f"model {spec.model_id!r}: loading failed: {type(exc).__name__}: {exc}"
    return ServiceUnavailableError(
        f"{why}: model {spec.model_id!r} cannot serve until its files load: check them with "
        "`zest check`, replace what is broken, then reload the routes file",
        code="model_load_failed",
    )


def _digest_note(digest: ModelDigest | None) -> str:
    if digest is None:
        return ""
    return f" sha256={digest.sha256}{' (pinned, verified)' if digest.pinned else ''}"


def _megabytes(size: int | None) -> str:
    return "n/a" if size is None else f"{size / 1e6:.0f}MB"


def kept_for(entry: LoadedEngine, policy: ModelPolicy | None) -> float | None:
    """How long `entry` stays loaded once idle: a request's keep-alive, else its model's
    (None: until something else unloads it)."""
    if policy is not None and policy.pinned:
        return None
    if entry.requested_keep_alive is not None:
        return None if math.isinf(entry.requested_keep_alive) else entry.requested_keep_alive
    return policy.keep_alive if policy else None


def describe(entry: LoadedEngine, now: float, policy: ModelPolicy | None) -> dict[str, Any]:
    """A loaded engine as GET /v1/loaded and system-info list it."""
    info = entry.info
    idle = 0.0 if entry.busy else now - entry.last_used
    keep_alive = kept_for(entry, policy)
    return {
        "model": info.model,
        "engine": info.engine,
        "device": info.device,
        "backend": info.backend,
        "memory_bytes": info.memory_bytes,
        # ggml's own accounting of the model's buffers (llama.cpp): where its layers and KV
        # cache went, e.g. {"buffer": "Vulkan0", "kind": "KV", "mib": 11.25}.
        "buffers": [{"buffer": b.buffer, "kind": b.kind, "mib": b.mib} for b in info.buffers],
        "loaded_at": entry.loaded_at,
        "load_s": round(entry.load_s, 3),
        "last_used_s_ago": round(now - entry.last_used, 3),
        "busy": entry.busy,
        "requests_in_flight": entry.leases,
        "queued": entry.runner.waiting,  # for a slot (the running ones: requests_in_flight)
        "pinned": bool(policy and policy.pinned),
        # Its files' SHA-256 (None: a remote model), and whether routes.yaml pins it (then
        # it was verified before the load): equal digests across replicas, equal models.
        "sha256": entry.digest.sha256 if entry.digest else None,
        "sha256_pinned": bool(entry.digest and entry.digest.pinned),
        "keep_alive_s": keep_alive,
        "unloads_in_s": None if keep_alive is None else round(max(keep_alive - idle, 0.0), 3),
        "retired": entry.retired,
        # Its context's KV cells, as its scheduler last counted them (null: not counted):
        # running sequences', prompts kept for reuse, and stray ones (a leak; always 0).
        "kv_cells": None if (cells := entry.engine.kv_cells()) is None else cells.as_dict(),
    }
