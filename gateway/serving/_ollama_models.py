"""The tasks as Ollama's model listings see them (/api/tags, /api/show, /api/ps), and what a
request's keep_alive does to the engine that served it.

An Ollama "model" here is a task of the routes file (or a model callable by id), listed as
`TASK:latest`. Its size, format, family and template are its route's model's, read from the
model file's header without loading it; its digest identifies the route's definition (a
reload that changes it changes the digest), not the file's bytes, which zest hashes only
when routes.yaml pins them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from zest.engines import (
    EngineInfo,
    LoadedEngine,
    kept_for,
    read_gguf_metadata,
    resolve_source,
)
from zest.errors import RequestError
from zest.gateway.serving._ollama_options import KeepAlive
from zest.gateway.serving._runtime import Runtime
from zest.router import LoadedRoutes, ModelConfig, RouteConfig, find_route

__all__ = [
    "ModelCard",
    "apply_keep_alive",
    "load_task",
    "model_card",
    "model_cards",
    "running_cards",
    "unload_task",
]

log = logging.getLogger("zest.gateway")
_FORMATS = {"llamacpp": "gguf", "onnx-genai": "onnx", "remote": "remote"}
# GGUF's general.file_type: what Ollama shows as the quantization level.
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1"}
_FILE_TYPES |= {10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S"}
_FILE_TYPES |= {15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


@dataclass(frozen=True)
class ModelCard:
    """One task as Ollama lists a model."""

    name: str  # TASK:latest
    task: str
    route: RouteConfig
    model_id: str
    model: ModelConfig
    size: int
    modified_at: str
    digest: str
    metadata: dict[str, Any]

    def details(self) -> dict[str, Any]:
        arch = str(self.metadata.get("general.architecture") or "") or None
        file_type = self.metadata.get("general.file_type")
        return {
            "parent_model": "",
            "format": _FORMATS.get(self.model.engine, self.model.engine),
            "family": arch,
            "families": [arch] if arch else None,
            "parameter_size": _parameter_size(self.metadata.get("general.size_label")),
            "quantization_level": _FILE_TYPES.get(file_type)
            if isinstance(file_type, int)
            else None,
        }

    def listing(self) -> dict[str, Any]:
        """An entry of GET /api/tags."""
        return {
            "name": self.name,
            "model": self.name,
            "modified_at": self.modified_at,
            "size": self.size,
            "digest": self.digest,
            "details": self.details(),
        }

    def capabilities(self) -> list[str]:
        """What Ollama's clients look for before they send tools or images."""
        if self.route.kind == "embedding":
            return ["embedding"]
        found = ["completion"]
        if self.route.kind == "chat" and self.route.tools != "deny":
            found.append("tools")
        return found

    def context_length(self) -> int | None:
        arch = self.metadata.get("general.architecture")
        trained = self.metadata.get(f"{arch}.context_length")
        declared = getattr(self.model, "context_length", None)
        if isinstance(declared, int):
            return declared
        return trained if isinstance(trained, int) else None


def _parameter_size(label: Any) -> str:
    return str(label) if label else ""


def _card(routes: LoadedRoutes, task: str, route: RouteConfig) -> ModelCard:
    model = routes.config.models[route.model]
    path, metadata = _model_file(routes, model)
    stat = path.stat() if path is not None else None
    size = _size(path) if path is not None else 0
    modified = stat.st_mtime if stat is not None else 0.0
    definition = route.model_dump_json() + model.model_dump_json()
    return ModelCard(
        name=f"{task}:latest",
        task=task,
        route=route,
        model_id=route.model,
        model=model,
        size=size,
        modified_at=dt.datetime.fromtimestamp(modified, dt.UTC).isoformat().replace("+00:00", "Z"),
        digest=hashlib.sha256(definition.encode()).hexdigest(),
        metadata=metadata,
    )


