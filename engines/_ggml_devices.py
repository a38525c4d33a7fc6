"""The devices ggml's backend registry reports, and what zest calls each one (pure).

llama.cpp runs on what ggml registers: the CPU always, and one device per GPU its build has a
backend for (Vulkan0, CUDA0, ...). ggml calls Mesa's llvmpipe ("lavapipe") a GPU, since the
Vulkan driver says so; it is a CPU in disguise, so zest calls it `software`: it runs a gpu
route for real (the Vulkan lane proves correctness on it) and is never shown as a gpu.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["GgmlDevice", "GgmlReport", "device_kind", "offload_device"]

# enum ggml_backend_dev_type, in its order (ggml-backend.h).
GGML_TYPES = ("cpu", "gpu", "igpu", "accel", "meta")
# Vulkan (and OpenGL) drivers that compute on the CPU: Mesa's llvmpipe (its Vulkan driver is
# called lavapipe), softpipe, and Google's SwiftShader.
_SOFTWARE = re.compile(r"llvmpipe|lavapipe|softpipe|swiftshader", re.IGNORECASE)
_MIB = 1024 * 1024


def device_kind(ggml_type: str, description: str) -> str:
    """cpu, gpu, software, accel or meta: a GPU-typed device whose driver computes on the CPU
    is software."""
    if ggml_type in ("gpu", "igpu"):
        return "software" if _SOFTWARE.search(description) else "gpu"
    return ggml_type


@dataclass(frozen=True)
class GgmlDevice:
    name: str  # ggml's: CPU, Vulkan0, CUDA0
    description: str  # the driver's: "llvmpipe (LLVM 15.0.6, 256 bits)", "NVIDIA H200"
    ggml_type: str  # one of GGML_TYPES
    memory_free: int
    memory_total: int

    @property
    def kind(self) -> str:
        return device_kind(self.ggml_type, self.description)

    def describe(self) -> str:
        memory = f", {self.memory_total // _MIB} MiB" if self.memory_total else ""
        note = " (software: a CPU in disguise)" if self.kind == "software" else ""
        return f"{self.name}: {self.description}{memory}{note}"

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "ggml_type": self.ggml_type,
            "kind": self.kind,
            "memory_free": self.memory_free,
            "memory_total": self.memory_total,
        }


@dataclass(frozen=True)
class GgmlReport:
    """What the llama.cpp build in this process can run on."""

    devices: tuple[GgmlDevice, ...]
    backends: tuple[tuple[str, int], ...]  # each registered backend and its device count

    @property
    def idle_backends(self) -> list[str]:
        """Backends built in that found no device they will use (Vulkan with no GPU, or with
        only a software device that GGML_VK_VISIBLE_DEVICES did not select)."""
        return [name for name, count in self.backends if count == 0 and name != "CPU"]

    def summary(self) -> str:
        found = ", ".join(d.describe() for d in self.devices) or "no device"
        idle = "".join(f"; {name}: built in, no usable device" for name in self.idle_backends)
        return found + idle


def offload_device(devices: Sequence[GgmlDevice]) -> GgmlDevice | None:
    """The device a gpu route offloads to: the first real GPU, else the first software one."""
    for kind in ("gpu", "software"):
        found = next((d for d in devices if d.kind == kind), None)
        if found is not None:
            return found
    return None
