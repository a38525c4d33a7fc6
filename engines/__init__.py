"""Engines that run models in process, behind one interface, and the device inventory.

`create_engine` builds the engine a model's `engine:` key names, for one placement; heavy
libraries are imported only when a model is loaded, and a missing one fails with the command to
install it.
"""

from __future__ import annotations

from pathlib import Path

from engines._base import (
    Delta,
    Engine,
    EngineInfo,
    GenerationJob,
    Message,
    StageStats,
    engine_factory,
    register_engine,
)
from engines._devices import Inventory, Probe, detect_inventory, parse_emulation
from engines._llamacpp import LlamaCppEngine
from engines._remote import RemoteEngine, privacy_is_strict
from engines._sources import ModelFileMissingError, resolve_source
from engines._stops import StopMatcher
from router import ModelConfig, Placement

__all__ = [
    "Delta",
    "Engine",
    "EngineInfo",
    "GenerationJob",
    "Inventory",
    "LlamaCppEngine",
    "Message",
    "ModelFileMissingError",
    "Probe",
    "RemoteEngine",
    "StageStats",
    "StopMatcher",
    "create_engine",
    "detect_inventory",
    "engine_class",
    "parse_emulation",
    "privacy_is_strict",
    "register_engine",
    "resolve_source",
]

register_engine(LlamaCppEngine.name, LlamaCppEngine)
register_engine(RemoteEngine.name, RemoteEngine)


def create_engine(
    model_id: str, config: ModelConfig, base_dir: Path, placement: Placement
) -> Engine:
    """The engine for one routes.yaml model entry on one placement (not loaded yet)."""
    return engine_factory(config.engine)(model_id, config, base_dir, placement)


def engine_class(name: str) -> type[Engine]:
    """The registered engine class for `engine: name` (to ask what it supports)."""
    factory = engine_factory(name)
    if not isinstance(factory, type):
        raise TypeError(f"engine {name!r} is registered with a factory, not a class")
    return factory