def _model_file(routes: LoadedRoutes, model: ModelConfig) -> tuple[Path | None, dict[str, Any]]:
    """The model's file (or folder) and its GGUF metadata, when they are here."""
    source = getattr(model, "source", None)
    if not isinstance(source, str):
        return None, {}
    try:
        path = resolve_source(source, routes.base_dir, getattr(model, "revision", None))
    except RequestError:
        return None, {}
    if path.is_file():
        stat = path.stat()
        return path, _metadata(path, stat.st_mtime_ns, stat.st_size)
    return path, {}


@lru_cache(maxsize=64)
def _metadata(path: Path, mtime_ns: int, size: int) -> dict[str, Any]:
    """A GGUF file's metadata without its large arrays (cached by the file's identity)."""
    try:
        return read_gguf_metadata(path)
    except Exception:  # not a GGUF zest can read: listed without its details
        return {}


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file())
    return path.stat().st_size


async def model_cards(runtime: Runtime) -> list[ModelCard]:
    """Every task (and model callable by id) as GET /api/tags lists them."""
    routes = runtime.routes
    return await asyncio.to_thread(_cards, routes)


def _cards(routes: LoadedRoutes) -> list[ModelCard]:
    config = routes.config
    cards = [_card(routes, task, route) for task, route in config.routes.items()]
    for model_id in config.models:
        if config.exposes(model_id) and model_id not in config.routes:
            cards.append(_card(routes, model_id, find_route(model_id, None, config)))
    return cards


async def model_card(runtime: Runtime, task: str) -> ModelCard:
    """One task's card; an unknown task raises UnknownTaskError (404)."""
    routes = runtime.routes
    route = find_route(task, None, routes.config)
    return await asyncio.to_thread(_card, routes, task, route)


async def running_cards(runtime: Runtime) -> list[tuple[ModelCard, LoadedEngine, float | None]]:
    """Each task whose model is loaded, with the engine and how long it stays loaded idle."""
    cards = await model_cards(runtime)
    running = []
    for entry in runtime.pool.loaded():
        policy = runtime.model_policy(entry.spec.model_id)
        for card in cards:
            if card.model_id == entry.spec.model_id:
                running.append((card, entry, kept_for(entry, policy)))
    return running


async def load_task(runtime: Runtime, task: str) -> EngineInfo:
    """Load the model of `task`'s route where its plan would place it first (Ollama's empty
    prompt): the route's privacy and devices apply as for any request."""
    routes = runtime.routes
    route = find_route(task, None, routes.config)
    attempt = runtime.plan(routes, task, route, prompt_tokens=0).first
    lease = await runtime.acquire(routes, attempt.model, attempt.placement)
    lease.release()
    return lease.info


async def unload_task(runtime: Runtime, task: str) -> list[str]:
    """Unload the model of `task`'s route wherever it is loaded and idle (Ollama's keep_alive
    0); one still serving is unloaded by the sweep when it is done. Returns the devices."""
    route = find_route(task, None, runtime.routes.config)
    unloaded = []
    for entry in runtime.pool.find(route.model):
        unloaded.append(entry.info.device)
        await _unload_when_idle(runtime, entry)
    return unloaded


async def apply_keep_alive(runtime: Runtime, info: EngineInfo, keep: KeepAlive) -> None:
    """What a request's keep_alive asks of the engine that served it: unload it now (0, or
    when its other requests end), or stay loaded that long once idle (None: forever)."""
    for entry in runtime.pool.loaded():
        if entry.info is not info:
            continue
        if keep.unload:
            await _unload_when_idle(runtime, entry)
        else:
            entry.requested_keep_alive = math.inf if keep.seconds is None else keep.seconds


async def _unload_when_idle(runtime: Runtime, entry: LoadedEngine) -> None:
    entry.requested_keep_alive = 0.0  # the sweep unloads it once its requests end
    if not entry.busy:
        await runtime.pool.unload(entry, "keep_alive 0 (Ollama API)")
