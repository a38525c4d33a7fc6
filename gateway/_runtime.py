"""What the gateway holds while serving: the routes, the device inventory, the loaded engines."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from engines import Engine, EngineInfo, Inventory, create_engine, engine_class
from router import (
    Device,
    LoadedRoutes,
    Placement,
    Plan,
    RouteConfig,
    ServiceUnavailableError,
    plan_route,
)

__all__ = ["Runtime"]

log = logging.getLogger("zest.gateway")
EngineKey = tuple[str, str]  # (model id, placement key)


@dataclass
class Runtime:
    routes: LoadedRoutes
    inventory: Inventory
    engines: dict[EngineKey, Engine] = field(default_factory=dict)
    infos: dict[EngineKey, EngineInfo] = field(default_factory=dict)
    _locks: dict[EngineKey, asyncio.Lock] = field(default_factory=dict)
    _started: bool = False

    @property
    def devices(self) -> dict[str, Device]:
        return self.inventory.devices

    async def start(self) -> None:
        """Load each route's first placement; a broken model fails the start, loudly."""
        if self._started:
            return
        self._started = True
        for task, route in self.routes.config.routes.items():
            try:
                plan = self.plan(task, route, prompt_tokens=0)
            except ServiceUnavailableError as exc:
                log.warning("route %s cannot run on this machine: %s", task, exc.message)
                continue
            await self.engine_for(route.model, plan.first.placement)
        if self.routes.config.expose_models:
            for model_id in self.routes.config.models:
                await self.tokenizer_for(model_id)

    def plan(self, task: str, route: RouteConfig, prompt_tokens: int) -> Plan:
        engine = self.routes.config.models[route.model].engine
        return plan_route(
            task,
            route,
            engine=engine,
            devices=self.devices,
            load=self.queue_depths(),
            prompt_tokens=prompt_tokens,
            can_split=engine_class(engine).supports_split,
        )

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
