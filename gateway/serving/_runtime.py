"""What the gateway holds while serving: the routes in force, the device inventory, the engine
pool, and whether the warm start is done.

A request reads `runtime.routes` once and carries that table to its end, so a reload swaps the
table under new requests only; the pool keeps the engines the old table's requests still use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from zest.engines import (
    Engine,
    EnginePool,
    EngineSpec,
    Inventory,
    Lease,
    ModelDigest,
    ModelPolicy,
    Prompt,
    RemoteEngine,
    Tokenizer,
    check_model_files,
    create_engine,
    load_tokenizer,
    use_zest_cache,
    verify_model,
)
from zest.errors import EngineError, RequestError, ServiceUnavailableError
from zest.gateway.serving._answer_cache import AnswerCache
from zest.gateway.serving._clients import ClientGate
from zest.gateway.serving._drain import Drain
from zest.gateway.serving._planning import plan_for
from zest.gateway.serving._routing import RoutingOracle
from zest.gateway.serving._settings import Settings
from zest.gateway.serving._tokens import Tokens
from zest.router import (
    Device,
    LoadedRoutes,
    Needs,
    Placement,
    Plan,
    RouteConfig,
    condition_routes,
)

__all__ = ["PreloadTarget", "Readiness", "Runtime", "Staged"]

log = logging.getLogger("zest.gateway")
State = Literal["starting", "loading", "ready", "failed", "stopping"]


@dataclass(frozen=True)
class PreloadTarget:
    model_id: str
    # None: the model's default device, found when it loads (no device may be able to run it).
    placement: Placement | None
    # A failure stops the server at start: the model was asked for by name, or a route has
    # nothing to fall back on.
    fatal: bool
    why: str


@dataclass(frozen=True)
class Readiness:
    """What GET /ready answers: the state (`unservable`: the warm start is done, but a route
    cannot serve its own requests; `degraded`: every route can, but a route that only routing
    rules run cannot, so those rules take their on_error path), the routes nothing can serve
    now, with why, those the privacy in force forbids for good (not judged: no replica with
    this setting will ever serve them), and the rules' routes that cannot be served (each
    with why, its models and the rules that run it)."""

    status: str
    unservable: dict[str, str]
    forbidden: dict[str, str]
    rules_degraded: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Why the store of the clients' limits cannot be reached (None: it answers, or there is
    # none): degraded, still ready, as every replica shares the store.
    limits_store: str | None = None

    @property
    def ready(self) -> bool:
        """Whether a balancer should send this replica requests: every one is served."""
        return self.status in ("ready", "degraded")


@dataclass
class Staged:
    """What `Runtime.stage` loaded for a table (held) and what failed: `problems` (targets the
    table cannot do without) refuse it, `warnings` (routes with a fallback) do not.
    `broken_files`: the table's route models whose files would fail to load, with why."""

    leases: list[Lease] = field(default_factory=list)
    failures: list[tuple[PreloadTarget, str]] = field(default_factory=list)
    broken_files: dict[str, str] = field(default_factory=dict)
    # What one load of each readable local model holds on its device (planning's room check).
    device_bytes: dict[str, int | None] = field(default_factory=dict)

    @property
    def problems(self) -> list[str]:
        return [f"{target.why}: {message}" for target, message in self.failures if target.fatal]

    @property
    def warnings(self) -> list[str]:
        return [f"{t.why}: {message}" for t, message in self.failures if not t.fatal]

    def release(self) -> None:
        for lease in self.leases:
            lease.release()
        self.leases.clear()


