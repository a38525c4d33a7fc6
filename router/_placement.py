"""Devices as the router sees them, and where a route runs: pure data and a documented cost model.

The cost model of `device: auto`, in order:
1. Candidates are the devices that can run the model's engine; the CPU only where the route
   allows it (`allow_cpu`); a device that reports its free memory only when the model's weights
   and KV cache fit in it (router/_plan.py, lacks_room).
2. A prompt of at least `hybrid_min_prompt_tokens` tokens is split (prefill on the NPU, decode on
   the GPU) when both exist and the engine can split: prefill is compute-bound and the NPU takes
   it off the GPU, which keeps decoding other streams.
3. Otherwise the request stays on one device: the one with the shortest queue; ties go to the
   GPU, then the NPU, then the CPU (fastest first).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "DEVICE_ORDER",
    "REMOTE_DEVICE",
    "Device",
    "Placement",
    "describe_devices",
    "parse_device",
]

DEVICE_ORDER: tuple[str, ...] = ("gpu", "npu", "cpu")  # fastest first: the tie-break of auto


@dataclass(frozen=True)
class Device:
    """One device routes may use. `engines` lists the engines able to run on it."""

    name: str
    engines: frozenset[str]
    detected_by: str
    detail: str = ""
    emulated: bool = False
    threads: int | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    # A real driver's device that is a CPU in disguise (Mesa's llvmpipe behind Vulkan): it runs
    # a gpu route for real, and is never shown as a gpu.
    software: bool = False
    # What the device reports (ggml's backend registry), None when nothing reports it.
    memory_total: int | None = None
    memory_free: int | None = None

    @property
    def label(self) -> str:
        """The name as shown everywhere: emulated and software devices always say so."""
        if self.emulated:
            return f"{self.name}(emulated)"
        return f"{self.name}(software)" if self.software else self.name


@dataclass(frozen=True)
class Placement:
    """Where one attempt runs: one device, or prefill on one and decode on another."""

    prefill: Device
    decode: Device

    @property
    def split(self) -> bool:
        return self.prefill.name != self.decode.name

    @property
    def key(self) -> str:
        return f"{self.prefill.name}->{self.decode.name}" if self.split else self.decode.name

    @property
    def label(self) -> str:
        if self.split:
            return f"{self.prefill.label}->{self.decode.label}"
        return self.decode.label

    @property
    def devices(self) -> tuple[Device, ...]:
        return (self.prefill, self.decode) if self.split else (self.decode,)


# Where remote models run: no local device. A pseudo-device so that plans, headers and explain
# say "remote"; it is never in the inventory, never counted as the CPU, never chosen by auto.
REMOTE_DEVICE = Device(
    name="remote",
    engines=frozenset({"remote"}),
    detected_by="routes.yaml (engine: remote)",
    detail="an OpenAI-compatible upstream: not a local device",
)


def parse_device(device: str) -> tuple[str, str] | None:
    """(prefill, decode) device names for a pinned route device; None for `auto`."""
    if device == "auto":
        return None
    if device == "hybrid":
        return ("npu", "gpu")
    prefill, _, decode = device.partition("->")
    return (prefill, decode or prefill)


def describe_devices(devices: Mapping[str, Device]) -> str:
    return ", ".join(devices[name].label for name in sorted(devices)) or "none"
