"""ONNX Runtime execution providers for a route's device, and AMD hybrid models.

A device maps to providers in order of preference; the first one this machine's onnxruntime
offers wins. None offered is an error naming the device, the providers looked for and the ones
found: a model is never run on the CPU instead. Everything here is pure except
`found_providers`, which asks the installed onnxruntime and onnxruntime-genai.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from zest.errors import ServiceUnavailableError

__all__ = [
    "HybridSplit",
    "Provider",
    "found_providers",
    "hybrid_split",
    "select_providers",
    "usable_providers",
]


@dataclass(frozen=True)
class Provider:
    ort_name: str  # as onnxruntime.get_available_providers() lists it
    genai_name: str  # as onnxruntime_genai.Config.append_provider takes it
    options: tuple[tuple[str, str], ...] = ()


CPU = Provider("CPUExecutionProvider", "cpu")
CUDA = Provider("CUDAExecutionProvider", "cuda")
DML = Provider("DmlExecutionProvider", "DML")
WEBGPU = Provider("WebGpuExecutionProvider", "WebGPU")
NV_TENSORRT_RTX = Provider("NvTensorRTRTXExecutionProvider", "NvTensorRtRtx")
VITIS_AI = Provider("VitisAIExecutionProvider", "VitisAI")  # AMD Ryzen AI NPUs
QNN = Provider("QNNExecutionProvider", "QNN")
OPENVINO_NPU = Provider("OpenVINOExecutionProvider", "OpenVINO", (("device_type", "NPU"),))

# Best first, per device kind.
CANDIDATES: dict[str, tuple[Provider, ...]] = {
    "cpu": (CPU,),
    "gpu": (CUDA, DML, WEBGPU, NV_TENSORRT_RTX),
    "npu": (VITIS_AI, QNN, OPENVINO_NPU),
}
# Devices as plans name them; "npu->gpu" is hybrid: prefill on the NPU, decode on the GPU.
_DEVICE_KINDS = {"cpu": ("cpu",), "gpu": ("gpu",), "npu": ("npu",), "npu->gpu": ("npu", "gpu")}
# onnxruntime-genai drives these through its own CUDA library, which CPU wheels do not ship.
_NEEDS_GENAI_CUDA = frozenset({CUDA.ort_name, NV_TENSORRT_RTX.ort_name})


def select_providers(model_id: str, device: str, found: Collection[str]) -> tuple[Provider, ...]:
    """The providers that run `model_id` on `device`, one per device kind it needs."""
    if device not in _DEVICE_KINDS:
        raise ServiceUnavailableError(
            f"model {model_id!r}: the onnx-genai engine has no providers for device {device!r} "
            f"(known: {', '.join(_DEVICE_KINDS)})",
            code="device_unavailable",
        )
    return tuple(_best(model_id, device, kind, found) for kind in _DEVICE_KINDS[device])


def _best(model_id: str, device: str, kind: str, found: Collection[str]) -> Provider:
    for provider in CANDIDATES[kind]:
        if provider.ort_name in found:
            return provider
    looked = ", ".join(p.ort_name for p in CANDIDATES[kind])
    offered = ", ".join(sorted(found)) or "none"
    raise ServiceUnavailableError(
        f"model {model_id!r} needs device {device!r} but no ONNX Runtime {kind} provider is "
        f"available (looked for: {looked}; found: {offered}); it was not run elsewhere: "
        "install the onnxruntime build for that device or route the model to a device found",
        code="device_unavailable",
    )


def usable_providers(ort_providers: Iterable[str], genai_has_cuda: bool) -> frozenset[str]:
    """Providers onnxruntime offers that onnxruntime-genai can also drive."""
    found = frozenset(ort_providers)
    return found if genai_has_cuda else found - _NEEDS_GENAI_CUDA


def found_providers(og: Any) -> frozenset[str]:
    """What this machine offers, from the installed onnxruntime and onnxruntime-genai `og`."""
    import onnxruntime

    return usable_providers(onnxruntime.get_available_providers(), og.is_cuda_available())


# --- AMD hybrid models ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HybridSplit:
    """A model whose genai_config.json puts prefill on one device and decode on another."""

    prefill: str
    decode: str
    evidence: str  # what in genai_config.json says so, for logs and errors

    @property
    def device(self) -> str:
        return f"{self.prefill}->{self.decode}"


_NPU_NAMES = frozenset({"ryzenai", "vitisai", "qnn"})
_GPU_NAMES = frozenset({"cuda", "dml", "webgpu", "nvtensorrtrtx", "rocm", "migraphx"})


def hybrid_split(genai_config: Mapping[str, Any]) -> HybridSplit | None:
    """The NPU-prefill/GPU-decode split an (AMD hybrid) model declares, or None.

    Two shapes say so: a decoder whose session loads a custom-ops library (AMD's NPU kernels)
    next to a GPU side (a GPU provider, Ryzen AI hybrid options, or memory shared between D3D
    and the NPU runtime); or a decoder `pipeline` whose prompt-only stage runs on an NPU
    provider and whose token-only stage runs on a GPU provider.
    """
    decoder = _mapping(_mapping(genai_config.get("model")).get("decoder"))
    if _amd_hybrid_session(_mapping(decoder.get("session_options"))):
        return HybridSplit("npu", "gpu", "custom ops library with Ryzen AI hybrid options")
    if _pipeline_splits(decoder.get("pipeline")):
        return HybridSplit("npu", "gpu", "decoder pipeline: prefill stage on npu, decode on gpu")
    return None


def _amd_hybrid_session(session: Mapping[str, Any]) -> bool:
    if not session.get("custom_ops_library"):
        return False
    providers = _provider_entries(session)
    options = dict(_mapping(session.get("config_entries")))
    for name, provider_options in providers.items():
        if name in ("ryzenai", "vitisai"):
            options.update(provider_options)
    backend = str(options.get("hybrid_opt_token_backend", "")).lower()
    if backend == "npu":  # an NPU-only model: decode stays on the NPU
        return False
    return (
        backend == "gpu"
        or "ryzenai" in providers  # Ryzen AI's own provider decodes on the GPU unless told not to
        or bool(_GPU_NAMES & providers.keys())
        or session.get("custom_allocator") == "shared_d3d_xrt"
    )


def _pipeline_splits(pipeline: Any) -> bool:
    if not isinstance(pipeline, list):
        return False
    stages = [stage for entry in pipeline for stage in _mapping(entry).values()]
    stages = [_mapping(stage) for stage in stages]
    prefill = {k for s in stages if s.get("run_on_token_gen") is False for k in _kinds(s)}
    decode = {k for s in stages if s.get("run_on_prompt") is False for k in _kinds(s)}
    return "npu" in prefill and "gpu" in decode


def _kinds(stage: Mapping[str, Any]) -> set[str]:
    entries = _provider_entries(_mapping(stage.get("session_options")))
    return {kind for name, options in entries.items() if (kind := _kind(name, options))}


def _kind(name: str, options: Mapping[str, Any]) -> str | None:
    if name in _NPU_NAMES:
        return "npu"
    if name == "openvino":  # OpenVINO drives CPUs, GPUs and NPUs: its device_type tells
        device_type = str(options.get("device_type", "")).lower()
        return device_type if device_type in ("npu", "gpu") else None
    return "gpu" if name in _GPU_NAMES else None


def _provider_entries(session: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """provider_options as {lower-case provider name: its options}, whatever the list holds."""
    entries = session.get("provider_options")
    found: dict[str, dict[str, Any]] = {}
    for entry in entries if isinstance(entries, list) else []:
        for name, options in _mapping(entry).items():
            found[str(name).lower()] = dict(_mapping(options))
    return found


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
