"""What the gateway holds while serving: the routes table, the loaded engines, the devices."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from engines import Engine, EngineInfo, create_engine, detect_devices
from router import LoadedRoutes, ServiceUnavailableError

__all__ = ["Runtime"]

log = logging.getLogger("zest.gateway")


@dataclass
class Runtime:
    routes: LoadedRoutes
    devices: frozenset[str] = field(default_factory=detect_devices)
    engines: dict[str, Engine] = field(default_factory=dict)
    infos: dict[str, EngineInfo] = field(default_factory=dict)

    async def start(self) -> None:
        """Load every model a route uses; a missing file or engine fails the start, loudly."""
        if self.engines:
            return
        used = sorted({route.model for route in self.routes.config.routes.values()})
        if self.routes.config.expose_models:
            used = sorted(self.routes.config.models)
        for model_id in used:
            await self._load(model_id)

    async def _load(self, model_id: str) -> None:
        config = self.routes.config.models[model_id]
        engine = create_engine(model_id, config, self.routes.base_dir, device="cpu")
        info = await asyncio.to_thread(engine.load)
        self.engines[model_id], self.infos[model_id] = engine, info
        log.info(
            "model %s: engine=%s device=%s backend=%s context=%d source=%s",
            model_id,
            info.engine,
            info.device,
            info.backend,
            info.context_length,
            info.source,
        )

    def engine(self, model_id: str) -> Engine:
        try:
            return self.engines[model_id]
        except KeyError:
            raise ServiceUnavailableError(
                f"model {model_id!r} is not loaded: check the server log for its load error",
                code="model_not_loaded",
            ) from None

    async def close(self) -> None:
        for engine in self.engines.values():
            await engine.close()
        self.engines.clear()
