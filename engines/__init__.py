"""Engines that run models in process (llama.cpp, ONNX Runtime GenAI), behind one interface,
and the device inventory.

`create_engine` builds the engine a model's `engine:` key names, for one placement; heavy
libraries are imported only when a model is loaded, and a missing one fails with the command to
install it.
"""

from __future__ import annotations

from pathlib import Path

from zest.engines._base import (
    Delta,
    Engine,
    EngineInfo,
    GenerationJob,
    Message,
    StageStats,
    engine_factory,
    register_engine,
)
from zest.engines._baseline import raw_llama_cpp
from zest.engines._devices import Inventory, Probe, detect_inventory, parse_emulation
from zest.engines._llamacpp import LlamaCppEngine
from zest.engines._onnx_genai import OnnxGenaiEngine
from zest.engines._pool import (
    EngineKey,
    EnginePool,
    EngineSpec,
    Lease,
    LoadedEngine,
    ModelPolicy,
    describe,
)
from zest.engines._remote import RemoteEngine, privacy_is_strict
from zest.engines._sources import hf_hub_cache_dir, resolve_source, zest_cache_dir
from zest.engines._stops import StopMatcher
from zest.router import Device, ModelConfig, Placement, parse_device

__all__ = [
    "Delta",
    "Engine",
    "EngineInfo",
    "EngineKey",
    "EnginePool",
    "EngineSpec",
    "GenerationJob",
    "Inventory",
    "Lease",
    "LlamaCppEngine",
    "LoadedEngine",
    "Message",
    "ModelPolicy",
    "Probe",
    "RemoteEngine",
    "StageStats",
    "StopMatcher",
    "create_engine",
    "describe",
    "detect_inventory",
    "engine_class",
    "hf_hub_cache_dir",
    "parse_emulation",
    "privacy_is_strict",
    "raw_llama_cpp",
    "register_engine",
    "resolve_source",
    "zest_cache_dir",
]

register_engine(LlamaCppEngine.name, LlamaCppEngine)
register_engine(OnnxGenaiEngine.name, OnnxGenaiEngine)
register_engine(RemoteEngine.name, RemoteEngine)


def create_engine(
    model_id: str, config: ModelConfig, base_dir: Path, placement: Placement | str
) -> Engine:
    """The engine for one routes.yaml model entry on one placement (not loaded yet).

    A plain device name ("cpu", "npu->gpu") stands for real devices of that name.
    """
    if isinstance(placement, str):
        placement = _real_placement(placement)
    return engine_factory(config.engine)(model_id, config, base_dir, placement)


def _real_placement(device: str) -> Placement:
    prefill, decode = parse_device(device) or ("cpu", "cpu")
    found = {name: Device(name, frozenset(), "named by the caller") for name in {prefill, decode}}
    return Placement(found[prefill], found[decode])


def engine_class(name: str) -> type[Engine]:
    """The registered engine class for `engine: name` (to ask what it supports)."""
    factory = engine_factory(name)
    if not isinstance(factory, type):
        raise TypeError(f"engine {name!r} is registered with a factory, not a class")
    return factory
