"""What the gateway holds while serving: the routes, the device inventory, the loaded engines."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Literal

from engines import Engine, EngineInfo, Inventory, Message, create_engine
from gateway._explain import plan_for
from gateway._tokens import counter_for
from policies import approximate_tokens
from router import (
    REMOTE_ENGINE,
    Device,
    LoadedRoutes,
    Placement,
    Plan,
    RouteConfig,
    ServiceUnavailableError,
)

__all__ = ["Runtime"]

log = logging.getLogger("zest.gateway")
EngineKey = tuple[str, str]  # (model id, placement key)


@dataclass
class Runtime:
    routes: LoadedRoutes
    inventory: Inventory
    # ZEST_PRIVACY=strict: every remote attempt is left out of every plan.
    strict_privacy: bool = False
    engines: dict[EngineKey, Engine] = field(default_factory=dict)
    infos: dict[EngineKey, EngineInfo] = field(default_factory=dict)
    _locks: dict[EngineKey, asyncio.Lock] = field(default_factory=dict)
    _started: bool = False

    @property
    def devices(self) -> dict[str, Device]:
        return self.inventory.devices

    async def start(self) -> None:
        """Load each route's first attempt. A broken model fails the start, loudly, unless the
        route has another attempt to fall back on (then it is a warning, and each request that
        falls back says so)."""
        if self._started:
            return
        self._started = True
        if self.strict_privacy:
            log.info("privacy: ZEST_PRIVACY=strict: no remote engine will be reached")
        for task, route in self.routes.config.routes.items():
            try:
                plan = self.plan(task, route, prompt_tokens=0)
            except ServiceUnavailableError as exc:
                log.warning("route %s cannot run on this machine: %s", task, exc.message)
                continue
            try:
                await self.engine_for(plan.first.model, plan.first.placement)
            except ServiceUnavailableError as exc:
                if len(plan.attempts) == 1 or route.on_failure != "next":
                    raise
                log.warning(
                    "route %s: %s on %s cannot load, requests will fall back: %s",
                    task,
                    plan.first.model,
                    plan.first.device,
                    exc.message,
                )
        if self.routes.config.expose_models:
            for model_id, model in self.routes.config.models.items():
                if model.engine != REMOTE_ENGINE:
                    await self.tokenizer_for(model_id)

    def plan(self, task: str, route: RouteConfig, prompt_tokens: int) -> Plan:
        return plan_for(
            self.routes.config,
            self.devices,
            task,
            route,
            prompt_tokens=prompt_tokens,
            load=self.queue_depths(),
            strict_privacy=self.strict_privacy,
        )

    async def count_prompt(
        self, model_id: str, kind: Literal["chat", "completion"], messages: list[Message]
    ) -> int:
        """The prompt's size for planning (the auto cost model), with the model's tokenizer;
        approximate for remote models, or when the model cannot load (its attempts will say)."""
        if self.routes.config.models[model_id].engine == REMOTE_ENGINE:
            return approximate_tokens(messages)
        try:
            engine = await self.tokenizer_for(model_id)
        except ServiceUnavailableError:
            return approximate_tokens(messages)
        return await asyncio.to_thread(counter_for(engine, kind), messages)

    def queue_depths(self) -> dict[str, int]:
        depths: dict[str, int] = {}
        for engine in self.engines.values():
            for device in engine.placement.devices:
                depths[device.name] = depths.get(device.name, 0) + engine.pending()
        return depths

    async def engine_for(self, model_id: str, placement: Placement) -> Engine:
        key = (model_id, placement.key)
        if key in self.engines:
            return self.engines[key]
        async with self._locks.setdefault(key, asyncio.Lock()):
            if key not in self.engines:  # loaded while we waited for the lock
                await self._load(key, placement)
        return self.engines[key]

    async def tokenizer_for(self, model_id: str) -> Engine:
        """Any loaded engine of the model (tokenizer and template do not depend on the device)."""
        for (loaded_id, _), engine in self.engines.items():
            if loaded_id == model_id:
                return engine
        config = self.routes.config.models[model_id]
        usable = self.inventory.usable(config.engine)
        if not usable:
            raise ServiceUnavailableError(
                f"model {model_id!r}: no device here can run engine {config.engine!r} "
                "(GET /v1/system-info lists the devices)",
                code="device_unavailable",
            )
        device = self.devices["cpu" if "cpu" in usable else usable[0]]
        return await self.engine_for(model_id, Placement(device, device))

    async def _load(self, key: EngineKey, placement: Placement) -> None:
        model_id = key[0]
        config = self.routes.config.models[model_id]
        engine = create_engine(model_id, config, self.routes.base_dir, placement)
        info = await asyncio.to_thread(engine.load)
        self.engines[key], self.infos[key] = engine, info
        log.info(
            "model %s: engine=%s device=%s backend=%s context=%d source=%s",
            model_id,
            info.engine,
            info.device,
            info.backend,
            info.context_length,
            info.source,
        )

    async def close(self) -> None:
        for engine in self.engines.values():
            await engine.close()
        self.engines.clear()
        self.infos.clear()
