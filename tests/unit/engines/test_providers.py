"""Devices to ONNX Runtime providers, and AMD hybrid models recognised from genai_config.json."""

from __future__ import annotations

from typing import Any

import pytest

from zest.engines._providers import (
    CPU,
    CUDA,
    DML,
    OPENVINO_NPU,
    QNN,
    VITIS_AI,
    WEBGPU,
    HybridSplit,
    hybrid_split,
    select_providers,
    usable_providers,
)
from zest.errors import ServiceUnavailableError

CPU_ONLY = {"AzureExecutionProvider", "CPUExecutionProvider"}


def test_the_cpu_device_takes_the_cpu_provider() -> None:
    assert select_providers("m", "cpu", CPU_ONLY) == (CPU,)


@pytest.mark.parametrize(
    ("found", "chosen"),
    [
        ({"CUDAExecutionProvider", "DmlExecutionProvider", "CPUExecutionProvider"}, CUDA),
        ({"DmlExecutionProvider", "WebGpuExecutionProvider", "CPUExecutionProvider"}, DML),
        ({"WebGpuExecutionProvider", "CPUExecutionProvider"}, WEBGPU),
    ],
)
def test_gpu_takes_the_best_gpu_provider_found(found: set[str], chosen: object) -> None:
    assert select_providers("m", "gpu", found) == (chosen,)


@pytest.mark.parametrize(
    ("found", "chosen"),
    [
        ({"VitisAIExecutionProvider", "QNNExecutionProvider"}, VITIS_AI),
        ({"QNNExecutionProvider", "OpenVINOExecutionProvider"}, QNN),
        ({"OpenVINOExecutionProvider", "CPUExecutionProvider"}, OPENVINO_NPU),
    ],
)
def test_npu_takes_the_best_npu_provider_found(found: set[str], chosen: object) -> None:
    assert select_providers("m", "npu", found) == (chosen,)


def test_openvino_is_asked_for_its_npu() -> None:
    assert OPENVINO_NPU.options == (("device_type", "NPU"),)


def test_hybrid_needs_an_npu_and_a_gpu_provider() -> None:
    found = {"VitisAIExecutionProvider", "DmlExecutionProvider", "CPUExecutionProvider"}
    assert select_providers("m", "npu->gpu", found) == (VITIS_AI, DML)


def test_a_missing_gpu_provider_names_device_looked_for_and_found() -> None:
    with pytest.raises(ServiceUnavailableError) as info:
        select_providers("smol", "gpu", CPU_ONLY)
    assert info.value.message == (
        "model 'smol' needs device 'gpu' but no ONNX Runtime gpu provider is available "
        "(looked for: CUDAExecutionProvider, DmlExecutionProvider, WebGpuExecutionProvider, "
        "NvTensorRTRTXExecutionProvider; found: AzureExecutionProvider, CPUExecutionProvider); "
        "it was not run elsewhere: install the onnxruntime build for that device or route the "
        "model to a device found"
    )
    assert (info.value.code, info.value.status_code) == ("device_unavailable", 503)


def test_hybrid_without_a_gpu_provider_names_the_missing_kind() -> None:
    with pytest.raises(ServiceUnavailableError) as info:
        select_providers("smol", "npu->gpu", {"QNNExecutionProvider"})
    assert info.value.message.startswith(
        "model 'smol' needs device 'npu->gpu' but no ONNX Runtime gpu provider is available"
    )


def test_an_unknown_device_is_refused() -> None:
    with pytest.raises(ServiceUnavailableError) as info:
        select_providers("smol", "tpu", CPU_ONLY)
    assert info.value.message == (
        "model 'smol': the onnx-genai engine has no providers for device 'tpu' "
        "(known: cpu, gpu, npu, npu->gpu)"
    )


def test_cuda_counts_only_when_onnxruntime_genai_has_its_cuda_library() -> None:
    ort = ["CUDAExecutionProvider", "NvTensorRTRTXExecutionProvider", "CPUExecutionProvider"]
    assert usable_providers(ort, genai_has_cuda=False) == {"CPUExecutionProvider"}
    assert usable_providers(ort, genai_has_cuda=True) == set(ort)


# --- hybrid models: hand-written genai_config.json shapes -----------------------------------------


def config(session_options: dict[str, Any] | None = None, **decoder: Any) -> dict[str, Any]:
    if session_options is not None:
        decoder["session_options"] = session_options
    return {"model": {"type": "llama", "decoder": {"filename": "model.onnx", **decoder}}}


