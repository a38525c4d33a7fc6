"""The onnx-genai engine's pieces that need no model: lazy import, model folders, backend label."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from zest.engines import create_engine, inspect_model
from zest.engines._onnx_genai import _backend
from zest.engines._providers import CPU, DML, VITIS_AI, HybridSplit
from zest.errors import EngineError, ModelFileMissingError, ServiceUnavailableError
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


@pytest.mark.parametrize(
    ("value", "shown"),
    [(-5, "-5"), (0, "0"), ("4096", "'4096'"), (4096.5, "4096.5"), (True, "True")],
)
def test_a_built_context_that_is_no_count_of_tokens_is_refused_plainly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: Any, shown: str
) -> None:
    """genai_config.json's model.context_length, as a check reads it and as a load does."""
    config_file = tmp_path / "genai_config.json"
    config_file.write_text(json.dumps({"model": {"context_length": value}}))
    config = OnnxGenaiModel(engine="onnx-genai", source=str(tmp_path))
    expected = (
        f"model 'm': model.context_length in {config_file} is {shown}: it must be a whole "
        "number of tokens above 0 (the context the model was built for): correct the file, "
        "or build the model again"
    )
    with pytest.raises(EngineError) as refused:
        inspect_model("m", config, tmp_path)
    assert refused.value.message == expected
    monkeypatch.setitem(sys.modules, "onnxruntime_genai", types.SimpleNamespace())
    with pytest.raises(EngineError) as refused:
        create_engine("m", config, tmp_path, "cpu").load()
    assert refused.value.message == expected
