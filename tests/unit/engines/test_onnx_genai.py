"""The onnx-genai engine's pieces that need no model: lazy import, model folders, backend label."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from zest.engines import create_engine
from zest.engines._onnx_genai import _backend
from zest.engines._providers import CPU, DML, VITIS_AI, HybridSplit
from zest.errors import ModelFileMissingError, ServiceUnavailableError
from zest.router import OnnxGenaiModel


def model_folder(tmp_path: Path) -> Path:
    (tmp_path / "genai_config.json").write_text(json.dumps({"model": {"context_length": 64}}))
    return tmp_path


def test_without_onnxruntime_genai_loading_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime_genai", None)  # makes the import fail
    config = OnnxGenaiModel(engine="onnx-genai", source=str(model_folder(tmp_path)))
    engine = create_engine("m", config, tmp_path, "cpu")
    with pytest.raises(ServiceUnavailableError) as info:
        engine.load()
    assert info.value.message == (
        "onnxruntime-genai is not installed: run make install "
        "(or: pip install onnxruntime-genai==0.18.0)"
    )
    assert info.value.code == "engine_not_installed"


def test_source_may_name_the_folder_or_its_genai_config(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    for source in (str(folder), str(folder / "genai_config.json")):
        config = OnnxGenaiModel(engine="onnx-genai", source=source)
        assert create_engine("m", config, tmp_path, "cpu").info().source == str(folder)


def test_a_folder_without_genai_config_is_not_a_model(tmp_path: Path) -> None:
    config = OnnxGenaiModel(engine="onnx-genai", source=str(tmp_path))
    with pytest.raises(ModelFileMissingError) as info:
        create_engine("m", config, tmp_path, "cpu")
    assert info.value.message == (
        f"model {tmp_path}: {tmp_path} has no genai_config.json: point source at an ONNX "
        "Runtime GenAI model folder (`python -m zest.engines.convert` makes one from the bundled "
        "SmolLM2)"
    )


def test_the_backend_label_names_providers_threads_and_a_hybrid_split() -> None:
    assert _backend("0.18.0", (CPU,), None, 2) == (
        "onnxruntime-genai 0.18.0 (CPUExecutionProvider, 2 threads)"
    )
    split = HybridSplit("npu", "gpu", "custom ops")
    assert _backend("0.18.0", (VITIS_AI, DML), split, None) == (
        "onnxruntime-genai 0.18.0 (hybrid: prefill npu -> decode gpu; "
        "VitisAIExecutionProvider + DmlExecutionProvider)"
    )
