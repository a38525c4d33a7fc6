"""Engines that run models in process, behind one interface: llama.cpp and ONNX Runtime GenAI.

`create_engine` builds the engine a model's `engine:` key names; heavy libraries are imported
only when a model is loaded, and a missing one fails with the command to install it.
"""

from __future__ import annotations

from pathlib import Path

from engines._base import (
    Delta,
    Engine,
    EngineInfo,
    GenerationJob,
    Message,
    engine_factory,
    register_engine,
)
from engines._devices import detect_devices
from engines._llamacpp import LlamaCppEngine
from engines._onnx_genai import OnnxGenaiEngine
from engines._sources import ModelFileMissingError, resolve_source
from engines._stops import StopMatcher
from router import ModelConfig

__all__ = [
    "Delta",
    "Engine",
    "EngineInfo",
    "GenerationJob",
    "Message",
    "ModelFileMissingError",
    "StopMatcher",
    "create_engine",
    "detect_devices",
    "register_engine",
    "resolve_source",
]


register_engine(LlamaCppEngine.name, LlamaCppEngine)
register_engine(OnnxGenaiEngine.name, OnnxGenaiEngine)


def create_engine(model_id: str, config: ModelConfig, base_dir: Path, device: str) -> Engine:
    """The engine for one routes.yaml model entry (not loaded yet)."""
    return engine_factory(config.engine)(model_id, config, base_dir, device)