@dataclass
class Runtime:
    routes: LoadedRoutes
    inventory: Inventory
    # Settings.privacy "strict" (ZEST_PRIVACY=strict; create_app applies the settings): every
    # remote attempt is left out of every plan.
    strict_privacy: bool = False
    # Called with the reason when the warm start cannot serve a route (the CLI stops the server).
    on_fatal: Callable[[str], None] | None = None
    state: State = "starting"
    preload_errors: list[str] = field(default_factory=list)
    # The route models of the table in force whose files failed the cheap checks when it was
    # loaded (readiness: their routes cannot be served until the model loads after all).
    broken_files: dict[str, str] = field(default_factory=dict)
    # ...and what one load of each holds on its device: auto places none where the device
    # reports less free memory (router/_plan.py, lacks_room).
    device_bytes: dict[str, int | None] = field(default_factory=dict)
    # Graceful shutdown: what is in flight, and whether new work is refused.
    drain: Drain = field(default_factory=Drain)
    # The rules' model-backed results, cached (per runtime: its observers are its metrics).
    oracle: RoutingOracle = field(default_factory=RoutingOracle, repr=False, compare=False)
    # Named clients' admission and limits, and the routes' kept answers (docs/teams.md).
    clients: ClientGate = field(default_factory=ClientGate, repr=False, compare=False)
    answers: AnswerCache = field(default_factory=AnswerCache, repr=False, compare=False)
    pool: EnginePool = field(init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pool = EnginePool(
            self._create_engine,
            policy=self.model_policy,
            current=self._current_spec,
            max_loaded=self.routes.config.lifecycle.max_loaded_models,
            load_timeout_s=self.routes.config.lifecycle.load_timeout_s,
            verify=_verify,
        )

    @property
    def devices(self) -> dict[str, Device]:
        return self.inventory.devices

    def apply(self, settings: Settings) -> None:
        """Take what the settings say about serving (create_app does, so Settings in code
        arms everything): strict privacy, for the planner and every remote engine, made or to
        be made; it only tightens (a runtime built strict stays strict). And zest's cache
        folder, for the engines' cache: sources."""
        if settings.privacy == "strict":
            self.strict_privacy = True
            for entry in self.pool.loaded():
                self._arm(entry.engine)
        use_zest_cache(settings.cache)
        self.clients = ClientGate(
            settings.limits_storage,
            on_store_error=settings.limits_on_store_error,
            timeout_s=settings.limits_store_timeout_s,
        )

    async def start(self) -> None:
        """Start the warm start (in the background: liveness answers at once, readiness when
        it is done) and the sweeps that unload idle models."""
        if self.state != "starting":
            return
        self.state = "loading"
        if self.strict_privacy:
            log.info("privacy: ZEST_PRIVACY=strict: no remote engine will be reached")
        self._spawn(self._warm_start())
        self._spawn(self.pool.run_sweeps())

    async def stage(self, routes: LoadedRoutes) -> Staged:
        """Load what `routes` needs before it is put in force (make-before-break): its preload
        targets, and a new engine for every model it changes that serves now. A target the
        table cannot do without that fails to load raises ConfigError naming it, and nothing
        of the old table is touched; what did load is held by the returned leases (no sweep
        unloads it before the swap) until `Staged.release`."""
        broken, sizes = await asyncio.to_thread(_read_model_files, routes)
        staged = Staged(broken_files=broken, device_bytes=sizes)
        preload = self.preload_targets(routes, sizes)  # planned with the new table's sizes
        for target in [*preload, *self._changed_targets(routes)]:
            try:
                placement = target.placement or self.default_placement(routes, target.model_id)
                staged.leases.append(await self.acquire(routes, target.model_id, placement))
            except RequestError as exc:  # a broken file, a missing device or library
                staged.failures.append((target, exc.message))
                if target.fatal:  # the table is refused: loading more would be wasted
                    staged.release()
                    break
        return staged

    def swap(self, routes: LoadedRoutes, staged: Staged | None = None) -> None:
        """Put a new routes table in force (one assignment: atomic for every later request)
        and retire the engines whose model it changed; `staged` (what `stage` loaded for it)
        is let go once the new table holds its engines."""
        self.routes = routes
        self.pool.max_loaded = routes.config.lifecycle.max_loaded_models
        self.pool.load_timeout_s = routes.config.lifecycle.load_timeout_s
        for entry in self.pool.retire_changed():
            log.info(
                "model %s on %s: changed or removed by the reload; unloaded once its requests end",
                entry.info.model,
                entry.info.device,
            )
        if staged is not None:
            self.preload_errors = list(staged.warnings)
            self.broken_files = staged.broken_files
            self.device_bytes = staged.device_bytes
            staged.release()

    def _changed_targets(self, routes: LoadedRoutes) -> list[PreloadTarget]:
        """Models serving now that `routes` defines anew: loaded again where they run now."""
        targets = []
        for entry in self.pool.loaded():
            model_id = entry.spec.model_id
            config = routes.config.models.get(model_id)
            if entry.retired or config is None:
                continue
            spec = _spec(routes, model_id, entry.spec.placement)
            if spec.fingerprint != entry.spec.fingerprint:
                why = f"model {model_id} (serving on {entry.info.device}, changed)"
                targets.append(PreloadTarget(model_id, entry.spec.placement, True, why))
        return targets

    def readiness(self) -> Readiness:
        """Whether this replica should get traffic: the warm start is done and every route
        that may ever be served here can serve its own requests now. A route that only
        routing rules run (a similar_to's or classify's `via`) that cannot be served degrades
        the replica without taking it out: its rules take their on_error path."""
        found, forbidden = self._unservable()
        by_rules = condition_routes(self.routes.config)
        unservable = {task: why for task, why in found.items() if task not in by_rules}
        degraded = {
            task: self._rule_outage(task, why, by_rules[task])
            for task, why in found.items()
            if task in by_rules
        }
        store = self.clients.store_problem  # the clients' limits' store (docs/teams.md)
        status: str = self.state
        if status == "ready" and (unservable or degraded or store is not None):
            status = "unservable" if unservable else "degraded"
        return Readiness(status, unservable, forbidden, degraded, store)

    def _rule_outage(self, task: str, why: str, rules: list[tuple[str, str]]) -> dict[str, Any]:
        """A rules' route that cannot be served: why, its models, the rules that run it."""
        route = self.routes.config.routes[task]
        models = dict.fromkeys([route.model, *(entry.model for entry in route.fallback)])
        return {
            "reason": why,
            "models": list(models),
            "rules": [{"task": user, "rule": rule} for user, rule in rules],
        }

    def _unservable(self) -> tuple[dict[str, str], dict[str, str]]:
        """Routes of the table in force that nothing can serve now, with why (no device here
        runs any attempt, or every attempt's model has broken files or failed its last load),
        and apart, those that only the privacy in force keeps from being served."""
        routes = self.routes
        found: dict[str, str] = {}
        forbidden: dict[str, str] = {}
        for task, route in routes.config.routes.items():
            try:
                plan = self.plan(routes, task, route, prompt_tokens=0)
            except ServiceUnavailableError as exc:
                target = forbidden if self._privacy_forbids(task, route) else found
                target[task] = exc.message
                continue
            reasons = [self._broken(_spec(routes, a.model, a.placement)) for a in plan.attempts]
            if all(reasons):
                found[task] = "; ".join(dict.fromkeys(r for r in reasons if r))
        return found, forbidden

    def _privacy_forbids(self, task: str, route: RouteConfig) -> bool:
        """Whether a route no device can serve under ZEST_PRIVACY=strict could be planned
        without it (its attempts are all remote)."""
        if not self.strict_privacy:
            return False
        routes = self.routes
        try:
            plan_for(routes.config, self.devices, task, route, prompt_tokens=0, load=None,
                     strict_privacy=False)  # fmt: skip
        except ServiceUnavailableError:
            return False
        return True

    def _broken(self, spec: EngineSpec) -> str | None:
        """Why this attempt's engine cannot load: its last load failed, or its files failed
        the table's checks and no engine of it is loaded (the file was fixed since)."""
        if (failure := self.pool.load_failures.get(spec.key)) is not None:
            return failure
        broken = self.broken_files.get(spec.model_id)
        loaded = self.pool.find(spec.model_id, spec.placement.key)
        if broken is not None and not any(e.spec.key == spec.key for e in loaded):
            return broken
        return None

    def model_policy(self, model_id: str) -> ModelPolicy | None:
        model = self.routes.config.models.get(model_id)
        if model is None:
            return None
        return ModelPolicy(keep_alive=model.keep_alive, pinned=model.pinned)

    def plan(
        self,
        routes: LoadedRoutes,
        task: str,
        route: RouteConfig,
        prompt_tokens: int,
        *,
        needs: Needs | None = None,
        device_bytes: Mapping[str, int | None] | None = None,
    ) -> Plan:
        """The plan of one request; `device_bytes`: each model's size on a device (default:
        the table in force's)."""
        return plan_for(
            routes.config,
            self.devices,
            task,
            route,
            prompt_tokens=prompt_tokens,
            load=self.queue_depths(),
            strict_privacy=self.strict_privacy,
            needs=needs,
            device_bytes=self.device_bytes if device_bytes is None else device_bytes,
        )

    async def count_prompt(
        self, routes: LoadedRoutes, model_id: str, prompt: Prompt, *, over: int | None = None
    ) -> int:
        """The prompt's size for planning (the auto cost model), with the model's tokenizer
        (its tokens stay on the prompt for the attempt to reuse); approximate for models
        without one, or whose tokenizer cannot load (their attempts will say why). Loads no
        engine. `over`: any count above it will do (routing's token conditions): a prompt
        whose length alone says it is longer is not tokenized, and its least count is given."""
        try:
            tokenizer = await self.tokenizer(routes, model_id)
        except (ServiceUnavailableError, EngineError):
            tokenizer = None
        tokens = Tokens(prompt, tokenizer)
        if over is not None and (least := tokens.least(prompt.messages) or 0) > over:
            return least
        return await asyncio.to_thread(tokens.count, prompt.messages)

    async def model_contexts(self, routes: LoadedRoutes) -> dict[str, int | None]:
        """Each model's context as a request's budget counts it: declared, else what its
        tokenizer read from the model's files (loads no engine); None where not known."""
        contexts: dict[str, int | None] = {}
        for model_id, config in routes.config.models.items():
            contexts[model_id] = config.context_length
            if config.context_length is None and config.local:
                try:
                    tokenizer = await self.tokenizer(routes, model_id)
                except RequestError:  # its file is missing: its attempts will say why
                    continue
                contexts[model_id] = tokenizer.context_length if tokenizer else None
        return contexts

    def waiting_for(self, routes: LoadedRoutes, task: str) -> int:
        """Requests waiting for a slot of the model of route `task`, on any placement."""
        route = routes.config.routes.get(task)
        if route is None:
            return 0
        return sum(entry.runner.waiting for entry in self.pool.find(route.model))

    def queue_depths(self) -> dict[str, int]:
        depths: dict[str, int] = {}
        for entry in self.pool.loaded():
            for device in entry.engine.placement.devices:
                depths[device.name] = depths.get(device.name, 0) + entry.runner.pending
        return depths

    async def acquire(self, routes: LoadedRoutes, model_id: str, placement: Placement) -> Lease:
        return await self.pool.acquire(_spec(routes, model_id, placement))

    async def tokenizer(self, routes: LoadedRoutes, model_id: str) -> Tokenizer | None:
        """The model's tokenizer, read without its weights and cached (None: the model's
        kind has no local tokenizer). Never loads an engine, on any device."""
        config = routes.config.models[model_id]
        return await asyncio.to_thread(load_tokenizer, model_id, config, routes.base_dir)

    def default_placement(self, routes: LoadedRoutes, model_id: str) -> Placement:
        engine = routes.config.models[model_id].engine
        usable = self.inventory.usable(engine)
        if not usable:
            raise ServiceUnavailableError(
                f"model {model_id!r}: no device here can run engine {engine!r} "
                "(GET /v1/system-info lists the devices)",
                code="device_unavailable",
            )
        device = self.devices["cpu" if "cpu" in usable else usable[0]]
        return Placement(device, device)

    def preload_targets(
        self, routes: LoadedRoutes, device_bytes: Mapping[str, int | None] | None = None
    ) -> list[PreloadTarget]:
        """`lifecycle.preload: routes`: each route's first attempt (fatal when the route has
        no fallback, unless only routing rules run it: they have an on_error path); a list:
        those models, where their routes first place them."""
        config = routes.config
        wanted = config.lifecycle.preload
        by_rules = condition_routes(config)
        targets: dict[tuple[str, str], PreloadTarget] = {}
        for task, route in config.routes.items():
            try:
                plan = self.plan(routes, task, route, prompt_tokens=0, device_bytes=device_bytes)
            except ServiceUnavailableError as exc:
                log.warning("route %s cannot run on this machine: %s", task, exc.message)
                continue
            first = plan.first
            if first.remote or (wanted != "routes" and first.model not in wanted):
                continue
            alone = task not in by_rules and (len(plan.attempts) == 1 or route.on_failure != "next")
            key = (first.model, first.placement.key)
            fatal = alone or wanted != "routes" or (key in targets and targets[key].fatal)
            targets[key] = PreloadTarget(first.model, first.placement, fatal, f"route {task}")
        # Models callable by id (expose_models) load on first use unless listed: counting their
        # prompts needs no engine, and warming them all would override lifecycle.preload.
        listed = () if wanted == "routes" else wanted
        placed = {model for model, _ in targets}
        return list(targets.values()) + [
            PreloadTarget(model_id, None, True, f"preload {model_id}")
            for model_id in dict.fromkeys(listed)
            if model_id not in placed
        ]

    async def shut_down(self) -> None:
        """Drain (SIGTERM): refuse new work, let what runs finish within the grace, then end
        the rest with an error; readiness is 503 from the first moment."""
        self.state = "stopping"
        await self.drain.run()

    def loaded_digest(self, model_id: str) -> str | bool | None:
        """The SHA-256 of a model as loaded now (None: a remote model, nothing local; False:
        not loaded), what a kept answer is checked against."""
        config = self.routes.config.models.get(model_id)
        if config is not None and not config.local:
            return None
        for entry in self.pool.find(model_id):
            if not entry.retired:
                return entry.digest.sha256 if entry.digest is not None else None
        return False

    async def close(self) -> None:
        await self.clients.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.pool.close()

    async def _warm_start(self) -> None:
        """Load the preload targets; one the table cannot do without stops the server."""
        staged = await self.stage(self.routes)
        self.broken_files = staged.broken_files
        self.device_bytes = staged.device_bytes
        self.preload_errors = [f"{target.why}: {message}" for target, message in staged.failures]
        for warning in staged.warnings:
            log.warning("preload: %s", warning)
        staged.release()
        fatal = [message for target, message in staged.failures if target.fatal]
        if fatal:
            self._fail(fatal[0])
        elif self.state == "loading":
            self.state = "ready"
            log.info("ready: %d model(s) loaded", len(self.pool.loaded()))

    def _fail(self, message: str) -> None:
        self.state = "failed"
        log.error("cannot start: %s", message)
        if self.on_fatal is not None:
            self.on_fatal(message)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.append(task)
        task.add_done_callback(self._tasks_done)

    def _tasks_done(self, task: asyncio.Task[None]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    def _create_engine(self, spec: EngineSpec) -> Engine:
        engine = create_engine(spec.model_id, spec.config, spec.base_dir, spec.placement)
        self._arm(engine)
        return engine

    def _arm(self, engine: Engine) -> None:
        if isinstance(engine, RemoteEngine):  # Settings.privacy arms the engine's own refusal
            engine.strict_privacy = self.strict_privacy

    def _current_spec(self, model_id: str) -> EngineSpec | None:
        """A model's definition in the table now in force (placement does not matter here)."""
        if model_id not in self.routes.config.models:
            return None
        device = self.devices["cpu"]
        return _spec(self.routes, model_id, Placement(device, device))


def _read_model_files(routes: LoadedRoutes) -> tuple[dict[str, str], dict[str, int | None]]:
    """The local models of the table's routes (fallbacks included) whose files would fail to
    load, with why, and what one load of each of the others holds on its device: cheap reads
    of their headers, no weight read (blocking: a thread)."""
    config, broken, sizes = routes.config, {}, {}
    used = [(r.model, *(entry.model for entry in r.fallback)) for r in config.routes.values()]
    for model_id in dict.fromkeys(m for models in used for m in models):
        model = config.models[model_id]
        if not model.local:
            continue
        try:
            facts = check_model_files(model_id, model, routes.base_dir)
        except RequestError as exc:
            broken[model_id] = exc.message
            continue
        sizes[model_id] = facts.device_bytes if facts else None
    return broken, sizes


def _verify(spec: EngineSpec) -> ModelDigest | None:
    """The model's digest, checked against its pin, before every load (cached: fast)."""
    return verify_model(spec.model_id, spec.config, spec.base_dir)


def _spec(routes: LoadedRoutes, model_id: str, placement: Placement) -> EngineSpec:
    return EngineSpec(model_id, routes.config.models[model_id], routes.base_dir, placement)