HYBRID = HybridSplit("npu", "gpu", "custom ops library with Ryzen AI hybrid options")


def test_a_plain_cpu_model_is_not_hybrid() -> None:
    plain = config({"log_id": "onnxruntime-genai", "provider_options": []})
    assert hybrid_split(plain) is None


def test_custom_ops_sharing_gpu_memory_with_the_npu_runtime_is_hybrid() -> None:
    amd = config(
        {
            "custom_ops_library": "onnx_custom_ops.dll",
            "custom_allocator": "shared_d3d_xrt",
            "external_data_file": "token.pb.bin",
            "provider_options": [{"dml": {}}],
        }
    )
    assert hybrid_split(amd) == HYBRID
    assert HYBRID.device == "npu->gpu"


def test_the_ryzen_ai_provider_decodes_on_the_gpu_unless_told_otherwise() -> None:
    session = {
        "custom_ops_library": "onnxruntime_vitis_ai_custom_ops.dll",
        "provider_options": [{"RyzenAI": {"external_data_file": "model.pb.bin"}}],
    }
    assert hybrid_split(config(session)) == HYBRID


def test_a_gpu_token_backend_in_config_entries_is_hybrid() -> None:
    session = {
        "custom_ops_library": "onnx_custom_ops.dll",
        "config_entries": {"hybrid_opt_token_backend": "gpu", "hybrid_opt_max_seq_length": "4096"},
        "provider_options": [{"VitisAI": {}}],
    }
    assert hybrid_split(config(session)) == HYBRID


@pytest.mark.parametrize(
    "session",
    [
        {
            "custom_ops_library": "onnx_custom_ops.dll",
            "provider_options": [{"RyzenAI": {"hybrid_opt_token_backend": "npu"}}],
        },
        {
            "custom_ops_library": "onnx_custom_ops.dll",
            "provider_options": [{"VitisAI": {"config_file": "vaip_config.json"}}],
        },
        {"provider_options": [{"dml": {}}], "custom_allocator": "shared_d3d_xrt"},
    ],
    ids=["npu-token-backend", "vitisai-only", "no-custom-ops"],
)
def test_npu_only_and_gpu_only_models_are_not_hybrid(session: dict[str, Any]) -> None:
    assert hybrid_split(config(session)) is None


def stage(provider: dict[str, Any], *, prompt: bool, token_gen: bool) -> dict[str, Any]:
    return {
        "filename": "stage.onnx",
        "session_options": {"provider_options": [provider]},
        "run_on_prompt": prompt,
        "run_on_token_gen": token_gen,
    }


def test_a_pipeline_with_an_npu_prefill_and_a_gpu_decode_stage_is_hybrid() -> None:
    pipeline = [
        {"embeddings": stage({"cpu": {}}, prompt=True, token_gen=True)},
        {"prefill": stage({"QNN": {"backend_path": "QnnHtp.dll"}}, prompt=True, token_gen=False)},
        {"decode": stage({"cuda": {}}, prompt=False, token_gen=True)},
    ]
    assert hybrid_split(config(pipeline=pipeline)) == HybridSplit(
        "npu", "gpu", "decoder pipeline: prefill stage on npu, decode on gpu"
    )


def test_openvino_stages_count_by_their_device_type() -> None:
    pipeline = [
        {"prefill": stage({"OpenVINO": {"device_type": "NPU"}}, prompt=True, token_gen=False)},
        {"decode": stage({"OpenVINO": {"device_type": "GPU"}}, prompt=False, token_gen=True)},
    ]
    assert hybrid_split(config(pipeline=pipeline)) is not None


def test_a_pipeline_on_one_device_is_not_hybrid() -> None:
    pipeline = [
        {"prefill": stage({"QNN": {}}, prompt=True, token_gen=False)},
        {"decode": stage({"QNN": {}}, prompt=False, token_gen=True)},
    ]
    assert hybrid_split(config(pipeline=pipeline)) is None


@pytest.mark.parametrize(
    "odd",
    [
        {},
        {"model": []},
        {
            "model": {
                "decoder": {"session_options": {"custom_ops_library": "x", "provider_options": {}}}
            }
        },
        {"model": {"decoder": {"pipeline": [{"prefill": "not a stage"}, 3]}}},
    ],
)
def test_odd_shapes_are_not_hybrid_and_do_not_crash(odd: dict[str, Any]) -> None:
    assert hybrid_split(odd) is None
